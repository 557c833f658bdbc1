"""A serving process keeps the C heap it has grown, rather than hand it back to the
kernel between bursts of requests and fault it in again on the next one.

glibc's malloc returns the free top of its heap to the kernel once it passes
M_TRIM_THRESHOLD (128 KiB by default), and serves blocks from M_MMAP_THRESHOLD up (128
KiB, raised as such blocks are freed) from mappings of their own. A produce request's
body, its decoded payloads and its entries (about 140 KB each for 100 x 1 KiB messages)
all sit around those sizes, so after every lull the next burst paid page faults to
rebuild the heap: 4-7 minor faults a request with 0.3 s gaps between bursts of 500
requests (16 producers), and 3-5% more loop CPU a message than with the settings below,
which brought it to 0.1 a request. A JVM broker such as Pulsar's keeps its heap the same
way.

``brokerlab serve`` and ``brokerlab bench``'s bare ceiling server both call
``keep_heap_for_serving`` at start, so the ratio between them measures the broker's own
work, not this setting.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import platform

log = logging.getLogger(__name__)

# mallopt parameters (glibc's malloc.h)
_M_TRIM_THRESHOLD = -1
_M_TOP_PAD = -2
_M_MMAP_THRESHOLD = -3

#: the free top of the heap is handed back only beyond this
TRIM_THRESHOLD_BYTES = 128 * 1024 * 1024
#: each time the heap grows, it grows by this much more than asked
TOP_PAD_BYTES = 16 * 1024 * 1024
#: blocks from this size up get mappings of their own (setting the other two turns off
#: glibc's own raising of this threshold, so it is set too)
MMAP_THRESHOLD_BYTES = 4 * 1024 * 1024


def keep_heap_for_serving() -> bool:
    """Set the three thresholds with glibc's mallopt (for the rest of the process's
    life); False where the C library is not glibc, or refused a setting (those before
    it stay set)."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    settings = (
        (_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES),
        (_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES),
        (_M_TOP_PAD, TOP_PAD_BYTES),
    )
    for parameter, value in settings:
        if mallopt(parameter, value) != 1:  # mallopt answers 1 on success
            log.warning(
                "mallopt(%d, %d) was refused; the heap is trimmed as usual", parameter, value
            )
            return False
    return True
