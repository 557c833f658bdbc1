"""The binary-protocol tests run the official Pulsar client (C++ core, blocking calls)
in the test process against ``brokerlab serve`` in its own process, so a blocking
``receive`` never stalls the broker's event loop: the ``served_broker`` and
``shared_served_broker`` fixtures of ``tests/conftest.py`` (and ``broker``, the module's
shared one, with ``client``, an official client of it).

Here, for the tests of the protocol itself: ``raw``, a raw connection to ``broker``'s
binary port, and ``client_of``, official clients of whichever broker a test started.

``ServedBroker`` is re-exported for tests elsewhere that import it from here."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import pytest

from tests.harness import ServedBroker
from tests.protocol.raw import RawConnection

if TYPE_CHECKING:
    import pulsar

__all__ = ["ServedBroker"]

ClientFactory = Callable[[ServedBroker], "pulsar.Client"]


@pytest.fixture
def raw(broker: ServedBroker) -> Iterator[RawConnection]:
    """A raw connection to ``broker``'s binary port (nothing sent yet), closed at the end."""
    connection = RawConnection(broker.service_url)
    yield connection
    connection.close()


@pytest.fixture
def client_of(pulsar_client: Callable[..., pulsar.Client]) -> ClientFactory:
    """Official clients of a broker; those still open are closed at the end."""
    return lambda broker: pulsar_client(broker.service_url)
