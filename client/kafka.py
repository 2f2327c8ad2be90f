"""Kafka producers that join a TMS transaction context: a two-line change.

    from tmsgate.client.kafka import KafkaProducer   # was: from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=gateway)
    with tms.transaction():                          # new: tms is a MessagingClient
        producer.send("orders", b"order 17 shipped")

Inside a transaction context every record carries header ``tms.tx.write_pointer`` (the
8-byte big-endian write pointer), so the gateway publishes it under that transaction and
read_committed consumers see it only after the commit; the context flushes the producer
and checks every record was acknowledged before it commits (an unacknowledged record
aborts the transaction instead). Outside a context records pass through unchanged.

``Producer`` is the same for confluent-kafka (imported only when asked for).

The gateway takes one write pointer per record batch, so the producer is flushed before
its first record of a transaction: records sent earlier without the header must not share
a batch with stamped ones. For the same reason, do not send with one producer inside and
outside a transaction concurrently from several threads; use a producer per thread.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import kafka

from ._errors import TmsError
from ._scope import Scope, current_transaction
from ._shim import TX_HEADER, Headers, Tracker, stamped

if TYPE_CHECKING:
    from ._confluent import Producer

__all__ = ["TX_HEADER", "KafkaProducer", "Producer"]


class KafkaProducer(kafka.KafkaProducer):  # type: ignore[misc]
    """kafka-python's KafkaProducer, stamping records sent inside a transaction context."""

    def __init__(self, **configs: Any) -> None:
        super().__init__(**configs)
        self._tms = Tracker()

    def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        headers: Headers = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> Any:
        scope = current_transaction()
        if scope is None:
            return super().send(topic, value, key, headers, partition, timestamp_ms)
        if self._tms.begin(scope):
            super().flush()
            scope.enlist(self)
        future = super().send(topic, value, key, stamped(headers, scope), partition, timestamp_ms)
        self._tms.sent(scope, future)
        return future

    def tms_flush(self, scope: Scope) -> None:
        self.flush()
        futures, _, _ = self._tms.finish(scope)
        failed = [f for f in futures if not f.succeeded()]
        if failed:
            raise TmsError(
                f"{len(failed)} of {len(futures)} Kafka records sent under transaction "
                f"{scope.write_pointer} were not acknowledged: {failed[0].exception!r}"
            )

    def tms_discard(self, scope: Scope) -> None:
        try:
            self.flush()
        finally:
            self._tms.finish(scope)


def __getattr__(name: str) -> Any:
    # confluent-kafka is optional: import it only when its shim is used.
    if name == "Producer":
        from ._confluent import Producer

        return Producer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
