"""The ``tms`` Python data source: batch and streaming reads of tmsgate topics by offset
range, and batch and streaming writes, exactly once, through the PayloadTable
(docs/spark.md). Planning and commits run on the driver; reads and stores in the tasks,
each over HTTP to the gateway (never the store's files)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from . import options as opt
from .arrow import SPARK_SCHEMA, next_offset_of, to_record_batch
from .gateway import PARTITION_MARK, Gateway, GatewayError, find_http_url, tms_topic
from .writing import bodies

Ranges = list["OffsetRange"]


@dataclass(frozen=True)
class OffsetRange(InputPartition):
    """One task's work: offsets [start, end) of one partition of one topic."""

    topic: str
    partition: int
    start: int
    end: int


def _url(o: opt.SourceOptions) -> str:
    return o.url or find_http_url(o.bootstrap or "")


# --- planning (driver) -------------------------------------------------------------------
def _resolve(spec: opt.OffsetSpec, topic: str, p: int, default: int) -> int:
    if isinstance(spec, int):
        return spec
    return spec.get(topic, {}).get(p, default)


class Planner:
    """Topics, partitions and offsets as the gateway has them now."""

    def __init__(self, o: opt.SourceOptions) -> None:
        opt.require_source(o)
        self.o = o
        self.gw = o.gateway(_url(o))
        self.topics = self.gw.matching(list(o.subscribe or []), o.pattern)
        for spec in (o.starting, o.ending):
            if isinstance(spec, dict):
                unknown = sorted(set(spec) - set(self.topics))
                if unknown:
                    raise ValueError(f"offsets name topic {unknown[0]!r}, which is not subscribed")

    def partitions(self) -> list[tuple[str, int]]:
        return [(t, p) for t, n in sorted(self.topics.items()) for p in range(n)]

    def end_of(self, topic: str, p: int) -> tuple[int, int]:
        """-> (earliest, the end a reader of this isolation reads to now)."""
        off = self.gw.offsets(tms_topic(topic, p))
        return off.earliest, off.stable if self.o.isolation == "read_committed" else off.latest

    def start_of(self, topic: str, p: int, default: int) -> int:
        earliest, end = self.end_of(topic, p)
        if self.o.starting_timestamp is not None and self.o.starting is None:
            found = self.gw.offsets(tms_topic(topic, p), self.o.starting_timestamp).for_timestamp
            return end if found is None else found
        spec = default if self.o.starting is None else self.o.starting
        offset = _resolve(spec, topic, p, default)
        return earliest if offset == opt.EARLIEST else end if offset == opt.LATEST else offset

    def ends(self) -> dict[tuple[str, int], int]:
        out = {}
        for topic, p in self.partitions():
            offset = _resolve(self.o.ending, topic, p, opt.LATEST)
            _earliest, end = self.end_of(topic, p)
            out[topic, p] = end if offset == opt.LATEST else offset
        return out


def split(ranges: Ranges, min_partitions: int | None) -> Ranges:
    """Spark's KafkaOffsetRangeCalculator: ranges cut into contiguous pieces, in proportion
    to their size, until there are at least ``min_partitions``."""
    ranges = [r for r in ranges if r.end > r.start]
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.end - r.start for r in ranges)
    out: Ranges = []
    for r in ranges:
        size = r.end - r.start
        parts = max(1, round(size / total * min_partitions))
        step = size / parts
        bounds = [r.start + round(step * i) for i in range(parts)] + [r.end]
        out += [
            OffsetRange(r.topic, r.partition, a, b) for a, b in itertools.pairwise(bounds) if b > a
        ]
    return out


# --- reading (tasks) ---------------------------------------------------------------------
def read_range(o: opt.SourceOptions, url: str, r: OffsetRange) -> Iterator[pa.RecordBatch]:
    """The range's records, one Arrow batch per HTTP read. The next read is in flight while
    Spark takes the current batch (the gateway's read and Spark's intake overlap)."""
    gw = o.gateway(url)
    name = tms_topic(r.topic, r.partition)
    ahead = ThreadPoolExecutor(1, thread_name_prefix="tms-read-ahead")

    def fetch(offset: int) -> Future[bytes]:
        return ahead.submit(gw.read, name, offset, r.end, o.isolation, o.max_records_per_read)

    offset = r.start
    pending = fetch(offset)
    try:
        while True:
            try:
                body = pending.result()
            except GatewayError as exc:
                if exc.kind != "offset_out_of_range" or offset >= exc.doc.get("earliest", 0):
                    raise
                if o.fail_on_data_loss:
                    raise RuntimeError(
                        f"{r.topic} partition {r.partition}: offsets {offset} to "
                        f"{exc.doc['earliest']} are gone (retention); set failOnDataLoss "
                        "to false to read on from the earliest"
                    ) from None
                offset = int(exc.doc["earliest"])
                pending = fetch(offset)
                continue
            nxt = next_offset_of(body)
            more = offset < nxt < r.end  # else: done, or held by a transaction in progress
            if more:
                pending = fetch(nxt)
            batch, _ = to_record_batch(body, r.topic, r.partition)
            if batch.num_rows:
                yield batch
            if not more:
                break
            offset = nxt
    finally:
        ahead.shutdown(wait=True, cancel_futures=True)
        gw.close()


