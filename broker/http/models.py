"""Request bodies of the HTTP contract, as typed dicts validated by pydantic.

Each body is a ``TypedDict`` with pydantic's field constraints, and
:class:`broker.http.contract.JsonBody` wraps it for one operation: the handler reads the
body through it (``validate_json`` parses and checks in one pass, in Rust, strictly: no
string-to-number or number-to-bool coercion) and the OpenAPI document takes the body's
schema from the same type. Typed dicts rather than models: a 100-message produce
validated into 101 model instances costs about 3.5 times ``orjson.loads``; as a typed
dict it costs the same as ``orjson.loads`` (both about 70 us for 100 x 1 KiB).

What a type cannot say is checked by the handler, which answers the same errors: limits
set in broker.conf (maxMessagesPerProduceRequest, maxMessageSize: 413), base64 that
decodes, a key's length in UTF-8 bytes, message ids within Java's long.

Unknown fields are ignored, as Pulsar's REST API ignores them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired

from pydantic import AfterValidator, ConfigDict, Field, with_config
from typing_extensions import TypedDict

from storage_stub.bookie.api import OPERATIONS
from storage_stub.tiered.api import OBJECT_OPERATIONS

#: every body is checked strictly: a number is a JSON number, a flag a JSON boolean
STRICT = ConfigDict(strict=True)

#: A message id ``"{ledgerId}:{entryId}"``.
MESSAGE_ID_PATTERN = r"^[0-9]+:[0-9]+$"
#: A message id that may name message ``I`` of a batched entry: ``"L:E"`` or ``"L:E:I"``.
BATCH_MESSAGE_ID_PATTERN = r"^[0-9]+:[0-9]+(:[0-9]+)?$"
INT32_MAX = 2_147_483_647
INT64_MAX = 2**63 - 1

Int32 = Annotated[int, Field(json_schema_extra={"format": "int32"})]
Int64 = Annotated[int, Field(json_schema_extra={"format": "int64"})]
Double = Annotated[float, Field(json_schema_extra={"format": "double"})]

MessageId = Annotated[
    str,
    Field(
        description="Message id `{ledgerId}:{entryId}`, both at most 9223372036854775807.",
        pattern=MESSAGE_ID_PATTERN,
        examples=["3:17"],
    ),
]
BatchMessageId = Annotated[
    str,
    Field(
        description="Message id `{ledgerId}:{entryId}`, or `{ledgerId}:{entryId}:{batchIndex}` "
        "for message batchIndex of a batched entry (batchIndex below 1048576).",
        pattern=BATCH_MESSAGE_ID_PATTERN,
        examples=["3:17:0"],
    ),
]
#: Pulsar's subscription types
SubscriptionType = Literal["Exclusive", "Failover", "Shared", "Key_Shared"]
#: a name given by the client (producer, consumer)
ClientName = Annotated[str, Field(min_length=1, max_length=256)]


@with_config(STRICT)
class ProducerMessage(TypedDict):
    """One message to produce."""

    payload: Annotated[
        str,
        Field(
            description="Base64 (standard alphabet, padded, no whitespace or line breaks); "
            "decoded length at most maxMessageSize (default 5242880 bytes), else 413.",
            json_schema_extra={"format": "byte"},
        ),
    ]
    key: NotRequired[
        Annotated[
            str,
            Field(description="Message key; at most 65535 bytes in UTF-8.", max_length=65535),
        ]
    ]
    properties: NotRequired[
        Annotated[dict[str, str], Field(description="String properties of the message.")]
    ]
    eventTime: NotRequired[
        Annotated[
            Int64,
            Field(description="Event time, epoch ms; 0 means not set.", ge=0, le=INT64_MAX),
        ]
    ]
    deliverAt: NotRequired[
        Annotated[
            Int64,
            Field(
                description="Delayed delivery: epoch ms the message is due on Shared and "
                "Key_Shared subscriptions; 0 means not set.",
                ge=0,
                le=INT64_MAX,
            ),
        ]
    ]
    deliverAfterMs: NotRequired[
        Annotated[
            Int64,
            Field(
                description="Delayed delivery: due this many ms after the broker received "
                "the request (deliverAt wins when both are set); 0 means not set.",
                ge=0,
                le=INT64_MAX,
            ),
        ]
    ]


@with_config(STRICT)
class ProduceRequest(TypedDict):
    """Messages to store, in order."""

    producerName: NotRequired[Annotated[ClientName, Field(description="Informational.")]]
    messages: Annotated[
        list[ProducerMessage],
        Field(
            description="1..maxMessagesPerProduceRequest (default 1000) messages; empty: 400, "
            "more: 413.",
            min_length=1,
        ),
    ]
    batch: NotRequired[
        Annotated[
            bool,
            Field(
                description="true: all the messages become one batched entry in Pulsar's "
                "format, with ids L:E:0, L:E:1, ...; their payloads together at most "
                "maxMessageSize, else 413.",
            ),
        ]
    ]


@with_config(STRICT)
class ConsumerRequest(TypedDict):
    """Consumer settings; every field has a default, so `{}` is an Exclusive consumer."""

    consumerName: NotRequired[Annotated[ClientName, Field(description="Default: generated.")]]
    subscriptionType: NotRequired[
        Annotated[SubscriptionType, Field(description="Pulsar subscription type.")]
    ]
    receiverQueueSize: NotRequired[
        Annotated[
            Int32,
            Field(description="Receiver queue size: the consumer's permits.", ge=1, le=100_000),
        ]
    ]
    subscriptionInitialPosition: NotRequired[
        Annotated[
            Literal["Latest", "Earliest"],
            Field(description="Where a subscription created by this call starts."),
        ]
    ]
    priorityLevel: NotRequired[
        Annotated[
            Int32,
            Field(
                description="Lower is dispatched to first (Shared, Key_Shared) or preferred "
                "as active (Failover).",
                ge=0,
                le=INT32_MAX,
            ),
        ]
    ]
    ackTimeoutMillis: NotRequired[
        Annotated[
            Int64,
            Field(
                description="Redeliver a message not acked within this time; 0 disables.",
                ge=0,
                le=INT32_MAX,
            ),
        ]
    ]
    negativeAckRedeliveryDelayMillis: NotRequired[
        Annotated[
            Int64,
            Field(description="Delay before a nacked message is redelivered.", ge=0, le=INT32_MAX),
        ]
    ]


#: defaults of ConsumerRequest's fields, as the handler applies them
CONSUMER_DEFAULTS: dict[str, Any] = {
    "subscriptionType": "Exclusive",
    "receiverQueueSize": 1000,
    "subscriptionInitialPosition": "Latest",
    "priorityLevel": 0,
    "ackTimeoutMillis": 0,
    "negativeAckRedeliveryDelayMillis": 60000,
}

#: most ids in one ack or nack
MAX_IDS = 100_000


@with_config(STRICT)
class MessageIdsRequest(TypedDict):
    """Messages pending for this consumer; other ids are ignored."""

    messageIds: Annotated[list[BatchMessageId], Field(min_length=1, max_length=MAX_IDS)]


@with_config(STRICT)
class AckRequest(TypedDict):
    """Acknowledgement of messages pending for this consumer; other ids are ignored."""

    messageIds: Annotated[list[BatchMessageId], Field(min_length=1, max_length=MAX_IDS)]
    ackType: NotRequired[
        Annotated[
            Literal["Individual", "Cumulative"],
            Field(
                description="Cumulative acks everything up to the greatest id listed (L:E:I: "
                "messages 0..I of that batch and every entry before it); refused (400) on "
                "Shared and Key_Shared.",
            ),
        ]
    ]


@with_config(STRICT)
class MessageIdRequest(TypedDict):
    """A position."""

    messageId: MessageId


#: every storage operation a fault can be set on: the bookie's and metadata's, then the
#: tiered object store's
FAULT_OPERATIONS: tuple[str, ...] = OPERATIONS + OBJECT_OPERATIONS


def _fault_operation(name: str) -> str:
    if name not in FAULT_OPERATIONS:
        raise ValueError(f"not a storage operation; one of {', '.join(FAULT_OPERATIONS)}")
    return name


#: a storage operation's name, checked against the storage stub's own list
FaultOperation = Annotated[
    str,
    AfterValidator(_fault_operation),
    Field(json_schema_extra={"enum": list(FAULT_OPERATIONS)}),
]


ErrorRate = Annotated[
    Double,
    Field(ge=0.0, le=1.0, description="Probability that a call fails (it then changes nothing)."),
]
FaultDelay = Annotated[
    Double,
    Field(
        ge=0.0,
        le=600_000.0,
        description="Milliseconds added to every call's latency, before it succeeds or fails.",
    ),
]


@with_config(STRICT)
class FaultSetting(TypedDict):
    """The injected fault of one storage operation."""

    operation: Annotated[FaultOperation, Field(description="Storage operation.")]
    errorRate: NotRequired[ErrorRate]
    delayMs: NotRequired[FaultDelay]


@with_config(STRICT)
class StartMessageId(TypedDict):
    """Pulsar's MessageId / ResetCursorData."""

    ledgerId: Annotated[
        Int64,
        Field(
            description="With entryId: the first message delivered; both "
            "9223372036854775807 = latest, both -1 = earliest.",
            ge=-1,
            le=INT64_MAX,
        ),
    ]
    entryId: Annotated[Int64, Field(description="See ledgerId.", ge=-1, le=INT64_MAX)]
    isExcluded: NotRequired[Annotated[bool, Field(description="Start after that message.")]]
    batchIndex: NotRequired[Annotated[Int64, Field(description="Ignored.")]]
    partitionIndex: NotRequired[Annotated[Int64, Field(description="Ignored.")]]


