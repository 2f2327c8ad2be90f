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
    StoredRange,
    TopicId,
    TopicMetadata,
)
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
    "OffsetGap",
    "OffsetOutOfRange",
    "PublishResult",
    "ReadResult",
    "RollbackDetail",
    "StateConflict",
    "StorageError",
    "Store",
    "StoreClosed",
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
