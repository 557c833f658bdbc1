"""A stand-in for the virtual-time runner that ``run_virtual_all`` hands to its process
pool: light to import in a spawned process (no broker), it answers with the seed and the
process it ran in."""

from __future__ import annotations

import os
from typing import Any


def echo_run(scenario: Any, options: Any, seed: int) -> dict[str, Any]:
    return {
        "scenario": {"seed": seed},
        "variant": options.variant,
        "pid": os.getpid(),
        "virtualSeconds": 1.0,
        "wallSeconds": 0.5,
        "virtualToWall": 2.0,
    }
