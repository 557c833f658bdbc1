"""What a batch-index ack leaves unacknowledged, as Pulsar's ack set says it: a bit
mask over the batch's messages, bit i set while message i is not acknowledged."""

from __future__ import annotations

from collections.abc import Iterable


def unacked_after(batch_size: int, index: int, cumulative: bool) -> int:
    """The ack set of a batch of ``batch_size`` messages once message ``index`` is
    acknowledged: all but that message, or (cumulative) all after it. O(1) (big-int
    arithmetic on ``batch_size`` bits)."""
    acked = (2 << index) - 1 if cumulative else 1 << index
    return ((1 << batch_size) - 1) & ~acked


def words_of(mask: int) -> list[int]:
    """An ack set as Pulsar's wire carries it: signed 64-bit words, lowest first."""
    words = []
    while mask:
        word = mask & 0xFFFF_FFFF_FFFF_FFFF
        words.append(word - (1 << 64) if word >= 1 << 63 else word)
        mask >>= 64
    return words or [0]


def mask_of(words: Iterable[int]) -> int:
    """Pulsar's ack set words (an iterable of 64-bit ints) as one bit mask."""
    mask = 0
    for index, word in enumerate(words):
        mask |= (word & 0xFFFF_FFFF_FFFF_FFFF) << (64 * index)
    return mask