class BatchReader(DataSourceReader):
    def __init__(self, o: opt.SourceOptions) -> None:
        planner = Planner(o)
        self.o, self.url = o, planner.gw.url
        ends = planner.ends()
        self.ranges = [
            OffsetRange(t, p, planner.start_of(t, p, opt.EARLIEST), ends[t, p])
            for t, p in planner.partitions()
        ]
        planner.gw.close()

    def partitions(self) -> list[InputPartition]:
        return split(self.ranges, self.o.min_partitions) or [OffsetRange("", 0, 0, 0)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, OffsetRange)
        if partition.end > partition.start:
            yield from read_range(self.o, self.url, partition)


class StreamReader(DataSourceStreamReader):
    """Offsets are Spark's Kafka source's JSON: ``{"topic": {"0": 23}}``."""

    def __init__(self, o: opt.SourceOptions) -> None:
        self.o = o
        self.planner = Planner(o)
        self.url = self.planner.gw.url
        # Where the next micro-batch starts: the end of the last one planned (partitions())
        # or the initial offset. PySpark 4.0 calls latestOffset() without the start, so the
        # maxOffsetsPerTrigger cap counts from here.
        self.last: dict[str, dict[str, int]] | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Pickled to the tasks for read(): they need the options and the URL only, and an
        # HTTP client (its locks and sockets) does not pickle.
        return {"o": self.o, "url": self.url, "last": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def initialOffset(self) -> dict:
        self.last = self._initial()
        return self.last

    def _initial(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for t, p in self.planner.partitions():
            out.setdefault(t, {})[str(p)] = self.planner.start_of(t, p, opt.LATEST)
        return out

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        """The end of the next micro-batch: what each partition holds now (its stable
        offset for read_committed), capped by maxOffsetsPerTrigger in proportion to what
        each has waiting (at least one offset each)."""
        self.planner.topics = self.planner.gw.matching(list(self.o.subscribe or []), self.o.pattern)
        # Spark asks for the latest offset before the initial one on a fresh query; a
        # restarted one plans its last batch again first (partitions()), setting self.last.
        base = start or self.last or self._initial()
        ends: dict[str, dict[str, int]] = {}
        waiting: dict[tuple[str, str], tuple[int, int]] = {}
        for t, p in self.planner.partitions():
            earliest, end = self.planner.end_of(t, p)
            begin = base.get(t, {}).get(str(p), earliest)  # a new partition: from its start
            waiting[t, str(p)] = (begin, max(begin, end))
        cap = self.o.max_offsets_per_trigger
        total = sum(e - b for b, e in waiting.values())
        for (t, p), (begin, end) in waiting.items():
            if cap is not None and total > cap:
                end = begin + max(1 if end > begin else 0, (end - begin) * cap // total)
            ends.setdefault(t, {})[p] = end
        return ends

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        self.last = end
        ranges = [
            OffsetRange(t, int(p), start.get(t, {}).get(p, self.planner.end_of(t, int(p))[0]), e)
            for t, parts in end.items()
            for p, e in parts.items()
        ]
        return list(split(ranges, self.o.min_partitions))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, OffsetRange)
        yield from read_range(self.o, self.url, partition)

    def commit(self, end: dict) -> None:
        pass  # nothing to release: offsets live in Spark's checkpoint

    def stop(self) -> None:
        self.planner.gw.close()


# --- writing -----------------------------------------------------------------------------
@dataclass
class Stored(WriterCommitMessage):
    """A task's receipts per TMS topic, under one write pointer (``committed``: the batch
    had already committed before a crash; the task wrote nothing)."""

    write_pointer: int
    receipts: dict[str, list[dict[str, int]]] = field(default_factory=dict)
    committed: bool = False


def _store_all(
    o: opt.SourceOptions, url: str, wp: int, batches: Iterator[pa.RecordBatch]
) -> Stored:
    with o.gateway(url) as gw:
        counts = gw.partitions()
        out = Stored(wp)
        for batch in batches:
            for topic, body in bodies(batch, o.topic, counts):
                out.receipts.setdefault(topic, []).append(_store(gw, topic, wp, body))
        return out


def _store(gw: Gateway, topic: str, wp: int, body: bytes) -> dict[str, int]:
    """One store call. A missing topic is created, as Spark's Kafka sink has a broker with
    ``auto.create.topics.enable`` create it, by the gateway if its auto-create is on; if it
    is off (``--no-auto-create-topics``) the gateway's 404 says so."""
    try:
        return gw.store(topic, wp, body, auto_create=True)
    except GatewayError as exc:
        if exc.status != 404:
            raise
        raise ValueError(
            f"cannot write to topic {topic.partition(PARTITION_MARK)[0]!r} in namespace "
            f"{gw.namespace!r}: {exc}; kafka-topics.sh --create or "
            "PUT /v1/namespaces/NS/topics/NAME creates it"
        ) from None


def _commit(o: opt.SourceOptions, url: str, messages: list[Any]) -> None:
    stored = [m for m in messages if isinstance(m, Stored)]
    if not stored or all(m.committed for m in stored):
        return
    pointers = {m.write_pointer for m in stored}
    if len(pointers) != 1:
        raise RuntimeError(f"the batch's tasks wrote under several transactions: {pointers}")
    merged: dict[str, list[dict[str, int]]] = {}
    for m in stored:
        for topic, receipts in m.receipts.items():
            merged.setdefault(topic, []).extend(receipts)
    publish = [
        {"namespace": o.namespace, "topic": t, "stored": rs} for t, rs in sorted(merged.items())
    ]
    with o.gateway(url) as gw:
        gw.commit(pointers.pop(), publish)


def _abort(o: opt.SourceOptions, url: str, wp: int | None) -> None:
    if wp is None:
        return
    with o.gateway(url) as gw:
        gw.abort(wp)


class BatchWriter(DataSourceArrowWriter):
    """``df.write``: one transaction, started here on the driver, committed when the job
    succeeds with the receipts of the tasks that succeeded."""

    def __init__(self, o: opt.SourceOptions, url: str) -> None:
        self.o, self.url = o, url
        with o.gateway(url) as gw:
            self.wp = int(gw.start(o.transaction_timeout_s)["writePointer"])

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return _store_all(self.o, self.url, self.wp, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        _commit(self.o, self.url, [*messages, Stored(self.wp)])

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        _abort(self.o, self.url, self.wp)


class StreamWriter(DataSourceStreamWriter, DataSourceArrowWriter):
    """``writeStream``: one keyed transaction per micro-batch (docs/spark.md)."""

    def __init__(self, o: opt.SourceOptions, url: str) -> None:
        self.o, self.url = o, url

    def _batch_key(self) -> str:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        batch = ctx.getLocalProperty("streaming.sql.batchId") if ctx else None
        query = ctx.getLocalProperty("sql.streaming.queryId") if ctx else None
        if batch is None or query is None:
            raise RuntimeError("the tms stream writer runs only in a streaming query's tasks")
        sink = f"/{self.o.sink_id}" if self.o.sink_id else ""
        return f"spark/{query}{sink}/{batch}"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        with self.o.gateway(self.url) as gw:
            tx = gw.start(self.o.transaction_timeout_s, key=self._batch_key())
        wp = int(tx["writePointer"])
        if tx["state"] == "committed":  # a replay of a batch that committed before a crash
            for _ in iterator:
                pass
            return Stored(wp, committed=True)
        return _store_all(self.o, self.url, wp, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _commit(self.o, self.url, messages)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pointers = {m.write_pointer for m in messages if isinstance(m, Stored) and not m.committed}
        for wp in pointers:
            _abort(self.o, self.url, wp)


class TmsDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "tms"

    def schema(self) -> str:
        return SPARK_SCHEMA

    def _options(self) -> opt.SourceOptions:
        return opt.parse(dict(self.options))

    def reader(self, schema: StructType) -> DataSourceReader:
        return BatchReader(self._options())

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return StreamReader(self._options())

    def writer(self, schema: StructType, overwrite: bool) -> BatchWriter:
        if overwrite:  # as Spark's Kafka sink: a topic is a log, nothing in it is replaced
            raise ValueError('save mode "overwrite" is not allowed for tms: use "append"')
        o = self._options()
        return BatchWriter(o, _check_write_target(schema, o))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        o = self._options()
        return StreamWriter(o, _check_write_target(schema, o))


def _check_write_target(schema: StructType, o: opt.SourceOptions) -> str:
    """On the driver, before any task: the columns to write; -> the gateway's URL. Topics are
    not checked here: a missing one is created by the first store into it if the gateway's
    auto-create is on, and refused by that store, with the reason, if it is off."""
    names = set(schema.fieldNames())
    if "value" not in names:
        raise ValueError("the rows to write need a value column (binary or string)")
    if "topic" not in names and not o.topic:
        raise ValueError("give the topic option, or a topic column in the rows to write")
    unknown = names - {"key", "value", "headers", "topic", "partition"}
    if unknown:
        raise ValueError(
            f"columns {sorted(unknown)} cannot be written: only key, value, headers, topic "
            "and partition (as Spark's Kafka sink)"
        )
    return _url(o)
