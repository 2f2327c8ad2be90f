"""Liveness and readiness: open to everyone (Kubernetes' probes send no credentials)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response
from tmsgate.storage import StoreClosed

from .config import HttpConfig
from .errors import json_response
from .openapi import JSON_TYPE, json_ok, ref
from .routes import Doc, Need, On, Route

if TYPE_CHECKING:
    from tmsgate.gateway.services import Services

OPEN = Need(On.NOTHING)


class Probes:
    ROUTES = (
        Route(
            "GET",
            "/healthz",
            "healthz",
            OPEN,
            Doc("200 while the process serves", json_ok("Status")),
        ),
        Route(
            "GET",
            "/readyz",
            "readyz",
            OPEN,
            Doc(
                "200 when the store is open and writable, else 503 with the reason",
                {
                    **json_ok("Status"),
                    "503": {
                        "description": "not ready (disk full, store closed, shutting down)",
                        "content": {JSON_TYPE: {"schema": ref("Error")}},
                    },
                },
            ),
        ),
    )

    def __init__(self, services: Services, config: HttpConfig) -> None:
        self.services = services

    async def healthz(self, request: Request) -> Response:
        return json_response({"status": "ok"})

    async def readyz(self, request: Request) -> Response:
        store = self.services.store
        reason = None
        if self.services.closing:
            reason = "the gateway is shutting down"
        elif store.writes_refused:
            reason = "disk full: writes are refused until space is free"
        else:
            try:  # one point read: raises StoreClosed once the store is closed
                await self.services.run(store.get_state, "http", "ready")
            except StoreClosed:
                reason = "the store is closed"
        if reason is not None:
            return json_response({"error": "not_ready", "message": reason}, 503)
        return json_response({"status": "ready"})
