"""Publishing and consuming: publish, store, rollback and poll (the seed's REST API).

Bodies are Avro binary or Avro JSON by Content-Type, and answers use the request's; JSON
payloads are Avro JSON bytes, text or base64 by ?payload= (errors.body_codec). Publish
and store take ?create=auto (topic_lookup.py). A publish goes straight to the topic's
writer (``publish_async``: no executor hop, the event loop awaits the writer's future),
so concurrent requests share its fsyncs; reads and rollbacks, which touch the backend on
the caller's thread, run on the I/O executor.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response
from tmsgate.gateway.acls import Operation
from tmsgate.gateway.errors import BadRequest
from tmsgate.protocol.columns import MEDIA_TYPE as COLUMNS_MEDIA_TYPE
from tmsgate.protocol.tms_http import AVRO, PublishRequest, PublishResponse, media_type
from tmsgate.storage import MessageId, RollbackDetail, Transaction

from .config import HttpConfig
from .errors import body_codec, json_response, payload_mode, read_body, topic_id
from .openapi import (
    COLUMNS_BODY,
    COLUMNS_TYPE,
    CREATE_PARAM,
    PAYLOAD_PARAM,
    both_bodies,
    both_ok,
)
from .records import store_columns
from .routes import Doc, Need, On, Route
from .topic_lookup import TopicLookup

if TYPE_CHECKING:
    from tmsgate.gateway.services import Services

BASE = "/v1/namespaces/{namespace}/topics/{topic}"
DEFAULT_POLL_LIMIT = 100  # the seed: a poll without a limit
_MAX_SEQ = 0xFFFF  # sequence ids are 16 bits in the row key
OFF_LOOP_BODY_BYTES = 1 << 20  # larger publish bodies are decoded on the CPU thread
# An empty message is one byte of Avro: a 64 MiB body could carry 64M of them. Kafka bounds
# a batch by bytes only, but each of its records costs at least 7 bytes.
MAX_MESSAGES_PER_REQUEST = 1_000_000


W, R = Operation.WRITE, Operation.READ
# 421 and 504: a topic led by another gateway or worker (forward.py)
WRITES = (400, 404, 409, 413, 415, 421, 503, 504, 507)


class MessageHandlers:
    ROUTES = (
        Route(
            "POST",
            BASE + "/publish",
            "publish",
            Need(On.TOPIC, (W,), creates=True),
            Doc(
                "Publish messages (to the MessageTable), or make a transaction's stored "
                "messages visible (write pointer and no messages)",
                {
                    "200": {
                        "description": "Published. Non-transactional: empty body, no "
                        "Content-Type. Transactional: a PublishResponse in the request's "
                        "Content-Type; post it back to rollback to undo the publish."
                    }
                },
                WRITES,
                body=both_bodies("PublishRequest"),
                query=(PAYLOAD_PARAM, CREATE_PARAM),
            ),
        ),
        Route(
            "POST",
            BASE + "/store",
            "store",
            Need(On.TOPIC, (W,), creates=True),
            Doc(
                "Store messages under a transaction (PayloadTable) for a later publish; "
                "record columns with the header X-Transaction-Write-Pointer keep keys, "
                "headers and timestamps",
                {
                    "200": {
                        "description": "The receipt: a PublishResponse of the rows stored "
                        "(JSON for record columns), for a commit's manifest",
                    }
                },
                WRITES,
                body={
                    "required": True,
                    "content": {
                        **both_bodies("PublishRequest")["content"],
                        COLUMNS_TYPE: COLUMNS_BODY,
                    },
                },
                query=(PAYLOAD_PARAM, CREATE_PARAM),
            ),
        ),
        Route(
            "POST",
            BASE + "/rollback",
            "rollback",
            Need(On.TOPIC, (W,)),
            Doc(
                "Roll back a transactional publish: the body is its PublishResponse",
                {
                    "200": {
                        "description": 'Rolled back. JSON: {"rolledBack": n} (a '
                        "RollbackResult); Avro: empty body, no Content-Type."
                    }
                },
                (400, 404, 409, 413, 415, 503),
                body=both_bodies("PublishResponse"),
            ),
        ),
        Route(
            "POST",
            BASE + "/poll",
            "poll",
            Need(On.TOPIC, (R,)),
            Doc(
                "Read messages from a message id, a time or the start",
                both_ok("MessageList", "Messages, in the request's Content-Type"),
                (400, 404, 413, 415, 503),
                body=both_bodies("ConsumeRequest"),
                query=(PAYLOAD_PARAM,),
            ),
        ),
    )

    def __init__(self, services: Services, config: HttpConfig) -> None:
        self.services = services
        self._store = services.store
        self.lookup = TopicLookup(services)
        self.max_body = config.max_body_bytes
        self.max_poll = max(1, config.max_poll)

    async def publish(self, request: Request) -> Response:
        codec = body_codec(request)
        tid = topic_id(request.path_params["namespace"], request.path_params["topic"])
        req = await self._publish_request(request, codec)
        wp = req.write_pointer
        if wp is None and not req.messages:
            raise BadRequest("messages is empty and there is no transactionWritePointer")
        result = await self.lookup.writing(
            request,
            tid,
            lambda: self.services.wait(self._store.publish_async(tid, req.messages, wp)),
        )
        if wp is None:
            return Response(status_code=200)
        # No rows when nothing was stored for the pointer: a rollback of this is a no-op.
        rb = result.rollback or RollbackDetail(wp, 0, 0, 0, 0)
        resp = PublishResponse(wp, rb.start_ts, rb.start_seq, rb.end_ts, rb.end_seq)
        return Response(codec.encode_publish_response(resp), media_type=codec.content_type)

    async def store(self, request: Request) -> Response:
        tid = topic_id(request.path_params["namespace"], request.path_params["topic"])
        if media_type(request.headers.get("content-type")) == COLUMNS_MEDIA_TYPE:
            if payload_mode(request) not in (None, "avro"):
                raise BadRequest("payload= is for JSON bodies: record columns carry bytes")
            return await store_columns(self.services, request, tid, self.max_body, self.lookup)
        codec = body_codec(request)
        req = await self._publish_request(request, codec)
        if req.write_pointer is None:
            raise BadRequest("store needs a transactionWritePointer")
        if not req.messages:
            raise BadRequest("store needs at least one message")
        wp = req.write_pointer
        stored = await self.lookup.writing(
            request, tid, lambda: self.services.wait(self._store.store_async(tid, req.messages, wp))
        )
        # The receipt: a PublishResponse of the PayloadTable rows written. A commit with a
        # manifest (docs/http-api.md) names the receipts whose rows it publishes.
        resp = PublishResponse(
            stored.write_pointer, stored.start_ts, stored.start_seq, stored.end_ts, stored.end_seq
        )
        return Response(codec.encode_publish_response(resp), media_type=codec.content_type)

    async def _publish_request(self, request: Request, codec: Any) -> PublishRequest:
        """Decode a PublishRequest; a large body on the CPU thread, so that decoding it
        does not hold the event loop every other client shares (as Kafka's large frames)."""
        body = await read_body(request, self.max_body)
        if len(body) < OFF_LOOP_BODY_BYTES:
            req = codec.decode_publish_request(body)
        else:
            req = await self.services.compute(codec.decode_publish_request, body)
        if len(req.messages) > MAX_MESSAGES_PER_REQUEST:
            raise BadRequest(
                f"{len(req.messages)} messages in one request; the limit is "
                f"{MAX_MESSAGES_PER_REQUEST:,}: split it"
            )
        return req

    async def rollback(self, request: Request) -> Response:
        codec = body_codec(request)
        tid = topic_id(request.path_params["namespace"], request.path_params["topic"])
        resp = codec.decode_publish_response(await read_body(request, self.max_body))
        detail = _rollback_detail(resp)
        count = await self.services.run(self._store.rollback, tid, detail)
        if codec is AVRO:
            return Response(status_code=200)
        return json_response({"rolledBack": count})

    async def poll(self, request: Request) -> Response:
        codec = body_codec(request)
        tid = topic_id(request.path_params["namespace"], request.path_params["topic"])
        req = codec.decode_consume_request(await read_body(request, self.max_body))
        start = req.start_from
        if isinstance(start, bytes) and len(start) != MessageId.SIZE:
            raise BadRequest(f"startFrom: a message id has 20 bytes, got {len(start)}")
        limit = DEFAULT_POLL_LIMIT if req.limit is None else req.limit
        if limit < 1:
            raise BadRequest(f"limit: expected at least 1, got {limit}")
        tx = self._transaction(req.transaction)
        messages = await self.services.run(
            self._store.poll, tid, start, req.inclusive, min(limit, self.max_poll), tx
        )
        # A Kafka record with a null value (a tombstone) has no payload: it reads as empty.
        body = codec.encode_messages((m.id, m.payload or b"") for m in messages)
        return Response(body, media_type=codec.content_type)

    def _transaction(self, raw: bytes | None) -> Transaction | None:
        if raw is None:
            return None
        try:
            return self.services.transactions.decode(raw)
        except ValueError as exc:
            raise BadRequest(f"transaction: not an encoded transaction ({exc})") from None


def _rollback_detail(resp: PublishResponse) -> RollbackDetail:
    """The rows a publish answered with; refused before the store if they cannot be rows."""
    if resp.write_pointer is None:
        raise BadRequest("rollback needs a transactionWritePointer")
    for name, ts, seq in (
        ("start", resp.start_ts, resp.start_seq),
        ("end", resp.end_ts, resp.end_seq),
    ):
        if ts < 0 or not 0 <= seq <= _MAX_SEQ:
            raise BadRequest(
                f"{name}Timestamp {ts} / {name}SequenceId {seq} is not a message position "
                f"(timestamp >= 0, sequence id 0-{_MAX_SEQ})"
            )
    return RollbackDetail(
        resp.write_pointer, resp.start_ts, resp.start_seq, resp.end_ts, resp.end_seq
    )
