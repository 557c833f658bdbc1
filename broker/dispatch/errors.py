"""Domain errors of the broker. Each front end answers them in its own terms: HTTP with
the status and code of ``broker.http.errors.ERRORS``, the binary protocol with Pulsar's
ServerError codes."""

from __future__ import annotations


class BrokerError(Exception):
    """Base of the broker's errors; an unlisted one is an internal error."""


class InvalidRequestError(BrokerError):
    """The request is malformed or names something badly; nothing changed."""


class CorruptEntryError(InvalidRequestError):
    """An entry a producer built whose metadata or batch cannot be trusted (it does not
    parse, or its batch header counts messages the entry does not hold): nothing is
    stored. Binary protocol: SEND_ERROR MetadataError; HTTP: 400."""


class StoredEntryError(BrokerError):
    """An entry already stored whose metadata does not parse, asked for by a route that
    must read it (admin peek): Pulsar's admin answers such an entry's IOException as a
    500 with its message. HTTP: 500 ``internal-error``, no traceback logged."""


class NotFoundError(BrokerError):
    """What the request names (topic, subscription, consumer...) does not exist."""


class ConflictError(BrokerError):
    """The request contradicts the current state (an existing name, a busy subscription)."""


class ReservedNameError(ConflictError):
    """A name the broker keeps for itself (the subscription ``pulsar.dedup``): Pulsar's
    NamingException, ProducerBusy on the binary protocol; HTTP 409 ``conflict``."""


class PreconditionFailedError(BrokerError):
    """The current state forbids the request (a subscription with consumers)."""


class MethodNotAllowedError(BrokerError):
    """Pulsar refuses the operation on this kind of thing (peek on a partitioned topic's
    name): HTTP 405."""


class TooLargeError(BrokerError):
    """A message, a batch or a request is over its configured size or count."""


class NotImplementedYetError(BrokerError):
    """Something Pulsar does that brokerlab does not."""


class UnavailableError(BrokerError):
    """Storage fault or timeout; the request changed nothing and may be retried."""


class SubscriptionFencedError(UnavailableError):
    """The subscription's cursor is being reset (a seek): no consumer may attach until
    it is done. Pulsar answers ServiceNotReady and the client retries."""


class LimitReachedError(ConflictError):
    """A count limit of broker.conf (consumers, producers, subscriptions, topics) is
    reached; the request may succeed once the count goes down. HTTP: 409 ``conflict``,
    the reason naming the setting."""


class ProducerBusyError(ConflictError):
    """A producer the topic's access mode leaves no room for (a Shared producer while an
    exclusive one holds the topic or waits for it): Pulsar's ProducerBusy."""


class ProducerFencedError(ConflictError):
    """An exclusive producer refused (another holds the topic, shared ones are
    connected, or the topic epoch moved past the producer's) or fenced out by an
    ExclusiveWithFencing one: Pulsar's ProducerFenced; the client gives the producer up."""


class ProducerLimitError(LimitReachedError):
    """maxProducersPerTopic: Pulsar answers ProducerBusy."""


class ConsumerLimitError(LimitReachedError):
    """maxConsumersPerTopic, maxConsumersPerSubscription: Pulsar answers ConsumerBusy."""


class NotAllowedLimitError(LimitReachedError):
    """maxSubscriptionsPerTopic, maxTopicsPerNamespace: Pulsar answers NotAllowedError."""


class IncompatibleSchemaError(ConflictError):
    """A schema the topic's compatibility strategy refuses (Pulsar's
    IncompatibleSchemaException): nothing stored. Binary protocol: IncompatibleSchema;
    HTTP: 409."""


class InvalidSchemaError(BrokerError):
    """A schema whose definition does not parse for its type (Pulsar's
    InvalidSchemaDataException): nothing stored. Binary protocol: IncompatibleSchema, as
    Pulsar answers it for old clients; HTTP: 422."""
