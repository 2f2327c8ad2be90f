"""The TMS HTTP API (the seed's REST API and a transaction service), served beside Kafka
over the same store: a Starlette app run by uvicorn inside the gateway's event loop."""

from .app import build_app
from .config import HttpConfig
from .server import HttpServer

__all__ = ["HttpConfig", "HttpServer", "build_app"]
