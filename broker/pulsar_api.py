"""The messages of Pulsar's binary protocol and of its stored entries (MessageMetadata,
SingleMessageMetadata), defined here from the protocol's documented field numbers and
compiled by the protobuf runtime (upb) when this module loads. A leaf module, like
``broker.clock``: the ledger's entry format and the protocol front end both use it.

Why not a ``.proto`` file and ``protoc`` at build time: the protobuf runtime can build
message classes from a descriptor at import, so the schema below is the only definition,
there is no generated file to keep in step and no compiler in the install. Parsing and
serializing run in upb's C code either way (measured in ``brokerlab bench wire``).

Only what brokerlab answers or reads is defined; a field a client sends that is not
here is kept as an unknown field and ignored, as proto2 does. Enum-typed fields are
declared ``int32`` (same wire encoding) with the values named as constants below, so an
enum value newer than this file still parses.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_F = descriptor_pb2.FieldDescriptorProto
_TYPES = {
    "uint64": _F.TYPE_UINT64,
    "int64": _F.TYPE_INT64,
    "uint32": _F.TYPE_UINT32,
    "int32": _F.TYPE_INT32,
    "bool": _F.TYPE_BOOL,
    "string": _F.TYPE_STRING,
    "bytes": _F.TYPE_BYTES,
    "double": _F.TYPE_DOUBLE,
}
_LABELS = {"req": _F.LABEL_REQUIRED, "opt": _F.LABEL_OPTIONAL, "rep": _F.LABEL_REPEATED}

# name: [(number, field name, label, type or message name, default or None)]
_SCHEMA: dict[str, list[tuple[int, str, str, str, Any]]] = {
    "KeyValue": [(1, "key", "req", "string", None), (2, "value", "req", "string", None)],
    "Schema": [
        (1, "name", "req", "string", None),
        (3, "schema_data", "req", "bytes", None),
        (4, "type", "req", "int32", None),
        (5, "properties", "rep", "KeyValue", None),
    ],
    "KeyLongValue": [(1, "key", "req", "string", None), (2, "value", "req", "uint64", None)],
    "IntRange": [(1, "start", "req", "int32", None), (2, "end", "req", "int32", None)],
    "MessageIdData": [
        (1, "ledgerId", "req", "uint64", None),
        (2, "entryId", "req", "uint64", None),
        (3, "partition", "opt", "int32", -1),
        (4, "batch_index", "opt", "int32", -1),
        (5, "ack_set", "rep", "int64", None),
        (6, "batch_size", "opt", "int32", None),
    ],
    "MessageMetadata": [
        (1, "producer_name", "req", "string", None),
        (2, "sequence_id", "req", "uint64", None),
        (3, "publish_time", "req", "uint64", None),
        (4, "properties", "rep", "KeyValue", None),
        (5, "replicated_from", "opt", "string", None),
        (6, "partition_key", "opt", "string", None),
        (7, "replicate_to", "rep", "string", None),
        (8, "compression", "opt", "int32", 0),
        (9, "uncompressed_size", "opt", "uint32", 0),
        (11, "num_messages_in_batch", "opt", "int32", 1),
        (12, "event_time", "opt", "uint64", 0),
        # 13: encryption_keys (not read); an encrypted message carries its IV here
        (14, "encryption_algo", "opt", "string", None),
        (15, "encryption_param", "opt", "bytes", None),
        (16, "schema_version", "opt", "bytes", None),
        (17, "partition_key_b64_encoded", "opt", "bool", False),
        (18, "ordering_key", "opt", "bytes", None),
        (19, "deliver_at_time", "opt", "int64", None),
        (20, "marker_type", "opt", "int32", None),
        (24, "highest_sequence_id", "opt", "uint64", 0),
        (25, "null_value", "opt", "bool", False),
        (26, "uuid", "opt", "string", None),
        (27, "num_chunks_from_msg", "opt", "int32", None),
        (28, "total_chunk_msg_size", "opt", "int32", None),
        (29, "chunk_id", "opt", "int32", None),
        (30, "null_partition_key", "opt", "bool", False),
    ],
    "SingleMessageMetadata": [
        (1, "properties", "rep", "KeyValue", None),
        (2, "partition_key", "opt", "string", None),
        (3, "payload_size", "req", "int32", None),
        (4, "compacted_out", "opt", "bool", False),
        (5, "event_time", "opt", "uint64", 0),
        (6, "partition_key_b64_encoded", "opt", "bool", False),
        (7, "ordering_key", "opt", "bytes", None),
        (8, "sequence_id", "opt", "uint64", None),
        (9, "null_value", "opt", "bool", False),
        (10, "null_partition_key", "opt", "bool", False),
    ],
    "FeatureFlags": [
        (1, "supports_auth_refresh", "opt", "bool", False),
        (2, "supports_broker_entry_metadata", "opt", "bool", False),
        (3, "supports_partial_producer", "opt", "bool", False),
        (4, "supports_topic_watchers", "opt", "bool", False),
        (5, "supports_get_partitioned_metadata_without_auto_creation", "opt", "bool", False),
    ],
    "CommandConnect": [
        (1, "client_version", "req", "string", None),
        (2, "auth_method", "opt", "int32", None),
        (3, "auth_data", "opt", "bytes", None),
        (4, "protocol_version", "opt", "int32", 0),
        (5, "auth_method_name", "opt", "string", None),
        (6, "proxy_to_broker_url", "opt", "string", None),
        (10, "feature_flags", "opt", "FeatureFlags", None),
    ],
    "AuthData": [
        (1, "auth_method_name", "opt", "string", None),
        (2, "auth_data", "opt", "bytes", None),
    ],
    "CommandAuthChallenge": [
        (1, "server_version", "opt", "string", None),
        (2, "challenge", "opt", "AuthData", None),
        (3, "protocol_version", "opt", "int32", 0),
    ],
    "CommandAuthResponse": [
        (1, "client_version", "opt", "string", None),
        (2, "response", "opt", "AuthData", None),
        (3, "protocol_version", "opt", "int32", 0),
    ],
    "CommandConnected": [
        (1, "server_version", "req", "string", None),
        (2, "protocol_version", "opt", "int32", 0),
        (3, "max_message_size", "opt", "int32", None),
        (4, "feature_flags", "opt", "FeatureFlags", None),
    ],
    "KeySharedMeta": [
        (1, "keySharedMode", "req", "int32", None),
        (3, "hashRanges", "rep", "IntRange", None),
        (4, "allowOutOfOrderDelivery", "opt", "bool", False),
    ],
    "CommandSubscribe": [
        (1, "topic", "req", "string", None),
        (2, "subscription", "req", "string", None),
        (3, "subType", "req", "int32", None),
        (4, "consumer_id", "req", "uint64", None),
        (5, "request_id", "req", "uint64", None),
        (6, "consumer_name", "opt", "string", None),
        (7, "priority_level", "opt", "int32", None),
        (8, "durable", "opt", "bool", True),
        (9, "start_message_id", "opt", "MessageIdData", None),
        (10, "metadata", "rep", "KeyValue", None),
        (11, "read_compacted", "opt", "bool", None),
        (12, "schema", "opt", "Schema", None),
        (13, "initialPosition", "opt", "int32", 0),
        (14, "replicate_subscription_state", "opt", "bool", None),
        (15, "force_topic_creation", "opt", "bool", True),
        (16, "start_message_rollback_duration_sec", "opt", "uint64", 0),
        (17, "keySharedMeta", "opt", "KeySharedMeta", None),
        (18, "subscription_properties", "rep", "KeyValue", None),
        (19, "consumer_epoch", "opt", "uint64", None),
    ],
    "CommandPartitionedTopicMetadata": [
        (1, "topic", "req", "string", None),
        (2, "request_id", "req", "uint64", None),
        (6, "metadata_auto_creation_enabled", "opt", "bool", True),
    ],
    "CommandPartitionedTopicMetadataResponse": [
        (1, "partitions", "opt", "uint32", None),
        (2, "request_id", "req", "uint64", None),
        (3, "response", "opt", "int32", None),
        (4, "error", "opt", "int32", None),
        (5, "message", "opt", "string", None),
    ],
    "CommandLookupTopic": [
        (1, "topic", "req", "string", None),
        (2, "request_id", "req", "uint64", None),
        (3, "authoritative", "opt", "bool", False),
        (7, "advertised_listener_name", "opt", "string", None),
    ],
    "CommandLookupTopicResponse": [
        (1, "brokerServiceUrl", "opt", "string", None),
        (2, "brokerServiceUrlTls", "opt", "string", None),
        (3, "response", "opt", "int32", None),
        (4, "request_id", "req", "uint64", None),
        (5, "authoritative", "opt", "bool", False),
        (6, "error", "opt", "int32", None),
        (7, "message", "opt", "string", None),
        (8, "proxy_through_service_url", "opt", "bool", False),
    ],
    "CommandProducer": [
        (1, "topic", "req", "string", None),
        (2, "producer_id", "req", "uint64", None),
        (3, "request_id", "req", "uint64", None),
        (4, "producer_name", "opt", "string", None),
        (5, "encrypted", "opt", "bool", False),
        (6, "metadata", "rep", "KeyValue", None),
        (7, "schema", "opt", "Schema", None),
        (8, "epoch", "opt", "uint64", 0),
        (9, "user_provided_producer_name", "opt", "bool", True),
        (10, "producer_access_mode", "opt", "int32", 0),
        (11, "topic_epoch", "opt", "uint64", None),
        (12, "txn_enabled", "opt", "bool", False),
        (13, "initial_subscription_name", "opt", "string", None),
    ],
    "CommandSend": [
        (1, "producer_id", "req", "uint64", None),
        (2, "sequence_id", "req", "uint64", None),
        (3, "num_messages", "opt", "int32", 1),
        (4, "txnid_least_bits", "opt", "uint64", 0),
        (5, "txnid_most_bits", "opt", "uint64", 0),
        (6, "highest_sequence_id", "opt", "uint64", 0),
        (7, "is_chunk", "opt", "bool", False),
        (8, "marker", "opt", "bool", False),
        (9, "message_id", "opt", "MessageIdData", None),
    ],
    "CommandSendReceipt": [
        (1, "producer_id", "req", "uint64", None),
        (2, "sequence_id", "req", "uint64", None),
        (3, "message_id", "opt", "MessageIdData", None),
        (4, "highest_sequence_id", "opt", "uint64", 0),
    ],
    "CommandSendError": [
        (1, "producer_id", "req", "uint64", None),
        (2, "sequence_id", "req", "uint64", None),
        (3, "error", "req", "int32", None),
        (4, "message", "req", "string", None),
    ],
    "CommandMessage": [
        (1, "consumer_id", "req", "uint64", None),
        (2, "message_id", "req", "MessageIdData", None),
        (3, "redelivery_count", "opt", "uint32", 0),
        (4, "ack_set", "rep", "int64", None),
        (5, "consumer_epoch", "opt", "uint64", None),
    ],
    "CommandAck": [
        (1, "consumer_id", "req", "uint64", None),
        (2, "ack_type", "req", "int32", None),
        (3, "message_id", "rep", "MessageIdData", None),
        (4, "validation_error", "opt", "int32", None),
        (5, "properties", "rep", "KeyLongValue", None),
        (6, "txnid_least_bits", "opt", "uint64", 0),
        (7, "txnid_most_bits", "opt", "uint64", 0),
        (8, "request_id", "opt", "uint64", None),
    ],
    "CommandAckResponse": [
        (1, "consumer_id", "req", "uint64", None),
        (4, "error", "opt", "int32", None),
        (5, "message", "opt", "string", None),
        (6, "request_id", "opt", "uint64", None),
    ],
    "CommandActiveConsumerChange": [
        (1, "consumer_id", "req", "uint64", None),
        (2, "is_active", "opt", "bool", False),
    ],
    "CommandFlow": [
        (1, "consumer_id", "req", "uint64", None),
        (2, "messagePermits", "req", "uint32", None),
    ],
    "CommandUnsubscribe": [
        (1, "consumer_id", "req", "uint64", None),
        (2, "request_id", "req", "uint64", None),
        (3, "force", "opt", "bool", False),
    ],
    "CommandSeek": [
        (1, "consumer_id", "req", "uint64", None),
        (2, "request_id", "req", "uint64", None),
        (3, "message_id", "opt", "MessageIdData", None),
        (4, "message_publish_time", "opt", "uint64", None),
    ],
    "CommandReachedEndOfTopic": [(1, "consumer_id", "req", "uint64", None)],
    "CommandCloseProducer": [
        (1, "producer_id", "req", "uint64", None),
        (2, "request_id", "req", "uint64", None),
        (3, "assignedBrokerServiceUrl", "opt", "string", None),
    ],
    "CommandCloseConsumer": [
        (1, "consumer_id", "req", "uint64", None),
        (2, "request_id", "req", "uint64", None),
        (3, "assignedBrokerServiceUrl", "opt", "string", None),
    ],
    "CommandRedeliverUnacknowledgedMessages": [
        (1, "consumer_id", "req", "uint64", None),
        (2, "message_ids", "rep", "MessageIdData", None),
        (3, "consumer_epoch", "opt", "uint64", None),
    ],
    "CommandSuccess": [
        (1, "request_id", "req", "uint64", None),
        (2, "schema", "opt", "Schema", None),
    ],
    "CommandProducerSuccess": [
        (1, "request_id", "req", "uint64", None),
        (2, "producer_name", "req", "string", None),
        (3, "last_sequence_id", "opt", "int64", -1),
        (4, "schema_version", "opt", "bytes", None),
        (5, "topic_epoch", "opt", "uint64", None),
        (6, "producer_ready", "opt", "bool", True),
    ],
    "CommandError": [
        (1, "request_id", "req", "uint64", None),
        (2, "error", "req", "int32", None),
        (3, "message", "req", "string", None),
    ],
    "CommandPing": [],
    "CommandPong": [],
    "CommandConsumerStats": [
        (1, "request_id", "req", "uint64", None),
        (4, "consumer_id", "req", "uint64", None),
    ],
    "CommandConsumerStatsResponse": [
        (1, "request_id", "req", "uint64", None),
        (2, "error_code", "opt", "int32", None),
        (3, "error_message", "opt", "string", None),
        (4, "msgRateOut", "opt", "double", None),
        (5, "msgThroughputOut", "opt", "double", None),
        (6, "msgRateRedeliver", "opt", "double", None),
        (7, "consumerName", "opt", "string", None),
        (8, "availablePermits", "opt", "uint64", None),
        (9, "unackedMessages", "opt", "uint64", None),
        (10, "blockedConsumerOnUnackedMsgs", "opt", "bool", None),
        (13, "type", "opt", "string", None),
        (15, "msgBacklog", "opt", "uint64", None),
    ],
    "CommandGetLastMessageId": [
        (1, "consumer_id", "req", "uint64", None),
        (2, "request_id", "req", "uint64", None),
    ],
    "CommandGetLastMessageIdResponse": [
        (1, "last_message_id", "req", "MessageIdData", None),
        (2, "request_id", "req", "uint64", None),
        (3, "consumer_mark_delete_position", "opt", "MessageIdData", None),
    ],
    "CommandGetTopicsOfNamespace": [
        (1, "request_id", "req", "uint64", None),
        (2, "namespace", "req", "string", None),
        (3, "mode", "opt", "int32", 0),
        (4, "topics_pattern", "opt", "string", None),
        (5, "topics_hash", "opt", "string", None),
    ],
    "CommandGetTopicsOfNamespaceResponse": [
        (1, "request_id", "req", "uint64", None),
        (2, "topics", "rep", "string", None),
        (3, "filtered", "opt", "bool", False),
        (4, "topics_hash", "opt", "string", None),
        (5, "changed", "opt", "bool", True),
    ],
    "CommandGetSchema": [
        (1, "request_id", "req", "uint64", None),
        (2, "topic", "req", "string", None),
        (3, "schema_version", "opt", "bytes", None),
    ],
    "CommandGetSchemaResponse": [
        (1, "request_id", "req", "uint64", None),
        (2, "error_code", "opt", "int32", None),
        (3, "error_message", "opt", "string", None),
        (4, "schema", "opt", "Schema", None),
        (5, "schema_version", "opt", "bytes", None),
    ],
    "CommandGetOrCreateSchema": [
        (1, "request_id", "req", "uint64", None),
        (2, "topic", "req", "string", None),
        (3, "schema", "req", "Schema", None),
    ],
    "CommandGetOrCreateSchemaResponse": [
        (1, "request_id", "req", "uint64", None),
        (2, "error_code", "opt", "int32", None),
        (3, "error_message", "opt", "string", None),
        (4, "schema_version", "opt", "bytes", None),
    ],
    # the requests brokerlab answers with an error, as Pulsar does where the feature is
    # off: only the request id is read (every one carries it as field 1)
    "CommandNewTxn": [(1, "request_id", "req", "uint64", None)],
    "CommandAddPartitionToTxn": [(1, "request_id", "req", "uint64", None)],
    "CommandAddSubscriptionToTxn": [(1, "request_id", "req", "uint64", None)],
    "CommandEndTxn": [(1, "request_id", "req", "uint64", None)],
    "CommandEndTxnOnPartition": [(1, "request_id", "req", "uint64", None)],
    "CommandEndTxnOnSubscription": [(1, "request_id", "req", "uint64", None)],
    "CommandTcClientConnectRequest": [(1, "request_id", "req", "uint64", None)],
    "CommandWatchTopicList": [
        (1, "request_id", "req", "uint64", None),
        (2, "watcher_id", "req", "uint64", None),
        (3, "namespace", "opt", "string", None),
        (4, "topics_pattern", "opt", "string", None),
    ],
    "CommandWatchTopicListClose": [
        (1, "request_id", "req", "uint64", None),
        (2, "watcher_id", "req", "uint64", None),
    ],
}

# BaseCommand: the type, then one optional field per command, numbered as the type
_COMMANDS = [
    (2, "connect", "CommandConnect"),
    (3, "connected", "CommandConnected"),
    (4, "subscribe", "CommandSubscribe"),
    (5, "producer", "CommandProducer"),
    (6, "send", "CommandSend"),
    (7, "send_receipt", "CommandSendReceipt"),
    (8, "send_error", "CommandSendError"),
    (9, "message", "CommandMessage"),
    (10, "ack", "CommandAck"),
    (11, "flow", "CommandFlow"),
    (12, "unsubscribe", "CommandUnsubscribe"),
    (13, "success", "CommandSuccess"),
    (14, "error", "CommandError"),
    (15, "close_producer", "CommandCloseProducer"),
    (16, "close_consumer", "CommandCloseConsumer"),
    (17, "producer_success", "CommandProducerSuccess"),
    (18, "ping", "CommandPing"),
    (19, "pong", "CommandPong"),
    (20, "redeliverUnacknowledgedMessages", "CommandRedeliverUnacknowledgedMessages"),
    (21, "partitionMetadata", "CommandPartitionedTopicMetadata"),
    (22, "partitionMetadataResponse", "CommandPartitionedTopicMetadataResponse"),
    (23, "lookupTopic", "CommandLookupTopic"),
    (24, "lookupTopicResponse", "CommandLookupTopicResponse"),
    (25, "consumerStats", "CommandConsumerStats"),
    (26, "consumerStatsResponse", "CommandConsumerStatsResponse"),
    (27, "reachedEndOfTopic", "CommandReachedEndOfTopic"),
    (28, "seek", "CommandSeek"),
    (29, "getLastMessageId", "CommandGetLastMessageId"),
    (30, "getLastMessageIdResponse", "CommandGetLastMessageIdResponse"),
    (31, "active_consumer_change", "CommandActiveConsumerChange"),
    (32, "getTopicsOfNamespace", "CommandGetTopicsOfNamespace"),
    (33, "getTopicsOfNamespaceResponse", "CommandGetTopicsOfNamespaceResponse"),
    (34, "getSchema", "CommandGetSchema"),
    (35, "getSchemaResponse", "CommandGetSchemaResponse"),
    (36, "authChallenge", "CommandAuthChallenge"),
    (37, "authResponse", "CommandAuthResponse"),
    (38, "ackResponse", "CommandAckResponse"),
    (39, "getOrCreateSchema", "CommandGetOrCreateSchema"),
    (40, "getOrCreateSchemaResponse", "CommandGetOrCreateSchemaResponse"),
    (50, "newTxn", "CommandNewTxn"),
    (52, "addPartitionToTxn", "CommandAddPartitionToTxn"),
    (54, "addSubscriptionToTxn", "CommandAddSubscriptionToTxn"),
    (56, "endTxn", "CommandEndTxn"),
    (58, "endTxnOnPartition", "CommandEndTxnOnPartition"),
    (60, "endTxnOnSubscription", "CommandEndTxnOnSubscription"),
    (62, "tcClientConnectRequest", "CommandTcClientConnectRequest"),
    (64, "watchTopicList", "CommandWatchTopicList"),
    (67, "watchTopicListClose", "CommandWatchTopicListClose"),
]
_SCHEMA["BaseCommand"] = [(1, "type", "req", "int32", None)] + [
    (number, field, "opt", message, None) for number, field, message in _COMMANDS
]

_PACKAGE = "brokerlab.pulsar"


def _build() -> dict[str, Any]:
    file = descriptor_pb2.FileDescriptorProto(
        name="brokerlab/pulsar_api.proto", package=_PACKAGE, syntax="proto2"
    )
    for name, fields in _SCHEMA.items():
        message = file.message_type.add(name=name)
        for number, field_name, label, kind, default in fields:
            field = message.field.add(name=field_name, number=number, label=_LABELS[label])
            if kind in _TYPES:
                field.type = _TYPES[kind]
                if default is not None:
                    field.default_value = (
                        str(default).lower() if isinstance(default, bool) else str(default)
                    )
            else:
                field.type = _F.TYPE_MESSAGE
                field.type_name = f".{_PACKAGE}.{kind}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.{name}"))
        for name in _SCHEMA
    }


_CLASSES = _build()

BaseCommand: Any = _CLASSES["BaseCommand"]
MessageMetadata: Any = _CLASSES["MessageMetadata"]
SingleMessageMetadata: Any = _CLASSES["SingleMessageMetadata"]
MessageIdData: Any = _CLASSES["MessageIdData"]
KeyValue: Any = _CLASSES["KeyValue"]

#: BaseCommand.type -> the name of its field
COMMAND_FIELDS = {number: field for number, field, _ in _COMMANDS}


class Type:
    """BaseCommand.Type values."""

    CONNECT = 2
    CONNECTED = 3
    SUBSCRIBE = 4
    PRODUCER = 5
    SEND = 6
    SEND_RECEIPT = 7
    SEND_ERROR = 8
    MESSAGE = 9
    ACK = 10
    FLOW = 11
    UNSUBSCRIBE = 12
    SUCCESS = 13
    ERROR = 14
    CLOSE_PRODUCER = 15
    CLOSE_CONSUMER = 16
    PRODUCER_SUCCESS = 17
    PING = 18
    PONG = 19
    REDELIVER_UNACKNOWLEDGED_MESSAGES = 20
    PARTITIONED_METADATA = 21
    PARTITIONED_METADATA_RESPONSE = 22
    LOOKUP = 23
    LOOKUP_RESPONSE = 24
    CONSUMER_STATS = 25
    CONSUMER_STATS_RESPONSE = 26
    REACHED_END_OF_TOPIC = 27
    SEEK = 28
    GET_LAST_MESSAGE_ID = 29
    GET_LAST_MESSAGE_ID_RESPONSE = 30
    ACTIVE_CONSUMER_CHANGE = 31
    GET_TOPICS_OF_NAMESPACE = 32
    GET_TOPICS_OF_NAMESPACE_RESPONSE = 33
    GET_SCHEMA = 34
    GET_SCHEMA_RESPONSE = 35
    AUTH_CHALLENGE = 36
    AUTH_RESPONSE = 37
    ACK_RESPONSE = 38
    GET_OR_CREATE_SCHEMA = 39
    GET_OR_CREATE_SCHEMA_RESPONSE = 40
    NEW_TXN = 50
    ADD_PARTITION_TO_TXN = 52
    ADD_SUBSCRIPTION_TO_TXN = 54
    END_TXN = 56
    END_TXN_ON_PARTITION = 58
    END_TXN_ON_SUBSCRIPTION = 60
    TC_CLIENT_CONNECT_REQUEST = 62
    WATCH_TOPIC_LIST = 64
    WATCH_TOPIC_LIST_CLOSE = 67


class ServerError:
    """Pulsar's ServerError codes (the ones brokerlab answers with)."""

    UnknownError = 0
    MetadataError = 1
    PersistenceError = 2
    AuthenticationError = 3
    AuthorizationError = 4
    ConsumerBusy = 5
    ServiceNotReady = 6
    ProducerBlockedQuotaExceededError = 7
    ProducerBlockedQuotaExceededException = 8
    ChecksumError = 9
    UnsupportedVersionError = 10
    TopicNotFound = 11
    SubscriptionNotFound = 12
    ConsumerNotFound = 13
    TooManyRequests = 14
    TopicTerminatedError = 15
    ProducerBusy = 16
    InvalidTopicName = 17
    IncompatibleSchema = 18
    ConsumerAssignError = 19
    NotAllowedError = 22
    ProducerFenced = 25


#: CommandSubscribe.SubType -> brokerlab's subscription type names
SUB_TYPES = {0: "Exclusive", 1: "Shared", 2: "Failover", 3: "Key_Shared"}
#: CommandLookupTopicResponse.LookupType
LOOKUP_CONNECT = 1
LOOKUP_FAILED = 2
#: CommandPartitionedTopicMetadataResponse.LookupType
PARTITIONS_SUCCESS = 0
PARTITIONS_FAILED = 1
#: CommandProducer.ProducerAccessMode -> its name
ACCESS_MODES = {0: "Shared", 1: "Exclusive", 2: "WaitForExclusive", 3: "ExclusiveWithFencing"}
#: CommandAck.AckType
ACK_INDIVIDUAL = 0
ACK_CUMULATIVE = 1
#: MessageMetadata.compression
COMPRESSION_NONE = 0
COMPRESSION_ZLIB = 2
#: the newest protocol version brokerlab speaks (v19: as Pulsar 3.x/4.x brokers answer)
PROTOCOL_VERSION = 19
