"""The api_key -> request class table, built from kafka-python 3's schema classes.

kafka-python keeps a registry of response classes only (a client never decodes a
request), so the request side is found by walking ``ApiMessage`` subclasses after
importing every ``kafka.protocol`` module (except the pre-3.0 ``old`` package).
"""

from __future__ import annotations

import enum
import importlib
import pkgutil
from collections.abc import Iterator
from functools import cache, lru_cache

import kafka.protocol
from kafka.protocol.api_message import ApiMessage

_SKIP_MODULES = ("kafka.protocol.old", "kafka.protocol.generate_stubs")


class ApiKey(enum.IntEnum):
    """The Kafka APIs tmsgate names in code (the table below knows all of them)."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    LIST_PARTITION_REASSIGNMENTS = 46
    DESCRIBE_CLIENT_QUOTAS = 48
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66


def _subclasses(cls: type) -> Iterator[type]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def _import_protocol_modules() -> None:
    for info in pkgutil.walk_packages(kafka.protocol.__path__, "kafka.protocol."):
        if not info.name.startswith(_SKIP_MODULES):
            importlib.import_module(info.name)


@cache
def request_classes() -> dict[int, type[ApiMessage]]:
    """api_key -> the primary (unversioned) kafka-python request class."""
    _import_protocol_modules()
    table: dict[int, type[ApiMessage]] = {}
    for cls in _subclasses(ApiMessage):
        # Versioned wrappers (Foo_v3) are subclasses too; keep only the primary class.
        if getattr(cls, "_class_version", None) is not None:
            continue
        schema = getattr(cls, "_json", None)
        if not schema or schema.get("type") != "request":
            continue
        key = int(schema["apiKey"])
        if key in table and table[key] is not cls:
            raise RuntimeError(f"two request classes for api key {key}: {table[key]}, {cls}")
        table[key] = cls
    return table


def request_class(api_key: int) -> type[ApiMessage] | None:
    return request_classes().get(api_key)


@lru_cache(maxsize=512)  # per request; bounded: a client may send any api key
def decodable_versions(api_key: int) -> tuple[int, int] | None:
    """The version range kafka-python can decode for this API, or None if unknown."""
    cls = request_class(api_key)
    if cls is None or cls.valid_versions is None:
        return None
    low, high = cls.valid_versions
    return int(low), int(high)


@lru_cache(maxsize=512)  # per request; bounded: a client may send any api key
def api_name(api_key: int) -> str:
    cls = request_class(api_key)
    if cls is None:
        return f"api{api_key}"
    return str(cls.name).removesuffix("Request")


@lru_cache(maxsize=4096)  # per request; bounded: a client may send any key and version
def is_flexible_request(api_key: int, api_version: int) -> bool:
    """Whether the request uses header v2 (compact strings, tagged fields)."""
    cls = request_class(api_key)
    return bool(cls is not None and cls.flexible_version_q(api_version))
