"""The one table of Apache Kafka 4.1's topic-level configs that the gateway accepts.

Every config that Kafka 4.1's topic ConfigDef defines (``TopicConfig`` names, defined in
``LogConfig`` with defaults from ``ServerLogConfigs``, broker synonyms from
``ServerTopicConfigSynonyms``), with its type, its default as DescribeConfigs shows it,
the broker configs that supply that default, and a validator the gateway can check
without Kafka's code. Accepting a config here says nothing about honouring it: which of
these the gateway acts on, and how, is decided elsewhere (config.py).

Left out on purpose: Kafka's ``internal.segment.bytes`` (an internal, test-only define)
and the configs 4.0 removed (``message.format.version``,
``message.timestamp.difference.max.ms``, ``message.downconversion.enable``). The 33 here
are the 33 a Kafka 4.1.0 broker describes for a topic, with the same defaults (checked
against one).

``check`` parses and validates one value as Kafka's ConfigDef does (``parseType`` and
then the config's validator), with ConfigException's wording, and returns the value as
DescribeConfigs would show it. Checks that span several configs (LogConfig.validate,
e.g. local.retention.ms <= retention.ms) are not made here.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from decimal import Decimal

# DescribeConfigs' configType codes (v3+), by ConfigDef type name.
TYPE_IDS: dict[str, int] = {
    "BOOLEAN": 1,
    "STRING": 2,
    "INT": 3,
    "SHORT": 4,
    "LONG": 5,
    "DOUBLE": 6,
    "LIST": 7,
    "CLASS": 8,
    "PASSWORD": 9,
}

# Validators that are neither a range nor a list of choices.
RULE_GZIP_LEVEL = "gzip_level"  # [min, max] or -1 (Deflater.DEFAULT_COMPRESSION)
RULE_THROTTLED_REPLICAS = "throttled_replicas"  # '*' or partition:broker pairs

LONG_MAX = "9223372036854775807"
_INT_BOUNDS = {
    "SHORT": (-(2**15), 2**15 - 1),
    "INT": (-(2**31), 2**31 - 1),
    "LONG": (-(2**63), 2**63 - 1),
}


@dataclass(frozen=True, slots=True)
class TopicConfigDef:
    name: str
    type: str  # a ConfigDef type: BOOLEAN STRING INT SHORT LONG DOUBLE LIST CLASS PASSWORD
    default: str | None  # as DescribeConfigs shows it; "" for an empty list
    synonyms: tuple[str, ...]  # broker configs supplying the default, the primary first
    doc: str
    min: float | None = None  # Range bounds, both inclusive
    max: float | None = None
    choices: tuple[str, ...] | None = None  # ValidString / ValidList (case-sensitive)
    rule: str | None = None  # RULE_GZIP_LEVEL or RULE_THROTTLED_REPLICAS

    @property
    def synonym(self) -> str | None:
        """The broker config Kafka reports as the primary source of the default."""
        return self.synonyms[0] if self.synonyms else None


def _d(
    name: str,
    type_: str,
    default: str | None,
    synonyms: tuple[str, ...] | str,
    doc: str,
    *,
    min: float | None = None,
    max: float | None = None,
    choices: tuple[str, ...] | None = None,
    rule: str | None = None,
) -> TopicConfigDef:
    syn = (synonyms,) if isinstance(synonyms, str) else synonyms
    return TopicConfigDef(name, type_, default, syn, doc, min, max, choices, rule)


_COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")

_DEFS = (
    _d(
        "cleanup.policy",
        "LIST",
        "delete",
        "log.cleanup.policy",
        "Whether old segments are deleted, compacted, or both (empty: neither).",
        choices=("compact", "delete"),
    ),
    _d(
        "compression.gzip.level",
        "INT",
        "-1",
        "compression.gzip.level",
        "Compression level used when the topic's compression type is gzip.",
        min=1,
        max=9,
        rule=RULE_GZIP_LEVEL,
    ),
    _d(
        "compression.lz4.level",
        "INT",
        "9",
        "compression.lz4.level",
        "Compression level used when the topic's compression type is lz4.",
        min=1,
        max=17,
    ),
    _d(
        "compression.type",
        "STRING",
        "producer",
        "compression.type",
        "Codec batches are stored with; 'producer' keeps whatever the producer used.",
        choices=_COMPRESSION_TYPES,
    ),
    _d(
        "compression.zstd.level",
        "INT",
        "3",
        "compression.zstd.level",
        "Compression level used when the topic's compression type is zstd.",
        min=-131072,
        max=22,
    ),
    _d(
        "delete.retention.ms",
        "LONG",
        "86400000",
        "log.cleaner.delete.retention.ms",
        "How long tombstones survive in a compacted log before they may be dropped.",
        min=0,
    ),
    _d(
        "file.delete.delay.ms",
        "LONG",
        "60000",
        "log.segment.delete.delay.ms",
        "Delay before a removed segment's files are deleted from disk.",
        min=0,
    ),
    _d(
        "flush.messages",
        "LONG",
        LONG_MAX,
        "log.flush.interval.messages",
        "Number of appended messages after which the log is forced to disk.",
        min=1,
    ),
    _d(
        "flush.ms",
        "LONG",
        LONG_MAX,
        ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
        "Time after which unflushed log data is forced to disk.",
        min=0,
    ),
    _d(
        "follower.replication.throttled.replicas",
        "LIST",
        "",
        (),
        "Replicas ('partition:broker' pairs, or '*') throttled on the follower side.",
        rule=RULE_THROTTLED_REPLICAS,
    ),
    _d(
        "index.interval.bytes",
        "INT",
        "4096",
        "log.index.interval.bytes",
        "Bytes of log between two entries of the offset index.",
        min=0,
    ),
    _d(
        "leader.replication.throttled.replicas",
        "LIST",
        "",
        (),
        "Replicas ('partition:broker' pairs, or '*') throttled on the leader side.",
        rule=RULE_THROTTLED_REPLICAS,
    ),
    _d(
        "local.retention.bytes",
        "LONG",
        "-2",
        "log.local.retention.bytes",
        "Size a partition's local part may reach under tiered storage (-2: retention.bytes).",
        min=-2,
    ),
    _d(
        "local.retention.ms",
        "LONG",
        "-2",
        "log.local.retention.ms",
        "Age at which local segments go under tiered storage (-2: retention.ms).",
        min=-2,
    ),
    _d(
        "max.compaction.lag.ms",
        "LONG",
        LONG_MAX,
        "log.cleaner.max.compaction.lag.ms",
        "Longest time a record may stay ineligible for compaction.",
        min=1,
    ),
    _d(
        "max.message.bytes",
        "INT",
        "1048588",
        "message.max.bytes",
        "Largest record batch, after compression, the topic accepts.",
        min=0,
    ),
    _d(
        "message.timestamp.after.max.ms",
        "LONG",
        "3600000",
        "log.message.timestamp.after.max.ms",
        "How far past the broker's clock a CreateTime timestamp may lie.",
        min=0,
    ),
    _d(
        "message.timestamp.before.max.ms",
        "LONG",
        LONG_MAX,
        "log.message.timestamp.before.max.ms",
        "How far before the broker's clock a CreateTime timestamp may lie.",
        min=0,
    ),
    _d(
        "message.timestamp.type",
        "STRING",
        "CreateTime",
        "log.message.timestamp.type",
        "Whether record timestamps come from the producer or from the append.",
        choices=("CreateTime", "LogAppendTime"),
    ),
    _d(
        "min.cleanable.dirty.ratio",
        "DOUBLE",
        "0.5",
        "log.cleaner.min.cleanable.ratio",
        "Share of uncompacted log that makes the log eligible for cleaning.",
        min=0,
        max=1,
    ),
    _d(
        "min.compaction.lag.ms",
        "LONG",
        "0",
        "log.cleaner.min.compaction.lag.ms",
        "Shortest time a record stays uncompacted.",
        min=0,
    ),
    _d(
        "min.insync.replicas",
        "INT",
        "1",
        "min.insync.replicas",
        "In-sync replicas needed for an acks=all produce to succeed.",
        min=1,
    ),
    _d(
        "preallocate",
        "BOOLEAN",
        "false",
        "log.preallocate",
        "Whether a new segment's file is allocated on disk up front.",
    ),
    _d(
        "remote.log.copy.disable",
        "BOOLEAN",
        "false",
        (),
        "Stops copying segments to tiered storage, leaving the tiered data read-only.",
    ),
    _d(
        "remote.log.delete.on.disable",
        "BOOLEAN",
        "false",
        (),
        "Whether tiered data is deleted when tiered storage is turned off for the topic.",
    ),
    _d(
        "remote.storage.enable",
        "BOOLEAN",
        "false",
        (),
        "Turns tiered (remote) storage on for the topic.",
    ),
    _d(
        "retention.bytes",
        "LONG",
        "-1",
        "log.retention.bytes",
        "Size per partition beyond which the oldest segments are deleted (-1: no limit).",
    ),
    _d(
        "retention.ms",
        "LONG",
        "604800000",
        ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
        "Age beyond which segments are deleted (-1: no limit).",
        min=-1,
    ),
    _d(
        "segment.bytes",
        "INT",
        "1073741824",
        "log.segment.bytes",
        "Size at which the active segment is rolled.",
        min=1048576,
    ),
    _d(
        "segment.index.bytes",
        "INT",
        "10485760",
        "log.index.size.max.bytes",
        "Size preallocated for each segment's offset index.",
        min=4,
    ),
    _d(
        "segment.jitter.ms",
        "LONG",
        "0",
        ("log.roll.jitter.ms", "log.roll.jitter.hours"),
        "Largest random amount taken off segment.ms so segments do not roll together.",
        min=0,
    ),
    _d(
        "segment.ms",
        "LONG",
        "604800000",
        ("log.roll.ms", "log.roll.hours"),
        "Age at which the active segment is rolled even if not full.",
        min=1,
    ),
    _d(
        "unclean.leader.election.enable",
        "BOOLEAN",
        "false",
        "unclean.leader.election.enable",
        "Whether an out-of-sync replica may become leader, at the risk of losing data.",
    ),
)

KAFKA_TOPIC_CONFIGS: dict[str, TopicConfigDef] = {d.name: d for d in _DEFS}

# Java's String.trim() strips every char <= U+0020; its regex \s is these six.
_JAVA_TRIM = "".join(map(chr, range(33)))
_LIST_SPLIT = re.compile(r"[ \t\n\x0b\f\r]*,[ \t\n\x0b\f\r]*")
_INTEGER = re.compile(r"[+-]?\d+")  # Integer/Long.parseLong: sign, decimal digits
_DOUBLE = re.compile(  # Double.parseDouble's grammar
    r"(?P<sign>[+-]?)(?:(?P<special>NaN|Infinity)"
    r"|(?P<dec>(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)[fFdD]?"
    r"|(?P<hex>0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?[0-9]+)[fFdD]?)"
)
_REPLICA = re.compile(r"(?:[0-9]+:[0-9]+)?")


def _invalid(name: str, value: object, message: str) -> ValueError:
    return ValueError(f"Invalid value {value} for configuration {name}: {message}")


def _bound(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(x)


def _java_double(x: float) -> str:
    """Java's Double.toString."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    if x == 0:
        return "-0.0" if math.copysign(1.0, x) < 0 else "0.0"
    if 1e-3 <= abs(x) < 1e7:
        return repr(x)  # positional, shortest digits, ".0" when integral: as Java
    sign, digits, exponent = Decimal(repr(x)).as_tuple()
    assert isinstance(exponent, int)
    text = "".join(map(str, digits)).rstrip("0") or "0"
    power = exponent + len(digits) - 1
    return f"{'-' if sign else ''}{text[0]}.{text[1:] or '0'}E{power}"