#: Where a new subscription starts, as Pulsar's admin sends it.
SubscriptionStart = Annotated[
    Literal["latest", "earliest"] | StartMessageId,
    Field(description="Where a new subscription starts, as Pulsar's admin sends it."),
]

#: The number of partitions, a bare JSON number as Pulsar takes it.
PartitionCount = Annotated[
    Int32,
    Field(
        description="Number of partitions, a bare JSON number (`3`); at most "
        "maxNumPartitionsPerPartitionedTopic when that is not 0.",
        ge=1,
        le=INT32_MAX,
        examples=[3],
        strict=True,
    ),
]


@with_config(STRICT)
class TenantInfo(TypedDict):
    """Pulsar's TenantInfo."""

    adminRoles: NotRequired[
        Annotated[list[str] | None, Field(description="Kept and shown, not enforced.")]
    ]
    allowedClusters: NotRequired[
        Annotated[list[str] | None, Field(description="Only clusterName; default [clusterName].")]
    ]


#: Pulsar's Policies; accepted and ignored.
NamespacePolicies = Annotated[
    dict[str, Any], Field(description="Pulsar's Policies; accepted and ignored.")
]


#: What an absent optional field means, per body type: the handlers apply these, and the
#: OpenAPI document shows them as the fields' defaults.
DEFAULTS: dict[str, dict[str, Any]] = {
    "ProducerMessage": {"properties": {}, "eventTime": 0},
    "ProduceRequest": {"batch": False},
    "ConsumerRequest": CONSUMER_DEFAULTS,
    "AckRequest": {"ackType": "Individual"},
    "FaultSetting": {"errorRate": 0.0, "delayMs": 0.0},
    "StartMessageId": {"isExcluded": False, "batchIndex": -1, "partitionIndex": -1},
    "PostSchemaPayload": {"schema": "", "properties": {}},
}


