"""One client process of ``brokerlab bench wire``: the official Python client on one topic.

``python -m broker.bench.wire_client SPEC_JSON`` subscribes and creates a producer on
its topic, then runs the two phases in step with the bench and its other client
processes, over a line protocol on its stdin and stdout:

- prints ``wire-client-ready`` once subscribed and the producer exists, then waits for
  a ``go`` line;
- produce: ``send_async`` of every message, then ``flush``; prints
  ``wire-client-produced {json}`` (its CPU time over the phase: the whole process and
  its Python thread), then waits for the next ``go``;
- consume: ``receive`` + ``acknowledge`` until every distinct message arrived; prints
  ``wire-client-result {json}`` and exits 0. A failure prints ``wire-client-error ...``
  and exits 1.

The bench measures wall time and the server's CPU between the lines of all its client
processes, so the phases of several clients overlap and their sum is the load. This
module imports only the client and orjson (no broker code): a client process starts in
about 0.2 s of CPU instead of the 1 s the bench's own imports cost, which matters with
several processes a row in the bench's quick test.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from typing import Any

import orjson

SUBSCRIPTION = "bench-wire"
READY_LINE = "wire-client-ready"
PRODUCED_PREFIX = "wire-client-produced "
RESULT_PREFIX = "wire-client-result "
ERROR_PREFIX = "wire-client-error "
GO_LINE = "go"
CONSUME_STALL_S = 30.0  # no new message for this long while some are missing: give up
RECEIVE_POLL_MS = 1000
SEND_CHECK_EVERY = 1000  # sends with a callback that checks their result


class ClientError(Exception):
    """The client could not do its part: the row is reported as not measured."""


@dataclass(frozen=True, slots=True)
class ClientSpec:
    """One client process's share of a row slice."""

    service_url: str
    topic: str
    batching: bool
    messages: int
    message_bytes: int
    max_pending_messages: int
    receiver_queue_size: int
    subscription_type: str  # a pulsar.ConsumerType name


def _cpu(*, start: bool) -> tuple[float, float]:
    """This process's CPU time (all its threads, the client's C++ ones included) and
    this thread's (the Python thread that builds, sends and receives every message).

    The thread's clock is read inside the process's (after it at a phase's start, before
    it at its end), so the thread's share of a phase can never exceed the process's."""
    if start:
        process = time.process_time()
        return process, time.thread_time()
    thread = time.thread_time()
    return time.process_time(), thread


def _wait_for_go() -> None:
    line = sys.stdin.readline()
    if line.strip() != GO_LINE:
        raise ClientError(f"expected {GO_LINE!r} from the bench, got {line!r}")


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def run(spec: ClientSpec) -> dict[str, Any]:
    """Subscribe, produce ``spec.messages``, consume them all; the consume figures."""
    import pulsar  # type: ignore[import-untyped]  # no py.typed in pulsar-client

    if spec.message_bytes < 8:
        raise ClientError("messages carry an 8-byte sequence number: message_bytes >= 8")
    count = spec.messages
    body = os.urandom(spec.message_bytes - 8)
    payloads = [sequence.to_bytes(8, "big") + body for sequence in range(count)]
    client = pulsar.Client(spec.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    try:
        consumer = client.subscribe(
            spec.topic,
            SUBSCRIPTION,
            consumer_type=getattr(pulsar.ConsumerType, spec.subscription_type),
            initial_position=pulsar.InitialPosition.Earliest,
            receiver_queue_size=spec.receiver_queue_size,
        )
        producer = client.create_producer(
            spec.topic,
            batching_enabled=spec.batching,
            max_pending_messages=spec.max_pending_messages,
            block_if_queue_full=True,
        )
        results: list[Any] = []

        def on_sent(result: Any, _message_id: Any) -> None:
            results.append(result)  # on the client's thread; list.append holds the GIL

        # A callback on every send took two thirds of the client's batched produce rate
        # (each one a trip into Python); the consume phase checks every message anyway.
        callbacks = [
            on_sent if sequence % SEND_CHECK_EVERY == 0 or sequence == count - 1 else None
            for sequence in range(count)
        ]
        checked = sum(callback is not None for callback in callbacks)
        _say(READY_LINE)
        _wait_for_go()
        wall0, (cpu0, thread0) = time.perf_counter(), _cpu(start=True)
        for payload, callback in zip(payloads, callbacks, strict=True):
            producer.send_async(payload, callback)
        producer.flush()
        give_up = time.perf_counter() + CONSUME_STALL_S
        while len(results) < checked:  # flush returned; the last callbacks may still run
            if time.perf_counter() > give_up:
                raise ClientError(f"{checked - len(results)} checked sends never completed")
            time.sleep(0.0005)
        wall1, (cpu1, thread1) = time.perf_counter(), _cpu(start=False)
        failed = [result for result in results if result != pulsar.Result.Ok]
        if failed:
            raise ClientError(f"{len(failed)} of {checked} checked sends failed: {failed[0]}")
        produced = {
            "wall_s": wall1 - wall0,
            "cpu_s": cpu1 - cpu0,
            "thread_cpu_s": thread1 - thread0,
        }
        _say(PRODUCED_PREFIX + orjson.dumps(produced).decode())
        _wait_for_go()

        wall1, (cpu1, thread1) = time.perf_counter(), _cpu(start=True)
        seen = bytearray(count)
        distinct = received = idle_polls = 0
        while distinct < count:
            try:
                message = consumer.receive(RECEIVE_POLL_MS)
            except pulsar.Timeout:
                idle_polls += 1
                if idle_polls * RECEIVE_POLL_MS / 1000 >= CONSUME_STALL_S:
                    raise ClientError(
                        f"consumer stalled: {count - distinct} of {count} messages never "
                        f"arrived ({received} received)"
                    ) from None
                continue
            idle_polls = 0
            received += 1
            sequence = int.from_bytes(message.data()[:8], "big")
            if sequence >= count:
                raise ClientError(f"consumer got a message that was never produced ({sequence})")
            if not seen[sequence]:
                seen[sequence] = 1
                distinct += 1
            consumer.acknowledge(message)
        wall2, (cpu2, thread2) = time.perf_counter(), _cpu(start=False)
        producer.close()
        consumer.close()
    finally:
        client.close()
    return {
        "messages": count,
        "received": received,
        "produce": produced,
        "consume": {
            "wall_s": wall2 - wall1,
            "cpu_s": cpu2 - cpu1,
            "thread_cpu_s": thread2 - thread1,
        },
    }


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m broker.bench.wire_client SPEC_JSON", file=sys.stderr)
        return 2
    spec = ClientSpec(**orjson.loads(argv[0]))
    try:
        result = run(spec)
    except Exception as error:
        _say(f"{ERROR_PREFIX}{type(error).__name__}: {error}")
        return 1
    _say(RESULT_PREFIX + orjson.dumps(result).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
