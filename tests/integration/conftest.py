"""Integration tests start ``brokerlab serve`` processes with the harness's fixtures
(``tests/conftest.py``: ``broker_process``, ``served_broker``), which fork them from a warm
server (``forkserver``): the same command, main and data dir, without a fresh
interpreter's imports at every start and restart."""
