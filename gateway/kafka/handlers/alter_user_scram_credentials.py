"""AlterUserScramCredentials (v0, KIP-554): add, replace or delete users' SCRAM credentials
on a running gateway (``kafka-configs.sh --alter --entity-type users --add-config
'SCRAM-SHA-256=[password=...]'`` / ``--delete-config``, the admin clients'
alter_user_scram_credentials).

The client sends the salt and the salted password, Hi(password, salt, i), never the
password; the gateway keeps StoredKey and ServerKey derived from it (gateway/users.py).
Each user's result follows Kafka 4.1's controller (ScramControlManager, measured): a user
named twice in one request, whatever the mechanisms, is DUPLICATE_RESOURCE; an empty name
or an iteration count outside 4096..16384 UNACCEPTABLE_CREDENTIAL; a mechanism other than
1 (SCRAM-SHA-256) or 2 (SCRAM-SHA-512) UNSUPPORTED_SASL_MECHANISM; deleting a credential
that does not exist RESOURCE_NOT_FOUND. The accepted changes are written at once, as Kafka
writes them in one atomic batch. Results that succeeded come first, then the refused.

Logins made afterwards use the new credentials (each login reads the store); connections
already logged in stay so, as in Kafka. A user left without any credential is gone, and
its HTTP bearer tokens are revoked, as ``tmsgate users delete`` does. With an authorizer
it needs ALTER on the cluster (without it every user gets CLUSTER_AUTHORIZATION_FAILED);
without one anyone may, as in Kafka, whose check is ``authorizer.forall``."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from kafka.protocol.admin import AlterUserScramCredentialsResponse
from tmsgate.protocol import ApiKey, ErrorCode

from ...acls import ANONYMOUS, Operation
from ...tokens import Tokens
from ...users import (
    DEFAULT_ITERATIONS,
    MAX_ITERATIONS,
    MECHANISMS,
    ScramEntry,
    UserError,
    Users,
    check_name,
    entry_from_salted_password,
)
from ..context import RequestContext
from ..errors import error_of
from ..routes import Route

if TYPE_CHECKING:
    from ..broker import Broker

log = logging.getLogger("tmsgate.kafka.users")
_Result = AlterUserScramCredentialsResponse.AlterUserScramCredentialsResult
MECHANISM_OF = dict(enumerate(MECHANISMS, 1))  # Kafka's ScramMechanism type -> name
_Error = tuple[ErrorCode, str | None]
READ_BATCH = 1000  # users read per executor call
# Kafka's words (ScramControlManager)
TWICE = (
    ErrorCode.DUPLICATE_RESOURCE,
    "A user credential cannot be altered twice in the same request",
)
NO_NAME = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
UNKNOWN_MECHANISM = (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
TOO_FEW = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
TOO_MANY = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
NOT_FOUND = (
    ErrorCode.RESOURCE_NOT_FOUND,
    "Attempt to delete a user credential that does not exist",
)
# Kafka's is "Request <the request's internals> is not authorized."
DENIED = "Request AlterUserScramCredentials is not authorized: ALTER on the cluster needed"
# Kafka fails to make the keys (HMAC with an empty key) and answers UNKNOWN_SERVER_ERROR
# with no message; the gateway says why.
EMPTY_SALTED_PASSWORD = (ErrorCode.UNKNOWN_SERVER_ERROR, "The salted password is empty")


def _check_name_and_mechanism(name: str, mechanism: int) -> _Error | None:
    if not name:
        return NO_NAME
    if mechanism not in MECHANISM_OF:
        return UNKNOWN_MECHANISM
    return None


def _check_upsertion(up: Any) -> _Error | None:
    error = _check_name_and_mechanism(up.name, up.mechanism)
    if error is not None:
        return error
    if up.iterations < DEFAULT_ITERATIONS:
        return TOO_FEW
    if up.iterations > MAX_ITERATIONS:
        return TOO_MANY
    if not up.salted_password:
        return EMPTY_SALTED_PASSWORD
    try:
        check_name(up.name)  # the gateway's rule for names, stricter than Kafka's
    except UserError as exc:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, str(exc)
    return None


_Change = tuple[str, ScramEntry | None]  # mechanism, and the entry to set or None: delete


def _entry(up: Any) -> ScramEntry:
    return entry_from_salted_password(
        MECHANISM_OF[up.mechanism], bytes(up.salt), bytes(up.salted_password), up.iterations
    )


def _existing(users: Users, names: list[str]) -> dict[str, set[str]]:
    """Blocking: name -> the mechanisms it has a credential for."""
    return {name: set(users.entries(name)) for name in names}


async def _sort_out(ctx: RequestContext, req: Any) -> tuple[dict[str, _Change], dict[str, _Error]]:
    """Kafka's validation: name -> the one change accepted for that user, and name -> the
    error of each user refused. A user's first error stands; later entries are ignored."""
    broker = ctx.broker
    accepted: dict[str, _Change] = {}
    errors: dict[str, _Error] = {}
    existing: dict[str, set[str]] = {}
    if req.deletions:
        names = list(dict.fromkeys([d.name async for d in broker.paced(req.deletions)]))
        for start in range(0, len(names), READ_BATCH):
            batch = names[start : start + READ_BATCH]
            existing.update(await broker.run(_existing, broker.users, batch))
    async for d in broker.paced(req.deletions):
        if d.name in errors:
            continue
        if accepted.pop(d.name, None) is not None:
            errors[d.name] = TWICE
            continue
        error = _check_name_and_mechanism(d.name, d.mechanism)
        if error is None and MECHANISM_OF[d.mechanism] not in existing[d.name]:
            error = NOT_FOUND
        if error is None:
            accepted[d.name] = (MECHANISM_OF[d.mechanism], None)
        else:
            errors[d.name] = error
    async for up in broker.paced(req.upsertions):
        if up.name in errors:
            continue
        if accepted.pop(up.name, None) is not None:
            errors[up.name] = TWICE
            continue
        error = _check_upsertion(up)
        if error is None:
            accepted[up.name] = (MECHANISM_OF[up.mechanism], _entry(up))
        else:
            errors[up.name] = error
    return accepted, errors


