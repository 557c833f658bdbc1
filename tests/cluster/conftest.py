"""Cluster tests use the shared harness (``tests/conftest.py``): ``served_broker(brokers=2)``
for ``brokerlab serve --brokers 2`` (the official client's calls block), ``local_cluster``
for an in-process cluster whose brokers a test stops and starts directly. Here: the
helpers only cluster tests need, and the load generator's brokers forked from the
harness's warm interpreter (``tests/loadgen/forked.py``), as ``served_broker``'s are."""

from __future__ import annotations

from typing import Any

from tests.harness import NAMESPACE, Client
from tests.loadgen.charts import no_run_charts
from tests.loadgen.forked import forked_loadgen_brokers

__all__ = ["forked_loadgen_brokers", "no_run_charts"]


def owner_in_listing(brokers: list[dict[str, Any]], bundle: str) -> int | None:
    """The broker whose listing holds ``public/default/<bundle>``, if any."""
    owners = [b["index"] for b in brokers if f"{NAMESPACE}/{bundle}" in b["bundles"]]
    assert len(owners) <= 1, f"bundle {bundle} owned twice: {brokers}"
    return owners[0] if owners else None


async def unfollowed(client: Client, method: str, path: str, json: Any = None) -> tuple[int, str]:
    """One request with redirects not followed: the status and the Location (or "")."""
    async with client.session.request(
        method, client.base_url + path, json=json, allow_redirects=False
    ) as response:
        await response.read()
        return response.status, response.headers.get("Location", "")
