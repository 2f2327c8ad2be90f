"""``tmsgate`` command line. ``tmsgate serve`` runs the gateway (Kafka and HTTP) over a store.

Every flag can also come from the environment (TMSGATE_STORE, TMSGATE_KAFKA_LISTEN,
...), which is how containers configure it; a flag on the command line wins.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import gc
import logging
import os
import sys
from collections.abc import Sequence

from tmsgate.gateway import groups_cli, inspect_cli, users_cli
from tmsgate.pipelines import migrate, pipeline_cli

DEFAULT_STORE = "leveldb://./data"
DEFAULT_KAFKA_LISTEN = "127.0.0.1:9092"
DEFAULT_HTTP_LISTEN = "127.0.0.1:8080"
log = logging.getLogger("tmsgate")


def parse_address(text: str, what: str = "address") -> tuple[str, int]:
    """``host:port``, ``:port`` (all interfaces) or ``[v6addr]:port``."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"{what} must be host:port, got {text!r}")
    host = host.strip("[]") or "0.0.0.0"
    number = int(port)
    if not 0 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"port {number} is out of range")
    return host, number


def _env(name: str, default: str | None) -> str | None:
    return os.environ.get(name, default)


def _env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return raw.strip().lower() in ("1", "true", "yes", "on")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tmsgate", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="run the gateway: Kafka and HTTP over one store")
    s.add_argument(
        "--store",
        default=_env("TMSGATE_STORE", DEFAULT_STORE),
        help="store URL, e.g. leveldb:///var/lib/tmsgate (env TMSGATE_STORE)",
    )
    s.add_argument(
        "--cluster",
        action="store_true",
        default=_env_bool("TMSGATE_CLUSTER", False),
        help="share the store with other gateways (hbase://): each partition is led by one "
        "gateway at a time, by lease; needs a distinct --node-id each (env TMSGATE_CLUSTER)",
    )
    s.add_argument(
        "--node-id",
        type=int,
        default=int(_env("TMSGATE_NODE_ID", "0") or 0),
        help="this gateway's Kafka broker id, unique among the gateways of one store "
        "(default 0) (env TMSGATE_NODE_ID)",
    )
    s.add_argument(
        "--lease-ms",
        type=int,
        default=int(_env("TMSGATE_LEASE_MS", "10000") or 10000),
        help="with --cluster: how long a dead gateway's partitions wait before another takes "
        "them over (default 10000) (env TMSGATE_LEASE_MS)",
    )
    s.add_argument(
        "--kafka-listen",
        default=_env("TMSGATE_KAFKA_LISTEN", DEFAULT_KAFKA_LISTEN),
        help="host:port of the Kafka listener (env TMSGATE_KAFKA_LISTEN)",
    )
    s.add_argument(
        "--kafka-advertised",
        default=_env("TMSGATE_KAFKA_ADVERTISED", None),
        help="host:port clients are told to connect to (default: the listen "
        "address) (env TMSGATE_KAFKA_ADVERTISED)",
    )
    s.add_argument(
        "--kafka-security",
        choices=("plaintext", "ssl", "sasl_plaintext", "sasl_ssl"),
        default=_env("TMSGATE_KAFKA_SECURITY", "plaintext"),
        help="the Kafka listener's security protocol; sasl_*: clients log in as a user of "
        "`tmsgate users`; ssl, sasl_ssl: TLS with --tls-cert and --tls-key "
        "(env TMSGATE_KAFKA_SECURITY)",
    )
    s.add_argument(
        "--connections-max-reauth-ms",
        type=int,
        default=int(_env("TMSGATE_CONNECTIONS_MAX_REAUTH_MS", "0") or 0),
        help="a SASL login lasts this long; the client must log in again on its connection "
        "(KIP-368) or is disconnected (Kafka's connections.max.reauth.ms; 0: forever) "
        "(env TMSGATE_CONNECTIONS_MAX_REAUTH_MS)",
    )
    s.add_argument(
        "--tls-cert",
        default=_env("TMSGATE_TLS_CERT", None),
        help="PEM certificate chain of the Kafka listener (ssl, sasl_ssl) (env TMSGATE_TLS_CERT)",
    )
    s.add_argument(
        "--tls-key",
        default=_env("TMSGATE_TLS_KEY", None),
        help="PEM private key of --tls-cert (env TMSGATE_TLS_KEY)",
    )
    s.add_argument(
        "--tls-client-ca",
        default=_env("TMSGATE_TLS_CLIENT_CA", None),
        help="PEM CA certificates: ssl clients must present a certificate it signed, and "
        "are User:<its CN> (Kafka's ssl.client.auth=required) (env TMSGATE_TLS_CLIENT_CA)",
    )
    s.add_argument(
        "--authorizer",
        choices=("none", "acl"),
        default=_env("TMSGATE_AUTHORIZER", "none"),
        help="acl: check Kafka ACLs (kafka-acls.sh) on the Kafka and HTTP listeners "
        "(Kafka's authorizer.class.name) (env TMSGATE_AUTHORIZER)",
    )
    s.add_argument(
        "--super-users",
        default=_env("TMSGATE_SUPER_USERS", ""),
        help="principals allowed everything, e.g. User:admin,User:ops (Kafka's super.users; "
        "',' or ';' between them) (env TMSGATE_SUPER_USERS)",
    )
    s.add_argument(
        "--allow-everyone-if-no-acl-found",
        action=argparse.BooleanOptionalAction,
        default=_env_bool("TMSGATE_ALLOW_EVERYONE_IF_NO_ACL_FOUND", False),
        help="Kafka's allow.everyone.if.no.acl.found: a resource without any ACL is open "
        "to all (env TMSGATE_ALLOW_EVERYONE_IF_NO_ACL_FOUND)",
    )
    s.add_argument(
        "--sasl-mechanisms",
        default=_env("TMSGATE_SASL_MECHANISMS", "SCRAM-SHA-256,SCRAM-SHA-512"),
        help="Kafka's sasl.enabled.mechanisms, from PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 "
        "(env TMSGATE_SASL_MECHANISMS)",
    )
    s.add_argument(
        "--http-listen",
        default=_env("TMSGATE_HTTP_LISTEN", DEFAULT_HTTP_LISTEN),
        help="host:port of the TMS HTTP API and transaction service (env TMSGATE_HTTP_LISTEN)",
    )
    s.add_argument(
        "--http-tls-cert",
        default=_env("TMSGATE_HTTP_TLS_CERT", None),
        help="PEM certificate chain: serve the HTTP API over HTTPS (env TMSGATE_HTTP_TLS_CERT)",
    )
    s.add_argument(
        "--http-tls-key",
        default=_env("TMSGATE_HTTP_TLS_KEY", None),
        help="PEM private key of --http-tls-cert (env TMSGATE_HTTP_TLS_KEY)",
    )
    s.add_argument(
        "--http-auth",
        choices=("none", "required"),
        default=_env("TMSGATE_HTTP_AUTH", "none"),
        help="required: HTTP requests name a user, by HTTP Basic (HTTPS only) or a bearer "
        "token of `tmsgate users token`; /healthz, /readyz and /openapi.json stay open "
        "(env TMSGATE_HTTP_AUTH)",
    )
    s.add_argument(
        "--no-http",
        action="store_true",
        default=_env_bool("TMSGATE_NO_HTTP", False),
        help="serve Kafka only (env TMSGATE_NO_HTTP)",
    )
    s.add_argument(
        "--http-max-body-mb",
        type=int,
        default=int(_env("TMSGATE_HTTP_MAX_BODY_MB", "64") or 0),
        help="largest HTTP request body accepted; larger ones get 413",
    )
    s.add_argument(
        "--http-max-poll",
        type=int,
        default=int(_env("TMSGATE_HTTP_MAX_POLL", "10000") or 0),
        help="most messages one HTTP poll returns, whatever its limit asks",
    )
    s.add_argument(
        "--namespace",
        default=_env("TMSGATE_NAMESPACE", "default"),
        help="TMS namespace holding the Kafka topics (env TMSGATE_NAMESPACE)",
    )
    s.add_argument(
        "--metrics-listen",
        default=_env("TMSGATE_METRICS_LISTEN", None),
        help="host:port for Prometheus /metrics; off unless given (env TMSGATE_METRICS_LISTEN)",
    )
    s.add_argument(
        "--auto-create-topics",
        action=argparse.BooleanOptionalAction,
        default=_env_bool("TMSGATE_AUTO_CREATE_TOPICS", True),
        help="Kafka's auto.create.topics.enable (env TMSGATE_AUTO_CREATE_TOPICS)",
    )
    s.add_argument(
        "--num-partitions",
        type=int,
        default=int(_env("TMSGATE_NUM_PARTITIONS", "1") or 1),
        help="Kafka's num.partitions: partitions of auto-created topics and of "
        "CreateTopics asking for -1 (env TMSGATE_NUM_PARTITIONS)",
    )
    s.add_argument(
        "--max-request-bytes",
        type=int,
        default=int(_env("TMSGATE_MAX_REQUEST_BYTES", str(100 << 20)) or 0),
        help="largest request accepted (Kafka's socket.request.max.bytes)",
    )
    s.add_argument(
        "--queued-max-request-bytes",
        type=int,
        default=int(_env("TMSGATE_QUEUED_MAX_REQUEST_BYTES", str(256 << 20)) or 0),
        help="memory for requests being received, all connections together; beyond it "
        "sockets are not read until requests are taken (Kafka's queued.max.request.bytes; "
        "-1: unbounded) (env TMSGATE_QUEUED_MAX_REQUEST_BYTES)",
    )
    s.add_argument(
        "--idle-timeout-ms",
        type=int,
        default=int(_env("TMSGATE_IDLE_TIMEOUT_MS", "600000") or 0),
        help="close connections idle this long (connections.max.idle.ms)",
    )
    s.add_argument(
        "--max-message-bytes",
        type=int,
        default=int(_env("TMSGATE_MAX_MESSAGE_BYTES", "1048588") or 0),
        help="default max.message.bytes of topics",
    )
    s.add_argument(
        "--fetch-cache-mb",
        type=int,
        default=int(_env("TMSGATE_FETCH_CACHE_MB", "512") or 0),
        help="memory for produced record batches kept for consumers near the head (0: off)",
    )
    s.add_argument(
        "--janitor-interval-s",
        type=float,
        default=float(_env("TMSGATE_JANITOR_INTERVAL_S", "60") or 0),
        help="how often expired and deleted data is removed from disk (0: never)",
    )
    # Log compaction (storage/compaction.py, docs/compaction.md): the cleaner, and the
    # broker-level defaults of Kafka's compaction topic configs.
    for flag, env, default, help_ in _CLEANER_OPTIONS:
        s.add_argument(
            flag,
            type=float if "ratio" in flag or "share" in flag else int,
            default=(float if "ratio" in flag or "share" in flag else int)(_env(env, default) or 0),
            help=f"{help_} (env {env})",
        )
    s.add_argument(
        "--transaction-max-timeout-ms",
        type=int,
        default=int(_env("TMSGATE_TRANSACTION_MAX_TIMEOUT_MS", "900000") or 0),
        help="the longest transaction.timeout.ms a Kafka transactional producer may ask "
        "for (Kafka's transaction.max.timeout.ms; env TMSGATE_TRANSACTION_MAX_TIMEOUT_MS)",
    )
    s.add_argument(
        "--transactional-id-expiration-ms",
        type=int,
        default=int(_env("TMSGATE_TRANSACTIONAL_ID_EXPIRATION_MS", "604800000") or 0),
        help="how long a transactional id with no transaction open is kept after its last "
        "use (Kafka's transactional.id.expiration.ms; env "
        "TMSGATE_TRANSACTIONAL_ID_EXPIRATION_MS)",
    )
    s.add_argument(
        "--disk-reserve-mb",
        type=int,
        default=int(_env("TMSGATE_DISK_RESERVE_MB", "64") or 0),
        help="space kept back in <store>/reserve for a full disk: below this much free, "
        "writes are refused and the reserve is released so that reads, deletes and a "
        "restart still work; writes resume at three times as much free (0: no reserve) "
        "(env TMSGATE_DISK_RESERVE_MB)",
    )
    s.add_argument(
        "--log-level",
        default=_env("TMSGATE_LOG_LEVEL", "INFO"),
        help="DEBUG, INFO, WARNING, ... (env TMSGATE_LOG_LEVEL)",
    )
    inspect_cli.add_commands(sub)
    groups_cli.add_commands(sub)
    migrate.add_commands(sub)
    pipeline_cli.add_commands(sub)
    users_cli.add_commands(sub)
    return parser


