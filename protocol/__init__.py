"""Kafka wire codecs without I/O: framing, requests/responses, record batches, errors.

Requests and responses are kafka-python 3's schema-generated classes, except the two
responses sent once per message at low rates, Produce and Fetch, which are written
directly (and tested byte for byte against kafka-python's encoder); record batches use
aiokafka's compiled codec. Nothing here touches a socket, asyncio or the store.
"""

from ._apis import ApiKey, api_name, decodable_versions, request_class, request_classes
from ._connection import (
    DEFAULT_MAX_FRAME_BYTES,
    BadFrame,
    Event,
    KafkaConnection,
    Request,
    decode_request,
    encode_response,
    parse_header,
    response_class,
)
from ._errors import (
    ConnectionClosed,
    CorruptRecords,
    ErrorCode,
    FrameTooLarge,
    InvalidRecords,
    MalformedMeta,
    MalformedRequest,
    ProtocolError,
    UnsupportedMessageFormat,
)
from ._fetch_response import FetchPartition, FetchResult, FetchTopic, encode_fetch_response
from ._meta import decode_meta, encode_meta, meta_timestamp, pack_timestamp_meta
from ._metadata_response import (
    MetadataBroker,
    MetadataPartition,
    MetadataResult,
    MetadataTopic,
    encode_metadata_response,
    encode_metadata_topic,
)
from ._produce_response import (
    PartitionResult,
    ProduceResult,
    TopicResult,
    encode_produce_response,
)
from ._records import (
    SERVED_HEAD,
    FetchRecord,
    ProducedBatch,
    RecordFields,
    batch_base_offset,
    batch_keys,
    batch_messages,
    batch_next_offset,
    build_batch,
    decode_batch,
    decode_records,
    empty_batch,
    iter_batch_messages,
    iter_batch_records,
    served_head,
    skip_batch,
    split_batches,
)
from ._txn_responses import (
    AddPartitionsResult,
    AddPartitionsTopicResult,
    EndTxnResult,
    encode_add_partitions_response,
    encode_end_txn_response,
)

TX_HEADER = "tms.tx.write_pointer"
"""Record header carrying an in-progress TMS transaction's write pointer (8 bytes, BE)."""

__all__ = [
    "DEFAULT_MAX_FRAME_BYTES",
    "SERVED_HEAD",
    "TX_HEADER",
    "AddPartitionsResult",
    "AddPartitionsTopicResult",
    "ApiKey",
    "BadFrame",
    "ConnectionClosed",
    "CorruptRecords",
    "EndTxnResult",
    "ErrorCode",
    "Event",
    "FetchPartition",
    "FetchRecord",
    "FetchResult",
    "FetchTopic",
    "FrameTooLarge",
    "InvalidRecords",
    "KafkaConnection",
    "MalformedMeta",
    "MalformedRequest",
    "MetadataBroker",
    "MetadataPartition",
    "MetadataResult",
    "MetadataTopic",
    "PartitionResult",
    "ProduceResult",
    "ProducedBatch",
    "ProtocolError",
    "RecordFields",
    "Request",
    "TopicResult",
    "UnsupportedMessageFormat",
    "api_name",
    "batch_base_offset",
    "batch_keys",
    "batch_messages",
    "batch_next_offset",
    "build_batch",
    "decodable_versions",
    "decode_batch",
    "decode_meta",
    "decode_records",
    "decode_request",
    "empty_batch",
    "encode_add_partitions_response",
    "encode_end_txn_response",
    "encode_fetch_response",
    "encode_meta",
    "encode_metadata_response",
    "encode_metadata_topic",
    "encode_produce_response",
    "encode_response",
    "iter_batch_messages",
    "iter_batch_records",
    "meta_timestamp",
    "pack_timestamp_meta",
    "parse_header",
    "request_class",
    "request_classes",
    "response_class",
    "served_head",
    "skip_batch",
    "split_batches",
]
