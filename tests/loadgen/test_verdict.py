"""Repeated runs turned into a verdict: Student's t intervals, the paired comparison of
variants seed by seed, and the words and table the CLI prints."""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest

from loadgen.verdict import (
    Interval,
    interval,
    paired_saving,
    rank,
    repeats_table,
    summarize_variant,
    t_975,
    verdict,
)

SEEDS = (1, 2, 3, 4, 5)
#: entries a workload reads per seed: the seed alone changes them fifty-fold
WORKLOAD = (4_000, 180_000, 25_000, 90_000, 7_500)


def run_doc(seed: int, reads: float, hit_ratio: float | None = 0.5) -> dict[str, Any]:
    """A results document as far as the verdict reads it; reads split 3:1 between the
    bookie and the tiered store (the verdict counts both)."""
    return {
        "scenario": {"seed": seed},
        "cache": {} if hit_ratio is None else {"hitRatio": hit_ratio},
        "storage": {
            "bookie": {"entriesRead": reads * 0.75},
            "tiered": {"entriesRead": reads * 0.25},
        },
    }


def variant(factors: tuple[float, ...], seeds: tuple[int, ...] = SEEDS) -> list[dict[str, Any]]:
    """One run per seed reading ``factor`` times that seed's workload."""
    return [
        run_doc(seed, WORKLOAD[i] * factor, hit_ratio=0.4 + 0.01 * i)
        for i, (seed, factor) in enumerate(zip(seeds, factors, strict=True))
    ]


def reading(reads: list[float]) -> list[dict[str, Any]]:
    """One run per seed 1, 2, ... reading these many entries."""
    return [run_doc(seed, value) for seed, value in enumerate(reads, start=1)]


#: the reference: some per-seed noise on top of the workload
BASELINE = (1.00, 1.03, 0.98, 1.01, 0.99)
#: 20% fewer reads than the baseline on every seed, give or take 1%
LEAN = tuple(0.8 * f * e for f, e in zip(BASELINE, (1.01, 0.99, 1.0, 1.005, 0.995), strict=True))
#: the baseline with noise only: 2% either way, averaging to nothing
JITTER = tuple(f * e for f, e in zip(BASELINE, (1.02, 0.98, 1.01, 0.99, 1.0), strict=True))


# ---------------------------------------------------------------------- Student's t


@pytest.mark.parametrize(
    ("degrees", "expected", "tolerance"),
    [
        (1, 12.706, 1e-9),
        (2, 4.303, 1e-9),
        (5, 2.571, 1e-9),
        (10, 2.228, 1e-9),
        (30, 2.042, 1e-9),
        (60, 2.000, 0.002),
        (120, 1.980, 0.002),
        (1000, 1.962, 0.002),
        (10**6, 1.960, 0.001),
    ],
)
def test_t_975_matches_the_student_t_quantiles(
    degrees: int, expected: float, tolerance: float
) -> None:
    assert t_975(degrees) == pytest.approx(expected, abs=tolerance)


def test_t_975_decreases_with_the_degrees_of_freedom_towards_the_normal() -> None:
    values = [t_975(d) for d in range(1, 2001)]
    assert all(a > b for a, b in itertools.pairwise(values))
    assert values[-1] > 1.959964


@pytest.mark.parametrize(("degrees", "exact"), [(31, 2.03951), (40, 2.02108), (50, 2.00856)])
def test_t_975_beyond_the_table_is_within_two_ten_thousandths(degrees: int, exact: float) -> None:
    assert t_975(degrees) == pytest.approx(exact, abs=0.0002)


@pytest.mark.parametrize("degrees", [0, -1])
def test_t_975_needs_a_degree_of_freedom(degrees: int) -> None:
    with pytest.raises(ValueError):
        t_975(degrees)


# ---------------------------------------------------------------------- intervals


def test_one_value_is_its_own_zero_width_interval() -> None:
    one = interval([7.5])
    assert one == Interval(mean=7.5, low=7.5, high=7.5, n=1)
    assert one.half_width == 0
    assert not one.excludes_zero()  # one value says nothing about zero


