"""DescribeUserScramCredentials (v0, KIP-554): which SCRAM mechanisms each user has, and
their iteration counts; never a salt or a key. ``kafka-configs.sh --describe --entity-type
users`` and the admin clients' describe_user_scram_credentials.

As Kafka 4.1's broker (ScramImage.describe, measured): null or an empty list means every
user with a credential; a named user without one gets RESOURCE_NOT_FOUND, and a name listed
twice DUPLICATE_RESOURCE, once per name. With an authorizer it needs DESCRIBE on the
cluster (without it the whole answer is CLUSTER_AUTHORIZATION_FAILED); without one anyone
may, as in Kafka."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import DescribeUserScramCredentialsResponse
from tmsgate.protocol import ApiKey, ErrorCode

from ...acls import Operation
from ...users import MECHANISMS, Users
from ..context import RequestContext
from ..errors import error_of
from ..routes import Route

_Result = DescribeUserScramCredentialsResponse.DescribeUserScramCredentialsResult
_Info = _Result.CredentialInfo
CODES = {m: i for i, m in enumerate(MECHANISMS, 1)}  # Kafka's ScramMechanism type
READ_BATCH = 1000  # named users read per executor call
# Kafka's words (ScramImage); an answer that is fine carries "" rather than null, as Kafka's.
NOT_FOUND = "Attempt to describe a user credential that does not exist: "
DUPLICATE = "Cannot describe SCRAM credentials for the same user twice in a single request: "
DENIED = "Cluster authorization failed."


def _result(name: str, code: ErrorCode, message: str, infos: list[Any] | None = None) -> Any:
    return _Result(user=name, error_code=code, error_message=message, credential_infos=infos or [])


def _found(name: str, mechanisms: dict[str, int]) -> Any:
    infos = [_Info(mechanism=CODES[m], iterations=i) for m, i in sorted(mechanisms.items())]
    return _result(name, ErrorCode.NONE, "", infos)


def _read(users: Users, names: list[str]) -> dict[str, dict[str, int]]:
    """name -> {mechanism: iterations} for those of ``names`` that have a credential."""
    found = {}
    for name in names:
        entries = users.entries(name)
        if entries:
            found[name] = {m: e.iterations for m, e in entries.items()}
    return found


async def _named(ctx: RequestContext, names: list[str]) -> list[Any]:
    broker = ctx.broker
    seen: dict[str, int] = {}
    async for name in broker.paced(names):
        seen[name] = seen.get(name, 0) + 1
    unique = [n for n, count in seen.items() if count == 1]
    found: dict[str, dict[str, int]] = {}
    for start in range(0, len(unique), READ_BATCH):
        found.update(await broker.run(_read, broker.users, unique[start : start + READ_BATCH]))
    results = []
    async for name in broker.paced(seen):
        if seen[name] > 1:
            results.append(_result(name, ErrorCode.DUPLICATE_RESOURCE, DUPLICATE + name))
        elif name in found:
            results.append(_found(name, found[name]))
        else:
            results.append(_result(name, ErrorCode.RESOURCE_NOT_FOUND, NOT_FOUND + name))
    return results


def _answer(ctx: RequestContext, code: ErrorCode, message: str, results: list[Any]) -> Any:
    return ctx.response(throttle_time_ms=0, error_code=code, error_message=message, results=results)


async def handle(ctx: RequestContext, req: Any) -> Any:
    broker = ctx.broker
    if not ctx.may_manage_users(Operation.DESCRIBE):
        # Kafka's getErrorResponse: one nameless result per listed user, with the error.
        denied = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return _answer(ctx, denied, DENIED, [_result("", denied, DENIED) for _ in req.users or ()])
    try:
        if req.users:
            results = await _named(ctx, [u.name for u in req.users])
        else:
            everyone = await broker.run(broker.users.list)
            results = [_found(n, m) async for n, m in broker.paced(everyone.items()) if m]
    except Exception as exc:
        code, message = error_of(exc, "describe SCRAM credentials")
        return _answer(ctx, code, message, [])
    return _answer(ctx, ErrorCode.NONE, "", results)


ROUTE = Route(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, 0, handle)