#: Pulsar's SchemaCompatibilityStrategy names (UNDEFINED: not set at that level)
SchemaCompatibilityStrategy = Annotated[
    Literal[
        "UNDEFINED",
        "ALWAYS_INCOMPATIBLE",
        "ALWAYS_COMPATIBLE",
        "BACKWARD",
        "FORWARD",
        "FULL",
        "BACKWARD_TRANSITIVE",
        "FORWARD_TRANSITIVE",
        "FULL_TRANSITIVE",
    ],
    Field(description='A schema compatibility strategy, a JSON string (`"BACKWARD"`).'),
]

#: A policy flag, a bare JSON boolean
PolicyFlag = Annotated[
    bool, Field(description="`true` or `false`, a bare JSON boolean.", strict=True)
]


@with_config(STRICT)
class PostSchemaPayload(TypedDict):
    """Pulsar's PostSchemaPayload: a schema to register."""

    type: Annotated[
        str,
        Field(
            description="Pulsar's SchemaType name: AVRO, JSON, PROTOBUF, PROTOBUF_NATIVE, "
            "STRING, KEY_VALUE, BYTES, NONE, BOOLEAN, INT8 ... LOCAL_DATE_TIME.",
            max_length=32,
        ),
    ]
    schema: NotRequired[
        Annotated[
            str,
            Field(
                description="The definition as text: an Avro schema in JSON for AVRO and "
                'JSON; `{"key": ..., "value": ...}` for KEY_VALUE; empty for STRING and '
                "primitives.",
            ),
        ]
    ]
    properties: NotRequired[
        Annotated[dict[str, str], Field(description="The schema's properties.")]
    ]
