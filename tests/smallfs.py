"""A small real file system a test can fill: a loop-mounted ext4 image (``-m 0``: no
blocks kept for root, so 100% used is when writes fail), or a tmpfs where loop mounts
are refused (``BROKERLAB_SMALL_FS=tmpfs`` forces it). Mounting needs root; without it
the test is skipped with the reason."""

from __future__ import annotations

import contextlib
import errno
import os
import pathlib
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from storage_stub.bookie.disk_monitor import statvfs_probe

MiB = 1024 * 1024


@dataclass
class SmallFileSystem:
    path: pathlib.Path
    kind: str

    def usage(self) -> float:
        used, total = statvfs_probe(self.path)()
        return used / total

    def fill_up(self, name: str = "filler") -> pathlib.Path:
        """Write a file until the file system has no block left (ENOSPC)."""
        path = self.path / name
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            for size in (MiB, 64 * 1024, 4096, 1024):
                chunk = bytes(size)
                while True:
                    try:
                        if os.write(fd, chunk) < size:
                            break
                    except OSError as error:
                        assert error.errno == errno.ENOSPC, error
                        break
        finally:
            os.close(fd)
        assert self.usage() > 0.99
        return path

    def fill_to(self, usage: float, name: str = "filler") -> pathlib.Path:
        """A file of the size that brings the file system to ``usage``."""
        used, total = statvfs_probe(self.path)()
        path = self.path / name
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.posix_fallocate(fd, 0, max(1, int(usage * total) - used))
        finally:
            os.close(fd)
        return path

    def open_files(self) -> list[str]:
        """Files of this process open under the mount."""
        names = []
        for fd in os.listdir("/proc/self/fd"):
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                continue
            if target.startswith(str(self.path)):
                names.append(target)
        return names


def _run(*command: str) -> bool:
    return subprocess.run(command, capture_output=True, check=False).returncode == 0


@contextlib.contextmanager
def small_file_system(tmp_path: pathlib.Path, size: str) -> Iterator[SmallFileSystem]:
    """Mount a file system of ``size`` (as ``truncate -s`` takes it) under ``tmp_path``;
    unmount it at the end, and fail if a file was left open there."""
    mount = tmp_path / "mnt"
    mount.mkdir()
    image = tmp_path / "fs.img"
    kind = None
    if os.environ.get("BROKERLAB_SMALL_FS", "ext4") == "ext4" and (
        shutil.which("mkfs.ext4")
        and _run("truncate", "-s", size, str(image))
        and _run("mkfs.ext4", "-q", "-F", "-m", "0", str(image))
        and _run("mount", "-o", "loop", str(image), str(mount))
    ):
        kind = "ext4"
    elif _run("mount", "-t", "tmpfs", "-o", f"size={size.lower()}", "tmpfs", str(mount)):
        kind = "tmpfs"
    if kind is None:
        image.unlink(missing_ok=True)
        pytest.skip(
            "needs a small file system to fill: mounting a loop ext4 image and a tmpfs "
            "were both refused (mounting needs root)"
        )
    try:
        yield SmallFileSystem(mount, kind)
    finally:
        busy = not _run("umount", str(mount))
        if busy:
            _run("umount", "-l", str(mount))  # detach anyway, then say so
        image.unlink(missing_ok=True)
        assert not busy, f"{mount} was still in use: a file was left open"