_CLEANER_OPTIONS = (
    (
        "--cleaner-buffer-mb",
        "TMSGATE_CLEANER_BUFFER_MB",
        "128",
        "memory for the compaction cleaner's key map; a topic with more keys is cleaned in "
        "several passes (Kafka's log.cleaner.dedupe.buffer.size)",
    ),
    (
        "--cleaner-backoff-ms",
        "TMSGATE_CLEANER_BACKOFF_MS",
        "15000",
        "pause between the cleaner's runs over the compacted topics (log.cleaner.backoff.ms)",
    ),
    (
        "--cleaner-max-share",
        "TMSGATE_CLEANER_MAX_SHARE",
        "0.5",
        "the most of its time the cleaner works while it runs, sleeping the rest, so that "
        "produce and fetch keep the interpreter lock (1: no pauses)",
    ),
    (
        "--log-cleaner-min-cleanable-ratio",
        "TMSGATE_LOG_CLEANER_MIN_CLEANABLE_RATIO",
        "0.5",
        "default min.cleanable.dirty.ratio of compacted topics",
    ),
    (
        "--log-cleaner-min-compaction-lag-ms",
        "TMSGATE_LOG_CLEANER_MIN_COMPACTION_LAG_MS",
        "0",
        "default min.compaction.lag.ms",
    ),
    (
        "--log-cleaner-max-compaction-lag-ms",
        "TMSGATE_LOG_CLEANER_MAX_COMPACTION_LAG_MS",
        "9223372036854775807",
        "default max.compaction.lag.ms",
    ),
    (
        "--log-cleaner-delete-retention-ms",
        "TMSGATE_LOG_CLEANER_DELETE_RETENTION_MS",
        "86400000",
        "default delete.retention.ms: how long tombstones stay once cleaned",
    ),
    (
        "--log-segment-ms",
        "TMSGATE_LOG_SEGMENT_MS",
        "604800000",
        "default segment.ms: the newest rows published within it are the head, not cleaned",
    ),
    (
        "--log-segment-bytes",
        "TMSGATE_LOG_SEGMENT_BYTES",
        "1073741824",
        "default segment.bytes: the head is the newest rows under this many bytes",
    ),
)
# serve option -> (CompactionSettings field, the topic config it is the default of)
_CLEANER_FIELDS = {
    "log_cleaner_min_cleanable_ratio": ("min_cleanable_dirty_ratio", "min.cleanable.dirty.ratio"),
    "log_cleaner_min_compaction_lag_ms": ("min_compaction_lag_ms", "min.compaction.lag.ms"),
    "log_cleaner_max_compaction_lag_ms": ("max_compaction_lag_ms", "max.compaction.lag.ms"),
    "log_cleaner_delete_retention_ms": ("delete_retention_ms", "delete.retention.ms"),
    "log_segment_ms": ("segment_ms", "segment.ms"),
    "log_segment_bytes": ("segment_bytes", "segment.bytes"),
}


