"""The transaction service over HTTP: start, snapshot, commit, abort, invalidate, state.

A started transaction's ``encoded`` bytes are what a transactional poll takes back as
its ``transaction``; its write pointer is what publish and store take, and what a Kafka
producer puts in the ``tms.tx.write_pointer`` header.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response
from tmsgate.gateway.acls import Operation
from tmsgate.gateway.errors import BadRequest
from tmsgate.gateway.transactions import DEFAULT_TIMEOUT_S, MAX_TIMEOUT_S, Manifest
from tmsgate.protocol.tms_http import AVRO_CONTENT_TYPE, media_type
from tmsgate.storage import StoredRange, TopicId, Transaction

from .config import HttpConfig
from .errors import json_response, read_json_object, topic_id, write_pointer_of
from .openapi import AVRO_TYPE, JSON_TYPE, json_ok, ref
from .routes import Doc, Need, On, Route

if TYPE_CHECKING:
    from tmsgate.gateway.services import Services

BASE = "/v1/transactions"
_MAX_START_BODY = 4096  # {"timeoutSeconds": N, "key": K}
_MAX_SEQ = 0xFFFF
_RANGE_FIELDS = ("startTimestamp", "startSequenceId", "endTimestamp", "endSequenceId")


def wants_avro(request: Request) -> bool:
    """``Accept: avro/binary`` asks for the codec bytes themselves."""
    accept = request.headers.get("accept", "")
    return any(media_type(part) == AVRO_CONTENT_TYPE for part in accept.split(","))


def timeout_of(doc: dict[str, Any]) -> float:
    unknown = sorted(set(doc) - {"timeoutSeconds", "key"})
    if unknown:
        raise BadRequest(f"unknown field {unknown[0]!r}; the fields are 'timeoutSeconds', 'key'")
    value = doc.get("timeoutSeconds")
    if value is None:
        return DEFAULT_TIMEOUT_S
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        raise BadRequest(f"timeoutSeconds: expected a number, got {value!r}"[:200])
    if not 0 < value <= MAX_TIMEOUT_S:
        raise BadRequest(f"timeoutSeconds: expected more than 0 and at most {MAX_TIMEOUT_S:g}")
    return float(value)


# kafka-acls.sh refuses Write on --cluster (Kafka's valid cluster operations), so
# IdempotentWrite, which it grants, does as well.
WRITE = (Operation.WRITE, Operation.IDEMPOTENT_WRITE)
DESCRIBE = (Operation.DESCRIBE,)


def _transaction_ok(description: str) -> dict[str, Any]:
    content = {
        JSON_TYPE: {"schema": ref("Transaction")},
        AVRO_TYPE: {"schema": {"type": "string", "format": "binary"}},
    }
    return {"200": {"description": description, "content": content}}


def _ending(action: str, need: Need) -> Route:
    return Route(
        "POST",
        BASE + "/{wp}/" + action,
        action,
        need,
        Doc(
            f"{action.capitalize()} an in-progress transaction",
            json_ok("TransactionState"),
            (400, 409, 503),
            operation_id=f"{action}Transaction",
        ),
    )


class TransactionHandlers:
    ROUTES = (
        Route(
            "POST",
            BASE,
            "start_transaction",
            Need(On.CLUSTER, WRITE, keyed=True),
            Doc(
                "Start a transaction. With Accept: avro/binary the answer is the encoded "
                "transaction itself.",
                _transaction_ok("The transaction"),
                (400, 413, 415, 503),
                body={
                    "required": False,
                    "content": {JSON_TYPE: {"schema": ref("TransactionStart")}},
                },
            ),
        ),
        Route(
            "GET",
            BASE,
            "list_transactions",
            Need(On.CLUSTER, DESCRIBE),
            Doc("Transactions in progress and the invalid list", json_ok("TransactionList")),
        ),
        # Read pointers only: what a transactional poll then reads needs READ on its topic.
        Route(
            "POST",
            BASE + "/snapshot",
            "snapshot",
            Need(On.LOGIN),
            Doc(
                "A read-only snapshot (write pointer 0) for transactional polls",
                _transaction_ok("The snapshot"),
            ),
        ),
        Route(
            "GET",
            BASE + "/{wp}",
            "transaction_state",
            Need(On.CLUSTER, DESCRIBE),
            Doc("A transaction's state", json_ok("TransactionState"), (400,)),
        ),
        Route(
            "POST",
            BASE + "/{wp}/commit",
            "commit",
            Need(On.CLUSTER, WRITE, manifest=True),
            Doc(
                "Commit an in-progress transaction; with a manifest, publish only the "
                "listed stores' rows first (recorded, replayed after a crash)",
                json_ok("TransactionState"),
                (400, 404, 409, 413, 415, 503),
                body={"required": False, "content": {JSON_TYPE: {"schema": ref("Commit")}}},
                operation_id="commitTransaction",
            ),
        ),
        _ending("abort", Need(On.CLUSTER, WRITE)),
        # An operator's: any transaction.
        _ending("invalidate", Need(On.CLUSTER, (Operation.ALTER,))),
    )

    def __init__(self, services: Services, config: HttpConfig) -> None:
        self.tx = services.transactions
        self.max_body = config.max_body_bytes

    async def start_transaction(self, request: Request) -> Response:
        doc = await read_json_object(request, _MAX_START_BODY, required=False)
        timeout = timeout_of(doc)
        if "key" not in doc:
            return self._answer(request, await self.tx.start(timeout), timeout)
        key = doc["key"]
        if not isinstance(key, str):  # null too: leave the field out for an unkeyed one
            raise BadRequest(f"key: expected a string, got {key!r}"[:200])
        try:
            keyed = await self.tx.start_keyed(key, timeout)
        except ValueError as exc:
            raise BadRequest(f"key: {exc}") from None
        extra = {"key": key, "state": keyed.state}
        if keyed.tx is None:  # committed: the key's final state
            return json_response({"writePointer": keyed.write_pointer, **extra})
        return self._answer(request, keyed.tx, timeout, extra)

    async def snapshot(self, request: Request) -> Response:
        return self._answer(request, await self.tx.snapshot(), None)

    def _answer(
        self,
        request: Request,
        tx: Transaction,
        timeout: float | None,
        extra: dict[str, Any] | None = None,
    ) -> Response:
        encoded = self.tx.encode(tx)
        if wants_avro(request):
            return Response(encoded, media_type=AVRO_CONTENT_TYPE)
        return json_response(
            {
                "writePointer": tx.write_pointer,
                "readPointer": tx.read_pointer,
                "inProgress": sorted(tx.in_progress),
                "invalid": sorted(tx.invalid),
                "timeoutSeconds": timeout,  # null for a snapshot: it never times out
                "encoded": encoded.decode("latin-1"),
                **(extra or {}),
            }
        )

    async def list_transactions(self, request: Request) -> Response:
        in_progress = sorted(self.tx.in_progress().items())
        return json_response(
            {
                "inProgress": [{"writePointer": wp, "expiresAtMs": ms} for wp, ms in in_progress],
                "invalid": sorted(self.tx.invalid()),
            }
        )

    async def transaction_state(self, request: Request) -> Response:
        wp = write_pointer_of(request.path_params["wp"])
        return json_response({"writePointer": wp, "state": await self.tx.current_state(wp)})

    async def commit(self, request: Request) -> Response:
        wp = write_pointer_of(request.path_params["wp"])
        doc = await read_json_object(request, self.max_body, required=False)
        if not doc:
            await self.tx.commit(wp)
        else:
            await self.tx.commit_publishing(wp, manifest_of(wp, doc))
        return json_response({"writePointer": wp, "state": "committed"})

    async def abort(self, request: Request) -> Response:
        wp = write_pointer_of(request.path_params["wp"])
        await self.tx.abort(wp)
        return json_response({"writePointer": wp, "state": "aborted"})

    async def invalidate(self, request: Request) -> Response:
        wp = write_pointer_of(request.path_params["wp"])
        await self.tx.invalidate(wp)
        return json_response({"writePointer": wp, "state": "invalid"})


def manifest_of(wp: int, doc: dict[str, Any]) -> Manifest:
    """A commit's ``{"publish": [{"namespace", "topic", "stored": [receipt, ...]}, ...]}``."""
    unknown = sorted(set(doc) - {"publish"})
    if unknown:
        raise BadRequest(f"unknown field {unknown[0]!r}; the only field is 'publish'")
    entries = doc.get("publish")
    if not isinstance(entries, list):
        raise BadRequest("publish: expected a list of {namespace, topic, stored}")
    manifest: list[tuple[TopicId, list[StoredRange]]] = []
    for i, entry in enumerate(entries):
        where = f"publish[{i}]"
        if not isinstance(entry, dict) or set(entry) - {"namespace", "topic", "stored"}:
            raise BadRequest(f"{where}: expected an object of namespace, topic, stored")
        namespace = entry.get("namespace", "default")
        name = entry.get("topic")
        if not isinstance(namespace, str) or not isinstance(name, str):
            raise BadRequest(f"{where}: namespace and topic are strings")
        stored = entry.get("stored")
        if not isinstance(stored, list):
            raise BadRequest(f"{where}.stored: expected a list of store receipts")
        manifest.append(
            (
                topic_id(namespace, name),
                [_range(wp, r, f"{where}.stored[{j}]") for j, r in enumerate(stored)],
            )
        )
    return manifest


def _range(wp: int, receipt: Any, where: str) -> StoredRange:
    """A store receipt's rows: one store() counts its rows through its sequence ids, moving
    to the next write time after 65535, so the count follows from the two ends."""
    if not isinstance(receipt, dict):
        raise BadRequest(f"{where}: expected a store receipt object")
    values = []
    for name in _RANGE_FIELDS:
        value = receipt.get(name)
        if isinstance(value, dict) and set(value) == {"long"}:  # Avro JSON's union form
            value = value["long"]
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise BadRequest(f"{where}.{name}: expected an integer >= 0")
        values.append(value)
    start_ts, start_seq, end_ts, end_seq = values
    if start_seq > _MAX_SEQ or end_seq > _MAX_SEQ:
        raise BadRequest(f"{where}: sequence ids are 0-{_MAX_SEQ}")
    count = (end_ts - start_ts) * (_MAX_SEQ + 1) + end_seq - start_seq + 1
    if count < 1:
        raise BadRequest(f"{where}: its end comes before its start")
    return StoredRange(wp, start_ts, start_seq, end_ts, end_seq, count)
