"""InitProducerId. Without a transactional id (idempotence only): a fresh producer id with
epoch 0, as Kafka answers (also a KIP-360 bump request: the client continues under the
new id). With one: the transaction coordinator maps it to its producer id and bumps the
epoch, fencing the previous instance after aborting its open transaction
(gateway/kafka/txn). Capped at v5: v6 is two-phase commit (KIP-939)."""

from __future__ import annotations

from typing import Any

from tmsgate.protocol import ApiKey, ErrorCode

from ...acls import CLUSTER_NAME, Operation, ResourceType
from ..context import RequestContext
from ..routes import Route
from ..txn import TxnError, for_version


async def handle(ctx: RequestContext, req: Any) -> Any:
    tid = req.transactional_id
    if tid is None:
        # Kafka (KIP-679): IdempotentWrite on the cluster, or Write on some topic.
        if not (
            ctx.allowed(Operation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME, log=False)
            or ctx.broker.authorizer.any_allowed(
                ctx.session.principal, Operation.WRITE, ResourceType.TOPIC, ctx.session.host
            )
        ):
            ctx.allowed(Operation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME)  # logged
            return _refused(ctx, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        pid = await ctx.broker.producers.allocate_id()
        return ctx.response(
            throttle_time_ms=0, error_code=ErrorCode.NONE, producer_id=pid, producer_epoch=0
        )
    if tid == "":  # Kafka tells null (idempotence only) from "": INVALID_REQUEST
        return _refused(ctx, ErrorCode.INVALID_REQUEST)
    if not ctx.allowed(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, tid):
        return _refused(ctx, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    v3 = ctx.version >= 3
    try:
        pid, epoch = await ctx.broker.txns.init_producer(
            tid,
            req.transaction_timeout_ms,
            req.producer_id if v3 else -1,
            req.producer_epoch if v3 else -1,
        )
    except TxnError as exc:
        return _refused(ctx, for_version(exc.code, ctx.version, 4))
    return ctx.response(
        throttle_time_ms=0, error_code=ErrorCode.NONE, producer_id=pid, producer_epoch=epoch
    )


def _refused(ctx: RequestContext, code: ErrorCode) -> Any:
    return ctx.response(throttle_time_ms=0, error_code=code, producer_id=-1, producer_epoch=-1)


ROUTE = Route(ApiKey.INIT_PRODUCER_ID, 0, 5, handle)
