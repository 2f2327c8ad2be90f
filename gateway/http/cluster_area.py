"""The cluster calls' endpoint (gateway/cluster_calls.py): ``POST
/internal/v1/cluster/{call}``, for the other gateways of the same store only.

Not for users, so not in the OpenAPI document, and not behind the users' authentication:
a call shows the cluster's secret instead (a row of the store), compared in constant
time. A gateway alone on its store has no secret and answers 404."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response
from tmsgate.gateway.cluster_calls import PATH, SECRET_HEADER
from tmsgate.gateway.errors import is_unexpected

from .config import HttpConfig
from .errors import HttpProblem, json_response
from .routes import Need, On, Route

if TYPE_CHECKING:
    from tmsgate.gateway.services import Services


class ClusterCallHandlers:
    ROUTES = (Route("POST", PATH + "{call}", "cluster_call", Need(On.NOTHING)),)

    def __init__(self, services: Services, config: HttpConfig) -> None:
        self.services = services

    async def cluster_call(self, request: Request) -> Response:
        calls = self.services.calls
        if calls is None:
            raise HttpProblem(404, "not_found", "this gateway is not part of a cluster")
        if not calls.authentic(request.headers.get(SECRET_HEADER)):
            raise HttpProblem(403, "forbidden", "cluster calls need the cluster's secret")
        try:
            body = json.loads(await request.body())
        except ValueError as exc:
            raise HttpProblem(400, "bad_request", f"the body is not JSON: {exc}") from None
        if not isinstance(body, dict):
            raise HttpProblem(400, "bad_request", "the body is a JSON object")
        name = request.path_params["call"]
        if not calls.knows(name):
            raise HttpProblem(404, "not_found", f"no cluster call {name!r}")
        try:
            answer = await calls.handle(name, body)
        except (KeyError, TypeError, ValueError) as exc:
            if not is_unexpected(exc):  # one of ours (TransactionOwned): its own answer
                raise
            raise HttpProblem(400, "bad_request", f"a field is missing or wrong: {exc}") from None
        return json_response(answer)
