"""A scenario's timed events (unload, restart, offload, disconnect, reconnect, pause,
resume, seek) applied to a run, in time order, each logged as it starts."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from loadgen.bounded import bounded, partial_call
from loadgen.client import BrokerError
from loadgen.run import NAMESPACE, TENANT, Consumer, Run
from loadgen.scenario import Event


async def run_events(run: Run, start: float, log: list[dict[str, Any]]) -> None:
    """Run the scenario's events in time order, logging each as it starts (an event
    still running when the run ends stays logged as unfinished)."""
    for event in sorted(run.scenario.events, key=lambda e: e.at):
        delay = start + event.at - run.now_s()
        if delay > 0:
            await asyncio.sleep(delay)
        began = run.now_s()
        entry: dict[str, Any] = {
            "at": round(event.at, 3),
            "startedAt": round(began - start, 3),
            "type": event.type,
            "subscription": event.subscription,
            "ok": False,
            "detail": "still running when the run ended",
        }
        log.append(entry)
        try:
            entry["detail"] = await _apply(run, event)
            entry["ok"] = True
        except BrokerError as error:
            entry["ok"] = False
            entry["detail"] = str(error)
        entry["tookMs"] = round((run.now_s() - began) * 1000, 1)


def _targets(run: Run, event: Event) -> list[Consumer]:
    return [
        worker
        for worker in run.consumers
        if event.subscription < 0 or worker.subscription_index == event.subscription
    ]


async def _apply(run: Run, event: Event) -> str:
    """Apply one event; what it did, for the log. BrokerError if the broker refused."""
    apply = _BY_KIND.get(event.type)
    if apply is None:
        raise ValueError(f"unknown event {event.type!r}")
    return await apply(run, event)


async def _unload(run: Run, event: Event) -> str:
    admin = run.admin_or_refuse("unload")
    if event.bundle:
        await admin.unload_bundle(TENANT, NAMESPACE, event.bundle)
        return f"unloaded bundle {event.bundle} of {TENANT}/{NAMESPACE}"
    await admin.unload_namespace(TENANT, NAMESPACE)
    return f"unloaded {TENANT}/{NAMESPACE} ({len(run.topics)} topics)"


async def _restart(run: Run, event: Event) -> str:
    """One broker of a cluster (``broker`` >= 0) through the admin, else the broker the
    run started."""
    if event.broker >= 0:
        await run.admin_or_refuse("restart").restart_broker(
            event.broker, event.mode, event.downtimeMs
        )
        return f"broker {event.broker} restarted ({event.mode}, down {event.downtimeMs} ms)"
    assert run.broker is not None
    await run.broker.restart()
    return f"broker restarted on {run.broker.url}"


async def _offload(run: Run, event: Event) -> str:
    client = run.admin_or_refuse("offload")
    done = 0

    async def offload(topic: str) -> None:
        nonlocal done
        last = await client.last_message_id(topic)
        await client.offload(topic, last)
        done += 1

    errors = await bounded([partial_call(offload, topic) for topic in run.topics])
    if errors and not done:
        raise errors[0]
    return f"offload asked for {done} of {len(run.topics)} topics"


async def _disconnect(run: Run, event: Event) -> str:
    targets = _targets(run, event)
    await bounded([worker.disconnect for worker in targets])
    return f"{len(targets)} consumers disconnected"


async def _reconnect(run: Run, event: Event) -> str:
    targets = _targets(run, event)
    for worker in targets:
        worker.reconnect()
    return f"{len(targets)} consumers reconnecting"


async def _pause(run: Run, event: Event) -> str:
    targets = _targets(run, event)
    for worker in targets:
        worker.pause()
    return f"{len(targets)} consumers paused"


async def _resume(run: Run, event: Event) -> str:
    targets = _targets(run, event)
    for worker in targets:
        worker.resume()
    return f"{len(targets)} consumers resumed"


async def _seek(run: Run, event: Event) -> str:
    seek_to = event.seekTo
    time_ms = 0 if seek_to == "earliest" else max(0, run.started_at_ms + int(seek_to))
    subscriptions = (
        run.subscriptions if event.subscription < 0 else [run.subscriptions[event.subscription]]
    )
    await run.driver.seek(run, subscriptions, time_ms)
    return f"{len(subscriptions)} subscription(s) of {len(run.topics)} topics reset to {time_ms}"


_BY_KIND: dict[str, Callable[[Run, Event], Awaitable[str]]] = {
    "unload": _unload,
    "restart": _restart,
    "offload": _offload,
    "disconnect": _disconnect,
    "reconnect": _reconnect,
    "pause": _pause,
    "resume": _resume,
    "seek": _seek,
}
