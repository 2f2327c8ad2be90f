"""SaslAuthenticate (v0-2, KIP-152): one SASL token each way, until the mechanism's
exchange (gateway/sasl.py) names the principal. A failed login gets
SASL_AUTHENTICATION_FAILED with the reason, and the connection closes after the answer,
as Kafka does. With connections.max.reauth.ms set, the answer tells the session's
lifetime and the client logs in again on the same connection before it ends (KIP-368),
as the same principal."""

from __future__ import annotations

import logging
import time
from typing import Any

from tmsgate.protocol import ApiKey, ErrorCode

from ...sasl import AuthenticationFailed
from ..context import RequestContext
from ..routes import Route

log = logging.getLogger("tmsgate.kafka.sasl")


def _answer(
    ctx: RequestContext, code: ErrorCode, message: str | None, token: bytes, lifetime_ms: int = 0
) -> Any:
    fields: dict[str, Any] = {"error_code": code, "error_message": message, "auth_bytes": token}
    if ctx.version >= 1:
        fields["session_lifetime_ms"] = lifetime_ms
    return ctx.response(**fields)


async def handle(ctx: RequestContext, req: Any) -> Any:
    session, metrics = ctx.session, ctx.broker.metrics
    current = session.exchange
    if current is None:
        session.close_after_answer = True
        return _answer(
            ctx,
            ErrorCode.ILLEGAL_SASL_STATE,
            "SaslAuthenticate without a SaslHandshake first"
            if session.principal is None
            else "already authenticated",
            b"",
        )
    mechanism = session.mechanism or "?"
    try:
        # A store read and, for PLAIN, 4096 rounds of PBKDF2: off the event loop.
        token = await ctx.broker.run(current.step, bytes(req.auth_bytes))
    except AuthenticationFailed as exc:
        session.exchange = None
        session.close_after_answer = True
        metrics.logins.labels(mechanism, "failed").inc()
        log.warning("connection %s: %s login failed: %s", ctx.peer, mechanism, exc)
        return _answer(ctx, ErrorCode.SASL_AUTHENTICATION_FAILED, str(exc), b"")
    except Exception:  # a defect here must still end the login with an answer
        session.exchange = None
        session.close_after_answer = True
        metrics.logins.labels(mechanism, "failed").inc()
        log.exception("connection %s: %s login failed on an internal error", ctx.peer, mechanism)
        return _answer(
            ctx, ErrorCode.SASL_AUTHENTICATION_FAILED, "internal error during authentication", b""
        )
    if current.principal is None:
        return _answer(ctx, ErrorCode.NONE, None, token)  # the exchange goes on
    session.exchange = None
    if session.principal is not None and current.principal != session.principal:
        session.close_after_answer = True  # Kafka's words
        metrics.logins.labels(mechanism, "failed").inc()
        reason = (
            f"Cannot change principals during re-authentication from {session.principal}: "
            f"{current.principal}"
        )
        log.warning("connection %s: %s", ctx.peer, reason)
        return _answer(ctx, ErrorCode.SASL_AUTHENTICATION_FAILED, reason, b"")
    again = session.principal is not None
    session.principal = current.principal
    metrics.logins.labels(mechanism, "ok").inc()
    log.info(
        "connection %s: %s as %s (%s)",
        ctx.peer,
        "re-authenticated" if again else "authenticated",
        current.principal,
        mechanism,
    )
    # KIP-368: the login lasts connections.max.reauth.ms; clients that know (v1+) log in
    # again before then, the others are disconnected at their first request after it.
    lifetime_ms = ctx.broker.config.connections_max_reauth_ms
    session.expires_at = time.monotonic() + lifetime_ms / 1000 if lifetime_ms > 0 else None
    return _answer(ctx, ErrorCode.NONE, None, token, lifetime_ms)


ROUTE = Route(ApiKey.SASL_AUTHENTICATE, 0, 2, handle)
