"""A thin client of the broker's HTTP contract (docs/api.md), and nothing else: the load
generator is a black box to the broker and never imports it.

Every non-2xx answer raises :class:`BrokerError` with the contract's ``code``; a broker
that cannot be reached (restarting, gone) raises :class:`Unavailable`, which callers
retry. Bodies are encoded and decoded with orjson: at tens of thousands of messages a
second the client's JSON is a visible share of the CPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

import aiohttp
import orjson

JSON_HEADERS = {"Content-Type": "application/json"}


class BrokerError(Exception):
    """The broker answered with an error (``{"reason", "code"}``)."""

    def __init__(self, status: int, code: str, reason: str) -> None:
        super().__init__(f"{status} {code}: {reason}")
        self.status = status
        self.code = code
        self.reason = reason


class Unavailable(BrokerError):
    """The broker could not be reached, or answered 503; try again later."""


def topic_path(topic: str) -> str:
    """``persistent://t/ns/x`` as it appears in URLs: ``persistent/t/ns/x``."""
    scheme, sep, rest = topic.partition("://")
    if not sep:
        raise ValueError(f"not a topic name: {topic!r}")
    return f"{scheme}/{rest}"


class BrokerClient:
    """One connection pool to one broker. ``connections`` bounds the sockets; each long
    poll holds one for its duration, so size it to the number of consumers that poll at
    once plus room for producers."""

    def __init__(self, base_url: str, *, connections: int = 512) -> None:
        self.base_url = base_url.rstrip("/")
        self._session: aiohttp.ClientSession | None = None
        self._connections = connections

    async def __aenter__(self) -> BrokerClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=self._connections, force_close=False)
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _call(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        params: dict[str, str] | None = None,
    ) -> tuple[int, bytes]:
        try:
            async with self.session.request(
                method,
                self.base_url + path,
                data=body,
                params=params,
                headers=JSON_HEADERS if body is not None else None,
            ) as response:
                payload = await response.read()
                status = response.status
        except (aiohttp.ClientConnectionError, ConnectionError, TimeoutError) as error:
            raise Unavailable(0, "unreachable", f"{method} {path}: {error!r}") from None
        if status >= 300:
            raise _error(status, payload)
        return status, payload

    async def _json(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        params: dict[str, str] | None = None,
    ) -> Any:
        _, payload = await self._call(method, path, body=body, params=params)
        return orjson.loads(payload) if payload else None

    # ---------------------------------------------------------------- produce/consume

    async def produce(self, topic: str, body: bytes) -> int:
        """POST a produce body (already JSON); returns how many messages were stored."""
        result = await self._json("POST", "/topics/" + topic_path(topic), body=body)
        stored = 0
        for item in result["messagePublishResults"]:
            if item.get("errorCode", 0) == 0:
                stored += 1
        return stored

    async def create_consumer(self, topic: str, subscription: str, spec: dict[str, Any]) -> str:
        path = f"/consumers/{topic_path(topic)}/{quote(subscription, safe='')}"
        result = await self._json("POST", path, body=orjson.dumps(spec))
        return str(result["consumerId"])

    async def receive(self, consumer_id: str, max_messages: int, timeout_ms: int) -> list[Any]:
        result = await self._json(
            "GET",
            f"/consumers/{consumer_id}/messages",
            params={"maxMessages": str(max_messages), "timeoutMs": str(timeout_ms)},
        )
        messages: list[Any] = result["messages"]
        return messages

    async def ack(self, consumer_id: str, message_ids: Sequence[str], cumulative: bool) -> None:
        body = orjson.dumps(
            {"messageIds": message_ids, "ackType": "Cumulative" if cumulative else "Individual"}
        )
        await self._call("POST", f"/consumers/{consumer_id}/ack", body=body)

    async def nack(self, consumer_id: str, message_ids: Sequence[str]) -> None:
        """Redelivered after the consumer's ``negativeAckRedeliveryDelayMillis``."""
        body = orjson.dumps({"messageIds": message_ids})
        await self._call("POST", f"/consumers/{consumer_id}/nack", body=body)

    async def close_consumer(self, consumer_id: str) -> None:
        await self._call("DELETE", f"/consumers/{consumer_id}")

    # ----------------------------------------------------------------------- admin

    async def create_subscription(self, topic: str, subscription: str, position: str) -> None:
        path = f"/admin/v2/{topic_path(topic)}/subscription/{quote(subscription, safe='')}"
        await self._call("PUT", path, params={"messageId": position})

    async def reset_cursor_to_time(self, topic: str, subscription: str, time_ms: int) -> None:
        path = (
            f"/admin/v2/{topic_path(topic)}/subscription/{quote(subscription, safe='')}"
            f"/resetcursor/{time_ms}"
        )
        await self._call("POST", path)

    async def unload_namespace(self, tenant: str, namespace: str) -> None:
        await self._call("POST", f"/admin/v2/namespaces/{tenant}/{namespace}/unload")

    async def last_message_id(self, topic: str) -> str:
        result = await self._json("GET", f"/admin/v2/{topic_path(topic)}/lastMessageId")
        return f"{result['ledgerId']}:{result['entryId']}"

    async def offload(self, topic: str, message_id: str) -> None:
        body = orjson.dumps({"messageId": message_id})
        await self._call("PUT", f"/admin/v2/{topic_path(topic)}/offload", body=body)

    async def cache_stats(self) -> dict[str, Any]:
        result: dict[str, Any] = await self._json("GET", "/admin/v2/broker-stats/cache")
        return result

    async def storage_stats(self) -> dict[str, Any]:
        result: dict[str, Any] = await self._json("GET", "/admin/v2/broker-stats/storage")
        return result

    async def trace_stats(self) -> dict[str, Any]:
        result: dict[str, Any] = await self._json("GET", "/admin/v2/broker-stats/trace")
        return result

    async def healthy(self) -> bool:
        try:
            await self._call("GET", "/admin/v2/brokers/health")
        except BrokerError:
            return False
        return True


def _error(status: int, payload: bytes) -> BrokerError:
    try:
        body = orjson.loads(payload)
        code, reason = str(body["code"]), str(body["reason"])
    except (orjson.JSONDecodeError, KeyError, TypeError):
        code, reason = "unexpected", payload[:200].decode("utf-8", "replace")
    kind = Unavailable if status == 503 else BrokerError
    return kind(status, code, reason)