def _apply(broker: Broker, changes: dict[tuple[str, str], ScramEntry | None]) -> set[str]:
    """Blocking: write the changes; -> the users whose deletion found nothing. A user left
    without a credential is gone: its HTTP tokens are revoked (as tmsgate users delete)."""
    missing = broker.users.alter(changes)
    tokens = Tokens(broker.store)
    for (name, mechanism), entry in changes.items():
        if entry is None and (name, mechanism) not in missing and not broker.users.entries(name):
            try:
                tokens.revoke(name)
            except Exception:  # the credentials are changed all the same: say so
                log.exception("user %s deleted, but its HTTP tokens were not revoked", name)
    return {name for name, _ in missing}


def _every_user(ctx: RequestContext, req: Any, code: ErrorCode, message: str) -> Any:
    """The same error for every user named (Kafka's getErrorResponse: sorted, once each)."""
    names = {d.name for d in req.deletions} | {u.name for u in req.upsertions}
    results = [_Result(user=n, error_code=code, error_message=message) for n in sorted(names)]
    return ctx.response(throttle_time_ms=0, results=results)


async def handle(ctx: RequestContext, req: Any) -> Any:
    if not ctx.may_manage_users(Operation.ALTER):
        return _every_user(ctx, req, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, DENIED)
    try:
        accepted, errors = await _sort_out(ctx, req)
    except Exception as exc:  # reading the users failed
        return _every_user(ctx, req, *error_of(exc, "alter SCRAM credentials"))
    if accepted:
        changes = {(name, mechanism): entry for name, (mechanism, entry) in accepted.items()}
        try:
            for name in await ctx.broker.run(_apply, ctx.broker, changes):
                del accepted[name]
                errors[name] = NOT_FOUND
        except Exception as exc:
            errors.update(dict.fromkeys(accepted, error_of(exc, "alter SCRAM credentials")))
            accepted.clear()
    who = ctx.session.principal or ANONYMOUS
    for name, (mechanism, entry) in accepted.items():
        done = "deleted" if entry is None else "set"
        log.info("user %s: %s credential %s by %s", name, mechanism, done, who)
    results = [_Result(user=n, error_code=ErrorCode.NONE, error_message=None) for n in accepted]
    results += [_Result(user=n, error_code=c, error_message=m) for n, (c, m) in errors.items()]
    return ctx.response(throttle_time_ms=0, results=results)


ROUTE = Route(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, 0, handle)
