"""The TMS store: MessageTable, PayloadTable and MetadataTable over an ordered KV backend.

See docs/storage-api.md for the API. Nothing here knows about Kafka.
"""

from .backend import Backend, open_backend
from .errors import (
    BackendError,
    DiskFull,
    InvalidTopicProperties,
    InvalidTransaction,
    NotLeader,
    OffsetGap,
    OffsetOutOfRange,
    StateConflict,
    StorageError,
    StoreClosed,
    TopicAlreadyExists,
    TopicNotFound,
    TransactionNotInProgress,
)
from .ids import (
    Entry,
    Message,
    MessageId,
    MessageRow,
    PublishResult,
    ReadResult,
    RollbackDetail,
    StoredBatch,
    StoredRange,
    TopicId,
    TopicMetadata,
)
from .keys import MAX_PACKED_BYTES as KAFKA_BATCH_MAX_BYTES
from .keys import MAX_PACKED_COUNT as KAFKA_BATCH_MAX_RECORDS
from .shared_transactions import NotTransactionLeader, SharedTransactions
from .store import Store, open_store
from .transactions import (
    TX_PER_MS,
    Transaction,
    TransactionManager,
    Visibility,
    decode_transaction,
    encode_transaction,
)

__all__ = [
    "KAFKA_BATCH_MAX_BYTES",
    "KAFKA_BATCH_MAX_RECORDS",
    "TX_PER_MS",
    "Backend",
    "BackendError",
    "DiskFull",
    "Entry",
    "InvalidTopicProperties",
    "InvalidTransaction",
    "Message",
    "MessageId",
    "MessageRow",
    "NotLeader",
    "NotTransactionLeader",
    "OffsetGap",
    "OffsetOutOfRange",
    "PublishResult",
    "ReadResult",
    "RollbackDetail",
    "SharedTransactions",
    "StateConflict",
    "StorageError",
    "Store",
    "StoreClosed",
    "StoredBatch",
    "StoredRange",
    "TopicAlreadyExists",
    "TopicId",
    "TopicMetadata",
    "TopicNotFound",
    "Transaction",
    "TransactionManager",
    "TransactionNotInProgress",
    "Visibility",
    "decode_transaction",
    "encode_transaction",
    "open_backend",
    "open_store",
]
