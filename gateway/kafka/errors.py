"""Kafka error codes for exceptions (the one table: ``gateway/errors.py``), and how
failures are logged (once with their cause, then counted: ``FailureLog``)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from tmsgate.gateway.errors import error_kind
from tmsgate.protocol import ErrorCode, ProtocolError
from tmsgate.storage import StorageError

log = logging.getLogger("tmsgate.kafka")


def error_code(exc: BaseException) -> ErrorCode:
    code = getattr(exc, "code", None)
    if isinstance(exc, ProtocolError) and isinstance(code, ErrorCode):
        return code
    return error_kind(exc).kafka


def error_of(
    exc: BaseException, what: str, failures: FailureLog | None = None
) -> tuple[ErrorCode, str]:
    """(code, message) for a response. Server-side failures are logged: through
    ``failures`` when given (rate-limited), else one line each; the traceback at ERROR
    only for an unexpected exception (a bug), else at DEBUG."""
    code = error_code(exc)
    if code in (ErrorCode.UNKNOWN_SERVER_ERROR, ErrorCode.KAFKA_STORAGE_ERROR):
        if failures is not None:
            failures.failed(code, exc, what)
        else:
            _log_first(log, what, code, exc)
    return code, str(exc) or type(exc).__name__


def _unexpected(exc: BaseException) -> bool:
    return not isinstance(exc, (StorageError, ProtocolError))


def _log_first(
    logger: logging.Logger, what: str, code: ErrorCode, exc: BaseException, tail: str = ""
) -> None:
    if _unexpected(exc):
        logger.error("%s failed: %s: %s%s", what, code.name, exc, tail, exc_info=exc)
        return
    logger.error("%s failed: %s: %s%s", what, code.name, exc, tail)
    if logger.isEnabledFor(logging.DEBUG):
        logger.debug("%s failed", what, exc_info=exc)


class FailureLog:
    """Logs a stream of failures of one kind of request without flooding the log.

    The first failure of each kind (error code and exception type) after a quiet spell is
    logged with its cause, in one line (with a traceback only for an unexpected exception,
    or at DEBUG); later ones are counted, and summed up in at most one line per
    ``interval_s``: ``produce failures since last report: 266 (KAFKA_STORAGE_ERROR: disk
    full: ...)``. The count still pending when requests succeed again is reported then
    (at the same bounded rate). A full disk used to log a traceback for every failed
    produce, 266 in 10 s. For one thread (the event loop)."""

    def __init__(
        self,
        what: str,
        logger: logging.Logger = log,
        interval_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.what = what
        self._log = logger
        self._interval = interval_s
        self._clock = clock
        self._seen: set[tuple[str, str]] = set()  # kinds logged in this spell
        self._counts: dict[tuple[str, str], int] = {}  # not yet reported
        self._causes: dict[tuple[str, str], str] = {}
        self._last_report = float("-inf")
        self._last_failure = float("-inf")
        self.total = 0

    def failed(self, code: ErrorCode, exc: BaseException | str, context: str) -> None:
        now = self._clock()
        self.total += 1
        if now - self._last_failure >= self._interval:
            if self._counts:
                self._report(now)
            self._seen.clear()  # a quiet spell: the next failures are news again
        self._last_failure = now
        kind = (code.name, type(exc).__name__)
        if kind not in self._seen:
            self._seen.add(kind)
            if not self._counts:
                self._last_report = now  # the next summary comes an interval after this
            tail = f" (more {self.what} failures are counted, reported every {self._interval:g} s)"
            if isinstance(exc, str):
                self._log.error("%s failed: %s: %s%s", context, code.name, exc, tail)
            else:
                _log_first(self._log, context, code, exc, tail)
            return
        self._counts[kind] = self._counts.get(kind, 0) + 1
        self._causes[kind] = str(exc)
        if now - self._last_report >= self._interval:
            self._report(now)

    def succeeded(self) -> None:
        """Cheap while nothing is pending: call it on every success."""
        if self._counts:
            now = self._clock()
            if now - self._last_report >= self._interval:
                self._report(now, " (requests succeed again)")

    def _report(self, now: float, tail: str = "") -> None:
        total = sum(self._counts.values())
        several = len(self._counts) > 1
        kinds = "; ".join(
            f"{f'{n} ' if several else ''}{kind[0]}: {self._causes[kind]}"
            for kind, n in self._counts.items()
        )
        self._log.warning("%s failures since last report: %d (%s)%s", self.what, total, kinds, tail)
        self._counts.clear()
        self._causes.clear()
        self._last_report = now
