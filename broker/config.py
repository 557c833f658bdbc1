"""Typed configuration of the broker (``conf/broker.conf``) and the loaders for both conf
files.

Field names are the file's keys: Pulsar's ``ServiceConfiguration`` names and defaults
where Pulsar has the setting; the few brokerlab-only keys say so. ``conf/broker.conf``
documents every key; ``tests/config`` keeps the file and these defaults in step.
"""

from __future__ import annotations

import pathlib
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field

from storage_stub.config import StorageConfig
from storage_stub.confparse import load_config

__all__ = ["BrokerConfig", "StorageConfig", "load_broker_config", "load_storage_config"]


class BrokerConfig(BaseModel):
    """Every key of conf/broker.conf."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # --- HTTP service ---
    #: Address the HTTP service listens on. Pulsar binds 0.0.0.0; brokerlab stays local.
    bindAddress: str = Field(default="127.0.0.1", min_length=1)
    #: HTTP port; 0 picks a free port (tests). Pulsar: same default.
    webServicePort: int = Field(default=8080, ge=0, le=65535)

    # --- Produce ---
    #: Produce to a missing topic creates it. Pulsar: same default.
    allowAutoTopicCreation: bool = True
    #: Largest message payload in bytes (413 above it). Pulsar: same default (5 MiB).
    maxMessageSize: int = Field(default=5242880, gt=0)
    #: brokerlab only: largest HTTP request body in bytes (Pulsar's httpMaxRequestSize
    #: is unbounded by default; produce bodies carry base64 payloads, so bound them).
    maxHttpRequestBodyBytes: int = Field(default=16777216, gt=0)
    #: brokerlab only: most messages in one produce request.
    maxMessagesPerProduceRequest: int = Field(default=1000, gt=0)

    # --- Managed ledger: rollover ---
    #: Roll the current ledger over at this many entries (not before the minimum time).
    managedLedgerMaxEntriesPerLedger: int = Field(default=50000, gt=0)
    #: Roll over at this many MiB written to the current ledger (ditto).
    managedLedgerMaxSizePerLedgerMbytes: int = Field(default=2048, gt=0)
    #: A ledger is never rolled over before it is this old (minutes); 0 = no minimum.
    managedLedgerMinLedgerRolloverTimeMinutes: int = Field(default=10, ge=0)
    #: A ledger holding entries is rolled over once it is this old (minutes).
    managedLedgerMaxLedgerRolloverTimeMinutes: int = Field(default=240, gt=0)

    # --- Managed ledger: entry cache ---
    #: Broker entry cache size in MiB; 0 disables caching. Pulsar's default is 20% of
    #: the JVM's direct memory with a floor of 64 MB; brokerlab has no JVM, so the floor.
    managedLedgerCacheSizeMB: int = Field(default=64, ge=0)

    # --- Dispatch ---
    #: Most entries a dispatcher reads from the ledger in one read. Pulsar: same default.
    dispatcherMaxReadBatchSize: int = Field(default=100, gt=0)
    #: Shared/Key_Shared: stop dispatching to a consumer with this many unacked messages;
    #: 0 = no limit. Pulsar: same default.
    maxUnackedMessagesPerConsumer: int = Field(default=50000, ge=0)
    #: Shared/Key_Shared: stop dispatching to a subscription with this many unacked
    #: messages; 0 = no limit. Pulsar: same default (4 x the per-consumer limit).
    maxUnackedMessagesPerSubscription: int = Field(default=200000, ge=0)
    #: brokerlab only: close a consumer that has not polled for this long (ms); HTTP
    #: consumers have no connection whose loss would tell the broker they are gone.
    consumerIdleTimeoutMs: int = Field(default=30000, gt=0)

    # --- Stats ---
    #: Period (s) over which topic stats and /metrics rates are computed. Pulsar's
    #: default is 60; brokerlab uses 10 so dashboards move while you watch.
    statsUpdateFrequencyInSecs: int = Field(default=10, ge=1)


def load_broker_config(
    path: pathlib.Path | None, overrides: Mapping[str, object] | None = None
) -> BrokerConfig:
    """Load conf/broker.conf (None: defaults); overrides win. Raises ConfigError."""
    return load_config(BrokerConfig, path, overrides)


def load_storage_config(
    path: pathlib.Path | None, overrides: Mapping[str, object] | None = None
) -> StorageConfig:
    """Load conf/storage.conf (None: defaults); overrides win. Raises ConfigError."""
    return load_config(StorageConfig, path, overrides)
