"""confluent-kafka's Producer, stamping records sent inside a transaction context.

Imported lazily by tmsgate.client.kafka (``from tmsgate.client.kafka import Producer``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

try:
    import confluent_kafka
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "tmsgate.client.kafka.Producer needs confluent-kafka: pip install confluent-kafka"
    ) from exc

from ._errors import TmsError
from ._scope import Scope, current_transaction
from ._shim import Headers, Tracker, stamped

DeliveryCallback = Callable[[Any, Any], None]


class Producer(confluent_kafka.Producer):  # type: ignore[misc]
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._tms = Tracker()

    def produce(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int = -1,
        on_delivery: DeliveryCallback | None = None,
        timestamp: int = 0,
        headers: Headers = None,
        **kwargs: Any,
    ) -> None:
        callback = on_delivery or kwargs.pop("callback", None)
        args: dict[str, Any] = {"value": value, "key": key, "partition": partition}
        args.update(timestamp=timestamp, **kwargs)
        scope = current_transaction()
        if scope is None:
            if headers is not None:
                args["headers"] = headers
            if callback is not None:
                args["on_delivery"] = callback
            super().produce(topic, **args)
            return
        if self._tms.begin(scope):
            super().flush()
            scope.enlist(self)
        args["headers"] = stamped(headers, scope)
        args["on_delivery"] = self._report(id(scope), callback)
        super().produce(topic, **args)
        self._tms.sent(scope, None)

    def produce_batch(self, topic: str, messages: list[Any], *args: Any, **kwargs: Any) -> int:
        # librdkafka's batch call takes no headers: inside a transaction context it would
        # publish outside the transaction, so it is refused there rather than let through.
        if current_transaction() is not None:
            raise TmsError(
                "produce_batch cannot carry the tms.tx.write_pointer header; "
                "use produce() inside a transaction context"
            )
        return super().produce_batch(topic, messages, *args, **kwargs)

    def _report(self, scope_id: int, user: DeliveryCallback | None) -> DeliveryCallback:
        def on_delivery(err: Any, msg: Any) -> None:
            self._tms.outcome(scope_id, None if err is None else str(err))
            if user is not None:
                user(err, msg)

        return on_delivery

    def tms_flush(self, scope: Scope) -> None:
        left = self.flush()
        sent, failed, delivered = self._tms.finish(scope)
        if left or failed or delivered != len(sent):
            reason = failed[0] if failed else f"{len(sent) - delivered} without a delivery report"
            raise TmsError(
                f"{len(sent) - delivered} of {len(sent)} Kafka records sent under transaction "
                f"{scope.write_pointer} were not acknowledged: {reason}"
            )

    def tms_discard(self, scope: Scope) -> None:
        try:
            self.flush()
        finally:
            self._tms.finish(scope)
