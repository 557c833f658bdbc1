"""A thin client of the broker's HTTP contract (docs/api.md), and nothing else: the load
generator is a black box to the broker and never imports it.

Every non-2xx answer raises :class:`BrokerError` with the contract's ``code``; a broker
that cannot be reached (restarting, gone) raises :class:`Unavailable`, which callers
retry; a 401 raises :class:`AuthenticationError`. A client given a token sends it as
``Authorization: Bearer <token>`` on every request, as Pulsar's HTTP clients do. Bodies
are encoded and decoded with orjson: at tens of thousands of messages a second the
client's JSON is a visible share of the CPU.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote, urlsplit

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


class AuthenticationError(BrokerError):
    """The broker has authentication on and refused the client's credentials (401):
    ``token_sent`` says whether there were any."""

    def __init__(self, status: int, code: str, reason: str, *, token_sent: bool) -> None:
        super().__init__(status, code, reason)
        self.token_sent = token_sent


def topic_path(topic: str) -> str:
    """``persistent://t/ns/x`` as it appears in URLs: ``persistent/t/ns/x``."""
    scheme, sep, rest = topic.partition("://")
    if not sep:
        raise ValueError(f"not a topic name: {topic!r}")
    return f"{scheme}/{rest}"


#: redirects followed for one request (a topic moving while it is asked for)
MAX_REDIRECTS = 4


