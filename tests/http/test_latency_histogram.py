"""The broker's own latency histogram is exposed exactly as prometheus_client's Histogram
would expose the same observations: the same buckets (a value equal to a bound counts
in that bound's bucket), count and sum, the same names and labels."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from broker.http.metrics import LATENCY_BUCKETS, LatencyHistogram
from loadgen.recorder import HIGHEST_US

OBSERVATIONS = [0.0, 0.0004, 0.0005, 0.00051, 0.003, 0.025, 0.7, 1.0, 29.9, 30.0, 31.0, 1e6]


def samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue  # the creation time differs between the two
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def test_exposition_matches_prometheus_clients_histogram_for_the_same_observations() -> None:
    theirs = CollectorRegistry()
    reference = Histogram(
        "brokerlab_x_latency_seconds",
        "help",
        labelnames=("broker",),
        buckets=LATENCY_BUCKETS,
        registry=theirs,
    ).labels("3")
    ours = CollectorRegistry()
    histogram = LatencyHistogram("brokerlab_x_latency_seconds", "help", "3")
    ours.register(histogram)
    for value in OBSERVATIONS:
        reference.observe(value)
        histogram.observe(value)
    expected = samples(theirs)
    assert samples(ours) == expected
    # and the comparison sees the buckets: the boundary value 0.0005 is in le=0.0005
    assert (
        expected[("brokerlab_x_latency_seconds_bucket", (("broker", "3"), ("le", "0.0005")))] == 3
    )
    assert expected[("brokerlab_x_latency_seconds_count", (("broker", "3"),))] == len(OBSERVATIONS)


def test_observing_a_value_n_times_at_once_is_observing_it_n_times() -> None:
    once, at_once = CollectorRegistry(), CollectorRegistry()
    each = LatencyHistogram("brokerlab_x_latency_seconds", "help", "0")
    grouped = LatencyHistogram("brokerlab_x_latency_seconds", "help", "0")
    once.register(each)
    at_once.register(grouped)
    for times, value in enumerate(OBSERVATIONS, 1):
        for _ in range(times):
            each.observe(value)
        grouped.observe(value, times)
    theirs, ours = samples(once), samples(at_once)
    assert ours.keys() == theirs.keys()
    for key, expected in theirs.items():
        assert abs(ours[key] - expected) <= 1e-9 * max(1.0, abs(expected)), key
    count = ("brokerlab_x_latency_seconds_count", (("broker", "0"),))
    assert ours[count] == len(OBSERVATIONS) * (len(OBSERVATIONS) + 1) // 2


def test_an_unobserved_histogram_exposes_zero_counts() -> None:
    registry = CollectorRegistry()
    registry.register(LatencyHistogram("brokerlab_y_latency_seconds", "help", "0"))
    found = samples(registry)
    assert found[("brokerlab_y_latency_seconds_count", (("broker", "0"),))] == 0
    assert found[("brokerlab_y_latency_seconds_bucket", (("broker", "0"), ("le", "+Inf")))] == 0
    assert len([key for key in found if key[0].endswith("_bucket")]) == len(LATENCY_BUCKETS) + 1


def histogram_quantile(q: float, buckets: list[tuple[float, float]]) -> float:
    """Prometheus's histogram_quantile over cumulative ``(le, count)`` buckets: linear
    within the bucket the rank falls in; in the +Inf bucket, the largest finite bound."""
    total = buckets[-1][1]
    rank = q * total
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if bound == float("inf"):
                return lower_bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (
                count - lower_count
            )
        lower_bound, lower_count = bound, count
    raise AssertionError("no bucket holds the rank")


def test_a_p99_of_minutes_reads_minutes_not_the_top_bucket() -> None:
    """A catch-up run: 6.7% of deliveries minutes after their publish (the backlog read
    back). With 30 s as the top bound the p99 read exactly 30.0."""
    registry = CollectorRegistry()
    histogram = LatencyHistogram("brokerlab_z_latency_seconds", "help", "0")
    registry.register(histogram)
    histogram.observe(0.004, 933)
    histogram.observe(200.0, 67)
    buckets = [
        (float(sample.labels["le"]), sample.value)
        for family in text_string_to_metric_families(generate_latest(registry).decode())
        for sample in family.samples
        if sample.name.endswith("_bucket")
    ]
    p99 = histogram_quantile(0.99, buckets)
    assert 120.0 < p99 <= 300.0, p99


def test_the_buckets_reach_as_far_as_the_load_generator_measures() -> None:
    assert LATENCY_BUCKETS[-1] >= HIGHEST_US / 1e6
