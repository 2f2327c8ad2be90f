"""Gateway settings (the listener, limits, Kafka defaults) and the topic config mapping.

Kafka topic configs live in the store's topic properties: ``retention.ms`` becomes the
store's own ``ttl`` (seconds, rounded up) so the store expires messages itself; the
others are kept verbatim under their Kafka names, where the store reads those it acts
on (``cleanup.policy`` and the compaction configs: storage/compaction.py). Every config
Kafka 4.1 defines is accepted (topic_config_defs.py); docs/compatibility.md says which
are honoured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

# Defined with the one error table; the Kafka code imports them from here too.
from tmsgate.gateway.errors import InvalidConfig as InvalidConfig
from tmsgate.gateway.errors import InvalidTopicName as InvalidTopicName
from tmsgate.protocol import DEFAULT_MAX_FRAME_BYTES
from tmsgate.storage.compaction import CompactionSettings

from .stream import DEFAULT_QUEUED_MAX_REQUEST_BYTES
from .topic_config_defs import KAFKA_TOPIC_CONFIGS, TYPE_IDS, check

if TYPE_CHECKING:  # the groups package imports this module
    from .groups.config import GroupConfig

RETENTION_MS = "retention.ms"
MAX_MESSAGE_BYTES = "max.message.bytes"
TIMESTAMP_TYPE = "message.timestamp.type"
# Set while `tmsgate migrate` copies the topic in (docs/migration.md): its produces then
# keep the source's offsets, and only the migration may produce.
MIGRATION_SOURCE = "tmsgate.migration.source"
CLEANUP_POLICY = "cleanup.policy"
# Every topic config a client may set or describe: Kafka 4.1's, then tmsgate's own.
TOPIC_CONFIGS = (*sorted(KAFKA_TOPIC_CONFIGS), MIGRATION_SOURCE)
LIST_CONFIGS = frozenset(n for n, d in KAFKA_TOPIC_CONFIGS.items() if d.type == "LIST")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
DEFAULT_MAX_MESSAGE_BYTES = 1048588  # Kafka's default max.message.bytes
_TTL = "ttl"


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    host: str = "127.0.0.1"
    port: int = 9092
    advertised_host: str | None = None  # what Metadata tells clients; default: host
    advertised_port: int | None = None
    # Listening sockets handed down by `serve --workers` (gateway/workers.py) instead of
    # binding host:port: this worker's own (the address Metadata gives), then the shared
    # one every worker accepts on (where clients bootstrap).
    listen_fds: tuple[int, ...] = ()
    namespace: str = "default"
    auto_create_topics: bool = True  # Kafka's auto.create.topics.enable
    default_partitions: int = 1  # Kafka's num.partitions: auto-created topics, and -1
    max_request_bytes: int = DEFAULT_MAX_FRAME_BYTES  # socket.request.max.bytes
    # queued.max.request.bytes: requests being received or queued, all connections
    # together; <= 0 unbounded, as Kafka's -1 (the default's reasons: stream.py).
    queued_max_request_bytes: int = DEFAULT_QUEUED_MAX_REQUEST_BYTES
    idle_timeout_s: float = 600.0  # connections.max.idle.ms
    max_in_flight_per_connection: int = 32
    io_threads: int = 16  # executor for blocking store calls
    default_max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    fetch_max_wait_cap_ms: int = 30_000  # no long poll outlives this, whatever asked
    fetch_cache_bytes: int = 512 << 20  # produced batches kept for consumers near the head
    janitor_interval_s: float = 60.0  # retention cleanup (log.retention.check.interval.ms)
    # Space kept back for a full disk (docs/storage-api.md). None: leave any reserve file
    # as it is, make none (embedded and test gateways); `tmsgate serve` passes 64 MiB.
    disk_reserve_bytes: int | None = None
    shutdown_grace_s: float = 30.0
    # Kafka's group.* and offsets.* settings; None: from the environment (groups/config.py).
    groups: GroupConfig | None = None
    # Kafka's transaction.max.timeout.ms: InitProducerId refuses longer timeouts.
    transaction_max_timeout_ms: int = 900_000
    # Kafka's transactional.id.expiration.ms: a transactional id idle this long (no
    # transaction open) is forgotten.
    transactional_id_expiration_ms: int = 7 * 24 * 3600 * 1000
    # When a Kafka transaction's records get their offsets: "commit" (sealed into one
    # reference at EndTxn; Produce answers -1) or "produce" (published in place under the
    # write pointer, held until the commit, as Kafka; docs/transactions.md).
    transactional_offsets: str = "commit"
    # Kafka's listener security protocol: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL, with
    # the SASL mechanisms of sasl.enabled.mechanisms (gateway/sasl.py); users:
    # gateway/users.py. docs/security.md.
    security_protocol: str = "PLAINTEXT"
    sasl_mechanisms: tuple[str, ...] = ()
    # Kafka's connections.max.reauth.ms: a SASL login lasts this long, then the client
    # logs in again on the same connection (KIP-368) or is disconnected; 0: forever.
    connections_max_reauth_ms: int = 0
    # SSL and SASL_SSL: the listener's certificate chain and key (PEM files), and the CA
    # whose client certificates are asked for and mapped to User:<CN> (None: none asked).
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_client_ca: str | None = None
    # Kafka's authorizer.class.name (on: ACLs are checked, gateway/acls.py), super.users
    # ("User:alice", ...) and allow.everyone.if.no.acl.found. They apply to HTTP too.
    authorizer: bool = False
    super_users: tuple[str, ...] = ()
    allow_everyone_if_no_acl_found: bool = False
    cluster_id: str = "tmsgate"
    node_id: int = 0
    # Broker-level defaults of topic configs (Kafka's log.cleaner.* and the like, set by
    # `serve` options): (topic config name, value) pairs, reported as the broker's.
    topic_defaults: tuple[tuple[str, str], ...] = ()
    # The compaction cleaner's settings (storage/compaction.py); None: Kafka's defaults.
    compaction: CompactionSettings | None = None


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """The Kafka view of one topic's properties."""

    retention_ms: int  # -1: forever
    max_message_bytes: int
    log_append_time: bool
    explicit: frozenset[str]  # which configs were set rather than defaulted
    migration_source: str | None = None
    # The other Kafka configs: those set on the topic, then the broker's defaults.
    settings: tuple[tuple[str, str], ...] = ()
    broker_defaults: tuple[tuple[str, str], ...] = ()

    @property
    def compacted(self) -> bool:
        """cleanup.policy holds compact: records need a key (storage/compaction.py)."""
        return "compact" in (self.value(CLEANUP_POLICY) or "").split(",")

    def source(self, name: str) -> str:
        """Where a config's value comes from: topic, broker or default."""
        if name in self.explicit:
            return "topic"
        if any(n == name for n, _ in self.broker_defaults) or (
            name == MAX_MESSAGE_BYTES and self.max_message_bytes != DEFAULT_MAX_MESSAGE_BYTES
        ):
            return "broker"
        return "default"

    def value(self, name: str) -> str | None:
        if name == RETENTION_MS:
            return str(self.retention_ms)
        if name == MAX_MESSAGE_BYTES:
            return str(self.max_message_bytes)
        if name == TIMESTAMP_TYPE:
            return TIMESTAMP_TYPES[self.log_append_time]
        if name == MIGRATION_SOURCE:
            return self.migration_source
        for source in (self.settings, self.broker_defaults):
            for n, v in source:
                if n == name:
                    return v
        defn = KAFKA_TOPIC_CONFIGS.get(name)
        if defn is None:
            raise InvalidConfig(f"Unknown topic config name: {name}")
        return defn.default