def _parse_double(name: str, raw: str, text: str) -> float:
    m = _DOUBLE.fullmatch(text)
    if m is None:
        raise _invalid(name, raw, "Not a number of type DOUBLE")
    negative = m["sign"] == "-"
    if m["special"]:
        number = math.nan if m["special"] == "NaN" else math.inf
    elif m["dec"] is not None:
        number = float(m["dec"])
    else:
        number = float.fromhex(m["hex"])
    return -number if negative else number


def _check_range(defn: TopicConfigDef, number: float, shown: str) -> None:
    if defn.rule == RULE_GZIP_LEVEL:
        lo, hi = defn.min, defn.max
        if (hi is not None and number > hi) or (lo is not None and number < lo and number != -1):
            raise _invalid(
                defn.name,
                shown,
                f"Value must be between {_bound(lo or 0)} and {_bound(hi or 0)} or equal to -1",
            )
        return
    # Range.ensureValid compares as doubles, so NaN passes, as it does in Kafka.
    if defn.min is not None and number < defn.min:
        raise _invalid(defn.name, shown, f"Value must be at least {_bound(defn.min)}")
    if defn.max is not None and number > defn.max:
        raise _invalid(defn.name, shown, f"Value must be no more than {_bound(defn.max)}")


def check(defn: TopicConfigDef, value: str) -> str:
    """Parse and validate ``value`` for ``defn`` as Kafka's ConfigDef would.

    Returns the value as Kafka displays it (numbers in canonical form, booleans lower
    case, lists joined by "," without spaces); raises ValueError with ConfigException's
    message when Kafka would reject it.
    """
    name, kind = defn.name, defn.type
    text = value.strip(_JAVA_TRIM)
    if kind == "BOOLEAN":
        if text.lower() not in ("true", "false"):
            raise _invalid(name, value, "Expected value to be either true or false")
        return text.lower()
    if kind in _INT_BOUNDS:
        lo, hi = _INT_BOUNDS[kind]
        if _INTEGER.fullmatch(text) is None or not lo <= int(text) <= hi:
            raise _invalid(name, value, f"Not a number of type {kind}")
        number = int(text)
        _check_range(defn, number, str(number))
        return str(number)
    if kind == "DOUBLE":
        real = _parse_double(name, value, text)
        shown = _java_double(real)
        _check_range(defn, real, shown)
        return shown
    if kind == "LIST":
        items = _LIST_SPLIT.split(text) if text else []
        if defn.rule == RULE_THROTTLED_REPLICAS:
            trimmed = [item.strip(_JAVA_TRIM) for item in items]
            if not (all(_REPLICA.fullmatch(i) for i in trimmed) or "".join(trimmed) == "*"):
                raise _invalid(
                    name,
                    "[" + ", ".join(items) + "]",
                    f"{name} must be the literal '*' or a list of replicas in the "
                    "following format: [partitionId]:[brokerId],"
                    "[partitionId]:[brokerId],...",
                )
        elif defn.choices is not None:
            for item in items:
                if item not in defn.choices:
                    raise _invalid(name, item, "String must be one of: " + ", ".join(defn.choices))
        return ",".join(items)
    if kind in ("STRING", "CLASS", "PASSWORD"):
        if defn.choices is not None and text not in defn.choices:
            raise _invalid(name, text, "String must be one of: " + ", ".join(defn.choices))
        return text
    raise ValueError(f"Unknown type {kind} for configuration {name}")
