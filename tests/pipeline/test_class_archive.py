"""The test JVMs' class archive on a machine without one (tests/pipeline/servers.py): the
first test process to ask makes it while holding its lock, and a JVM's options, asked
for meanwhile, wait for it rather than start without it."""

from __future__ import annotations

import pathlib
import threading

import pytest

from tests.pipeline import servers


class _Watched(threading.Event):
    """An event whose ``wait`` says that somebody waited on it."""

    def __init__(self, waited: threading.Event) -> None:
        super().__init__()
        self.waited = waited

    def wait(self, timeout: float | None = None) -> bool:
        self.waited.set()
        return super().wait(timeout)


@pytest.fixture
def archive(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
    target = tmp_path / "cds" / "archive.jsa"
    monkeypatch.setattr(servers, "class_archive", lambda: target)
    return target


def test_a_jvm_started_while_the_archive_is_made_waits_for_it_and_maps_it(
    archive: pathlib.Path, pytestconfig: pytest.Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    waited = threading.Event()
    monkeypatch.setattr(servers, "_archive_stop", _Watched(waited))

    def make() -> None:
        # the archive appears only once a JVM's start waits on the maker's lock
        waited.wait(timeout=30)
        archive.write_bytes(b"classes")

    monkeypatch.setattr(servers, "make_class_archive", make)
    servers.start_class_archive(pytestconfig)
    options: list[str] = []
    starter = threading.Thread(target=lambda: options.append(servers.java_options()))
    starter.start()
    starter.join(timeout=60)
    assert options == [f"{servers.JAVA_OPTIONS} -XX:SharedArchiveFile={archive}"]


def test_a_second_process_does_not_make_it_again_and_nobody_waits_once_it_is_there(
    archive: pathlib.Path, pytestconfig: pytest.Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[int] = []
    release = threading.Event()

    def make() -> None:
        made.append(1)
        release.wait(timeout=30)
        archive.write_bytes(b"classes")

    monkeypatch.setattr(servers, "make_class_archive", make)
    servers.start_class_archive(pytestconfig)  # holds the lock until released
    servers.start_class_archive(pytestconfig)  # finds the lock held: makes nothing
    release.set()
    servers.wait_for_class_archive()
    assert archive.exists() and made == [1]
    servers.start_class_archive(pytestconfig)  # the archive is there
    assert made == [1]
    assert servers.java_options().endswith(f"-XX:SharedArchiveFile={archive}")
