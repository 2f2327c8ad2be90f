"""SaslHandshake (KIP-152): the client names its mechanism; the answer lists the
listener's. v0 and v1 are advertised, as Kafka does (librdkafka enables SASL only when v0 is
in the range), but only v1 is served: after a v0 handshake a client would send raw tokens
outside Kafka's framing, which this listener does not read. Every client in use sends v1
when it is offered (v0 gets ILLEGAL_SASL_STATE and the connection closes). A mechanism the
listener does not enable, or a handshake on a listener without SASL, is answered as Kafka
does and the connection then closes."""

from __future__ import annotations

import logging
from typing import Any

from tmsgate.protocol import ApiKey, ErrorCode

from ...sasl import exchange
from ..context import RequestContext
from ..routes import Route

log = logging.getLogger("tmsgate.kafka.sasl")


async def handle(ctx: RequestContext, req: Any) -> Any:
    session, broker = ctx.session, ctx.broker
    enabled = list(broker.config.sasl_mechanisms)
    if ctx.version == 0:
        log.warning(
            "connection %s: SaslHandshake v0 (raw SASL tokens) is not supported; the client "
            "must use v1 with SaslAuthenticate",
            ctx.peer,
        )
        session.close_after_answer = True
        return ctx.response(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=enabled)
    reauthenticating = session.principal is not None and broker.config.connections_max_reauth_ms
    if session.exchange is not None or (session.principal is not None and not reauthenticating):
        session.close_after_answer = True
        return ctx.response(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=enabled)
    if reauthenticating and req.mechanism != session.mechanism:
        # Kafka: re-authentication must use the mechanism of the first login.
        log.warning(
            "connection %s: re-authentication with %s after a %s login",
            ctx.peer,
            req.mechanism,
            session.mechanism,
        )
        session.close_after_answer = True
        return ctx.response(error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=enabled)
    if req.mechanism not in enabled:
        log.info(
            "connection %s: SASL mechanism %r is not enabled (enabled: %s)",
            ctx.peer,
            req.mechanism,
            ", ".join(enabled) or "none: this listener has no SASL",
        )
        broker.metrics.logins.labels(req.mechanism[:40], "unsupported_mechanism").inc()
        session.close_after_answer = True
        return ctx.response(error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=enabled)
    users = broker.users
    session.exchange = exchange(req.mechanism, users.check_plain, users.entry)
    session.mechanism = req.mechanism
    return ctx.response(error_code=ErrorCode.NONE, mechanisms=enabled)


ROUTE = Route(ApiKey.SASL_HANDSHAKE, 0, 1, handle)
