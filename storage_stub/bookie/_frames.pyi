import mmap

# entries: a list or tuple of bytes; anything else raises TypeError (callers fall back)
def frame_header(
    ledger_id: int, first_entry_id: int, entries: object, /
) -> tuple[bytearray, int]: ...
def copy_frame(
    buffer: mmap.mmap | bytearray, position: int, header: bytes | bytearray, entries: object, /
) -> int: ...
def total_size(entries: object, /) -> int: ...
