"""Feed the ``orders`` topic with JSON orders, keyed by customer, through the gateway's Kafka
listener (confluent-kafka).

Each order is ``{"order": id, "customer": c, "amount": cents, "ts": epoch ms}``. The topic is
created with ``--partitions`` if it does not exist. Also runs as a module:

    python -m tmsgate.pipelines.examples.generate_orders --bootstrap 127.0.0.1:9092 --count 10000
"""

from __future__ import annotations

import json
import random
import sys
import time
from collections.abc import Sequence
from typing import Any

from rich.progress import Progress

from . import parser, rate

CUSTOMERS = [f"customer-{i}" for i in range(20)]


class Deliveries:
    """The producer's delivery reports: what the gateway acknowledged, and the first error."""

    def __init__(self) -> None:
        self.written = 0
        self.failed = 0
        self.first_error: str | None = None

    def __call__(self, err: Any, _msg: Any) -> None:
        if err is None:
            self.written += 1
            return
        self.failed += 1
        self.first_error = self.first_error or str(err)


def ensure_topic(bootstrap: str, topic: str, partitions: int) -> int:
    """Create ``topic`` with ``partitions`` unless it exists; -> its partition count."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    known = admin.list_topics(timeout=10).topics
    if topic in known:
        return len(known[topic].partitions)
    for fut in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        fut.result(10)
    return partitions


def main(argv: Sequence[str] | None = None) -> int:
    p = parser("generate-orders", __doc__)
    p.add_argument("--bootstrap", default="127.0.0.1:9092", help="the gateway's Kafka listener")
    p.add_argument("--topic", default="orders")
    p.add_argument("--partitions", type=int, default=1, help="when the topic is created")
    p.add_argument("--count", type=int, default=10_000)
    p.add_argument("--rate", type=float, default=0, help="orders per second (0: as fast as it can)")
    p.add_argument(
        "--spacing-ms",
        type=int,
        default=0,
        help="event time: orders this many ms apart from now (0: each order's send time)",
    )
    p.add_argument("--seed", type=int, default=7)
    args = p.parse_args(argv)

    from confluent_kafka import Producer

    partitions = ensure_topic(args.bootstrap, args.topic, args.partitions)
    rng = random.Random(args.seed)
    producer = Producer({"bootstrap.servers": args.bootstrap, "linger.ms": 20, "acks": "all"})
    deliveries = Deliveries()
    started = time.monotonic()
    first_ms = int(time.time() * 1000)
    with Progress() as progress:
        task = progress.add_task(f"orders -> {args.topic}", total=args.count)
        for i in range(args.count):
            customer = rng.choice(CUSTOMERS)
            order = {"order": i, "customer": customer, "amount": rng.randint(100, 50_000)}
            order["ts"] = (
                first_ms + i * args.spacing_ms if args.spacing_ms else int(time.time() * 1000)
            )
            producer.produce(
                args.topic, json.dumps(order).encode(), customer.encode(), on_delivery=deliveries
            )
            producer.poll(0)
            if i % 1000 == 999:
                progress.update(task, completed=deliveries.written)
            if args.rate:
                time.sleep(max(0.0, started + (i + 1) / args.rate - time.monotonic()))
        unsent = producer.flush(30)
        progress.update(task, completed=deliveries.written)
    seconds = time.monotonic() - started
    print(
        f"{deliveries.written} orders written to {args.topic} ({partitions} partition"
        f"{'s' if partitions != 1 else ''}) in {seconds:.1f}s, "
        f"{rate(deliveries.written, seconds, 'orders')}"
    )
    if deliveries.failed or unsent:
        print(
            f"{deliveries.failed} orders refused ({deliveries.first_error}), "
            f"{unsent} still unsent after 30 s",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
