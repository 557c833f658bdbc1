"""The binary-protocol tests run the official Pulsar client (C++ core, blocking calls)
in the test process against ``brokerlab serve`` in its own process, so a blocking
``receive`` never stalls the broker's event loop: the ``served_broker`` and
``shared_served_broker`` fixtures of ``tests/conftest.py``.

``ServedBroker`` is re-exported for tests elsewhere that import it from here."""

from tests.harness import ServedBroker

__all__ = ["ServedBroker"]
