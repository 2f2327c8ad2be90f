"""What a SASL login, TLS and ACLs cost: confluent-kafka produce and consume through
gateways with each Kafka security protocol, each a `tmsgate serve` this script starts on a
temporary LevelDB store.

    .venv/bin/python bench/sasl_bench.py [--records 200000] [--runs 3] [--modes a,b,...]

Modes (all by default, in this order):
  plaintext       PLAINTEXT
  sasl_scram      SASL_PLAINTEXT, SCRAM-SHA-256
  sasl_acl        SASL_PLAINTEXT, SCRAM-SHA-256, --authorizer acl (as sasl_ssl_acl below)
  ssl             SSL (server certificate only; TLS 1.3, the client's default)
  sasl_ssl_scram  SASL_SSL, SCRAM-SHA-256
  sasl_ssl_acl    SASL_SSL, SCRAM-SHA-256, --authorizer acl: the bench user is no super
                  user; PREFIXED ALLOW ALL bindings on its topics and groups (made by an
                  admin user through CreateAcls) let it in, so every request is checked

Measured, each the median of --runs runs alternating between the gateways, 1 KiB values,
one partition, a fresh topic per run: produce msgs/s (acks=all, linger.ms=5,
batch.size=1000000, timed from the first send to the last delivery report) and consume
msgs/s (assign + seek to 0, to the end); beside each, the gateway process's CPU time per
message (user + system, from /proc; robust to what else runs on the machine, where the
rates are not). Logins and TLS handshakes happen once per connection, outside the
timing. The TLS certificates are made by trustme (the test extra) in the temporary
directory. Progress goes to stderr, one JSON summary to stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kafka_clients_bench import free_port, stop, wait_for_port

TMSGATE = Path(sys.executable).with_name("tmsgate")
USER, PASSWORD = "bench", "bench-secret"
ADMIN, ADMIN_PASSWORD = "admin", "admin-secret"
VALUE = b"v" * 1024
TOPIC_PREFIX = "sasl-bench-"
GROUP_PREFIX = "bench-"
MODES = ("plaintext", "sasl_scram", "sasl_acl", "ssl", "sasl_ssl_scram", "sasl_ssl_acl")


def add_user(store: str, name: str, password: str) -> None:
    subprocess.run(
        [str(TMSGATE), "users", "add", name, "--password-stdin", "--store", store],
        input=password + "\n", text=True, check=True, capture_output=True,
    )  # fmt: skip


def make_certificates(workdir: Path) -> tuple[str, str, str]:
    """(CA, server chain, server key) PEM files for 127.0.0.1."""
    import trustme  # the test extra: pip install -e '.[test]'

    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    paths = [workdir / n for n in ("ca.pem", "server.pem", "server.key")]
    ca.cert_pem.write_to_path(str(paths[0]))
    paths[1].write_bytes(b"".join(b.bytes() for b in server.cert_chain_pems))
    server.private_key_pem.write_to_path(str(paths[2]))
    return str(paths[0]), str(paths[1]), str(paths[2])


def scram(user: str, password: str) -> dict[str, str]:
    return {"sasl.mechanism": "SCRAM-SHA-256", "sasl.username": user, "sasl.password": password}


@contextlib.contextmanager
def gateway(mode: str) -> Iterator[tuple[dict[str, str], int]]:
    """The client settings for a fresh gateway in ``mode``, and its process id."""
    with tempfile.TemporaryDirectory(prefix="tmsgate-sasl-bench-") as workdir:
        store = f"leveldb://{workdir}/store"
        listen = f"127.0.0.1:{free_port()}"
        conf = {"bootstrap.servers": listen}
        security = {
            "plaintext": "plaintext",
            "sasl_scram": "sasl_plaintext",
            "sasl_acl": "sasl_plaintext",
            "ssl": "ssl",
        }.get(mode, "sasl_ssl")
        extra = ["--kafka-security", security]
        conf["security.protocol"] = security.upper()
        if security.startswith("sasl"):
            add_user(store, USER, PASSWORD)
            extra += ["--sasl-mechanisms", "SCRAM-SHA-256"]
            conf |= scram(USER, PASSWORD)
        if security.endswith("ssl"):
            ca, cert, key = make_certificates(Path(workdir))
            extra += ["--tls-cert", cert, "--tls-key", key]
            conf["ssl.ca.location"] = ca
        if mode.endswith("_acl"):
            add_user(store, ADMIN, ADMIN_PASSWORD)
            extra += ["--authorizer", "acl", "--super-users", f"User:{ADMIN}"]
        cmd = [str(TMSGATE), "serve", "--store", store, "--kafka-listen", listen, "--no-http"]
        proc = subprocess.Popen([*cmd, *extra, "--log-level", "WARNING"])
        try:
            host, port = listen.split(":")
            wait_for_port(proc, (host, int(port)))
            if mode.endswith("_acl"):
                grant(conf | scram(ADMIN, ADMIN_PASSWORD))
            yield conf, proc.pid
        finally:
            stop(proc)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux; 0 elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def grant(admin_conf: dict[str, str]) -> None:
    """ALLOW ALL for the bench user on its topics and groups, IdempotentWrite on the
    cluster (the producer is idempotent by default), through CreateAcls as an admin."""
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )

    def allow(rtype: ResourceType, name: str, pattern: ResourcePatternType, op: AclOperation):
        return AclBinding(rtype, name, pattern, f"User:{USER}", "*", op, AclPermissionType.ALLOW)

    prefixed = ResourcePatternType.PREFIXED
    bindings = [
        allow(ResourceType.TOPIC, TOPIC_PREFIX, prefixed, AclOperation.ALL),
        allow(ResourceType.GROUP, GROUP_PREFIX, prefixed, AclOperation.ALL),
        allow(
            ResourceType.BROKER,
            "kafka-cluster",
            ResourcePatternType.LITERAL,
            AclOperation.IDEMPOTENT_WRITE,
        ),
    ]
    admin = AdminClient(admin_conf)  # referenced until the futures are done
    for future in admin.create_acls(bindings, request_timeout=30).values():
        future.result()


def produce(conf: dict[str, str], topic: str, n: int) -> float:
    p = Producer({**conf, "linger.ms": 5, "batch.size": 1_000_000, "acks": "all"})
    p.produce(topic, VALUE)  # creates the topic and logs in, outside the timing
    assert p.flush(30) == 0
    started = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                p.produce(topic, VALUE)
                break
            except BufferError:
                p.poll(0.01)
    assert p.flush(60) == 0
    return n / (time.perf_counter() - started)


def consume(conf: dict[str, str], topic: str, n: int) -> float:
    c = Consumer(
        {
            **conf,
            "group.id": f"{GROUP_PREFIX}{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "fetch.queue.backoff.ms": 10,  # as kafka_clients_bench.py: no idle second
        }
    )
    c.assign([TopicPartition(topic, 0, 0)])
    got, started = 0, time.perf_counter()
    while got < n + 1:
        # Never ask for more than is left: consume() waits its whole timeout for the rest.
        batch = c.consume(min(10_000, n + 1 - got), 5)
        for m in batch:
            if m.error():
                raise RuntimeError(f"consume failed: {m.error()}")
        got += len(batch)
    rate = (n + 1) / (time.perf_counter() - started)
    c.close()
    return rate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--modes", default=",".join(MODES), help=f"some of {', '.join(MODES)}")
    args = ap.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if unknown := set(modes) - set(MODES):
        ap.error(f"unknown modes {sorted(unknown)}; expected some of {', '.join(MODES)}")
    samples: dict[str, list[float]] = {}
    for run in range(args.runs):
        for mode in modes:
            with gateway(mode) as (conf, pid):
                topic = f"{TOPIC_PREFIX}{uuid.uuid4().hex[:8]}"
                for what, fn in (("produce", produce), ("consume", consume)):
                    cpu = cpu_seconds(pid)
                    rate = fn(conf, topic, args.records)
                    cpu_us = (cpu_seconds(pid) - cpu) / args.records * 1e6
                    samples.setdefault(f"{mode}_{what}", []).append(rate)
                    samples.setdefault(f"{mode}_{what}_gateway_cpu_us", []).append(cpu_us)
                    print(
                        f"run {run + 1} {mode} {what}: {rate:,.0f} msgs/s, "
                        f"gateway {cpu_us:.2f} us CPU/msg",
                        file=sys.stderr,
                    )
    report = {
        k: {"median": _round(statistics.median(v)), "runs": [_round(x) for x in v]}
        for k, v in samples.items()
    }
    print(json.dumps({"records": args.records, **report}, indent=2))


def _round(x: float) -> float:
    return round(x) if x >= 100 else round(x, 2)


if __name__ == "__main__":
    main()