def test_interval_of_a_known_sample() -> None:
    value = interval([1, 2, 3, 4, 5])
    half = 2.776 * math.sqrt(2.5 / 5)  # sd sqrt(2.5), t with 4 degrees of freedom
    assert value.n == 5
    assert value.mean == 3
    assert value.low == pytest.approx(3 - half, rel=1e-12)
    assert value.high == pytest.approx(3 + half, rel=1e-12)
    assert value.half_width == pytest.approx(half, rel=1e-12)
    assert value.excludes_zero()
    assert not interval([-1, 1, -2, 2]).excludes_zero()
    assert interval([-5, -4, -6]).excludes_zero()


def test_interval_of_nothing_is_an_error() -> None:
    with pytest.raises(ValueError):
        interval([])


# ---------------------------------------------------------------------- paired comparison


def test_paired_saving_is_the_share_saved_from_the_mean_log_ratio() -> None:
    # the same factor on every seed (reads plus one): that share, with no width
    saved = paired_saving([79, 159, 39], [99, 199, 49])
    assert saved.mean == pytest.approx(0.2)
    assert saved.half_width == pytest.approx(0, abs=1e-12)
    # the mean log ratio, not the mean share: a halving and a doubling cancel out
    assert paired_saving([49, 199], [99, 99]).mean == pytest.approx(0, abs=1e-12)
    # a variant that read nothing still has a ratio; more reads is a negative share
    assert paired_saving([0], [0]).mean == 0
    assert paired_saving([9], [0]).mean == pytest.approx(-9)
    with pytest.raises(ValueError):
        paired_saving([1, 2], [1, 2, 3])


def test_the_ranking_and_its_steps_never_point_opposite_ways() -> None:
    # the review's case: A reads more on 9 of 10 seeds but far less on one; ranked by
    # mean reads A looked better while the per-seed shares said worse
    a = reading([10_000] + [10] * 9)
    b = reading([20_000] + [8] * 9)
    step = rank({"a": a, "b": b})[0]
    assert (step.better, step.worse) == ("b", "a")
    assert step.saved.mean > 0


def test_seeds_that_change_nothing_give_an_exact_ratio_and_say_so() -> None:
    same = rank({"x": reading([100, 100, 100]), "y": reading([200, 200, 200])})[0]
    assert same.exact and same.separable and same.better == "x"
    words = verdict([same], 3)
    assert "on every one of 3 seeds" in words and "not an estimate" in words


def test_a_variant_reading_a_fifth_less_on_every_seed_ranks_first_and_separably() -> None:
    runs = {"baseline": variant(BASELINE), "jitter": variant(JITTER), "lean": variant(LEAN)}

    steps = rank(runs)

    assert len(steps) == 2
    first = steps[0]
    assert first.better == "lean"
    assert first.worse in {"baseline", "jitter"}
    assert first.separable
    assert first.saved.n == 5
    assert first.saved.mean == pytest.approx(0.2, abs=0.01)
    assert 0.15 < first.saved.low < first.saved.high < 0.25
    # ranked by mean reads, fewest first
    means = {name: summarize_variant(name, docs).storage_reads.mean for name, docs in runs.items()}
    order = [steps[0].better, steps[0].worse, steps[1].worse]
    assert order == sorted(means, key=means.__getitem__)
    assert steps[1].better == steps[0].worse


def test_the_paired_design_separates_what_the_seeds_alone_would_blur() -> None:
    """The workload changes reads fifty-fold between seeds, so the two variants' reads,
    taken apart, have overlapping intervals; paired seed by seed, the 20% stands out."""
    lean = summarize_variant("lean", variant(LEAN)).storage_reads
    baseline = summarize_variant("baseline", variant(BASELINE)).storage_reads
    assert lean.low < baseline.high and baseline.low < lean.high  # unpaired: a blur

    [step] = rank({"baseline": variant(BASELINE), "lean": variant(LEAN)})
    assert (step.better, step.worse) == ("lean", "baseline")
    assert step.separable
    assert step.saved.low > 0.15


def test_variants_differing_by_noise_only_are_not_separable() -> None:
    [step] = rank({"baseline": variant(BASELINE), "jitter": variant(JITTER)})
    assert {step.better, step.worse} == {"baseline", "jitter"}
    assert not step.separable
    assert step.saved.low < 0 < step.saved.high
    assert abs(step.saved.mean) < 0.01


