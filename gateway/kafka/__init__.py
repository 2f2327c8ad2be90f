"""The Kafka wire gateway: an asyncio listener, one handler per Kafka API, the store below."""

from .broker import Broker
from .config import GatewayConfig
from .server import KafkaServer

__all__ = ["Broker", "GatewayConfig", "KafkaServer"]
