"""The format of the entries a data directory holds, checked when a broker opens it."""

from __future__ import annotations

from broker.ledger.metadata_keys import metadata_key
from storage_stub.bookie.api import MetadataStore

#: metadata key naming the format of the stored entries
ENTRY_FORMAT_KEY = "format/entries"
#: Pulsar's entry format (magic, CRC32C, MessageMetadata, payload; batches inside)
ENTRY_FORMAT = b"pulsar-1"


class DataFormatError(Exception):
    """The data directory holds entries this brokerlab cannot read."""


async def check_data_format(metadata: MetadataStore) -> None:
    """Refuse a data directory written before entries took Pulsar's format (one message
    per entry under brokerlab's own header): serving it would hand clients bytes that
    are not Pulsar entries. A new or empty one is marked as holding Pulsar's format."""
    value = await metadata.get(ENTRY_FORMAT_KEY)
    if value == ENTRY_FORMAT:
        return
    if value is None:
        if not await metadata.keys_with_prefix(metadata_key("")):
            await metadata.put(ENTRY_FORMAT_KEY, ENTRY_FORMAT)
            return
        raise DataFormatError(
            "this data directory was written by an earlier brokerlab, whose entries were "
            "not in Pulsar's format; this one stores and serves Pulsar's entry format "
            "and cannot read them. Start with a new --data-dir (or delete this one)."
        )
    raise DataFormatError(
        f"this data directory holds entries in format {value.decode(errors='replace')!r}, "
        f"which this brokerlab does not know (it writes {ENTRY_FORMAT.decode()!r})"
    )
