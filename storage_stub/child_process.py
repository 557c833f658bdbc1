"""A Python child process on one end of a Unix socket pair, owned by the event loop: the
broker's codec processes.

The child runs in a session (so a process group) of its own: Ctrl-C in a terminal signals
the broker's group, and the broker stops the child by ending its input once nothing is
left to send; the child answers what it was sent and exits at the end of its input. A
child that exits before that sets the ``died`` future its owner gave (the reason, with its
pid and status), and ``brokerlab serve`` stops on it rather than run half-alive.

Imports nothing beyond the standard library: a child that imports the module that starts
it stays quick to start.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import sys
import typing
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

log = logging.getLogger(__name__)


class SocketProtocol(asyncio.Protocol):
    """The loop's end of a child's socket; subclasses read the child's answers."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = typing.cast(asyncio.Transport, transport)  # uvloop's is no subclass


P = TypeVar("P", bound=SocketProtocol)


class SocketChild(Generic[P]):
    """One child: ``process``, and ``connection``, the loop's protocol on its socket
    (its ``transport`` writes to the child). Make one with ``await SocketChild.start``;
    stop it with ``close`` (or ``end_input`` on several, then ``wait_stopped`` on each)."""

    __slots__ = ("_closing", "_died", "_label", "_watcher", "connection", "process")

    def __init__(
        self,
        label: str,
        process: asyncio.subprocess.Process,
        connection: P,
        died: asyncio.Future[str],
    ) -> None:
        self._label = label
        self.process = process
        self.connection = connection
        self._died = died
        self._closing = False
        self._watcher = asyncio.get_running_loop().create_task(
            self._watch(), name=f"{label} {process.pid}"
        )

    @classmethod
    async def start(
        cls,
        label: str,
        arguments: Callable[[int], Sequence[str]],
        protocol: Callable[[], P],
        died: asyncio.Future[str],
        *,
        pass_fds: Sequence[int] = (),
        socket_buffer_bytes: int = 0,
    ) -> SocketChild[P]:
        """Start ``sys.executable`` with ``arguments(fd)``, fd being the child's end of the
        socket pair (passed to it with ``pass_fds``); ``socket_buffer_bytes`` sizes both
        ends' buffers (0: the system's). ``label`` names the child in logs and in the
        reason ``died`` is given."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            if socket_buffer_bytes:
                for sock in (ours, theirs):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, socket_buffer_bytes)
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, socket_buffer_bytes)
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                *arguments(theirs.fileno()),
                stdin=asyncio.subprocess.DEVNULL,
                pass_fds=(theirs.fileno(), *pass_fds),
                start_new_session=True,
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        loop = asyncio.get_running_loop()
        try:
            _, connection = await loop.create_unix_connection(protocol, sock=ours)
        except BaseException:
            ours.close()
            process.kill()
            await process.wait()
            raise
        return cls(label, process, connection, died)

    async def _watch(self) -> None:
        code = await self.process.wait()
        if self._closing:
            return
        reason = f"{self._label} {self.process.pid} exited with status {code}"
        log.error("%s while the broker runs (brokerlab serve stops on it)", reason)
        if not self._died.done():
            self._died.set_result(reason)

    def end_input(self) -> None:
        """No more requests: the child answers what it was sent, then exits."""
        self._closing = True
        transport = self.connection.transport
        if transport is not None and not transport.is_closing():
            transport.write_eof()

    async def wait_stopped(self, deadline_s: float) -> None:
        """Wait for the child to exit (after ``end_input``); kill it after ``deadline_s``.
        Then close the socket."""
        try:
            await asyncio.wait_for(self.process.wait(), deadline_s)
        except TimeoutError:
            log.error("%s %d did not stop: killed", self._label, self.process.pid)
            self.process.kill()
            await self.process.wait()
        transport = self.connection.transport
        if transport is not None:
            transport.close()
        await self._watcher

    async def close(self, deadline_s: float) -> None:
        """``end_input``, then ``wait_stopped``."""
        self.end_input()
        await self.wait_stopped(deadline_s)
