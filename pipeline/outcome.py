"""What a replay, the bound and a reference policy all report: hits and misses, in
requests and in bytes, and the two ratios."""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(kw_only=True)
class CacheOutcome:
    hits: int
    misses: int
    hit_bytes: int
    miss_bytes: int

    @property
    def hit_ratio(self) -> float:
        reads = self.hits + self.misses
        return self.hits / reads if reads else 0.0

    @property
    def byte_hit_ratio(self) -> float:
        total = self.hit_bytes + self.miss_bytes
        return self.hit_bytes / total if total else 0.0

    def as_row(self) -> dict[str, Any]:
        """The fields and both ratios, flat, for a Spark row."""
        row = dataclasses.asdict(self)
        row["hit_ratio"] = self.hit_ratio
        row["byte_hit_ratio"] = self.byte_hit_ratio
        return row
