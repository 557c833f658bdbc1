"""Broker entry cache strategies: pure, synchronous, clock injected.

Imports nothing from asyncio, aiohttp or storage: the ledger layer asks the cache first and
fills misses from storage. The same classes serve the live broker, shadows, tests and replays.
"""

from broker.cache.api import EntryCache, EntryCacheManager, MissingRange
from broker.cache.disabled import DisabledEntryCacheManager

__all__ = ["DisabledEntryCacheManager", "EntryCache", "EntryCacheManager", "MissingRange"]
