"""The ``tms`` source's options, parsed and checked on the driver (a bad option fails there,
with its name in the message, before any task runs). Names and meanings follow Spark's
Kafka source (docs/spark.md has the table)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from .gateway import Gateway

EARLIEST, LATEST = -2, -1
ISOLATIONS = ("read_committed", "read_uncommitted")
# startingOffsets/endingOffsets: "earliest", "latest", or {"topic": {"partition": offset}}
OffsetSpec = int | dict[str, dict[int, int]]


@dataclass(frozen=True)
class SourceOptions:
    url: str | None
    bootstrap: str | None
    namespace: str
    subscribe: tuple[str, ...] | None
    pattern: str | None
    starting: OffsetSpec | None  # None: the mode's default
    ending: OffsetSpec
    starting_timestamp: int | None
    max_offsets_per_trigger: int | None
    min_partitions: int | None
    isolation: str
    fail_on_data_loss: bool
    max_records_per_read: int
    topic: str | None  # writing
    transaction_timeout_s: float
    sink_id: str | None
    token: str | None = None  # HTTP bearer token (docs/security.md)
    ca_file: str | None = None  # PEM CA of an HTTPS gateway

    def gateway(self, url: str) -> Gateway:
        """A client of the gateway's HTTP API with these options' credentials."""
        return Gateway(url, self.namespace, token=self.token, ca_file=self.ca_file)


def _int(opts: Mapping[str, str], name: str, low: int) -> int | None:
    """``name`` as documented (``minPartitions``); ``opts`` keys are lower case."""
    raw = opts.get(name.lower())
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name}: expected an integer, got {raw!r}") from None
    if value < low:
        raise ValueError(f"{name}: expected at least {low}, got {value}")
    return value


def _bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    if raw.lower() not in ("true", "false"):
        raise ValueError(f"{name}: expected true or false, got {raw!r}")
    return raw.lower() == "true"


def parse_offsets(name: str, raw: str | None, allowed: tuple[str, ...]) -> OffsetSpec | None:
    if raw is None:
        return None
    word = raw.strip().lower()
    if word in allowed:
        return EARLIEST if word == "earliest" else LATEST
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise ValueError(
            f"{name}: expected {' or '.join(allowed)} or JSON like "
            f'{{"topic": {{"0": 23}}}}, got {raw[:80]!r} ({exc})'
        ) from None
    if not isinstance(doc, dict):
        raise ValueError(f"{name}: the JSON must be an object of topics, got {raw[:80]!r}")
    out: dict[str, dict[int, int]] = {}
    for topic, parts in doc.items():
        if not isinstance(parts, dict):
            raise ValueError(f"{name}: topic {topic!r} must map partitions to offsets")
        out[topic] = {}
        for part, offset in parts.items():
            if not str(part).isdigit() or not isinstance(offset, int) or offset < -2:
                raise ValueError(
                    f"{name}: {topic!r} partition {part!r}: expected an offset >= -2 "
                    f"(-2 earliest, -1 latest), got {offset!r}"
                )
            out[topic][int(part)] = offset
    return out


def parse(opts: Mapping[str, str]) -> SourceOptions:
    """``opts``: Spark's options (any case). ValueError naming the option otherwise."""
    o = {k.lower(): v for k, v in opts.items()}
    url, bootstrap = o.get("url"), o.get("bootstrap") or o.get("kafka.bootstrap.servers")
    if not url and not bootstrap:
        raise ValueError("give the gateway's url (its HTTP API) or bootstrap (its Kafka listener)")
    if o.get("token") and not url:
        # The address found through the Kafka listener (an unauthenticated connection)
        # is not trusted with a credential.
        raise ValueError("token: give the gateway's url as well")
    if "assign" in o:
        raise ValueError("assign is not supported by the tms source: use subscribe")
    subscribe = o.get("subscribe")
    pattern = o.get("subscribepattern")
    topics = tuple(t.strip() for t in subscribe.split(",") if t.strip()) if subscribe else None
    if subscribe is not None and not topics:
        raise ValueError("subscribe: no topic named")
    if topics and pattern is not None:
        raise ValueError("give one of subscribe and subscribePattern, not both")
    isolation = o.get("isolation", o.get("kafka.isolation.level", "read_committed"))
    if isolation not in ISOLATIONS:
        raise ValueError(f"isolation: expected one of {', '.join(ISOLATIONS)}, got {isolation!r}")
    timeout = o.get("transactiontimeoutseconds", "300")
    try:
        timeout_s = float(timeout)
    except ValueError:
        raise ValueError(f"transactionTimeoutSeconds: expected seconds, got {timeout!r}") from None
    if not 0 < timeout_s <= 86_400:
        raise ValueError("transactionTimeoutSeconds: expected more than 0 and at most 86400")
    return SourceOptions(
        url=url,
        bootstrap=bootstrap,
        namespace=o.get("namespace", "default"),
        subscribe=topics,
        pattern=pattern,
        starting=parse_offsets("startingOffsets", o.get("startingoffsets"), ("earliest", "latest")),
        ending=parse_offsets("endingOffsets", o.get("endingoffsets"), ("latest",)) or LATEST,
        starting_timestamp=_int(o, "startingTimestamp", 0),
        max_offsets_per_trigger=_int(o, "maxOffsetsPerTrigger", 1),
        min_partitions=_int(o, "minPartitions", 1),
        isolation=isolation,
        fail_on_data_loss=_bool(o, "failOnDataLoss", True),
        max_records_per_read=_int(o, "maxRecordsPerRead", 1) or 10_000,
        topic=o.get("topic"),
        transaction_timeout_s=timeout_s,
        token=o.get("token"),
        ca_file=o.get("cafile"),
        sink_id=o.get("sinkid"),
    )


def require_source(opts: SourceOptions) -> None:
    if not opts.subscribe and opts.pattern is None:
        raise ValueError("give subscribe (topics) or subscribePattern (a regular expression)")
