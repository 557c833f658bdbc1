"""Where a managed ledger's and its cursors' records live in the metadata store.

Below the ledger (which lists and deletes its cursors' records) and the cursors (which
write their own), so neither imports the other for them.
"""

from __future__ import annotations

_ML_PREFIX = "ml/"
_CURSOR_PREFIX = "cursor/"


def metadata_key(name: str) -> str:
    """The key of the managed ledger ``name``'s record (its list of ledgers)."""
    return _ML_PREFIX + name


def cursor_key_prefix(ledger_name: str) -> str:
    """The prefix of the keys of the ledger ``ledger_name``'s cursor records."""
    return f"{_CURSOR_PREFIX}{ledger_name}/"
