"""Owned background tasks: every task has an owner that cancels and awaits it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

log = logging.getLogger(__name__)


class TaskOwner:
    """Holds running tasks; ``close`` cancels and awaits all of them. A task that fails
    is logged with its traceback at once, not when someone happens to await it."""

    __slots__ = ("_closed", "_name", "_tasks")

    def __init__(self, name: str) -> None:
        self._name = name
        #: a dict as an insertion-ordered set: close cancels in spawn order, the same on
        #: every run (a set would go by the tasks' addresses)
        self._tasks: dict[asyncio.Task[Any], None] = {}
        self._closed = False

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str | None = None) -> asyncio.Task[Any]:
        if self._closed:
            coro.close()
            raise RuntimeError(f"{self._name} is closed")
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks[task] = None
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.pop(task, None)
        if not task.cancelled() and (error := task.exception()) is not None:
            log.error("%s: task %s failed", self._name, task.get_name(), exc_info=error)

    async def settled(self) -> None:
        """Wait until no task is running, those they spawn meanwhile included (a task
        that fails is logged as ever, not raised here)."""
        while self._tasks:
            await asyncio.wait(list(self._tasks))

    async def close(self) -> None:
        self._closed = True
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
