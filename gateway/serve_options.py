"""The options of ``tmsgate serve``, in groups (listeners, store, security, ...), each
with its default and the TMSGATE_* environment variable that sets it.

Every option is declared through ``_Options.add``, which reads the variable and appends
"(default: X; env TMSGATE_Y)" to the help, so no option can forget either (a test
checks that each variable named really sets its option). A value from the environment
goes through the option's ``type`` like one typed on the command line, so a bad one is
an argparse error naming the option, not a traceback; a flag on the command line wins.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from typing import Any

DEFAULT_STORE = "leveldb://./data"
DEFAULT_KAFKA_LISTEN = "127.0.0.1:9092"
DEFAULT_HTTP_LISTEN = "127.0.0.1:8080"
TRUE_WORDS = ("1", "true", "yes", "on")

EPILOG = (
    "Every option can also be set by the TMSGATE_* environment variable its help names "
    "(switches: 1, true, yes or on); an option on the command line wins."
)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    return raw.strip().lower() in TRUE_WORDS


def _one_of(choices: Sequence[str], env: str) -> Callable[[str], str]:
    """A ``type`` that checks the choices itself: argparse checks ``choices`` only for
    values given on the command line, not for a default taken from the environment."""

    def check(value: str) -> str:
        if value not in choices:
            raise argparse.ArgumentTypeError(
                f"{value!r} (from the command line or {env}) is not one of {', '.join(choices)}"
            )
        return value

    check.__name__ = "choice"
    return check


_NUMBERS = {int: "an integer", float: "a number"}


def _number(type_: Callable[[str], Any], env: str) -> Callable[[str], Any]:
    """int or float, with an error that says where a bad value may have come from."""

    def convert(value: str) -> Any:
        try:
            return type_(value)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{value!r} (from the command line or {env}) is not {_NUMBERS[type_]}"
            ) from None

    return convert


class _Options:
    """Adds options to one argument group of the serve parser."""

    def __init__(self, parser: argparse.ArgumentParser, title: str, description: str) -> None:
        self.group = parser.add_argument_group(title, description)

    def add(
        self,
        flag: str,
        env: str,
        default: Any,
        help_: str,
        *,
        type_: Callable[[str], Any] = str,
        choices: Sequence[str] | None = None,
        shown: str | None = None,
        metavar: str | None = None,
    ) -> None:
        """An option taking a value. ``shown``: the default as the help says it, when
        the value itself says little (None: "the listen address")."""
        if metavar is None:
            metavar = _METAVARS.get(type_) or _metavar(flag)  # before type_ is wrapped
        raw = os.environ.get(env)
        # An empty variable means "not set", as a compose file's ``TMSGATE_X: ""`` does.
        value = raw if raw not in (None, "") else default
        if choices is not None:
            type_ = _one_of(choices, env)
        elif type_ in _NUMBERS:
            type_ = _number(type_, env)
        self.group.add_argument(
            flag,
            type=type_,
            choices=choices,
            default=value,
            metavar=None if choices is not None else metavar,
            help=_with(help_, shown if shown is not None else _show(default), env),
        )

    def switch(self, flag: str, env: str, default: bool, help_: str) -> None:
        """An on/off option: ``--flag`` (and ``--no-flag`` when it is on by default)."""
        self.group.add_argument(
            flag,
            action=argparse.BooleanOptionalAction if default else "store_true",
            default=env_bool(env, default),
            help=_with(help_, "on" if default else "off", env),
        )


_METAVARS: dict[Any, str] = {int: "N", float: "X"}


def _worker_count(value: str) -> int:
    """--workers: a count of at least 1, or ``auto`` (one per core this process may use)."""
    if value.strip().lower() == "auto":
        return max(
            1,
            len(os.sched_getaffinity(0))
            if hasattr(os, "sched_getaffinity")
            else os.cpu_count() or 1,
        )
    try:
        count = int(value)
    except ValueError:
        count = 0
    if count < 1:
        raise argparse.ArgumentTypeError(
            f"--workers {value!r} (or TMSGATE_WORKERS): a count of at least 1, or auto"
        )
    return count


def _metavar(flag: str) -> str:
    if flag.endswith("-listen") or flag.endswith("-advertised"):
        return "HOST:PORT"
    if "-tls-" in flag:
        return "FILE"
    return flag.removeprefix("--").split("-")[-1].upper()


def _show(default: Any) -> str:
    return "none" if default is None or default == "" else str(default)


def _with(help_: str, default: str, env: str) -> str:
    return f"{help_} (default: {default}; env {env})".replace("%", "%%")


def add_serve_command(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:  # type: ignore[type-arg]
    s = sub.add_parser(
        "serve",
        help="run the gateway: Kafka and HTTP over one store",
        usage="tmsgate serve [options]",
        description="Run the gateway: the Kafka and HTTP listeners over one store.",
        epilog=EPILOG,
    )
    _listeners(s)
    _store(s)
    _topics(s)
    _security(s)
    _cluster(s)
    _compaction(s)
    _limits(s)
    _observability(s)
    return s


def _listeners(s: argparse.ArgumentParser) -> None:
    o = _Options(s, "listeners", "where the gateway listens")
    o.add(
        "--kafka-listen",
        "TMSGATE_KAFKA_LISTEN",
        DEFAULT_KAFKA_LISTEN,
        "host:port of the Kafka listener",
    )
    o.add(
        "--kafka-advertised",
        "TMSGATE_KAFKA_ADVERTISED",
        None,
        "host:port clients are told to connect to",
        shown="the listen address",
    )
    o.add(
        "--http-listen",
        "TMSGATE_HTTP_LISTEN",
        DEFAULT_HTTP_LISTEN,
        "host:port of the TMS HTTP API and transaction service",
    )
    o.add(
        "--http-advertised",
        "TMSGATE_HTTP_ADVERTISED",
        None,
        "URL the other gateways of a cluster (and 421 answers) give for this gateway's "
        "HTTP listener",
        shown="scheme://advertised host:listen port",
        metavar="URL",
    )
    o.switch("--no-http", "TMSGATE_NO_HTTP", False, "serve Kafka only")


def _store(s: argparse.ArgumentParser) -> None:
    o = _Options(s, "store", "where the data lives, and its upkeep")
    o.add(
        "--store",
        "TMSGATE_STORE",
        DEFAULT_STORE,
        "store URL: leveldb:///abs/path, leveldb://./relative/path, hbase://host:9090/prefix",
        metavar="URL",
    )
    o.add("--namespace", "TMSGATE_NAMESPACE", "default", "TMS namespace holding the Kafka topics")
    o.add(
        "--disk-reserve-mb",
        "TMSGATE_DISK_RESERVE_MB",
        64,
        "space kept back in <store>/reserve for a full disk: below this much free, "
        "writes are refused and the reserve is released so that reads, deletes and a "
        "restart still work; writes resume at three times as much free (0: no reserve)",
        type_=int,
    )
    o.add(
        "--janitor-interval-s",
        "TMSGATE_JANITOR_INTERVAL_S",
        60.0,
        "how often expired and deleted data is removed from disk (0: never)",
        type_=float,
    )


def _topics(s: argparse.ArgumentParser) -> None:
    o = _Options(s, "Kafka topics and transactions", "broker defaults, as Kafka's configs")
    o.switch(
        "--auto-create-topics",
        "TMSGATE_AUTO_CREATE_TOPICS",
        True,
        "Kafka's auto.create.topics.enable",
    )
    o.add(
        "--num-partitions",
        "TMSGATE_NUM_PARTITIONS",
        1,
        "Kafka's num.partitions: partitions of auto-created topics and of CreateTopics "
        "asking for -1",
        type_=int,
    )
    o.add(
        "--max-message-bytes",
        "TMSGATE_MAX_MESSAGE_BYTES",
        1048588,
        "default max.message.bytes of topics",
        type_=int,
    )
    o.add(
        "--transaction-max-timeout-ms",
        "TMSGATE_TRANSACTION_MAX_TIMEOUT_MS",
        900000,
        "the longest transaction.timeout.ms a Kafka transactional producer may ask for "
        "(Kafka's transaction.max.timeout.ms)",
        type_=int,
    )
    o.add(
        "--transactional-id-expiration-ms",
        "TMSGATE_TRANSACTIONAL_ID_EXPIRATION_MS",
        604800000,
        "how long a transactional id with no transaction open is kept after its last use "
        "(Kafka's transactional.id.expiration.ms)",
        type_=int,
    )
    o.add(
        "--transactional-offsets",
        "TMSGATE_TRANSACTIONAL_OFFSETS",
        "commit",
        "when a Kafka transaction's records get their offsets: at the commit (an open "
        "transaction holds no reader back; Produce answers offset -1) or when produced (as "
        "Kafka: Produce answers the offsets, which quixstreams' and MirrorMaker 2's "
        "exactly-once need; read_committed readers wait for open transactions)",
        choices=("commit", "produce"),
    )


def _security(s: argparse.ArgumentParser) -> None:
    o = _Options(s, "security", "TLS, SASL, ACLs and HTTP authentication (docs/security.md)")
    o.add(
        "--kafka-security",
        "TMSGATE_KAFKA_SECURITY",
        "plaintext",
        "the Kafka listener's security protocol; sasl_*: clients log in as a user of "
        "`tmsgate users`; ssl, sasl_ssl: TLS with --tls-cert and --tls-key",
        choices=("plaintext", "ssl", "sasl_plaintext", "sasl_ssl"),
    )
    o.add(
        "--sasl-mechanisms",
        "TMSGATE_SASL_MECHANISMS",
        "SCRAM-SHA-256,SCRAM-SHA-512",
        "Kafka's sasl.enabled.mechanisms, from PLAIN, SCRAM-SHA-256, SCRAM-SHA-512",
    )
    o.add(
        "--connections-max-reauth-ms",
        "TMSGATE_CONNECTIONS_MAX_REAUTH_MS",
        0,
        "a SASL login lasts this long; the client must log in again on its connection "
        "(KIP-368) or is disconnected (Kafka's connections.max.reauth.ms; 0: forever)",
        type_=int,
    )
    o.add("--tls-cert", "TMSGATE_TLS_CERT", None, "PEM certificate chain of the Kafka listener")
    o.add("--tls-key", "TMSGATE_TLS_KEY", None, "PEM private key of --tls-cert")
    o.add(
        "--tls-client-ca",
        "TMSGATE_TLS_CLIENT_CA",
        None,
        "PEM CA certificates: ssl clients must present a certificate it signed, and are "
        "User:<its CN> (Kafka's ssl.client.auth=required)",
    )
    o.add(
        "--authorizer",
        "TMSGATE_AUTHORIZER",
        "none",
        "acl: check Kafka ACLs (kafka-acls.sh) on the Kafka and HTTP listeners "
        "(Kafka's authorizer.class.name)",
        choices=("none", "acl"),
    )
    o.add(
        "--super-users",
        "TMSGATE_SUPER_USERS",
        "",
        "principals allowed everything, e.g. User:admin,User:ops (Kafka's super.users; "
        "',' or ';' between them)",
    )
    o.switch(
        "--allow-everyone-if-no-acl-found",
        "TMSGATE_ALLOW_EVERYONE_IF_NO_ACL_FOUND",
        False,
        "Kafka's allow.everyone.if.no.acl.found: a resource without any ACL is open to all",
    )
    o.add(
        "--http-tls-cert",
        "TMSGATE_HTTP_TLS_CERT",
        None,
        "PEM certificate chain: serve the HTTP API over HTTPS",
    )
    o.add("--http-tls-key", "TMSGATE_HTTP_TLS_KEY", None, "PEM private key of --http-tls-cert")
    o.add(
        "--http-auth",
        "TMSGATE_HTTP_AUTH",
        "none",
        "required: HTTP requests name a user, by HTTP Basic (HTTPS only) or a bearer token "
        "of `tmsgate users token`; /healthz, /readyz and /openapi.json stay open",
        choices=("none", "required"),
    )


def _cluster(s: argparse.ArgumentParser) -> None:
    o = _Options(s, "cluster", "several gateways on one shared store (docs/deploy.md)")
    o.add(
        "--workers",
        "TMSGATE_WORKERS",
        "1",
        "gateway processes over a leveldb:// store, for more cores: 1 is one process; N "
        "runs N workers (a cluster on one machine, the parent owning the store: "
        "docs/architecture.md); auto: one per core",
        type_=_worker_count,
        metavar="N|auto",
    )
    o.switch(
        "--cluster",
        "TMSGATE_CLUSTER",
        False,
        "share the store with other gateways (hbase://): each partition is led by one "
        "gateway at a time, by lease; needs a distinct --node-id each",
    )
    o.add(
        "--node-id",
        "TMSGATE_NODE_ID",
        0,
        "this gateway's Kafka broker id, unique among the gateways of one store",
        type_=int,
    )
    o.add(
        "--lease-ms",
        "TMSGATE_LEASE_MS",
        10000,
        "with --cluster: how long a dead gateway's partitions wait before another takes them over",
        type_=int,
    )


# Log compaction (storage/compaction.py, docs/compaction.md): the cleaner, and the
# broker-level defaults of Kafka's compaction topic configs. cli.py maps them onto
# CompactionSettings.
CLEANER_OPTIONS: tuple[tuple[str, str, str, str], ...] = (
    (
        "--cleaner-buffer-mb",
        "TMSGATE_CLEANER_BUFFER_MB",
        "128",
        "memory for the compaction cleaner's key map; a topic with more keys is cleaned in "
        "several passes (Kafka's log.cleaner.dedupe.buffer.size)",
    ),
    (
        "--cleaner-produced-keys-mb",
        "TMSGATE_CLEANER_PRODUCED_KEYS_MB",
        "64",
        "memory for the keys of the newest batches produced to compacted topics, so that "
        "the cleaner need not read them back from the disk (0: always read)",
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
        "0.2",
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


def _compaction(s: argparse.ArgumentParser) -> None:
    o = _Options(s, "compaction", "the cleaner of compacted topics (docs/compaction.md)")
    for flag, env, default, help_ in CLEANER_OPTIONS:
        fractional = "ratio" in flag or "share" in flag
        o.add(flag, env, default, help_, type_=float if fractional else int)


def _limits(s: argparse.ArgumentParser) -> None:
    o = _Options(s, "limits and tuning", "memory, sizes and timeouts")
    o.add(
        "--max-request-bytes",
        "TMSGATE_MAX_REQUEST_BYTES",
        100 << 20,
        "largest Kafka request accepted (Kafka's socket.request.max.bytes)",
        type_=int,
    )
    o.add(
        "--queued-max-request-bytes",
        "TMSGATE_QUEUED_MAX_REQUEST_BYTES",
        256 << 20,
        "memory for requests being received, all connections together; beyond it sockets "
        "are not read until requests are taken (Kafka's queued.max.request.bytes; "
        "-1: unbounded)",
        type_=int,
    )
    o.add(
        "--idle-timeout-ms",
        "TMSGATE_IDLE_TIMEOUT_MS",
        600000,
        "close Kafka connections idle this long (Kafka's connections.max.idle.ms)",
        type_=int,
    )
    o.add(
        "--fetch-cache-mb",
        "TMSGATE_FETCH_CACHE_MB",
        512,
        "memory for produced record batches kept for consumers near the head (0: off)",
        type_=int,
    )
    o.add(
        "--http-max-body-mb",
        "TMSGATE_HTTP_MAX_BODY_MB",
        64,
        "largest HTTP request body accepted; larger ones get 413",
        type_=int,
    )
    o.add(
        "--http-max-poll",
        "TMSGATE_HTTP_MAX_POLL",
        10000,
        "most messages one HTTP poll returns, whatever its limit asks",
        type_=int,
    )


def _observability(s: argparse.ArgumentParser) -> None:
    o = _Options(s, "observability", "logs and metrics")
    o.add(
        "--metrics-listen",
        "TMSGATE_METRICS_LISTEN",
        None,
        "host:port for Prometheus /metrics",
        shown="off",
    )
    o.add("--log-level", "TMSGATE_LOG_LEVEL", "INFO", "DEBUG, INFO, WARNING, ...")
