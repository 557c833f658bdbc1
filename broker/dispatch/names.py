"""Topic names: ``persistent://{tenant}/{namespace}/{topic}``, each part validated."""

from __future__ import annotations

import re
from typing import NamedTuple

from broker.dispatch.errors import InvalidRequestError

_PART = re.compile(r"[A-Za-z0-9_.=:-]{1,128}")


def check_name_part(kind: str, value: str) -> str:
    """Return ``value`` if it is a valid name part; InvalidRequestError otherwise."""
    if not _PART.fullmatch(value) or value in (".", ".."):
        shown = value if len(value) <= 64 else value[:64] + "..."
        raise InvalidRequestError(
            f"invalid {kind} name {shown!r}: use 1-128 of A-Z a-z 0-9 _ . = : -, not '.' or '..'"
        )
    return value


class TopicName(NamedTuple):
    tenant: str
    namespace: str
    local_name: str

    @classmethod
    def of(cls, tenant: str, namespace: str, topic: str) -> TopicName:
        return cls(
            check_name_part("tenant", tenant),
            check_name_part("namespace", namespace),
            check_name_part("topic", topic),
        )

    @classmethod
    def parse(cls, full: str) -> TopicName:
        prefix = "persistent://"
        if not full.startswith(prefix):
            raise InvalidRequestError(f"invalid topic {full!r}: expected persistent://t/ns/topic")
        parts = full[len(prefix) :].split("/")
        if len(parts) != 3:
            raise InvalidRequestError(f"invalid topic {full!r}: expected persistent://t/ns/topic")
        return cls.of(*parts)

    @property
    def namespace_prefix(self) -> str:
        return f"persistent://{self.tenant}/{self.namespace}/"

    def __str__(self) -> str:
        return f"persistent://{self.tenant}/{self.namespace}/{self.local_name}"
