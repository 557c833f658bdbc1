import mmap
from collections.abc import Sequence

class Writer:
    event_fd: int
    busy: bool
    crc: str
    def __init__(self, isal_library: str | None = None) -> None: ...
    def submit(
        self,
        buffer: mmap.mmap,
        fd: int,
        offset: int,
        length: int,
        copies: list[tuple[int, bytearray, Sequence[bytes]]],
        seals: list[tuple[int, int]],
        /,
    ) -> None: ...
    def submit_fsync(self, fds: list[int] | tuple[int, ...], /) -> None: ...
    def collect(self) -> int | None: ...
    def close(self) -> None: ...
