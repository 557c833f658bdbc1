"""``brokerlab serve`` processes forked from one that has already imported brokerlab.

A ``python -m broker.cli serve`` spends one to several seconds of CPU starting Python and
importing aiohttp, pydantic, protobuf and the broker before it serves anything; the
integration tests start brokers a hundred times over (every kill -9 is followed by a
restart). A fork server pays that once per test session (per xdist worker): it imports
``broker.cli`` and what ``serve`` imports, then forks a child per start request, and the
child runs ``broker.cli.main(argv)`` exactly as ``python -m broker.cli`` would, with
its stdout and stderr on a pipe of the test's. The child is a real process over a real
data dir: SIGTERM stops it cleanly, SIGKILL kills it with no chance to flush.

The harness's launcher (``tests.harness.ServedBroker``) takes :meth:`ForkServer.spawn` as
its ``spawn``; set ``BROKERLAB_TEST_EXEC_BROKERS=1`` to start each broker with a fresh
interpreter instead.

Protocol: the test sends one SEQPACKET message per start, JSON ``{"argv": [...]}``,
with two file descriptors: the write ends of the child's output pipe and of a status
pipe. On the status pipe the server writes ``<pid>`` once forked and ``exit <code>``
once the child is reaped (``code`` as ``asyncio``'s returncode: ``-9`` after SIGKILL).
"""

from __future__ import annotations

import gc
import json
import os
import select
import signal
import socket
import subprocess
import sys
import traceback
from typing import IO

from tests.harness import ROOT, STARTUP_DEADLINE_S

#: a fork request and its file descriptors (output, status)
MAX_REQUEST_BYTES = 1 << 16


# ---------------------------------------------------------------------- the server


def _preload() -> None:
    """Import what ``brokerlab serve`` imports (the CLI imports a subcommand's modules
    when it runs: serve's are named here), so a forked child starts serving at once;
    then freeze it all, so the child's start-up collection skips it."""
    import uvloop  # noqa: F401

    import broker.cli
    import broker.dispatch.data_format
    import broker.heap
    import broker.http.app
    import broker.http.app_state
    import broker.http.listener
    import broker.scrape_targets

    broker.cli._parser()
    _compile_routes()
    gc.collect()
    gc.freeze()


def _compile_routes() -> None:
    """Build the HTTP routes once, in a throwaway app: aiohttp compiles a regular
    expression per route with a variable part, which ``re`` caches, and a forked child
    inherits the cache (a child that compiled them itself spent half of its start, about
    0.4 s, on that)."""
    from broker.config import load_broker_config, load_storage_config
    from broker.http.app import Settings, create_app

    create_app(
        Settings(
            broker=load_broker_config(ROOT / "conf" / "broker.conf", {}),
            storage=load_storage_config(ROOT / "conf" / "storage.conf", {}),
            data_dir=None,
        )
    )


def _run_child(argv: list[str], output: int, inherited: list[int]) -> None:
    """In the forked child: become ``python -m broker.cli *argv`` and exit with its code."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for fd in inherited:
        os.close(fd)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(output, 1)
    os.dup2(output, 2)
    os.close(output)
    code = 1
    try:
        import broker.cli

        sys.argv = [broker.cli.__file__, *argv]
        code = broker.cli.main(argv)
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def serve(control: socket.socket) -> None:
    """Fork a broker per request on ``control`` until the test closes it."""
    _preload()
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    status_of: dict[int, int] = {}  # child pid -> its status pipe

    def reap() -> None:
        while status_of:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                return
            fd = status_of.pop(pid, None)
            if fd is not None:
                os.write(fd, f"exit {os.waitstatus_to_exitcode(status)}\n".encode())
                os.close(fd)

    while True:
        ready, _, _ = select.select([control.fileno(), wake_read], [], [])
        if wake_read in ready:
            os.read(wake_read, 4096)
            reap()
        if control.fileno() not in ready:
            continue
        message, fds, _, _ = socket.recv_fds(control, MAX_REQUEST_BYTES, 2)
        if not message:
            return  # the test side is gone
        output, status = fds
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            inherited = [control.fileno(), wake_read, wake_write, status, *status_of.values()]
            _run_child(json.loads(message)["argv"], output, inherited)
        os.close(output)
        status_of[pid] = status
        os.write(status, f"{pid}\n".encode())


# ---------------------------------------------------------------------- the test side


class ForkServer:
    """The server process and the test's end of its control socket."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.control = ours
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.integration.forkserver", str(theirs.fileno())],
            pass_fds=(theirs.fileno(),),
            cwd=ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        theirs.close()

    def fork(self, argv: list[str]) -> tuple[int, int]:
        """Ask for a child running ``brokerlab *argv``: the read ends of its output and
        status pipes."""
        output_read, output_write = os.pipe()
        status_read, status_write = os.pipe()
        try:
            socket.send_fds(
                self.control, [json.dumps({"argv": argv}).encode()], [output_write, status_write]
            )
        finally:
            os.close(output_write)
            os.close(status_write)
        return output_read, status_read

    def spawn(self, argv: list[str]) -> ForkedChild:
        """A child running ``brokerlab *argv`` (the harness's ``Spawn``)."""
        output, status = self.fork(argv)
        buffer = b""
        while b"\n" not in buffer:
            ready, _, _ = select.select([status], [], [], STARTUP_DEADLINE_S)
            chunk = os.read(status, 64) if ready else b""
            if not chunk:
                os.close(output)
                os.close(status)
                raise RuntimeError("the fork server did not start a broker")
            buffer += chunk
        pid, rest = buffer.split(b"\n", 1)
        return ForkedChild(int(pid), output, status, rest)

    def close(self) -> None:
        self.control.close()  # the server's next read is empty: it returns
        self.process.wait(60)


class ForkedChild:
    """A forked broker as the harness sees a ``subprocess.Popen`` (``BrokerChild``): pid,
    stdout, poll, wait, send_signal, kill. Its exit code arrives on the status pipe."""

    def __init__(self, pid: int, stdout: int, status: int, early: bytes) -> None:
        self.pid = pid
        self.stdout: IO[bytes] | None = os.fdopen(stdout, "rb")
        self.returncode: int | None = None
        self._status = status
        self._buffer = early  # what the status pipe gave past the pid line

    def _read_exit(self, timeout: float | None) -> None:
        while b"\n" not in self._buffer:
            ready, _, _ = select.select([self._status], [], [], timeout)
            if not ready:
                return
            chunk = os.read(self._status, 64)
            if not chunk:  # the server is gone without saying: count it as killed
                self._buffer += b"exit -9\n"
                break
            self._buffer += chunk
        line = self._buffer.split(b"\n", 1)[0]
        self.returncode = int(line.split()[1]) if line.startswith(b"exit ") else -1
        os.close(self._status)

    def poll(self) -> int | None:
        if self.returncode is None:
            self._read_exit(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self._read_exit(timeout)
        if self.returncode is None:
            raise subprocess.TimeoutExpired(f"forked broker {self.pid}", timeout or 0)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


if __name__ == "__main__":
    serve(socket.socket(fileno=int(sys.argv[1])))
