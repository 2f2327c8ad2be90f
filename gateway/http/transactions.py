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
from tmsgate.gateway.errors import BadRequest
from tmsgate.gateway.transactions import DEFAULT_TIMEOUT_S, MAX_TIMEOUT_S
from tmsgate.protocol.tms_http import AVRO_CONTENT_TYPE, media_type
from tmsgate.storage import Transaction

from .config import HttpConfig
from .errors import json_response, read_json_object, write_pointer_of

if TYPE_CHECKING:
    from tmsgate.gateway.services import Services

BASE = "/v1/transactions"
_MAX_START_BODY = 4096  # {"timeoutSeconds": N}


def wants_avro(request: Request) -> bool:
    """``Accept: avro/binary`` asks for the codec bytes themselves."""
    accept = request.headers.get("accept", "")
    return any(media_type(part) == AVRO_CONTENT_TYPE for part in accept.split(","))


def timeout_of(doc: dict[str, Any]) -> float:
    unknown = sorted(set(doc) - {"timeoutSeconds"})
    if unknown:
        raise BadRequest(f"unknown field {unknown[0]!r}; the only field is 'timeoutSeconds'")
    value = doc.get("timeoutSeconds")
    if value is None:
        return DEFAULT_TIMEOUT_S
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        raise BadRequest(f"timeoutSeconds: expected a number, got {value!r}"[:200])
    if not 0 < value <= MAX_TIMEOUT_S:
        raise BadRequest(f"timeoutSeconds: expected more than 0 and at most {MAX_TIMEOUT_S:g}")
    return float(value)


class TransactionHandlers:
    ROUTES = (
        ("POST", BASE, "start_transaction"),
        ("GET", BASE, "list_transactions"),
        ("POST", BASE + "/snapshot", "snapshot"),
        ("GET", BASE + "/{wp}", "transaction_state"),
        ("POST", BASE + "/{wp}/commit", "commit"),
        ("POST", BASE + "/{wp}/abort", "abort"),
        ("POST", BASE + "/{wp}/invalidate", "invalidate"),
    )

    def __init__(self, services: Services, config: HttpConfig) -> None:
        self.tx = services.transactions

    async def start_transaction(self, request: Request) -> Response:
        timeout = timeout_of(await read_json_object(request, _MAX_START_BODY, required=False))
        return self._answer(request, await self.tx.start(timeout), timeout)

    async def snapshot(self, request: Request) -> Response:
        return self._answer(request, await self.tx.snapshot(), None)

    def _answer(self, request: Request, tx: Transaction, timeout: float | None) -> Response:
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
        return json_response({"writePointer": wp, "state": self.tx.state(wp)})

    async def commit(self, request: Request) -> Response:
        wp = write_pointer_of(request.path_params["wp"])
        await self.tx.commit(wp)
        return json_response({"writePointer": wp, "state": "committed"})

    async def abort(self, request: Request) -> Response:
        wp = write_pointer_of(request.path_params["wp"])
        await self.tx.abort(wp)
        return json_response({"writePointer": wp, "state": "aborted"})

    async def invalidate(self, request: Request) -> Response:
        wp = write_pointer_of(request.path_params["wp"])
        await self.tx.invalidate(wp)
        return json_response({"writePointer": wp, "state": "invalid"})