class BrokerClient:
    """One connection pool to a broker, or to the brokers of a cluster (``brokers``, the
    HTTP bases of all of them). ``connections`` bounds the sockets; each long poll holds
    one for its duration, so size it to the number of consumers that poll at once plus
    room for producers.

    In a cluster a topic's requests go to its owner: a 307 from another broker names it
    and is remembered per topic; a consumer's requests go to the broker that created
    it. A broker that is down (503 or unreachable) makes the next topic request start at
    the next broker, as a Pulsar client walks its service URL's hosts.

    ``token``: sent as a Bearer token on every request (None: no credentials)."""

    def __init__(
        self,
        base_url: str,
        *,
        connections: int = 512,
        brokers: Sequence[str] = (),
        token: str | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._token = token
        self.brokers = [url.rstrip("/") for url in brokers] or [self.base_url]
        self._session: aiohttp.ClientSession | None = None
        self._connections = connections
        #: topic -> the base of the broker that owns it, as last learned
        self._owners: dict[str, str] = {}
        #: consumer id -> the base of the broker that holds it
        self._consumers: dict[str, str] = {}
        self._next = 0

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
                headers=None if self._token is None else {"Authorization": f"Bearer {self._token}"},
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
        base: str | None = None,
    ) -> tuple[int, bytes]:
        status, payload, _ = await self._request(method, path, body, params, base)
        if status >= 300:
            raise _error(status, payload, token_sent=self._token is not None)
        return status, payload

    async def _request(
        self,
        method: str,
        path: str,
        body: bytes | None,
        params: dict[str, str] | None,
        base: str | None,
    ) -> tuple[int, bytes, str]:
        """One request, redirects not followed: (status, body, Location or "")."""
        url = (base or self.base_url) + path
        try:
            async with self.session.request(
                method,
                url,
                data=body,
                params=params,
                headers=JSON_HEADERS if body is not None else None,
                allow_redirects=False,
            ) as response:
                payload = await response.read()
                return response.status, payload, response.headers.get("Location", "")
        except (aiohttp.ClientConnectionError, ConnectionError, TimeoutError) as error:
            raise Unavailable(0, "unreachable", f"{method} {url}: {error!r}") from None

    async def _topic_call(
        self,
        topic: str,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        params: dict[str, str] | None = None,
    ) -> tuple[bytes, str]:
        """A request about ``topic`` at its owner, following 307s (the owner learned);
        returns the body and the base that answered."""
        base = self._owners.get(topic) or self.brokers[self._next % len(self.brokers)]
        for _ in range(MAX_REDIRECTS + 1):
            try:
                status, payload, location = await self._request(method, path, body, params, base)
            except Unavailable:
                self._lost(topic)
                raise
            if status == 307 and location:
                base = _base_of(location)
                self._owners[topic] = base
                continue
            if status >= 300:
                if status == 503:
                    self._lost(topic)
                raise _error(status, payload, token_sent=self._token is not None)
            return payload, base
        raise Unavailable(0, "redirect-loop", f"{method} {path}: too many redirects")

    def _lost(self, topic: str) -> None:
        """The topic's broker did not answer: ask the next broker next time."""
        self._owners.pop(topic, None)
        self._next += 1

    async def _json(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        params: dict[str, str] | None = None,
        base: str | None = None,
    ) -> Any:
        _, payload = await self._call(method, path, body=body, params=params, base=base)
        return orjson.loads(payload) if payload else None

    # ---------------------------------------------------------------- produce/consume

    async def produce(self, topic: str, body: bytes) -> int:
        """POST a produce body (already JSON); returns how many messages were stored."""
        return sum(await self.produce_each(topic, body))

    async def produce_each(self, topic: str, body: bytes) -> list[bool]:
        """POST a produce body (already JSON); whether each of its messages was stored,
        in the body's order."""
        payload, _ = await self._topic_call(
            topic, "POST", "/topics/" + topic_path(topic), body=body
        )
        result = orjson.loads(payload)
        return [item.get("errorCode", 0) == 0 for item in result["messagePublishResults"]]

    async def create_consumer(self, topic: str, subscription: str, spec: dict[str, Any]) -> str:
        path = f"/consumers/{topic_path(topic)}/{quote(subscription, safe='')}"
        payload, base = await self._topic_call(topic, "POST", path, body=orjson.dumps(spec))
        consumer_id = str(orjson.loads(payload)["consumerId"])
        self._consumers[consumer_id] = base
        return consumer_id

    async def receive(self, consumer_id: str, max_messages: int, timeout_ms: int) -> list[Any]:
        result = await self._json(
            "GET",
            f"/consumers/{consumer_id}/messages",
            params={"maxMessages": str(max_messages), "timeoutMs": str(timeout_ms)},
            base=self._consumers.get(consumer_id),
        )
        messages: list[Any] = result["messages"]
        return messages

    async def ack(self, consumer_id: str, message_ids: Sequence[str], cumulative: bool) -> None:
        body = orjson.dumps(
            {"messageIds": message_ids, "ackType": "Cumulative" if cumulative else "Individual"}
        )
        base = self._consumers.get(consumer_id)
        await self._call("POST", f"/consumers/{consumer_id}/ack", body=body, base=base)

    async def nack(self, consumer_id: str, message_ids: Sequence[str]) -> None:
        """Redelivered after the consumer's ``negativeAckRedeliveryDelayMillis``."""
        body = orjson.dumps({"messageIds": message_ids})
        base = self._consumers.get(consumer_id)
        await self._call("POST", f"/consumers/{consumer_id}/nack", body=body, base=base)

    async def close_consumer(self, consumer_id: str) -> None:
        base = self._consumers.pop(consumer_id, None)
        await self._call("DELETE", f"/consumers/{consumer_id}", base=base)

    def forget_consumer(self, consumer_id: str) -> None:
        """The consumer is gone (closed under its client): drop where it lived."""
        self._consumers.pop(consumer_id, None)

    # ----------------------------------------------------------------------- admin

    async def create_subscription(self, topic: str, subscription: str, position: str) -> None:
        path = f"/admin/v2/{topic_path(topic)}/subscription/{quote(subscription, safe='')}"
        await self._topic_call(topic, "PUT", path, params={"messageId": position})

    async def reset_cursor_to_time(self, topic: str, subscription: str, time_ms: int) -> None:
        path = (
            f"/admin/v2/{topic_path(topic)}/subscription/{quote(subscription, safe='')}"
            f"/resetcursor/{time_ms}"
        )
        await self._topic_call(topic, "POST", path)

    async def unload_namespace(self, tenant: str, namespace: str) -> None:
        await self._call("POST", f"/admin/v2/namespaces/{tenant}/{namespace}/unload")

    async def last_message_id(self, topic: str) -> str:
        path = f"/admin/v2/{topic_path(topic)}/lastMessageId"
        payload, _ = await self._topic_call(topic, "GET", path)
        result = orjson.loads(payload)
        return f"{result['ledgerId']}:{result['entryId']}"

    async def offload(self, topic: str, message_id: str) -> None:
        body = orjson.dumps({"messageId": message_id})
        await self._topic_call(topic, "PUT", f"/admin/v2/{topic_path(topic)}/offload", body=body)

    async def unload_bundle(self, tenant: str, namespace: str, bundle: str) -> None:
        await self._call("PUT", f"/admin/v2/namespaces/{tenant}/{namespace}/{bundle}/unload")

    async def restart_broker(self, index: int, mode: str, downtime_ms: int) -> None:
        """Restart broker ``index`` of the cluster, asked of another broker (the answer
        comes once it is up again); of itself when it is the only one."""
        others = [base for i, base in enumerate(self.brokers) if i != index]
        params = {"mode": mode, "downtimeMs": str(downtime_ms)}
        path = f"/admin/v2/brokerlab/brokers/{index}/restart"
        await self._call("POST", path, params=params, base=others[0] if others else None)

    async def cache_stats(self) -> dict[str, Any]:
        """The cache stats of the broker, or of every broker of a cluster summed (counts
        and sizes add up; each broker has its own cache)."""
        results = await asyncio.gather(
            *(self._json("GET", "/admin/v2/broker-stats/cache", base=base) for base in self.brokers)
        )
        return sum_stats(results)

    async def storage_stats(self) -> dict[str, Any]:
        result: dict[str, Any] = await self._json("GET", "/admin/v2/broker-stats/storage")
        return result

    async def stats(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """The cache stats of every broker summed and the storage stats, of one instant
        (``GET /admin/v2/brokerlab/stats``): the caches' misses then equal the storage's
        entries read even while reads complete. From a broker without that route (404),
        the two separate answers, which reads completing between them may set apart."""
        try:
            result = await self._json("GET", "/admin/v2/brokerlab/stats")
        except BrokerError as error:
            if error.status != 404:
                raise
            cache, storage = await asyncio.gather(self.cache_stats(), self.storage_stats())
            return cache, storage
        return sum_stats(result["cache"]), result["storage"]

    async def trace_stats(self) -> dict[str, Any]:
        """The trace recorder's stats, of every broker of a cluster summed (each broker
        records its own files): events and drops of the whole trace."""
        results = await asyncio.gather(
            *(self._json("GET", "/admin/v2/broker-stats/trace", base=base) for base in self.brokers)
        )
        return sum_stats(results)

    async def healthy(self) -> bool:
        try:
            await self._call("GET", "/admin/v2/brokers/health")
        except BrokerError:
            return False
        return True


def _base_of(location: str) -> str:
    """``http://host:port`` of a redirect's Location."""
    parsed = urlsplit(location)
    return f"{parsed.scheme}://{parsed.netloc}"


def sum_stats(parts: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Several brokers' stats as one: numbers added key by key (nested too), anything
    else taken from the first."""
    if len(parts) == 1:
        return dict(parts[0])
    total: dict[str, Any] = {}
    for part in parts:
        for key, value in part.items():
            if key not in total:
                total[key] = sum_stats([value]) if isinstance(value, dict) else value
            elif isinstance(value, bool) or not isinstance(value, (int, float, dict)):
                continue
            elif isinstance(value, dict):
                total[key] = sum_stats([total[key], value])
            else:
                total[key] += value
    return total


def _error(status: int, payload: bytes, *, token_sent: bool) -> BrokerError:
    try:
        body = orjson.loads(payload)
        code, reason = str(body["code"]), str(body["reason"])
    except (orjson.JSONDecodeError, KeyError, TypeError):
        code, reason = "unexpected", payload[:200].decode("utf-8", "replace")
    if status == 401:
        return AuthenticationError(status, code, reason, token_sent=token_sent)
    kind = Unavailable if status == 503 else BrokerError
    return kind(status, code, reason)
