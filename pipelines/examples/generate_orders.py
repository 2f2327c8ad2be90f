"""Feed the ``orders`` topic: JSON orders ``{"order": id, "customer": c, "amount": cents,
"ts": epoch ms}`` keyed by customer, over the gateway's Kafka listener (confluent-kafka).

    python -m tmsgate.pipelines.examples.generate_orders --bootstrap 127.0.0.1:9092 --count 10000
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections.abc import Sequence

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from rich.progress import Progress

CUSTOMERS = [f"customer-{i}" for i in range(20)]


def ensure_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    if topic in admin.list_topics(timeout=10).topics:
        return
    for fut in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        fut.result(10)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bootstrap", default="127.0.0.1:9092")
    p.add_argument("--topic", default="orders")
    p.add_argument("--partitions", type=int, default=1)
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
    ensure_topic(args.bootstrap, args.topic, args.partitions)
    rng = random.Random(args.seed)
    producer = Producer({"bootstrap.servers": args.bootstrap, "linger.ms": 20, "acks": "all"})
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
            producer.produce(args.topic, json.dumps(order).encode(), key=customer.encode())
            producer.poll(0)
            if i % 1000 == 999:
                progress.update(task, completed=i + 1)
            if args.rate:
                time.sleep(max(0.0, started + (i + 1) / args.rate - time.monotonic()))
        left = producer.flush(30)
        progress.update(task, completed=args.count - left)
    print(
        f"{args.count - left} orders written to {args.topic} in {time.monotonic() - started:.1f}s"
    )
    return 0 if left == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
