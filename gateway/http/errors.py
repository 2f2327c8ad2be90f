"""What a refused HTTP request gets, and the guards on the way in that refuse it.

Every error answers JSON ``{"error": kind, "message": ...}`` (plus the extra fields the
shared table adds, e.g. ``state`` for a transaction conflict), whatever the request's
content type. Storage and gateway errors map to statuses in one table,
``tmsgate.gateway.errors``; the refusals only HTTP has (413, 415, unknown routes) are here.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from tmsgate.gateway.errors import (
    BadRequest,
    HttpError,
    InvalidTopicName,
    http_error,
    is_unexpected,
)
from tmsgate.protocol.tms_http import (
    AVRO,
    JSON_CONTENT_TYPE,
    PAYLOAD_MODES,
    BodyError,
    Codec,
    codec_for,
    json_codec,
    media_type,
)
from tmsgate.storage import NotLeader, TopicId

if TYPE_CHECKING:
    from tmsgate.gateway.cluster import Cluster

log = logging.getLogger("tmsgate.http")


class HttpProblem(Exception):
    """A refusal with an HTTP status of its own (413, 415, ...), not from the store."""

    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind


def json_response(
    doc: object, status: int = 200, headers: dict[str, str] | None = None
) -> Response:
    body = json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode()
    return Response(body, status, headers, media_type=JSON_CONTENT_TYPE)


def error_of(exc: Exception) -> HttpError:
    if isinstance(exc, HttpProblem):
        return HttpError(exc.status, exc.kind, str(exc))
    if isinstance(exc, ClientDisconnect):
        # Nobody reads this answer; the status (nginx's "client closed request") is for
        # the metrics, which count it per route.
        return HttpError(499, "client_disconnected", "the client went away mid-request")
    if isinstance(exc, BodyError):  # the codec cannot import the gateway's error table
        exc = BadRequest(str(exc))
    return http_error(exc)


def error_response(exc: Exception, request: Request, cluster: Cluster | None = None) -> Response:
    err = error_of(exc)
    if isinstance(exc, NotLeader) and cluster is not None and isinstance(exc.topic, TopicId):
        # Several gateways: say where to write instead (the leader's HTTP URL, if known).
        leader = cluster.leader(exc.topic)
        if leader is not None:
            err.extra.update(leaderNodeId=leader.node_id, leaderUrl=leader.http_url)
    if is_unexpected(exc) and not isinstance(exc, HttpProblem | BodyError | ClientDisconnect):
        # A bug: the client gets a 500 with the exception's text, the log its traceback.
        log.error("%s %s failed: %r", request.method, request.url.path, exc, exc_info=exc)
    return json_response(err.body(), err.status)


# --- guards ----------------------------------------------------------------------------------
def topic_id(namespace: str, topic: str) -> TopicId:
    try:
        return TopicId(namespace, topic)
    except ValueError as exc:
        raise InvalidTopicName(str(exc)) from None


def check_namespace(namespace: str) -> str:
    # TopicId keeps the one copy of the naming rules, which namespaces share with topics.
    topic_id(namespace, "_")
    return namespace


def body_codec(request: Request) -> Codec:
    """The codec of the request's Content-Type (none: JSON; anything else is a 415) and,
    for JSON, of its ?payload= (how payloads are written)."""
    header = request.headers.get("content-type")
    codec = codec_for(header)
    if codec is None:
        raise HttpProblem(
            415,
            "unsupported_media_type",
            f"Content-Type {media_type(header)!r} is not supported; "
            "use avro/binary or application/json",
        )
    payload = payload_mode(request)
    if payload is None:
        return codec
    if codec is AVRO:
        if payload != "avro":
            raise BadRequest(
                f"payload={payload} is for JSON bodies: avro/binary carries payloads as "
                "bytes (leave payload out)"
            )
        return codec
    return json_codec(payload)


def payload_mode(request: Request) -> str | None:
    """?payload=, if given: one of PAYLOAD_MODES, else a 400 that names them."""
    if not request.scope["query_string"]:  # the common case, without parsing anything
        return None
    value = request.query_params.get("payload")
    if value is not None and value not in PAYLOAD_MODES:
        raise BadRequest(f"payload: expected one of {list(PAYLOAD_MODES)}, got {value[:40]!r}")
    return value


async def read_body(request: Request, limit: int) -> bytes:
    """The whole body, refused with 413 as soon as it is known to be larger than ``limit``:
    from Content-Length before reading, else while the chunks arrive."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(int(declared), limit)
    chunks = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _too_large(size, limit)
        chunks.append(chunk)
    body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    request.state.body = body  # kept for a write sent on to its topic's leader (forward.py)
    return body


def _too_large(size: int, limit: int) -> HttpProblem:
    return HttpProblem(
        413, "body_too_large", f"the body has {size}+ bytes; the limit is {limit} bytes"
    )


async def read_json_object(request: Request, limit: int, *, required: bool) -> dict[str, Any]:
    """A JSON object body (admin and transaction calls). An empty body is ``{}`` unless
    ``required``; a body in another content type is a 415. Whitespace alone is not
    empty: it is not JSON either (400), as the fuzzer insists."""
    body = await read_body(request, limit)
    if not body:
        if required:
            raise BadRequest("the body must be a JSON object")
        return {}
    header = request.headers.get("content-type")
    if media_type(header) != JSON_CONTENT_TYPE:
        raise HttpProblem(
            415,
            "unsupported_media_type",
            f"Content-Type {media_type(header)!r} is not supported here; use application/json",
        )
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise BadRequest(f"the body is not JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise BadRequest("the body must be a JSON object")
    return doc


def write_pointer_of(text: str) -> int:
    """A write pointer in a path: a decimal 64-bit integer >= 0."""
    if not (text.isascii() and text.isdigit() and len(text) <= 19 and int(text) < 1 << 63):
        raise BadRequest(f"write pointer {text[:40]!r} is not an integer in [0, 2^63)")
    return int(text)
