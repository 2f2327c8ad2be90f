"""The Spark source's and sink's column codecs, without Spark: a read body to Arrow
(pipelines/spark/arrow.py) agrees with the reference decoder record by record and refuses
damaged bodies with MalformedColumns; rows to write (pipelines/spark/writing.py) encode to
bodies the reference decoder reads back; the source's options are refused by name."""

from __future__ import annotations

import contextlib

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tmsgate.pipelines.spark import options as opt
from tmsgate.pipelines.spark.arrow import SCHEMA, to_record_batch
from tmsgate.pipelines.spark.writing import bodies, encode
from tmsgate.protocol.columns import MalformedColumns, RecordColumns, decode_columns, encode_columns

headers = st.lists(
    st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=5))), max_size=3
)
records = st.lists(
    st.tuples(
        st.integers(0, 2**62),
        st.integers(0, 2**50),  # ms: microseconds must fit in 64 bits
        st.integers(0, 2**62),
        st.binary(min_size=20, max_size=20),
        st.one_of(st.none(), st.binary(max_size=20)),
        st.one_of(st.none(), st.binary(max_size=50)),
        headers,
    ),
    max_size=30,
)


def columns_of(rows: list, next_offset: int, log_append: bool) -> RecordColumns:
    return RecordColumns(
        offsets=[r[0] for r in rows],
        timestamps=[r[1] for r in rows],
        write_pointers=[r[2] for r in rows],
        ids=[r[3] for r in rows],
        keys=[r[4] for r in rows],
        values=[r[5] for r in rows],
        headers=[r[6] for r in rows],
        next_offset=next_offset,
        log_append_time=log_append,
    )


@settings(max_examples=200, deadline=None)
@given(records, st.integers(0, 2**62), st.booleans())
def test_read_body_to_arrow_matches_the_reference_decoder(rows, next_offset, log_append) -> None:
    body = encode_columns(columns_of(rows, next_offset, log_append))
    batch, nxt = to_record_batch(body, "t", 3)
    assert nxt == next_offset and batch.schema == SCHEMA
    micros = batch.column("timestamp").cast(pa.int64()).to_pylist()
    assert micros == [r[1] * 1000 for r in rows]
    got = batch.drop_columns(["timestamp"]).to_pylist()
    assert [g["offset"] for g in got] == [r[0] for r in rows]
    assert [g["writePointer"] for g in got] == [r[2] or None for r in rows]
    assert [g["messageId"] for g in got] == [r[3] for r in rows]
    assert [(g["key"], g["value"]) for g in got] == [(r[4], r[5]) for r in rows]
    assert [[(h["key"], h["value"]) for h in g["headers"]] for g in got] == [r[6] for r in rows]
    assert {(g["topic"], g["partition"], g["timestampType"]) for g in got} <= {
        ("t", 3, int(log_append))
    }


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=300))
def test_fuzzed_read_bodies_convert_or_say_why(body: bytes) -> None:
    with contextlib.suppress(MalformedColumns):
        to_record_batch(body, "t", 0)[0].validate(full=True)


@settings(max_examples=300, deadline=None)
@given(records.filter(bool), st.data())
def test_damaged_read_bodies_convert_or_say_why(rows, data) -> None:
    body = bytearray(encode_columns(columns_of(rows, 0, False)))
    for _ in range(data.draw(st.integers(1, 4))):
        body[data.draw(st.integers(0, len(body) - 1))] = data.draw(st.integers(0, 255))
    with contextlib.suppress(MalformedColumns):
        to_record_batch(bytes(body), "t", 0)[0].validate(full=True)


def test_header_names_that_are_not_utf8_are_refused() -> None:
    body = encode_columns(columns_of([(0, 0, 0, bytes(20), None, b"v", [("ab", None)])], 1, False))
    bad = body.replace(b"ab", b"\xff\xfe")
    with pytest.raises(MalformedColumns, match="hold together"):
        to_record_batch(bad, "t", 0)


write_rows = st.lists(
    st.tuples(
        st.one_of(st.none(), st.binary(max_size=20)),
        st.one_of(st.none(), st.binary(max_size=50)),
        st.lists(st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=5)))),
    ),
    max_size=30,
)
WRITE_SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
    ]
)


@settings(max_examples=200, deadline=None)
@given(write_rows, st.integers(0, 3))
def test_rows_to_write_encode_to_what_the_reference_decoder_reads(rows, offset) -> None:
    table = pa.Table.from_pylist(
        [
            {"key": k, "value": v, "headers": [{"key": a, "value": b} for a, b in h]}
            for k, v, h in rows
        ],
        schema=WRITE_SCHEMA,
    )
    batch = (
        table.combine_chunks().to_batches()[0]
        if rows
        else pa.RecordBatch.from_pylist([], WRITE_SCHEMA)
    )
    batch = batch.slice(min(offset, batch.num_rows))  # sliced arrays keep their buffers' offsets
    cols = decode_columns(encode(batch))
    kept = rows[min(offset, len(rows)) :]
    assert cols.keys == [k for k, _, _ in kept]
    assert cols.values == [v for _, v, _ in kept]
    assert cols.headers == [h for _, _, h in kept]


def test_rows_go_to_their_topic_and_partition() -> None:
    batch = pa.RecordBatch.from_pylist(
        [
            {"value": "a", "topic": "x", "partition": 0},
            {"value": "b", "topic": "y", "partition": 1},
            {"value": "c", "topic": "x", "partition": 0},
        ]
    )
    out = {t: decode_columns(b).values for t, b in bodies(batch, None, {"x": 1, "y": 2})}
    assert out == {"x": [b"a", b"c"], "y~1": [b"b"]}
    with pytest.raises(ValueError, match="has 1 partition"):
        list(bodies(batch, None, {"x": 1, "y": 1}))
    # A topic not known to exist goes to the gateway, which creates it or says why not.
    assert {t for t, _ in bodies(batch, None, {"x": 1})} == {"x", "y~1"}


@pytest.mark.parametrize(
    ("given_options", "words"),
    [
        ({}, "url"),
        ({"url": "u", "subscribe": "a", "subscribePattern": "b"}, "not both"),
        ({"url": "u", "assign": "{}"}, "assign"),
        ({"url": "u", "startingOffsets": '{"t": {"0": -3}}'}, "startingOffsets"),
        ({"url": "u", "endingOffsets": "earliest"}, "endingOffsets"),
        ({"url": "u", "maxOffsetsPerTrigger": "many"}, "maxOffsetsPerTrigger"),
        ({"url": "u", "failOnDataLoss": "maybe"}, "failOnDataLoss"),
        ({"url": "u", "transactionTimeoutSeconds": "0"}, "transactionTimeoutSeconds"),
    ],
)
def test_bad_options_are_refused_by_name(given_options, words) -> None:
    with pytest.raises(ValueError, match=words):
        opt.parse(given_options)


def test_options_follow_spark_kafka_names_in_any_case() -> None:
    o = opt.parse(
        {
            "URL": "http://g",
            "subscribe": "a, b",
            "STARTINGOFFSETS": '{"a": {"0": 5, "1": -2}}',
            "kafka.isolation.level": "read_uncommitted",
            "minpartitions": "4",
        }
    )
    assert o.subscribe == ("a", "b") and o.min_partitions == 4
    assert o.starting == {"a": {0: 5, 1: opt.EARLIEST}} and o.ending == opt.LATEST
    assert o.isolation == "read_uncommitted" and o.fail_on_data_loss
