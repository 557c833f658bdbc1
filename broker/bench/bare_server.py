"""The ceilings of ``brokerlab bench http``: bare aiohttp endpoints on uvloop.

They do on the wire exactly the work the HTTP contract (docs/api.md) asks of any broker,
done the fastest way, and nothing else: no validation beyond that, no storage, no
dispatch. Whatever the broker loses to them is the cost of being a broker.

- produce (``POST /topics/persistent/{tenant}/{namespace}/{topic}``): parses the JSON
  body with pydantic-core's parser (jiter, the one the broker's validation runs on:
  about 0.25 us a 1 KiB message against orjson's 0.5), base64-decodes every payload
  strictly (400 for a payload that is not base64, as the broker) and answers one
  ``messagePublishResults`` entry per message. The decoding and the answer's
  formatting are the broker's own functions (``decode_all_strict``,
  ``publish_results``): a trick that speeds the broker up on work every broker does
  speeds its ceiling up alike, so it cannot pass for progress of the broker's own
  (and, for the same reason, it keeps its heap as ``brokerlab serve`` does:
  ``broker.heap``). It decodes each payload into a bytes object of its own, the
  payload as a value, which is what its consumer keeps and hands back; the broker
  decodes a request's payloads straight into the entries it stores
  (``broker.http.b64_entries.encode_base64_payloads`` and ``encode_batch_base64``, the same
  libbase64 decoder). Each
  decodes once into what it keeps and copies nothing after;
- consume: ``POST /consumers/persistent/{tenant}/{namespace}/{topic}/{subscription}``
  makes a consumer of the topic; from then on the topic's produces keep their decoded
  payloads in a bounded queue (a produce waits while it is full), and
  ``GET /consumers/{id}/messages`` long-polls and hands them back encoded as the broker
  encodes them (base64 payload, id, properties, publish and event time, redelivery
  count); ``POST /consumers/{id}/ack`` parses its JSON (the same parser) and answers 204.

Run as ``python -m broker.bench.bare_server [--host H] [--port P]``; it prints
``bare listening on http://H:P`` when ready and stops on SIGINT or SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import binascii
import collections
import contextlib
import operator
import signal
import sys
import time
from collections.abc import Sequence
from typing import Any

import orjson
import pybase64
import uvloop
from aiohttp import web
from pydantic_core import from_json

from broker.heap import keep_heap_for_serving
from broker.http.b64 import decode_all_strict
from broker.http.produce_encoding import publish_results

READY_PREFIX = "bare listening on "
MAX_BODY_BYTES = 16 * 1024 * 1024  # the broker's maxHttpRequestBodyBytes default
MAX_POLL_MESSAGES = 1000  # as the broker
#: decoded messages a consumed topic holds before its produces wait (~50 MB of 1 KiB)
QUEUE_LIMIT = 50_000

_payload_of = operator.itemgetter("payload")


class BareTopic:
    """The messages produced to a topic since a consumer was made for it, in order.
    Put and take are O(messages moved)."""

    __slots__ = ("arrived", "messages", "room")

    def __init__(self) -> None:
        #: (message id, payload, publish time) triples
        self.messages: collections.deque[tuple[str, bytes, int]] = collections.deque()
        self.arrived = asyncio.Event()
        self.room = asyncio.Event()
        self.room.set()


class BareState:
    __slots__ = ("consumers", "next_entry", "topics")

    def __init__(self) -> None:
        self.next_entry = 0
        self.topics: dict[str, BareTopic] = {}  # the topics somebody consumes
        self.consumers: dict[str, BareTopic] = {}


_STATE = web.AppKey("state", BareState)


def _bad_request(text: str) -> web.Response:
    return web.Response(
        status=400, body=orjson.dumps({"error": text}), content_type="application/json"
    )


def _topic_key(request: web.Request) -> str:
    info = request.match_info
    return f"{info['tenant']}/{info['namespace']}/{info['topic']}"


async def produce(request: web.Request) -> web.Response:
    try:
        messages = from_json(await request.read())["messages"]
        payloads = decode_all_strict(map(_payload_of, messages))
    except (KeyError, TypeError, ValueError, binascii.Error):
        return _bad_request("malformed produce request or payload not base64")
    state = request.app[_STATE]
    count = len(payloads)
    first = state.next_entry
    state.next_entry = first + count
    topic = state.topics.get(_topic_key(request))
    if topic is not None:
        while len(topic.messages) >= QUEUE_LIMIT:
            topic.room.clear()
            await topic.room.wait()
        ids = [f"0:{entry_id}" for entry_id in range(first, first + count)]
        now_ms = time.time_ns() // 1_000_000
        topic.messages.extend(zip(ids, payloads, [now_ms] * count, strict=True))
        topic.arrived.set()
    return web.Response(body=publish_results((0, first), 0, count), content_type="application/json")


async def create_consumer(request: web.Request) -> web.Response:
    state = request.app[_STATE]
    await request.read()
    topic = state.topics.setdefault(_topic_key(request), BareTopic())
    consumer_id = f"bare-{len(state.consumers)}"
    state.consumers[consumer_id] = topic
    return web.Response(
        body=orjson.dumps({"consumerId": consumer_id}), content_type="application/json"
    )


def _consumer_topic(request: web.Request) -> BareTopic:
    topic = request.app[_STATE].consumers.get(request.match_info["consumer_id"])
    if topic is None:
        raise web.HTTPNotFound()
    return topic


async def receive(request: web.Request) -> web.Response:
    topic = _consumer_topic(request)
    query = request.query
    max_messages = min(int(query.get("maxMessages", "100")), MAX_POLL_MESSAGES)
    timeout_s = int(query.get("timeoutMs", "1000")) / 1000
    if not topic.messages:
        topic.arrived.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(topic.arrived.wait(), timeout_s)
    queue = topic.messages
    taken = min(max_messages, len(queue))
    out: list[dict[str, Any]] = []
    encode = pybase64.b64encode_as_string
    for _ in range(taken):
        message_id, payload, publish_time = queue.popleft()
        out.append(
            {
                "messageId": message_id,
                "payload": encode(payload),
                "properties": {},
                "publishTime": publish_time,
                "eventTime": 0,
                "redeliveryCount": 0,
            }
        )
    if taken:
        topic.room.set()
    return web.Response(body=orjson.dumps({"messages": out}), content_type="application/json")


async def acknowledge(request: web.Request) -> web.Response:
    _consumer_topic(request)
    try:
        from_json(await request.read())["messageIds"]
    except (KeyError, TypeError, ValueError):
        return _bad_request("malformed ack request")
    return web.Response(status=204)


def create_app() -> web.Application:
    app = web.Application(client_max_size=MAX_BODY_BYTES)
    app[_STATE] = BareState()
    topic = "/persistent/{tenant}/{namespace}/{topic}"
    app.router.add_post("/topics" + topic, produce)
    app.router.add_post("/consumers" + topic + "/{subscription}", create_consumer)
    app.router.add_get("/consumers/{consumer_id}/messages", receive)
    app.router.add_post("/consumers/{consumer_id}/ack", acknowledge)
    return app


async def serve(host: str, port: int) -> None:
    runner = web.AppRunner(create_app(), access_log=None, handle_signals=False)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound = runner.addresses[0][1]
        print(f"{READY_PREFIX}http://{host}:{bound}", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        await stop.wait()
    finally:
        await runner.cleanup()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m broker.bench.bare_server")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    keep_heap_for_serving()
    uvloop.run(serve(args.host, args.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