def topic_config(
    properties: dict[str, str],
    default_max_message_bytes: int,
    broker_defaults: tuple[tuple[str, str], ...] = (),
) -> TopicConfig:
    explicit = set()
    retention = -1
    ttl = int(properties.get(_TTL, "0") or 0)
    if ttl > 0:
        explicit.add(RETENTION_MS)
        retention = ttl * 1000
        # Keep the exact millisecond value the client set if it still agrees with ttl
        # (the store's HTTP API may have changed ttl since).
        kept = properties.get(RETENTION_MS)
        if kept is not None and kept.lstrip("-").isdigit() and _ttl_seconds(int(kept)) == ttl:
            retention = int(kept)
    max_bytes = default_max_message_bytes
    if MAX_MESSAGE_BYTES in properties:
        explicit.add(MAX_MESSAGE_BYTES)
        max_bytes = int(properties[MAX_MESSAGE_BYTES])
    ts_type = properties.get(TIMESTAMP_TYPE, "CreateTime")
    if TIMESTAMP_TYPE in properties:
        explicit.add(TIMESTAMP_TYPE)
    source = properties.get(MIGRATION_SOURCE)
    if source is not None:
        explicit.add(MIGRATION_SOURCE)
    settings = tuple(
        (n, v) for n, v in sorted(properties.items()) if n in KAFKA_TOPIC_CONFIGS and n not in _OWN
    )
    explicit.update(n for n, _ in settings)
    return TopicConfig(
        retention,
        max_bytes,
        ts_type == "LogAppendTime",
        frozenset(explicit),
        source,
        settings,
        broker_defaults,
    )


