"""Calls between the gateways of a cluster (``--cluster``), over their HTTP listeners.

A transaction spans gateways: its write pointer comes from the cluster's transaction
manager (the controller: storage/shared_transactions.py), its records are stored by each
partition's leader, its group offsets belong to each group's coordinator. Kafka's brokers
talk to each other for the same reasons (WriteTxnMarkers, the coordinators' forwarding);
tmsgate's gateways do it with one small JSON call, ``POST /internal/v1/cluster/{name}``
on the HTTP listener each gateway already announces in its lease (gateway/cluster.py).

Why one coordinator for every transactional id (the controller) rather than Kafka's 50
slots: every step of a Kafka transaction (start, decide, commit, abort) is a transition
of the one transaction manager, which the controller runs; a coordinator elsewhere would
add a call per step and take no load off it. The leases, the fence and the takeover are
the controller's, and a takeover finishes every recorded commit and aborts the rest, as a
restart does (gateway/kafka/txn/coordinator.py).

The calls, by where they run:

- on the controller: ``tx.*`` (the TMS transaction service, gateway/transactions.py, and
  the manager's snapshot for the others' views), ``txn.offsets`` (TxnOffsetCommit's
  offsets, kept in the Kafka transaction's record until EndTxn), ``txn.unstable``;
- on a partition's leader: ``partition.seal``, ``partition.publish_kept``,
  ``partition.discard`` (a commit's or an abort's part on one partition, each idempotent),
  and ``tx.ended`` (a commit's notice, so read_committed readers need not wait for the
  next snapshot);
- on a group's coordinator: ``group.commit_txn`` (a Kafka transaction's offsets).

Each call shows the cluster's secret (Cluster.shared_secret: a row of the store, so only
a process that can read the store can call). A refusal comes back as the same error the
callee raised (``rebuild``); a gateway that does not answer is
``PeerUnavailable``, a StorageError: Kafka clients get a retriable code, HTTP clients 503.
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import json
import logging
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from prometheus_client import CollectorRegistry, Counter
from tmsgate.storage import (
    InvalidTransaction,
    NotLeader,
    NotTransactionLeader,
    TopicId,
    TopicNotFound,
    TransactionNotInProgress,
)

from .cluster import Cluster, Node
from .errors import AnswerLost, ClusterCallRefused, PeerUnavailable, TransactionOwned

log = logging.getLogger("tmsgate.cluster.calls")
# aiohttp, not httpx, for the calls: on this project's 2-core VM a call cost ~1.6 ms of the
# event loop's CPU with httpx and ~0.4 ms with aiohttp (a GET to a gateway, 1,000 in a
# row), and a commit across workers makes several (docs/benchmarks.md, "Every core").
_UNAVAILABLE = (aiohttp.ClientError, asyncio.TimeoutError, OSError)
# No connection made, so nothing was sent: safe to answer as if the peer were not there.
# (A worker's listening socket is the parent's: a connection to a worker being restarted
# waits in its backlog, is sent, and is answered by the new worker or lost.)
_NOT_CONNECTED = (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError)

PATH = "/internal/v1/cluster/"
SECRET_HEADER = "x-tmsgate-cluster"
CALL_TIMEOUT_S = 15.0  # a commit's part may wait behind a busy writer; well under Kafka's
Body = dict[str, Any]
Handler = Callable[[Body], Awaitable[Body]]


def rebuild(refused: ClusterCallRefused) -> Exception:
    """The error the other gateway raised, as far as its answer says."""
    body, kind, message = refused.body, refused.kind, str(refused.body.get("message", ""))
    if kind == "transaction_conflict":
        return TransactionNotInProgress(int(body["writePointer"]), str(body["state"]))
    if kind == "transaction_owned":
        return TransactionOwned(int(body["writePointer"]), str(body["kafkaTransactionalId"]))
    if kind == "topic_not_found":
        gone = TopicNotFound(body.get("topic", "?"))
        gone.args = (message,)
        return gone
    if kind == "invalid_transaction":
        return InvalidTransaction(message)
    if kind == "transaction_manager_moving":
        return NotTransactionLeader(message)
    if kind in ("bad_request", "invalid_name") and refused.status == 400:
        return ValueError(message)
    return refused


def topic_of(doc: list[str]) -> TopicId:
    namespace, name = doc
    return TopicId.stored(namespace, name)


def topic_doc(topic: TopicId) -> list[str]:
    return [topic.namespace, topic.topic]


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def unb64(text: str) -> bytes:
    return base64.b64decode(text, validate=True)


class ClusterCalls:
    """This gateway's end of the cluster calls: making them (``call``, ``to_controller``,
    ``to_leader``, ``to_group``) and answering them (``handle``, with the handlers each
    service registers)."""

    def __init__(
        self,
        cluster: Cluster,
        registry: CollectorRegistry | None = None,
        *,
        verify: bool | str = True,
    ) -> None:
        self.cluster = cluster
        self._verify = verify
        self._secret: str | None = None
        self._client: aiohttp.ClientSession | None = None
        self._handlers: dict[str, Handler] = {}
        self.calls_made = 0
        self._made = Counter(
            "tmsgate_cluster_calls",
            "Calls this gateway made to the others of its cluster (gateway/cluster_calls.py), "
            "by call and outcome: ok, refused (an error answer), unavailable (no answer), "
            "answer_lost (a relayed write sent, its answer lost)",
            ["call", "outcome"],
            registry=registry,
        )

    async def start(self, run: Callable[..., Awaitable[Any]]) -> None:
        """Read (or make) the cluster's secret: before this gateway takes any role."""
        self._secret = await run(self.cluster.shared_secret)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    def _session(self) -> aiohttp.ClientSession:
        """Made on first use, inside the running loop (aiohttp's requirement)."""
        if self._client is None:
            verify = self._verify
            tls: ssl.SSLContext | bool | None = None  # None: verify with the system's CAs
            if verify is False:
                tls = False
            elif isinstance(verify, str):
                tls = ssl.create_default_context(cafile=verify)
            self._client = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=CALL_TIMEOUT_S),
                connector=aiohttp.TCPConnector(ssl=tls, limit=0),
            )
        return self._client

    def register(self, name: str, handler: Handler) -> None:
        if name in self._handlers:
            raise ValueError(f"two handlers for cluster call {name!r}")
        self._handlers[name] = handler

    # --- answering ---------------------------------------------------------------------------
    def authentic(self, shown: str | None) -> bool:
        secret = self._secret
        return secret is not None and shown is not None and hmac.compare_digest(shown, secret)

    def knows(self, name: str) -> bool:
        return name in self._handlers

    async def handle(self, name: str, body: Body) -> Body:
        handler = self._handlers.get(name)
        if handler is None:
            raise LookupError(f"no cluster call {name!r}")
        return await handler(body)

    # --- calling -----------------------------------------------------------------------------
    async def call(self, node: Node | None, name: str, body: Body, role: str) -> Body:
        """``name`` on ``node`` (which holds ``role``: for the messages)."""
        if node is None:
            raise PeerUnavailable(f"no live gateway is the {role} now; try again shortly")
        if not node.http_url:
            raise PeerUnavailable(
                f"gateway {node.node_id} ({role}) has no HTTP listener: a cluster's "
                "gateways reach each other over it (serve --http-listen)"
            )
        self.calls_made += 1
        try:
            async with self._session().post(
                node.http_url + PATH + name,
                json=body,
                headers={SECRET_HEADER: self._secret or ""},
            ) as answer:
                status, raw = answer.status, await answer.read()
        except _UNAVAILABLE as exc:
            self._made.labels(name, "unavailable").inc()
            raise PeerUnavailable(
                f"gateway {node.node_id} ({role}, {node.http_url}) did not answer {name}: "
                f"{exc or type(exc).__name__}"
            ) from exc
        try:
            doc = json.loads(raw)
        except ValueError:
            doc = {"message": raw[:200].decode(errors="replace")}
        if status != 200:
            self._made.labels(name, "refused").inc()
            raise rebuild(ClusterCallRefused(name, status, doc))
        self._made.labels(name, "ok").inc()
        return doc if isinstance(doc, dict) else {}

    async def to_controller(self, name: str, body: Body) -> Body:
        return await self.call(self.cluster.controller(), name, body, "controller")

    async def relay(
        self, node: Node, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        """An HTTP API request sent on as it came (``serve --workers``: a write reaching a
        worker that does not lead its topic) -> the answer's status, headers and body.
        PeerUnavailable if no connection was made (nothing was sent); AnswerLost if the
        request went out and no answer came (it may have been applied)."""
        if not node.http_url:
            raise PeerUnavailable(f"gateway {node.node_id} has no HTTP listener")
        try:
            async with self._session().request(
                method, node.http_url + path, headers=headers, data=body
            ) as answer:
                reply = answer.status, list(answer.headers.items()), await answer.read()
        except _NOT_CONNECTED as exc:
            self._made.labels("relay", "unavailable").inc()
            raise PeerUnavailable(f"gateway {node.node_id} did not answer: {exc}") from exc
        except _UNAVAILABLE as exc:
            self._made.labels("relay", "answer_lost").inc()
            raise AnswerLost(
                f"the request was sent on to gateway {node.node_id}, which leads the topic, "
                f"and its answer was lost ({exc or type(exc).__name__}): it may have been "
                "applied; read the topic (or abort the transaction) before sending it again"
            ) from exc
        self._made.labels("relay", "ok").inc()
        return reply

    async def to_leader(self, topic: TopicId, name: str, body: Body) -> Body:
        node = self.cluster.leader(topic)
        if node is None:
            raise NotLeader(topic, "no live gateway leads it now; try again shortly")
        return await self.call(node, name, body, f"leader of {topic}")

    async def to_group(self, group_id: str, name: str, body: Body) -> Body:
        node = self.cluster.group_coordinator(group_id)
        return await self.call(node, name, body, f"coordinator of group {group_id!r}")

    def tell(self, nodes: list[Node], name: str, body: Body) -> None:
        """``name`` on each of ``nodes``, not awaited: a notice whose loss only delays
        (a failure is logged at debug level)."""
        for node in nodes:
            task = asyncio.get_running_loop().create_task(self.call(node, name, body, "peer"))
            task.add_done_callback(_log_notice)


def _log_notice(task: asyncio.Task[Body]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.debug("a cluster notice was not delivered: %s", task.exception())


__all__ = [
    "ClusterCallRefused",
    "ClusterCalls",
    "PeerUnavailable",
    "b64",
    "topic_doc",
    "topic_of",
    "unb64",
]
