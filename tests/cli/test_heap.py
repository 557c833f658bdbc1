"""broker.heap: a serving process keeps the heap it has grown. A burst of large blocks,
freed and asked for again, faults the heap back in every time under glibc's defaults
and not at all once ``keep_heap_for_serving`` has run."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
    reason="mallopt is glibc's",
)

#: eight 1 MiB blocks made and freed 20 times: the minor page faults a burst
_BURSTS = """
import resource, sys
from broker.heap import keep_heap_for_serving
if sys.argv[1] == "keep":
    assert keep_heap_for_serving()
def burst():
    blocks = [bytearray(1 << 20) for _ in range(8)]
    del blocks
burst()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    burst()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 20)
"""


def faults_a_burst(mode: str) -> float:
    done = subprocess.run(
        [sys.executable, "-c", _BURSTS, mode], capture_output=True, text=True, check=True
    )
    return float(done.stdout)


def test_a_kept_heap_serves_a_repeated_burst_without_faulting_it_in_again() -> None:
    # 8 MiB a burst is 2,048 pages: under the defaults the freed top is handed back
    assert faults_a_burst("default") > 1000
    assert faults_a_burst("keep") < 20
