"""What repeated runs say: a mean and a 95% confidence interval per variant, and
whether one variant is better than another beyond what the seed alone changes.

Each variant runs once per seed, the same seeds for every variant, so two variants can
be compared seed by seed (a paired comparison): the differences between them on the
same workload vary much less than either one does across workloads. The difference is
a ratio (designs differ by a factor of storage reads more than by an amount): each step
of the ranking is the mean per-seed log ratio of the two variants' reads, and variants
are ranked by their geometric mean reads, the same order. A step is *separable* when
the 95% interval of its mean log ratio excludes zero; with one seed there is no
interval, and nothing is called separable. Seeds that change nothing a ratio depends on
give it exactly, and the verdict says so.

Intervals use Student's t with n - 1 degrees of freedom (n seeds).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: Student's t, two-sided 95% (the 0.975 quantile), for 1..30 degrees of freedom
T_975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def t_975(degrees: int) -> float:
    """The 0.975 quantile of Student's t; beyond the table, the normal's 1.96 plus the
    first two terms of its Cornish-Fisher expansion (within 0.0002 of the exact value
    from 31 degrees on)."""
    if degrees < 1:
        raise ValueError("an interval needs at least two values")
    if degrees <= len(T_975):
        return T_975[degrees - 1]
    z = 1.959964
    first = (z**3 + z) / (4 * degrees)
    second = (5 * z**5 + 16 * z**3 + 3 * z) / (96 * degrees**2)
    return z + first + second


@dataclass(frozen=True, slots=True)
class Interval:
    """A mean and its 95% confidence interval (``low == high == mean`` for one value)."""

    mean: float
    low: float
    high: float
    n: int

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2

    def excludes_zero(self) -> bool:
        return self.n > 1 and (self.low > 0 or self.high < 0)


def interval(values: Sequence[float]) -> Interval:
    """The mean of ``values`` with its 95% interval. O(n)."""
    n = len(values)
    if n == 0:
        raise ValueError("no values")
    mean = math.fsum(values) / n
    if n == 1:
        return Interval(mean, mean, mean, 1)
    variance = math.fsum((value - mean) ** 2 for value in values) / (n - 1)
    half = t_975(n - 1) * math.sqrt(variance / n)
    return Interval(mean, mean - half, mean + half, n)


# ---------------------------------------------------------------------- what runs measured


def hit_ratio(run: Mapping[str, Any]) -> float | None:
    value = run["cache"].get("hitRatio")
    return None if value is None else float(value)


def storage_reads(run: Mapping[str, Any]) -> float:
    """Entries read from storage during the measured run: the bookie's and the tiered
    store's."""
    storage = run["storage"]
    return float(storage.get("bookie", {}).get("entriesRead", 0)) + float(
        storage.get("tiered", {}).get("entriesRead", 0)
    )


@dataclass(frozen=True, slots=True)
class VariantSummary:
    name: str
    seeds: tuple[int, ...]
    hit_ratio: Interval | None
    storage_reads: Interval


def summarize_variant(name: str, runs: Sequence[Mapping[str, Any]]) -> VariantSummary:
    """A variant's runs (one per seed, in seed order) summarized."""
    ratios = [ratio for ratio in map(hit_ratio, runs) if ratio is not None]
    return VariantSummary(
        name=name,
        seeds=tuple(int(run["scenario"]["seed"]) for run in runs),
        hit_ratio=interval(ratios) if ratios else None,
        storage_reads=interval([storage_reads(run) for run in runs]),
    )


@dataclass(frozen=True, slots=True)
class Step:
    """One step of the ranking: ``better`` read fewer entries from storage than
    ``worse``: ``saved`` is the share of ``worse``'s reads that ``better`` did not make
    (from the mean per-seed log ratio, with its interval); ``separable`` when that
    interval excludes zero; ``exact`` when the ratio was the same on every seed (the
    seeds changed nothing it depends on: this workload's difference, not an estimate)."""

    better: str
    worse: str
    saved: Interval
    separable: bool
    exact: bool = False


def _log_reads(reads: Sequence[float]) -> list[float]:
    # log(1 + reads): a variant that read nothing has a ratio too
    return [math.log1p(value) for value in reads]