def _compaction(args: argparse.Namespace) -> tuple[object, tuple[tuple[str, str], ...]]:
    """The cleaner's settings, and the topic defaults that differ from Kafka's."""
    from tmsgate.storage.compaction import CompactionSettings

    base = CompactionSettings()
    fields = {f: getattr(args, opt) for opt, (f, _) in _CLEANER_FIELDS.items()}
    settings = CompactionSettings(
        **fields,
        buffer_bytes=max(1, args.cleaner_buffer_mb) << 20,
        backoff_ms=max(100, args.cleaner_backoff_ms),
        max_share=min(max(args.cleaner_max_share, 0.05), 1.0),
    )
    defaults = tuple(
        (name, str(getattr(settings, f)))
        for _, (f, name) in _CLEANER_FIELDS.items()
        if getattr(settings, f) != getattr(base, f)
    )
    return settings, defaults


def _config(args: argparse.Namespace) -> object:
    from tmsgate.gateway.kafka import GatewayConfig

    host, port = parse_address(args.kafka_listen, "--kafka-listen")
    compaction, topic_defaults = _compaction(args)
    adv_host = adv_port = None
    if args.kafka_advertised:
        adv_host, adv_port = parse_address(args.kafka_advertised, "--kafka-advertised")
    return GatewayConfig(
        host=host,
        port=port,
        advertised_host=adv_host,
        advertised_port=adv_port,
        namespace=args.namespace,
        auto_create_topics=args.auto_create_topics,
        default_partitions=args.num_partitions,
        max_request_bytes=args.max_request_bytes,
        queued_max_request_bytes=args.queued_max_request_bytes,
        idle_timeout_s=args.idle_timeout_ms / 1000,
        default_max_message_bytes=args.max_message_bytes,
        fetch_cache_bytes=max(0, args.fetch_cache_mb) << 20,
        janitor_interval_s=args.janitor_interval_s,
        disk_reserve_bytes=max(0, args.disk_reserve_mb) << 20,
        transaction_max_timeout_ms=args.transaction_max_timeout_ms,
        transactional_id_expiration_ms=max(1, args.transactional_id_expiration_ms),
        security_protocol=args.kafka_security.upper(),
        sasl_mechanisms=_sasl_mechanisms(args),
        connections_max_reauth_ms=max(0, args.connections_max_reauth_ms),
        **_tls(args),
        authorizer=args.authorizer == "acl",
        super_users=_principals(args.super_users),
        allow_everyone_if_no_acl_found=args.allow_everyone_if_no_acl_found,
        node_id=args.node_id,
        compaction=compaction,
        topic_defaults=topic_defaults,
    )


