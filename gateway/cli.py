"""``tmsgate`` command line. ``tmsgate serve`` runs the gateway (Kafka and HTTP) over a store.

Every serve option can also come from the environment (TMSGATE_STORE,
TMSGATE_KAFKA_LISTEN, ...: gateway/serve_options.py), which is how containers configure
it; an option on the command line wins.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import gc
import logging
import sys
from collections.abc import Sequence

from tmsgate.gateway import groups_cli, inspect_cli, serve_options, users_cli
from tmsgate.gateway.serve_options import (
    DEFAULT_HTTP_LISTEN,
    DEFAULT_KAFKA_LISTEN,
    DEFAULT_STORE,
)
from tmsgate.pipelines import migrate_cli, pipeline_cli

__all__ = ["DEFAULT_HTTP_LISTEN", "DEFAULT_KAFKA_LISTEN", "DEFAULT_STORE", "build_parser", "main"]
# `tmsgate --help` shows this as it is: plain text, no reStructuredText markup.
DESCRIPTION = (
    "tmsgate: a Kafka-protocol gateway and the TMS HTTP API over one store. "
    "`tmsgate serve` runs the gateway; the other commands look into a store or manage it."
)
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tmsgate", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True)
    serve_options.add_serve_command(sub)
    inspect_cli.add_commands(sub)
    groups_cli.add_commands(sub)
    migrate_cli.add_commands(sub)
    pipeline_cli.add_commands(sub)
    users_cli.add_commands(sub)
    return parser


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
        produced_keys_bytes=max(0, args.cleaner_produced_keys_mb) << 20,
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
    from tmsgate.gateway.workers import inherited_listeners

    return GatewayConfig(
        host=host,
        port=port,
        listen_fds=inherited_listeners().get("kafka", ()),
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
        transactional_offsets=args.transactional_offsets,
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
    from tmsgate.gateway.workers import LISTED_AFTER_END_MS, inherited_listeners

    http = None
    # A worker of `serve --workers` listens for the others' calls even with --no-http.
    if not args.no_http or inherited_listeners().get("http"):
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
            advertised_url=_http_url(args.http_advertised),
            listen_fds=inherited_listeners().get("http", ()),
            relay_writes=bool(inherited_listeners()),
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
            # A worker of `serve --workers`: its parent starts a dead worker again at
            # the same address, so Metadata keeps naming it meanwhile (cluster.py).
            cluster = ClusterConfig(
                args.node_id,
                args.lease_ms,
                listed_after_end_ms=LISTED_AFTER_END_MS if inherited_listeners() else 0,
            )
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


def serve_command(args: argparse.Namespace, argv: Sequence[str] = ()) -> int:
    from tmsgate.gateway import workers
    from tmsgate.gateway.services import serve
    from tmsgate.gateway.tls import TlsConfigError

    if args.workers > 1:
        return workers.supervise(args, argv)
    workers.die_with_parent()

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
        return serve_command(args, sys.argv[1:] if argv is None else argv)
    if args.command == "groups":
        return groups_cli.run(args)
    if args.command == "migrate":
        return migrate_cli.run(args)
    if args.command == "pipeline":
        return pipeline_cli.run(args)
    if args.command == "users":
        return users_cli.run(args)
    return inspect_cli.run(args)


def _http_url(url: str | None) -> str | None:
    """--http-advertised: an http(s) URL with a host, no path (its trailing / dropped)."""
    if not url:
        return None
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path.strip("/"):
        raise SystemExit(
            f"--http-advertised {url!r}: an http:// or https:// URL with a host and no path"
        )
    return url.rstrip("/")


if __name__ == "__main__":  # how `serve --workers` starts each worker
    sys.exit(main())
