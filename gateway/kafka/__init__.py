"""The Kafka wire gateway: an asyncio listener, one handler per Kafka API, the store below.

The names below load on first use: the CLI's read-only commands import a codec or two
of this package (the groups' rows) and need not load the broker and every handler.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .broker import Broker
    from .config import GatewayConfig
    from .server import KafkaServer

__all__ = ["Broker", "GatewayConfig", "KafkaServer"]
_WHERE = {"Broker": ".broker", "GatewayConfig": ".config", "KafkaServer": ".server"}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name], __name__), name)
