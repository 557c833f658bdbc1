"""The listener of Pulsar's binary protocol (``brokerServicePort``): same process, same
event loop and same broker service as the HTTP front end.

Each connection reads the server's shared state (service, config, authentication,
limits), so ``broker.protocol.connection`` imports this module; the server is handed the
connection class to make its connections with, and knows them only as
:class:`ServedConnection`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from broker.auth.service import AuthenticationService
from broker.config import BrokerConfig
from broker.dispatch.names import TopicName
from broker.dispatch.service import BrokerService
from broker.limits import ConnectionLimiter
from broker.protocol.frames import FRAME_PADDING
from broker.protocol.throttle import PublishBuffer
from broker.tasks import TaskOwner

log = logging.getLogger(__name__)


#: the most one read of a connection brings: uvloop's own read buffer's size
READ_BUFFER_BYTES = 256 * 1024


class ServedConnection(Protocol):
    """A connection as its server sees it: one it can close at shutdown."""

    def abort(self, reason: str) -> None: ...


class ProtocolServer:
    """Accepts connections; each is made by ``connection`` (``Connection``) from this
    server. ``close`` closes them all and waits for their work."""

    def __init__(
        self,
        service: BrokerService,
        config: BrokerConfig,
        connection: Callable[[ProtocolServer], asyncio.BaseProtocol],
    ) -> None:
        self.service = service
        self._connection = connection
        self.config = config
        self.max_frame = config.maxMessageSize + FRAME_PADDING
        #: where every connection's reads land (``Connection.get_buffer``): a read is
        #: parsed, and what is kept of it copied out, before the loop reads again
        self.read_buffer = bytearray(READ_BUFFER_BYTES)
        self.read_view = memoryview(self.read_buffer)
        #: the bytes of every connection's cut entry still arriving (CUT_ENTRIES_MAX_BYTES)
        self.cut_entry_bytes = 0
        #: who a client is, from its CONNECT (authenticationEnabled)
        self.authentication = AuthenticationService(config)
        self.connections: set[ServedConnection] = set()
        #: brokerMaxConnections and brokerMaxConnectionsPerIp, checked at accept
        self.limiter = ConnectionLimiter(
            config.brokerMaxConnections, config.brokerMaxConnectionsPerIp
        )
        #: unanswered SEND bytes of every connection (maxMessagePublishBufferSizeInMB)
        self.publish_buffer = PublishBuffer(config.maxMessagePublishBufferSizeInMB << 20)
        #: PARTITIONED_METADATA requests being answered, all connections together
        #: (maxConcurrentLookupRequest)
        self.lookups = 0
        #: what LOOKUP answers: this broker's pulsar:// URL, known once listening
        self.service_url = ""
        self.port = 0
        self._server: asyncio.Server | None = None
        self._tasks = TaskOwner("pulsar protocol")

    async def start(self, host: str, port: int) -> int:
        """Listen on ``host:port`` (0: any free port); returns the port."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: self._connection(self), host, port)
        self.port = self._server.sockets[0].getsockname()[1]
        self.service_url = f"pulsar://{self.config.advertisedAddress}:{self.port}"
        return self.port

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> None:
        self._tasks.spawn(coro, name=name)

    def spawn_detach(self, coro: Coroutine[Any, Any, Any], name: str) -> None:
        """Run a hung-up connection's detach (``Connection._detach_in_turns``); the
        service's new consumers and this server's new producers wait for it
        (``BrokerService.detached``)."""
        self.service.detaching(self._tasks.spawn(coro, name=name))

    async def partitions(self, name: TopicName, auto_create: bool) -> int:
        """PARTITIONED_METADATA: the topic's partitions (0: not partitioned)."""
        return await self.service.partitions.metadata_for_client(name, auto_create)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for connection in list(self.connections):
            connection.abort("broker shutting down")
        if self._server is not None:
            await self._server.wait_closed()
        await self._tasks.close()