def _tls(args: argparse.Namespace) -> dict[str, str | None]:
    if args.kafka_security not in ("ssl", "sasl_ssl"):
        return {}
    if not (args.tls_cert and args.tls_key):
        raise SystemExit(f"--kafka-security {args.kafka_security} needs --tls-cert and --tls-key")
    return {"tls_cert": args.tls_cert, "tls_key": args.tls_key, "tls_client_ca": args.tls_client_ca}


def _principals(raw: str) -> tuple[str, ...]:
    from tmsgate.gateway.acls import AclError, check_principal

    names = tuple(p.strip() for p in raw.replace(";", ",").split(",") if p.strip())
    try:
        return tuple(check_principal(p) for p in names)
    except AclError as exc:
        raise SystemExit(f"--super-users: {exc}") from None


def _sasl_mechanisms(args: argparse.Namespace) -> tuple[str, ...]:
    from tmsgate.gateway.sasl import ALL_MECHANISMS

    if not args.kafka_security.startswith("sasl_"):
        return ()
    names = tuple(m.strip().upper() for m in args.sasl_mechanisms.split(",") if m.strip())
    unknown = [m for m in names if m not in ALL_MECHANISMS]
    if unknown or not names:
        raise SystemExit(
            f"--sasl-mechanisms: {', '.join(unknown) or 'none given'}; "
            f"expected some of {', '.join(ALL_MECHANISMS)}"
        )
    return names


