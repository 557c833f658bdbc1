"""Domain errors of the broker, each mapped to one HTTP status and code by broker.http."""

from __future__ import annotations


class BrokerError(Exception):
    """Base: ``code`` is the kebab-case id in error bodies."""

    code = "internal-error"


class InvalidRequestError(BrokerError):
    code = "invalid-request"


class NotFoundError(BrokerError):
    code = "not-found"


class ConflictError(BrokerError):
    code = "conflict"


class PreconditionFailedError(BrokerError):
    code = "precondition-failed"


class TooLargeError(BrokerError):
    code = "too-large"


class NotImplementedYetError(BrokerError):
    code = "not-implemented"


class UnavailableError(BrokerError):
    """Storage fault or timeout; the request changed nothing and may be retried."""

    code = "unavailable"


class LimitReachedError(ConflictError):
    """A count limit of broker.conf (consumers, producers, subscriptions, topics) is
    reached; the request may succeed once the count goes down. HTTP: 409 ``conflict``,
    the reason naming the setting."""


class ProducerLimitError(LimitReachedError):
    """maxProducersPerTopic: Pulsar answers ProducerBusy."""


class ConsumerLimitError(LimitReachedError):
    """maxConsumersPerTopic, maxConsumersPerSubscription: Pulsar answers ConsumerBusy."""


class NotAllowedLimitError(LimitReachedError):
    """maxSubscriptionsPerTopic, maxTopicsPerNamespace: Pulsar answers NotAllowedError."""
