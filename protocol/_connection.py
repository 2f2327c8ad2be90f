"""A sans-I/O Kafka server connection: bytes in, decoded requests out, responses as chunks.

Framing is a 4-byte big-endian length and then the request. The size is checked
against the limit before anything of the frame is buffered beyond what the peer
has already sent, so a hostile length prefix never makes us allocate it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from kafka.protocol.api_header import ResponseClassRegistry
from kafka.protocol.api_message import ApiMessage

from ._apis import decodable_versions, is_flexible_request, request_class, request_classes
from ._errors import ConnectionClosed, FrameTooLarge, MalformedRequest
from ._fetch_response import FetchResult
from ._metadata_response import MetadataResult
from ._nulls import check_nulls
from ._produce_response import ProduceResult
from ._txn_responses import AddPartitionsResult, EndTxnResult

# Answers that encode themselves in one piece (frame(correlation_id) -> bytes).
DirectAnswer = ProduceResult | MetadataResult | EndTxnResult | AddPartitionsResult
_ONE_PIECE = frozenset({ProduceResult, MetadataResult, EndTxnResult, AddPartitionsResult})

DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes
_FIXED_HEADER = struct.Struct(">hhih")  # api_key, api_version, correlation_id, client_id len
_SIZE = struct.Struct(">i")
# Compact the receive buffer only once this much of it has been consumed: deleting
# from the front of a bytearray moves the rest, so do it rarely.
_COMPACT_AT = 1 << 16


@dataclass(frozen=True, slots=True)
class Request:
    """One decoded request. ``body`` is None when kafka-python cannot decode this
    api_key/version; the caller answers (ApiVersions, KIP-511) or closes."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any
    size: int


@dataclass(frozen=True, slots=True)
class BadFrame:
    """A frame that could not be decoded. The connection is unusable afterwards:
    once framing is in doubt, nothing later in the stream can be trusted."""

    reason: str
    correlation_id: int | None = None
    api_key: int | None = None


Event = Request | BadFrame


