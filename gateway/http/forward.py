"""A write for a topic another worker leads, sent on to that worker (``serve --workers``).

With several gateways on one store (``--cluster``), an HTTP write reaching a gateway
that does not lead the topic answers 421 with the leader's URL (errors.py): each gateway
is a server of its own and the client picks. The workers of ``serve --workers N`` share
one public address, so a client cannot pick: whichever worker accepted the connection
sends the request on to the leader's private listener and answers with what it said.
Only once: a request that was sent on already and still finds no leader there gets the
421 (the leader moved meanwhile; the client retries). A request sent on whose answer is
lost (the leader killed mid-write) gets 504 ``outcome_unknown``: it may have been stored,
and a 421 would have the client store it again. The body is the one the handler
read (``read_body`` keeps it on the request); the leader checks the credentials again.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response
from tmsgate.storage import NotLeader, TopicId

from ..errors import PeerUnavailable

if TYPE_CHECKING:
    from ..cluster_calls import ClusterCalls

FORWARDED = "x-tmsgate-forwarded"
# A topic with no leader yet (made a moment ago): looked up in the store this long, this
# often, before the 421 (leaders are taken within a lease round: cluster.py).
LEADER_WAIT_S = 2.0
LEADER_POLL_S = 0.05
# Not sent on: they describe one connection, not the request (RFC 9110 7.6.1), or are
# recomputed for the new body.
_HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "te", "upgrade", "host", "content-length"}
)
_ANSWER_DROPPED = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length"})


async def to_leader(request: Request, exc: NotLeader, calls: ClusterCalls) -> Response | None:
    """The leader's answer, or None to answer 421 here (no leader known, already sent
    on once, the body not kept, the leader not reached). AnswerLost if the leader was
    sent the request and its answer was lost: the write may be stored, so not a 421."""
    if request.headers.get(FORWARDED) or not isinstance(exc.topic, TopicId):
        return None
    cluster = calls.cluster
    leader = cluster.leader(exc.topic)
    deadline = time.monotonic() + LEADER_WAIT_S
    while leader is None and time.monotonic() < deadline:
        # A topic made a moment ago: its leader took it after this worker's last look.
        leader = await asyncio.to_thread(cluster.leader_now, exc.topic)
        if leader is None:
            await asyncio.sleep(LEADER_POLL_S)
    if leader is None or leader.node_id == cluster.me.node_id:
        return None
    body = getattr(request.state, "body", None)
    if body is None:
        return None
    headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
    headers[FORWARDED] = str(cluster.me.node_id)
    path = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    try:
        status, answer_headers, content = await calls.relay(
            leader, request.method, path, headers, body
        )
    except PeerUnavailable:
        return None
    kept = {k: v for k, v in answer_headers if k.lower() not in _ANSWER_DROPPED}
    return Response(content, status, headers=kept)
