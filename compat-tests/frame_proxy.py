"""A tiny Kafka-framing TCP proxy for fault injection between a client and the gateway.

It forwards 4-byte-length-prefixed frames both ways, remembers (api_key, api_version) per
correlation id, decodes Produce responses with kafka-python's protocol classes (for
reporting), and can swallow the next Produce response -- the broker has written the batch
but the client never hears about it, so it must retry. Only sockets; no gateway imports.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading

_LEN = struct.Struct(">i")
_REQ_HEAD = struct.Struct(">hhi")


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        try:
            chunk = sock.recv(n - len(buf))
        except OSError:
            return None
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def _recv_frame(sock: socket.socket) -> bytes | None:
    head = _recv_exact(sock, 4)
    if head is None:
        return None
    (n,) = _LEN.unpack(head)
    return _recv_exact(sock, n)


def decode_produce_response(body: bytes, version: int) -> list[tuple[str, int, int, int]]:
    """[(topic, partition, error_code, base_offset)] from a Produce response frame body."""
    from kafka.protocol.producer import ProduceResponse

    resp = ProduceResponse.decode(body, version=version, header=True)
    out = []
    for t in resp.responses:
        for p in t.partition_responses:
            out.append((t.name, p.index, p.error_code, p.base_offset))
    return out


class FrameProxy:
    def __init__(self, target_host: str, target_port: int):
        self.target = (target_host, target_port)
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        self.swallow_next_produce = False
        self.swallowed = threading.Event()
        self.swallowed_response: list[tuple[str, int, int, int]] | None = None
        self.produce_responses: list[list[tuple[str, int, int, int]]] = []
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.target, timeout=5)
                server.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._socks += [client, server]
            inflight: dict[int, tuple[int, int]] = {}
            threading.Thread(target=self._up, args=(client, server, inflight), daemon=True).start()
            threading.Thread(
                target=self._down, args=(server, client, inflight), daemon=True
            ).start()

    @staticmethod
    def _close(*socks: socket.socket) -> None:
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                s.close()

    def _up(self, client, server, inflight) -> None:
        while True:
            frame = _recv_frame(client)
            if frame is None:
                break
            key, ver, corr = _REQ_HEAD.unpack_from(frame)
            inflight[corr] = (key, ver)
            try:
                server.sendall(_LEN.pack(len(frame)) + frame)
            except OSError:
                break
        self._close(client, server)

    def _down(self, server, client, inflight) -> None:
        while True:
            frame = _recv_frame(server)
            if frame is None:
                break
            (corr,) = struct.unpack_from(">i", frame)
            key, ver = inflight.pop(corr, (-1, -1))
            if key == 0:
                try:
                    decoded = decode_produce_response(frame, ver)
                except Exception as exc:
                    decoded = [("<undecodable>", -1, -1, -1)]
                    decoded.append((repr(exc), -1, -1, -1))
                with self._lock:
                    self.produce_responses.append(decoded)
                    swallow = self.swallow_next_produce
                    if swallow:
                        self.swallow_next_produce = False
                        self.swallowed_response = decoded
                if swallow:
                    self.swallowed.set()
                    continue
            try:
                client.sendall(_LEN.pack(len(frame)) + frame)
            except OSError:
                break
        self._close(client, server)

    def cut_all(self) -> None:
        """Drop every open connection (clients see a broken socket and reconnect)."""
        with self._lock:
            socks, self._socks = self._socks, []
        self._close(*socks)

    def close(self) -> None:
        self._closed = True
        self._close(self.listener)
        with self._lock:
            socks, self._socks = self._socks, []
        self._close(*socks)