def _read_uvarint(data: memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise MalformedRequest("truncated varint in request header")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 28:
            raise MalformedRequest("varint in request header is too long")


def _skip_tagged_fields(data: memoryview, pos: int) -> int:
    count, pos = _read_uvarint(data, pos)
    for _ in range(count):
        _tag, pos = _read_uvarint(data, pos)
        size, pos = _read_uvarint(data, pos)
        pos += size
        if pos > len(data):
            raise MalformedRequest("tagged field runs past the end of the request header")
    return pos


def parse_header(frame: memoryview) -> tuple[int, int, int, str | None, int]:
    """-> (api_key, api_version, correlation_id, client_id, body offset).

    Done by hand rather than with kafka-python's header class, which copies the
    whole frame into a BytesIO first (a megabyte for a large produce)."""
    if len(frame) < _FIXED_HEADER.size:
        raise MalformedRequest(f"frame of {len(frame)} bytes is shorter than a request header")
    api_key, api_version, correlation_id, client_len = _FIXED_HEADER.unpack_from(frame, 0)
    pos = _FIXED_HEADER.size
    client_id = None
    if client_len >= 0:
        end = pos + client_len
        if end > len(frame):
            raise MalformedRequest("client_id runs past the end of the frame")
        try:
            client_id = str(frame[pos:end], "utf-8")
        except UnicodeDecodeError as exc:
            raise MalformedRequest("client_id is not UTF-8") from exc
        pos = end
    elif client_len != -1:
        raise MalformedRequest(f"negative client_id length {client_len}")
    if is_flexible_request(api_key, api_version):
        pos = _skip_tagged_fields(frame, pos)
    return api_key, api_version, correlation_id, client_id, pos


@lru_cache(maxsize=4096)  # per request; bounded: a client may send any key and version
def decodable_class(api_key: int, api_version: int) -> Any:
    """The kafka-python request class that decodes this API at this version, or None."""
    versions = decodable_versions(api_key)
    if versions is None or not versions[0] <= api_version <= versions[1]:
        return None
    return request_class(api_key)


@lru_cache(maxsize=4096)
def _decoder(cls: Any, api_version: int) -> Any:
    """What cls.decode does, keeping the end position: a string or bytes field longer
    than the frame is cut short silently by the slice that reads it."""
    flexible = cls.flexible_version_q(api_version)
    return cls._struct.compiled_decode_from(
        api_version, compact=flexible, tagged=flexible, data_class=cls
    )


def decode_request(frame: bytes | memoryview) -> Request:
    """Decode one frame (without its length prefix). Raises MalformedRequest."""
    view = memoryview(frame)
    api_key, api_version, correlation_id, client_id, pos = parse_header(view)
    body = None
    if (cls := decodable_class(api_key, api_version)) is not None:
        try:
            body, end = _decoder(cls, api_version)(view, pos)
        except Exception as exc:  # the generated decoders raise many types on bad input
            raise MalformedRequest(
                f"{cls.name} v{api_version} (correlation id {correlation_id}) does not "
                f"decode: {type(exc).__name__}: {exc}"
            ) from exc
        if end > len(view):
            raise MalformedRequest(
                f"{cls.name} v{api_version} (correlation id {correlation_id}) is cut short: "
                f"its fields need {end - len(view)} more byte(s) than the frame has"
            )
        check_nulls(cls, api_version, body)  # Kafka refuses a null the schema does not allow
    return Request(api_key, api_version, correlation_id, client_id, body, len(view))


class KafkaConnection:
    """Server side of one Kafka connection, without any I/O."""

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._buf = bytearray()
        self._pos = 0
        self._broken = False
        # Whole-frame callers (frame_size/receive_frame) may size several frames before
        # receiving the first: a refused prefix must not cost the frames sized before it
        # their answers, so the refusal takes effect once those have been received.
        self._refused = False
        self._sized = 0  # frames whose prefix was accepted and that were not yet received

    @property
    def broken(self) -> bool:
        return self._broken or self._refused

    def receive_data(self, data: bytes | bytearray | memoryview) -> list[Event]:
        """Feed bytes from the socket; returns every request completed by them.

        A BadFrame, if any, is the last event: the stream is abandoned there.
        Raises FrameTooLarge at a length prefix above the limit; requests completed in the
        same data before it are returned first, and the next call raises.
        """
        if self._broken:
            raise ConnectionClosed("connection already failed; no more data is accepted")
        if self._pos == len(self._buf) and isinstance(data, bytes):
            # Nothing pending: decode straight from the (immutable) chunk and keep
            # only an incomplete tail, saving a copy of every whole request in it.
            events, used = self._parse(data, 0)
            if used < len(data) and not self._broken:
                self._buf[:] = memoryview(data)[used:]
                self._pos = 0
            return events
        self._buf += data
        events, self._pos = self._parse(self._buf, self._pos)
        self._compact()
        return events

    def _parse(self, buf: bytes | bytearray, pos: int) -> tuple[list[Event], int]:
        """Decode the complete frames in buf from pos -> (events, position after them)."""
        events: list[Event] = []
        copy = isinstance(buf, bytearray)  # the buffer changes later: frames need a copy
        while len(buf) - pos >= 4:
            (size,) = _SIZE.unpack_from(buf, pos)
            if size < 0 or size > self.max_frame_bytes:
                if events:  # answer these first: the prefix stays buffered, refused next call
                    break
                self._broken = True
                raise FrameTooLarge(size, self.max_frame_bytes)
            start = pos + 4
            if len(buf) - start < size:
                break
            view = memoryview(buf)[start : start + size]
            frame = bytes(view) if copy else view
            pos = start + size
            try:
                events.append(decode_request(frame))
            except MalformedRequest as exc:
                self._broken = True
                events.append(self._bad_frame(bytes(frame[:8]), str(exc)))
                break
        return events, pos

    def frame_size(self, prefix: bytes) -> int:
        """The size in a frame's 4-byte length prefix, for a caller that reads whole frames
        itself (see receive_frame). Raises FrameTooLarge before anything is allocated; the
        frames sized before the refused one may still be received."""
        if self._broken or self._refused:
            raise ConnectionClosed("connection already failed; no more data is accepted")
        (size,) = _SIZE.unpack(prefix)
        if size < 0 or size > self.max_frame_bytes:
            self._refused = True
            raise FrameTooLarge(size, self.max_frame_bytes)
        self._sized += 1
        return size

    def receive_frame(self, frame: bytes) -> list[Event]:
        """One whole frame (without its length prefix), read by the caller: saves copying
        large requests through the stream buffer. Same events as receive_data."""
        self.admit_frame()
        return self.decode_frame(frame)

    def admit_frame(self) -> None:
        """receive_frame's bookkeeping, for a caller that decodes on another thread: raises
        ConnectionClosed unless a frame may be received now. Call on the sizing thread."""
        if self._broken or (self._refused and not self._sized):
            raise ConnectionClosed("connection already failed; no more data is accepted")
        if self._sized:
            self._sized -= 1

    def decode_frame(self, frame: bytes | memoryview) -> list[Event]:
        """receive_frame's decoding, after admit_frame; safe to run on another thread (it
        only ever sets the connection broken)."""
        try:
            return [decode_request(frame)]
        except MalformedRequest as exc:
            self._broken = True
            return [self._bad_frame(bytes(frame[:8]), str(exc))]

    def bytes_needed(self) -> int:
        """How many more bytes complete the frame being received (0 if unknown)."""
        pending = len(self._buf) - self._pos
        if pending < 4:
            return 4 - pending
        (size,) = _SIZE.unpack_from(self._buf, self._pos)
        return max(0, 4 + size - pending)

    def _compact(self) -> None:
        if self._pos == len(self._buf):
            self._buf.clear()
            self._pos = 0
        elif self._pos >= _COMPACT_AT:
            del self._buf[: self._pos]
            self._pos = 0

    @staticmethod
    def _bad_frame(frame: bytes, reason: str) -> BadFrame:
        if len(frame) >= 8:
            api_key, _version, correlation_id = struct.unpack_from(">hhi", frame, 0)
            return BadFrame(reason, correlation_id, api_key)
        return BadFrame(reason)


def response_class(api_key: int, api_version: int) -> type[ApiMessage]:
    """The kafka-python response class for this request's api key and version."""
    request_classes()  # imports every kafka.protocol module, which registers responses
    cls = ResponseClassRegistry._response_class_registry.get(api_key)
    if cls is None:
        raise KeyError(f"no response class for api key {api_key}")
    return cls[api_version]


def encode_response(
    correlation_id: int, response: ApiMessage | DirectAnswer | FetchResult
) -> list[bytes | bytearray | memoryview]:
    """Frame a response (header version picked by the library) -> chunks for writelines.
    Produce and Fetch answers, one per message at low rates, Metadata answers, which
    name every topic, and the answers every small transaction gets (AddPartitionsToTxn,
    EndTxn) are encoded directly."""
    if type(response) in _ONE_PIECE:
        return [response.frame(correlation_id)]  # type: ignore[union-attr]
    if type(response) is FetchResult:
        return response.frame(correlation_id)
    response.with_header(correlation_id=correlation_id)
    # encode() returns a fresh bytearray (a slice of its pooled buffer): safe to keep.
    return [response.encode(header=True, framed=True)]
