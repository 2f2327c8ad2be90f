"""What the Kafka producer shims share: header stamping and per-transaction bookkeeping."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any

from ._scope import Scope

TX_HEADER = "tms.tx.write_pointer"
Headers = Iterable[tuple[str, Any]] | Mapping[str, Any] | None


def stamped(headers: Headers, scope: Scope) -> list[tuple[str, Any]]:
    """The record's headers with ``tms.tx.write_pointer`` set to the scope's write pointer
    (replacing one the caller set: the enclosing transaction wins)."""
    items = headers.items() if isinstance(headers, Mapping) else (headers or ())
    kept = [(name, value) for name, value in items if name != TX_HEADER]
    kept.append((TX_HEADER, scope.transaction.header_value))
    return kept


class Tracker:
    """Records sent by one producer, per transaction context, until that context ends.

    ``sent`` holds whatever the producer hands back per record (kafka-python futures) or
    None (confluent-kafka, whose outcomes arrive through ``failed``/``delivered``).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sent: dict[int, list[Any]] = {}
        self._failed: dict[int, list[str]] = {}
        self._delivered: dict[int, int] = {}

    def begin(self, scope: Scope) -> bool:
        """True the first time the producer sends under this scope."""
        with self._lock:
            if id(scope) in self._sent:
                return False
            self._sent[id(scope)] = []
            self._failed[id(scope)] = []
            self._delivered[id(scope)] = 0
            return True

    def sent(self, scope: Scope, handle: Any) -> None:
        with self._lock:
            self._sent[id(scope)].append(handle)

    def outcome(self, scope_id: int, error: str | None) -> None:
        with self._lock:
            if scope_id not in self._sent:
                return  # the context already ended (a late report after an abort)
            if error is None:
                self._delivered[scope_id] += 1
            else:
                self._failed[scope_id].append(error)

    def finish(self, scope: Scope) -> tuple[list[Any], list[str], int]:
        """Forget the scope; -> (handles, failures reported, deliveries reported)."""
        with self._lock:
            key = id(scope)
            return (
                self._sent.pop(key, []),
                self._failed.pop(key, []),
                self._delivered.pop(key, 0),
            )