def _run(coro: object) -> None:
    try:
        import uvloop
    except ImportError:  # optional: the stdlib loop works, only slower
        asyncio.run(coro)  # type: ignore[arg-type]
        return
    uvloop.run(coro)  # type: ignore[arg-type]


def _tune_gc() -> None:
    """A produced message allocates a dozen short-lived containers (decoded records, rows,
    futures), so CPython's default first-generation threshold (700) ran a collection every
    few dozen messages, and each older-generation pass walked every long-lived object:
    the Kafka protocol classes, cached batches, topic state. Freezing what start-up
    created and collecting less often took ~1 us of CPU per message off both the event
    loop and the writer thread (docs/benchmarks.md). Cycles are still collected."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 20, 50)


def _tune_malloc() -> None:
    """glibc returns freed memory at the top of its heap to the kernel (trim threshold
    128 KiB) and serves blocks of 128 KiB and more with fresh mmaps. A gateway frees and
    allocates megabytes of 1 KiB values and 1 MiB frames every millisecond, so both meant
    page faults on nearly every allocation: a 1 KiB bytes object cost ~600 ns instead of
    ~140 ns. Keeping the memory (up to the peak in use) costs RSS, not time. Without glibc
    (musl, macOS) this does nothing."""
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return
    m_trim_threshold, m_top_pad, m_mmap_threshold = -1, -2, -3
    mallopt(m_trim_threshold, 512 << 20)
    mallopt(m_top_pad, 64 << 20)
    mallopt(m_mmap_threshold, 32 << 20)  # glibc's maximum


def _serve_config(args: argparse.Namespace) -> object:
    from tmsgate.gateway.services import ServeConfig

    http = None
    if not args.no_http:
        from tmsgate.gateway.http.config import HttpConfig

        host, port = parse_address(args.http_listen, "--http-listen")
        http = HttpConfig(
            host=host,
            port=port,
            max_body_bytes=max(1, args.http_max_body_mb) << 20,
            max_poll=max(1, args.http_max_poll),
            tls_cert=args.http_tls_cert,
            tls_key=args.http_tls_key,
            auth_required=args.http_auth == "required",
        )
        if bool(args.http_tls_cert) != bool(args.http_tls_key):
            raise SystemExit("--http-tls-cert and --http-tls-key go together")
    metrics = (
        parse_address(args.metrics_listen, "--metrics-listen") if args.metrics_listen else None
    )
    cluster = None
    if args.cluster:
        from tmsgate.gateway.cluster import ClusterConfig

        try:
            cluster = ClusterConfig(args.node_id, args.lease_ms)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        if args.store.startswith("leveldb:"):
            raise argparse.ArgumentTypeError(
                "--cluster needs a store several processes can share (hbase://...); "
                "a leveldb:// store is one process's"
            )
    return ServeConfig(
        args.store,
        _config(args),  # type: ignore[arg-type]
        http,
        metrics,
        cluster=cluster,
    )


def serve_command(args: argparse.Namespace) -> int:
    from tmsgate.gateway.services import serve
    from tmsgate.gateway.tls import TlsConfigError

    try:
        config = _serve_config(args)
    except argparse.ArgumentTypeError as exc:
        log.error("%s", exc)
        return 2
    _tune_gc()
    _tune_malloc()
    try:
        _run(serve(config))  # type: ignore[arg-type]
    except OSError as exc:
        log.error("cannot serve: %s", exc)
        return 1
    except TlsConfigError as exc:  # a certificate or key that does not load
        log.error("cannot serve: %s", exc)
        return 2
    except Exception as exc:  # e.g. the store cannot be opened: say so, no traceback
        if type(exc).__module__.startswith("tmsgate.storage"):
            log.error("cannot open store %s: %s", args.store, exc)
            return 1
        raise
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=str(getattr(args, "log_level", "WARNING")).upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if args.command == "serve":
        return serve_command(args)
    if args.command == "groups":
        return groups_cli.run(args)
    if args.command == "migrate":
        return migrate.run(args)
    if args.command == "pipeline":
        return pipeline_cli.run(args)
    if args.command == "users":
        return users_cli.run(args)
    return inspect_cli.run(args)


if __name__ == "__main__":
    sys.exit(main())
