"""The managed ledger's errors, below the ledger and its cursors (both raise them)."""

from __future__ import annotations


class ManagedLedgerError(Exception):
    """The managed ledger cannot serve the request (closed, deleted)."""


class ReadsThrottled(ManagedLedgerError):
    """No permits for a read within managedLedgerMaxReadsInFlightSizeInMB: the reader
    retries after a backoff, as Pulsar's dispatchers do after TooManyRequests."""