def paired_saving(better: Sequence[float], worse: Sequence[float]) -> Interval:
    """Per seed, the log of ``worse``'s reads over ``better``'s (each plus one); its
    mean and interval, as shares saved: ``1 - exp(-x)`` (20% fewer reads on every seed
    is 0.2 whatever the seeds' absolute reads; a negative share: more reads). Designs
    differ by a factor more than by an amount, and the factor, unlike the amount, does
    not grow with how much a seed's workload reads. O(seeds)."""
    logs = [
        theirs - ours for ours, theirs in zip(_log_reads(better), _log_reads(worse), strict=True)
    ]
    spread = interval(logs)

    def share(log_ratio: float) -> float:
        return -math.expm1(-log_ratio)

    return Interval(share(spread.mean), share(spread.low), share(spread.high), spread.n)


def rank(runs_by_variant: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[Step]:
    """Variants from fewest storage reads to most, by the geometric mean over the seeds
    (of reads plus one): the order the per-seed log ratios of :func:`paired_saving`
    give, so a step never points the other way. Each step with its saving and whether
    it is separable; only neighbours in the ranking are compared. Every variant must
    have run the same seeds."""
    reads = {name: [storage_reads(run) for run in runs] for name, runs in runs_by_variant.items()}
    seeds = {
        name: [run["scenario"]["seed"] for run in runs] for name, runs in runs_by_variant.items()
    }
    if len({tuple(value) for value in seeds.values()}) > 1:
        raise ValueError(f"the variants ran different seeds: {seeds}")
    order = sorted(reads, key=lambda name: math.fsum(_log_reads(reads[name])))
    steps = []
    for better, worse in itertools.pairwise(order):
        saved = paired_saving(reads[better], reads[worse])
        ratios = {
            round(theirs - ours, 12)
            for ours, theirs in zip(
                _log_reads(reads[better]), _log_reads(reads[worse]), strict=True
            )
        }
        exact = saved.n > 1 and len(ratios) == 1
        steps.append(Step(better, worse, saved, saved.excludes_zero(), exact))
    return steps


# ---------------------------------------------------------------------- words


def percent_interval(value: Interval, digits: int = 1) -> str:
    if value.n == 1:
        return f"{value.mean:.{digits}%}"
    return f"{value.mean:.{digits}%} [{value.low:.{digits}%}, {value.high:.{digits}%}]"


def count_interval(value: Interval) -> str:
    """A count's mean and interval; the interval's low end shown no lower than 0 (the
    t interval is symmetric, a count is not negative)."""
    if value.n == 1:
        return f"{value.mean:,.0f}"
    return f"{value.mean:,.0f} [{max(value.low, 0.0):,.0f}, {value.high:,.0f}]"


def verdict(steps: Sequence[Step], seeds: int) -> str:
    """One line: the ranking by storage reads, each step with its paired saving and
    whether it holds beyond the seeds' variation."""
    if not steps:
        return "one variant: nothing to compare"
    if seeds < 2:
        first = steps[0]
        return (
            f"{first.better} read {first.saved.mean:.0%} fewer entries from storage than "
            f"{first.worse} in one run each: not separable without --repeat (one seed "
            "gives no interval)"
        )
    parts = []
    for step in steps:
        saved = step.saved
        if step.exact:
            how = (
                f"{saved.mean:.0%} fewer entries from storage than {step.worse} on every "
                f"one of {seeds} seeds (they changed nothing it depends on: this "
                "workload's difference, not an estimate)"
            )
            parts.append(
                f"{step.better} reads {how}"
                if saved.mean
                else f"{step.better} and {step.worse} read the same ({seeds} seeds)"
            )
            continue
        how = (
            f"{saved.mean:.0%} fewer entries from storage than {step.worse}, 95% CI "
            f"{saved.low:.0%} to {saved.high:.0%} over {seeds} seeds"
        )
        if step.separable:
            parts.append(f"{step.better} reads {how}")
        else:
            parts.append(f"{step.better} and {step.worse} are not separable ({how})")
    return "; ".join(parts)


def repeats_table(summaries: Sequence[VariantSummary]) -> str:
    """A markdown table: per variant, seeds, hit ratio and storage reads with their
    95% intervals."""
    rows = [
        ["variant", "seeds", "hit ratio (95% CI)", "entries read from storage (95% CI)"],
        ["---"] * 4,
    ]
    for summary in summaries:
        ratio = "n/a" if summary.hit_ratio is None else percent_interval(summary.hit_ratio)
        seeds = summary.seeds
        consecutive = list(seeds) == list(range(seeds[0], seeds[0] + len(seeds)))
        shown = (
            f"{seeds[0]}"
            if len(seeds) == 1
            else f"{seeds[0]}..{seeds[-1]}"
            if consecutive
            else ", ".join(map(str, seeds))
        )
        rows.append([summary.name, shown, ratio, count_interval(summary.storage_reads)])
    return "\n".join("| " + " | ".join(row) + " |" for row in rows) + "\n"
