"""Pulsar's ServerError code for each broker error: what the binary protocol's answers
(ERROR, SEND_ERROR, a lookup's or a schema request's error field) carry when the broker
service refuses or fails a request."""

from __future__ import annotations

from broker.dispatch.backlog_quota import ProducerBlockedError
from broker.dispatch.errors import (
    ConflictError,
    ConsumerLimitError,
    CorruptEntryError,
    IncompatibleSchemaError,
    InvalidRequestError,
    InvalidSchemaError,
    LimitReachedError,
    NotFoundError,
    NotImplementedYetError,
    PreconditionFailedError,
    ProducerBusyError,
    ProducerFencedError,
    ProducerLimitError,
    ReservedNameError,
    SubscriptionFencedError,
    TooLargeError,
    UnavailableError,
)
from broker.dispatch.ownership import NotOwnerError, ServiceNotReadyError
from broker.ledger.managed_ledger import ManagedLedgerError
from broker.pulsar_api import ServerError
from storage_stub.bookie.api import BookieError


def server_error(error: BaseException) -> int:
    """Pulsar's ServerError code for a broker error."""
    if isinstance(error, ProducerFencedError):
        return ServerError.ProducerFenced
    if isinstance(error, ProducerBusyError):
        return ServerError.ProducerBusy
    if isinstance(error, LimitReachedError):
        if isinstance(error, ProducerLimitError):
            return ServerError.ProducerBusy
        if isinstance(error, ConsumerLimitError):
            return ServerError.ConsumerBusy
        return ServerError.NotAllowedError
    if isinstance(error, NotOwnerError | ServiceNotReadyError | SubscriptionFencedError):
        return ServerError.ServiceNotReady  # the client looks the topic up again
    if isinstance(error, ReservedNameError):
        return ServerError.ProducerBusy  # Pulsar's NamingException
    if isinstance(error, ProducerBlockedError):
        if error.hold:
            return ServerError.ProducerBlockedQuotaExceededError
        return ServerError.ProducerBlockedQuotaExceededException
    if isinstance(error, IncompatibleSchemaError | InvalidSchemaError):
        # Pulsar answers an invalid schema as incompatible too, for older clients
        return ServerError.IncompatibleSchema
    if isinstance(error, ConflictError | PreconditionFailedError):
        return ServerError.ConsumerBusy
    if isinstance(error, NotFoundError):
        return ServerError.TopicNotFound
    if isinstance(error, CorruptEntryError):
        return ServerError.MetadataError
    if isinstance(error, InvalidRequestError):
        return ServerError.InvalidTopicName
    if isinstance(error, NotImplementedYetError | TooLargeError):
        return ServerError.NotAllowedError
    if isinstance(error, UnavailableError | BookieError | ManagedLedgerError | OSError):
        return ServerError.PersistenceError
    return ServerError.UnknownError
