"""Stub storage for brokerlab: a BookKeeper-like bookie and (later) a tiered object store.

Knows nothing of the broker: it stores ledgers of opaque entries and small metadata
records, and it counts, delays and fails operations on request.
"""