def test_one_seed_is_never_separable() -> None:
    steps = rank(
        {
            "baseline": variant(BASELINE[:1], SEEDS[:1]),
            "lean": variant(LEAN[:1], SEEDS[:1]),
        }
    )
    [step] = steps
    assert (step.better, step.worse) == ("lean", "baseline")
    assert step.saved.n == 1
    assert step.saved.mean == pytest.approx(0.192, abs=0.001)
    assert not step.separable


@pytest.mark.parametrize(
    "other_seeds",
    [(2, 3, 4, 5, 6), (5, 4, 3, 2, 1), (1, 2, 3, 4)],
    ids=["shifted", "reordered", "fewer"],
)
def test_variants_run_on_different_seeds_cannot_be_paired(other_seeds: tuple[int, ...]) -> None:
    runs = {
        "baseline": variant(BASELINE),
        "lean": variant(LEAN[: len(other_seeds)], other_seeds),
    }
    with pytest.raises(ValueError, match="different seeds"):
        rank(runs)


def test_a_single_variant_has_no_steps() -> None:
    assert rank({"baseline": variant(BASELINE)}) == []
    assert verdict([], 5) == "one variant: nothing to compare"


# ---------------------------------------------------------------------- words


def test_verdict_names_the_winner_and_what_is_not_separable() -> None:
    steps = rank({"baseline": variant(BASELINE), "jitter": variant(JITTER), "lean": variant(LEAN)})
    middle = steps[0].worse
    last = steps[1].worse

    text = verdict(steps, 5)

    separable, blurred = text.split("; ")
    assert separable.startswith("lean reads 20% fewer entries from storage than " + middle)
    assert "95% CI" in separable and "over 5 seeds" in separable
    assert "not separable" not in separable
    assert blurred.startswith(f"{middle} and {last} are not separable (")
    assert "0% fewer entries from storage" in blurred


def test_verdict_with_one_seed_asks_for_repeats() -> None:
    steps = rank(
        {
            "baseline": variant(BASELINE[:1], SEEDS[:1]),
            "lean": variant(LEAN[:1], SEEDS[:1]),
        }
    )
    text = verdict(steps, 1)
    assert text.startswith("lean read 19% fewer entries from storage than baseline")
    assert "not separable without --repeat" in text
    assert "one seed gives no interval" in text
    assert "CI" not in text


def test_repeats_table_has_a_row_per_variant_with_its_intervals() -> None:
    summaries = [
        summarize_variant("baseline", variant(BASELINE)),
        summarize_variant("lean", variant(LEAN)),
        summarize_variant("cold", [run_doc(seed, 1234.0, hit_ratio=None) for seed in SEEDS]),
        summarize_variant("once", [run_doc(9, 5_000.0, hit_ratio=0.25)]),
    ]

    table = repeats_table(summaries)

    lines = table.splitlines()
    assert table.endswith("\n")
    assert lines[0] == (
        "| variant | seeds | hit ratio (95% CI) | entries read from storage (95% CI) |"
    )
    assert lines[1] == "| --- | --- | --- | --- |"
    assert len(lines) == 2 + len(summaries)
    rows = {line.split(" | ")[0].removeprefix("| "): line for line in lines[2:]}
    assert list(rows) == ["baseline", "lean", "cold", "once"]

    base = summaries[0]
    assert base.hit_ratio is not None
    reads, ratio = base.storage_reads, base.hit_ratio
    assert rows["baseline"] == (
        f"| baseline | 1..5 | {ratio.mean:.1%} [{ratio.low:.1%}, {ratio.high:.1%}] | "
        f"{reads.mean:,.0f} [{max(reads.low, 0):,.0f}, {reads.high:,.0f}] |"
    )
    # a count is never negative: the t interval's low end is shown as 0 at the least
    assert reads.low < 0 and f"[0, {reads.high:,.0f}]" in rows["baseline"]
    assert rows["baseline"].startswith("| baseline | 1..5 | 42.0% [")
    assert rows["cold"] == "| cold | 1..5 | n/a | 1,234 [1,234, 1,234] |"
    assert rows["once"] == "| once | 9 | 25.0% | 5,000 |"
