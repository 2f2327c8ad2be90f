"""The API's description: ``/openapi.json``, built from the route table, and an API page
at ``/docs`` (Swagger UI, from the swagger-ui-bundle package: its assets are served
here, so the page needs no network beyond the gateway). Open to everyone, as the probes.
"""

from __future__ import annotations

from collections.abc import Iterable

from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, Response
from swagger_ui_bundle import swagger_ui_path

from .errors import HttpProblem
from .openapi import JSON_TYPE, document_bytes
from .routes import Doc, Need, On, Route

OPEN = Need(On.NOTHING)
# What the page loads (the bundle's other files are not served).
ASSETS = {
    "swagger-ui.css": "text/css",
    "swagger-ui-bundle.js": "text/javascript",
    "favicon-32x32.png": "image/png",
    "favicon-16x16.png": "image/png",
}
# Relative URLs: behind a proxy that adds a path prefix, the page still finds its assets
# and the document (/docs/ redirects to /docs, so the base is always the same).
PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>tmsgate HTTP API</title>
<link rel="stylesheet" href="docs/swagger-ui.css">
<link rel="icon" type="image/png" href="docs/favicon-32x32.png" sizes="32x32">
<link rel="icon" type="image/png" href="docs/favicon-16x16.png" sizes="16x16">
</head>
<body>
<div id="swagger-ui"></div>
<script src="docs/swagger-ui-bundle.js"></script>
<script>
window.ui = SwaggerUIBundle({
  url: "openapi.json",
  dom_id: "#swagger-ui",
  deepLinking: true,
  presets: [SwaggerUIBundle.presets.apis],
  layout: "BaseLayout",
});
</script>
</body>
</html>
"""


class ApiDocs:
    ROUTES = (
        Route(
            "GET",
            "/openapi.json",
            "openapi",
            OPEN,
            Doc(
                "This document",
                {"200": {"description": "OpenAPI 3.0", "content": {JSON_TYPE: {"schema": {}}}}},
            ),
        ),
        Route("GET", "/docs", "docs_page", OPEN),
        Route("GET", "/docs/{asset}", "docs_asset", OPEN),
    )

    def __init__(self, routes: Iterable[Route]) -> None:
        self.document = document_bytes(routes)  # built and encoded once

    async def openapi(self, request: Request) -> Response:
        return Response(self.document, media_type=JSON_TYPE)

    async def docs_page(self, request: Request) -> Response:
        return HTMLResponse(PAGE)

    async def docs_asset(self, request: Request) -> Response:
        name = request.path_params["asset"]
        media = ASSETS.get(name)
        if media is None:
            raise HttpProblem(404, "not_found", f"no such file of the API page: {name[:80]!r}")
        return FileResponse(
            str(swagger_ui_path / name),
            media_type=media,
            headers={"cache-control": "public, max-age=86400"},
        )