# Kafka's ConfigEntry source codes (DescribeConfigs, CreateTopics), by TopicConfig.source.
CONFIG_SOURCE = {"topic": 1, "broker": 4, "default": 5}


def config_type(name: str) -> int:
    """Kafka's ConfigEntry.ConfigType of a topic config (DescribeConfigs v3+)."""
    defn = KAFKA_TOPIC_CONFIGS.get(name)
    return TYPE_IDS[defn.type] if defn is not None else TYPE_IDS["STRING"]


def config_doc(name: str) -> str | None:
    defn = KAFKA_TOPIC_CONFIGS.get(name)
    return defn.doc if defn is not None else None


# Held in TopicConfig's own fields rather than in ``settings``.
_OWN = frozenset((RETENTION_MS, MAX_MESSAGE_BYTES, TIMESTAMP_TYPE))


def _ttl_seconds(retention_ms: int) -> int:
    return 0 if retention_ms < 0 else max(1, math.ceil(retention_ms / 1000))


def validate(name: str, value: str | None) -> str | None:
    """Check one Kafka config value; returns its normalised form (None = reset to default)."""
    if name not in TOPIC_CONFIGS:
        raise InvalidConfig(f"Unknown topic config name: {name}")
    if value is None:
        return None
    defn = KAFKA_TOPIC_CONFIGS.get(name)
    if defn is not None:
        try:
            value = check(defn, value)  # Kafka's parsing and validator, Kafka's wording
        except ValueError as exc:
            raise InvalidConfig(str(exc)) from None
        if name not in _OWN:
            return value
    value = value.strip()
    if name == MIGRATION_SOURCE:
        if not 0 < len(value) <= 1000:
            raise InvalidConfig(f"{name} names the source cluster: 1-1000 characters")
        return value
    if name == TIMESTAMP_TYPE:
        if value not in TIMESTAMP_TYPES:
            raise InvalidConfig(f"{name} must be CreateTime or LogAppendTime, got {value!r}")
        return value
    try:
        number = int(value)
    except ValueError:
        raise InvalidConfig(f"{name} must be an integer, got {value!r}") from None
    if name == RETENTION_MS and (number < -1 or number == 0):
        raise InvalidConfig(f"{name} must be -1 (forever) or a positive number of ms")
    if name == MAX_MESSAGE_BYTES and number < 0:
        raise InvalidConfig(f"{name} must be >= 0")
    return str(number)


def apply_configs(properties: dict[str, str], changes: dict[str, str | None]) -> dict[str, str]:
    """New store properties after setting (value) or resetting (None) Kafka configs."""
    props = dict(properties)
    for name, raw in changes.items():
        value = validate(name, raw)
        if name == RETENTION_MS:
            props.pop(RETENTION_MS, None)
            props.pop(_TTL, None)
            if value is not None and int(value) > 0:
                props[_TTL] = str(_ttl_seconds(int(value)))
                props[RETENTION_MS] = value
        elif value is None:
            props.pop(name, None)
        else:
            props[name] = value
    return props
