"""The HTTP producer's entries, each base64 payload decoded straight into its entry.

The produce route's common body is a list of base64 payloads. The compiled module
``broker.ledger._entries`` can decode each text into the entry it builds (no bytes
object, free or copy a payload), given a base64 decoder: pybase64's extension exports
libbase64's ``base64_decode``, which :func:`_bind_base64` hands it once at import. The
entries' framing is the ledger's (``plain_rows``, ``plain_framing``, ``batch_metadata``);
what is HTTP here is the producer's name and the base64.
"""

from __future__ import annotations

from typing import Any

from broker.ledger.entry import PLAIN_SEQUENCE_IDS, batch_metadata, plain_framing, plain_rows

try:  # compiled with the package where a C compiler and x86-64 with SSE4.2 allow
    from broker.ledger import _entries as _compiled
except ImportError:
    _compiled = None  # type: ignore[assignment]

#: producer name of messages produced over HTTP
HTTP_PRODUCER = "brokerlab-http"


def _bind_base64() -> bool:
    """Hand the compiled module pybase64's decoder (libbase64's ``base64_decode``, which
    its extension module exports) for :func:`encode_base64_payloads`; False where there
    is no compiled module, no pybase64 extension (its pure-Python fallback) or no such
    symbol."""
    if _compiled is None:
        return False
    try:
        from pybase64 import _pybase64

        _compiled.bind_base64(_pybase64.__file__)
    except (ImportError, OSError):
        return False
    return True


_b64_bound = _bind_base64()


def compiled_base64_encoder() -> bool:
    """Whether :func:`encode_base64_payloads` decodes into entries (the compiled module
    imported and pybase64's decoder bound), rather than answering None."""
    return _b64_bound


def encode_base64_payloads(texts: list[Any], publish_time: int) -> list[bytes] | None:
    """``encode_payloads`` of the base64 decodes of ``texts`` (the HTTP producer's, from
    sequence id 0), each text decoded straight into its entry: no bytes object, free or
    copy a payload, about 0.2 us of a 1 KiB message. None where the compiled module is
    missing (or could not bind pybase64's decoder), and for any text that is not
    canonical base64 in an ASCII str: the caller then decodes its own way, which decides.
    Whatever this encodes, decoding with ``broker.http.b64`` and ``encode_payloads``
    encodes the same (the tests hold them to it). O(total text length)."""
    count = len(texts)
    if not (_b64_bound and count <= PLAIN_SEQUENCE_IDS and 0 <= publish_time < 1 << 64):
        return None
    rows, tail, tail_crc = plain_rows(HTTP_PRODUCER, 0, count, publish_time)
    return _compiled.encode_rows_b64(rows, texts, tail, tail_crc)


def encode_batch_base64(texts: list[Any], publish_time: int, max_bytes: int) -> bytes | None:
    """``encode_batch_payloads`` of the base64 decodes of ``texts`` (the HTTP producer's,
    from sequence id 0), each text decoded straight into the entry: no bytes object a
    payload and no join. None where the decoder is not bound, for any text that is not
    canonical base64 in an ASCII str, for an empty list, and where the payloads would
    sum to more than ``max_bytes`` (the caller's general path then says so). Whatever
    this encodes, decoding with ``broker.http.b64`` and ``encode_batch_payloads``
    encodes the same (the tests hold them to it). O(total text length)."""
    if not (_b64_bound and texts and 0 <= publish_time < 1 << 64):
        return None
    sizes = _compiled.decoded_sizes(texts)
    if sizes is None or sum(sizes) > max_bytes:
        return None
    count = len(sizes)
    metadata = batch_metadata(count, publish_time, HTTP_PRODUCER, 0)
    return _compiled.encode_batch_b64(metadata, plain_framing(sizes, 0), texts)
