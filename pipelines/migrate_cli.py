"""``tmsgate migrate``, the command (pipelines/migrate.py does the planning and copying):
its options, the connections to both sides (a gateway of its own on a loopback port for
``--store``), --dry-run, signals, what it prints and its exit status."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import logging
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

from aiokafka.errors import KafkaError
from tmsgate.storage import StorageError
from tmsgate.storage.leveldb import snapshot_copy

from . import migrate as engine
from .kafka_link import Link, LinkError
from .migrate import (
    MIGRATE_CLIENT_ID,
    TP,
    Copier,
    GroupResult,
    MigrationError,
    Part,
    Plan,
    Throttle,
    copy_groups,
    finish,
    make_plan,
    prepare_target,
)
from .progress import CopyProgress
from .verify import verify

log = logging.getLogger("tmsgate.migrate")
GROUPS_EVERY_S = 10.0  # --follow: how often group offsets are copied meanwhile


@dataclass(frozen=True)
class Options:
    source: str
    target: str | None
    store: str | None
    topics: str
    groups: str
    follow: bool
    finish: bool
    verify: bool
    force: bool
    dry_run: bool
    max_bytes_per_second: int | None = None


class Unreachable(MigrationError):
    """A cluster cannot be reached at all: nothing was started, nothing changed."""


class CopyStopped(MigrationError):
    """The copy had begun when it stopped: running the command again continues it."""


@contextlib.asynccontextmanager
async def embedded_gateway(store_url: str) -> AsyncIterator[str]:
    """A tmsgate gateway on the store, on a loopback port, for ``--store``."""
    from tmsgate.gateway.kafka.config import GatewayConfig
    from tmsgate.gateway.services import ServeConfig, serve

    stop = asyncio.Event()
    ready: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    config = ServeConfig(store_url, GatewayConfig(host="127.0.0.1", port=0))
    task = asyncio.ensure_future(
        serve(config, stop=stop, on_ready=ready.set_result, handle_signals=False)
    )
    await asyncio.wait([task, ready], return_when=asyncio.FIRST_COMPLETED)
    if not ready.done():
        task.result()  # raises why the gateway did not start
    host, port = ready.result().kafka_server.address
    try:
        yield f"{host}:{port}"
    finally:
        stop.set()
        await task


@contextlib.contextmanager
def store_copy(store_url: str, out: Any) -> Iterator[str]:
    """--dry-run --store: a throwaway point-in-time copy of the store to plan against,
    so that the store itself is neither created nor changed (and may be in use)."""
    scheme, _, path = store_url.partition("://")
    if scheme != "leveldb" or not path:
        raise MigrationError(
            f"--dry-run with --store needs a leveldb:// store; for {store_url} run a "
            "gateway on it and use --to"
        )
    where = os.path.abspath(path)
    if not os.path.isdir(where):
        print(f"store {store_url} ({where}) does not exist yet: it would be created", file=out)
        copy = tempfile.mkdtemp(prefix="tmsgate-dry-run-")
    else:
        try:
            copy = snapshot_copy(path)
        except StorageError as exc:
            raise MigrationError(f"cannot read store {store_url}: {exc}") from None
    try:
        yield f"leveldb://{copy}"
    finally:
        shutil.rmtree(copy, ignore_errors=True)


async def _start(link: Link, what: str) -> None:
    """Connect, or say plainly that the cluster cannot be reached and what to check."""
    try:
        await link.start()
    except KafkaError as exc:
        with contextlib.suppress(Exception):
            await link.close()
        raise Unreachable(
            f"cannot reach the {what} at {link.bootstrap}: check the address, that it is "
            f"running and that this machine can connect to it ({exc})"
        ) from None


def _stop_on_signals(stop: asyncio.Event) -> Callable[[], None]:
    """SIGINT/SIGTERM: stop fetching, write what was fetched, copy offsets, end cleanly.
    A second SIGINT interrupts at once (the next run continues where the target ends)."""
    loop = asyncio.get_running_loop()

    def first() -> None:
        log.warning("stopping: writing what was fetched (interrupt again to stop at once)")
        stop.set()
        loop.remove_signal_handler(signal.SIGINT)

    loop.add_signal_handler(signal.SIGINT, first)
    loop.add_signal_handler(signal.SIGTERM, first)

    def restore() -> None:
        loop.remove_signal_handler(signal.SIGINT)
        loop.remove_signal_handler(signal.SIGTERM)

    return restore


async def migrate(opts: Options, out: Any = sys.stdout) -> int:
    async with contextlib.AsyncExitStack() as stack:
        # The source first: a source that cannot be reached leaves a --store untouched.
        source = Link(opts.source, f"{MIGRATE_CLIENT_ID}-source")
        await _start(source, "source cluster (--from)")
        stack.push_async_callback(source.close)
        target_bootstrap = opts.target
        if target_bootstrap is None:
            assert opts.store is not None
            store_url = opts.store
            if opts.dry_run:
                store_url = stack.enter_context(store_copy(opts.store, out))
            target_bootstrap = await stack.enter_async_context(embedded_gateway(store_url))
        target = Link(target_bootstrap, MIGRATE_CLIENT_ID)
        await _start(target, "target gateway (--to)" if opts.target else "store's own gateway")
        stack.push_async_callback(target.close)
        plan = await make_plan(source, target, opts.topics)
        if opts.dry_run:
            _print_plan(plan, out)
            _print_groups(await _planned_groups(source, target, opts, plan), out)
            return 0
        if not plan.parts:
            print(f"no topic of {opts.source} matches {opts.topics!r}", file=out)
        await prepare_target(target, plan)
        try:
            return await _copy(source, target, opts, plan, stack, out)
        except (MigrationError, LinkError, KafkaError) as exc:
            raise CopyStopped(str(exc) or type(exc).__name__) from exc
    return 0


async def _copy(
    source: Link,
    target: Link,
    opts: Options,
    plan: Plan,
    stack: contextlib.AsyncExitStack,
    out: Any,
) -> int:
    """Copy the records, then the group offsets; --finish, --verify."""
    stop = asyncio.Event()
    stack.callback(_stop_on_signals(stop))
    parts = {p.tp: p for p in plan.parts}
    with CopyProgress(plan.parts, out) as progress:
        throttle = Throttle(opts.max_bytes_per_second) if opts.max_bytes_per_second else None
        copier = Copier(source, target, plan.parts, opts.follow, stop, progress, throttle)
        groups_task = None
        if opts.follow:
            groups_task = asyncio.ensure_future(
                _groups_meanwhile(source, target, opts, parts, stop)
            )
        began = time.monotonic()
        try:
            await copier.run()
        finally:
            if groups_task is not None:
                groups_task.cancel()
        seconds = time.monotonic() - began
    results = await copy_groups(source, target, opts.groups, parts, opts.force)
    _print_summary(plan.parts, results, seconds, out)
    topics = sorted({p.topic for p in plan.parts})
    if opts.finish and topics:
        await finish(target, topics)
    if opts.verify:
        ok = await verify(source.bootstrap, target.bootstrap, plan.parts, out)
        return 0 if ok else 1
    return 0


async def _groups_meanwhile(
    source: Link, target: Link, opts: Options, parts: dict[TP, Part], stop: asyncio.Event
) -> None:
    while not stop.is_set():
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), GROUPS_EVERY_S)
        if stop.is_set():
            return
        try:
            for r in await copy_groups(source, target, opts.groups, parts, opts.force):
                if r.copied:
                    log.info("group %s: %d offsets copied", r.group, r.copied)
        except Exception as exc:  # the final copy at the end reports it
            log.warning("copying group offsets failed (tried again later): %s", exc)


def _print_plan(plan: Plan, out: Any) -> None:
    for topic, (count, configs) in plan.create.items():
        print(f"create {topic}: {count} partitions, configs {configs}", file=out)
    for topic, count in plan.grow.items():
        print(f"grow {topic} to {count} partitions", file=out)
    for p in plan.parts:
        todo = max(0, p.end - max(p.position, p.start))
        print(
            f"copy {p.topic}-{p.partition}: source [{p.start}, {p.end}), target at "
            f"{p.position}, ~{todo} offsets to copy",
            file=out,
        )


async def _planned_groups(
    source: Link, target: Link, opts: Options, plan: Plan
) -> list[GroupResult]:
    """The groups a run would copy, as if the copy had reached the source's end."""
    reached = {p.tp: dataclasses.replace(p, position=max(p.position, p.end)) for p in plan.parts}
    return await copy_groups(source, target, opts.groups, reached, opts.force, write=False)


def _print_groups(groups: list[GroupResult], out: Any) -> None:
    if not groups:
        print("no consumer group of the source matches --groups", file=out)
    for g in groups:
        print(f"group {g.group}: {g.copied} offsets to copy {g.note}".rstrip(), file=out)


def _print_summary(parts: list[Part], groups: list[GroupResult], seconds: float, out: Any) -> None:
    records, size = sum(p.records for p in parts), sum(p.size for p in parts)
    print(
        f"copied {records} records ({size / 1e6:.1f} MB) in {seconds:.2f} s "
        f"({records / max(seconds, 1e-9):.0f} records/s); target now at:",
        file=out,
    )
    for p in parts:
        print(f"  {p.topic}-{p.partition}: next offset {p.position}", file=out)
    for g in groups:
        print(f"group {g.group}: {g.copied} offsets copied {g.note}".rstrip(), file=out)


def _positive_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if n <= 0:
        raise argparse.ArgumentTypeError(f"must be above 0: {n}")
    return n


def add_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    m = sub.add_parser(
        "migrate",
        help="copy topics and group offsets from a Kafka cluster, keeping every offset",
        # the engine's summary, without its reStructuredText markup
        description=(engine.__doc__ or "").split("\n\n")[0].replace("``", ""),
    )
    m.add_argument("--from", dest="source", required=True, help="source bootstrap host:port")
    where = m.add_mutually_exclusive_group(required=True)
    where.add_argument("--to", dest="target", help="a running tmsgate gateway's Kafka address")
    where.add_argument("--store", help="a store URL (the gateway stopped), e.g. leveldb:///data")
    m.add_argument("--topics", default=".*", help="regular expression over topic names")
    m.add_argument("--groups", default=".*", help="regular expression over consumer groups")
    m.add_argument("--follow", action="store_true", help="keep copying until interrupted")
    m.add_argument(
        "--finish",
        action="store_true",
        help="at the end, let ordinary producers write to the migrated topics (the cutover)",
    )
    m.add_argument("--verify", action="store_true", help="compare source and target at the end")
    m.add_argument(
        "--force", action="store_true", help="copy offsets of groups active on the source too"
    )
    m.add_argument(
        "--dry-run",
        action="store_true",
        help="list the topics, partitions, offsets and groups a run would copy; writes "
        "nothing (--store: reads a copy of the store, and creates none)",
    )
    m.add_argument(
        "--max-bytes-per-second",
        type=_positive_int,
        metavar="N",
        help="copy at most this many bytes a second on average (as the source sends "
        "them), to leave a source cluster in use room for its own clients",
    )
    m.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR")


def run(args: argparse.Namespace) -> int:
    opts = Options(**{f.name: getattr(args, f.name) for f in dataclasses.fields(Options)})
    started = time.monotonic()
    try:
        code = asyncio.run(migrate(opts))
    except Unreachable as exc:
        log.error("%s", exc)
        return 1
    except CopyStopped as exc:  # the target's offsets are the checkpoint: nothing is lost
        log.error("migration stopped: %s (run it again to continue)", exc)
        return 1
    except (MigrationError, LinkError, KafkaError) as exc:  # before anything was copied
        log.error("migration stopped: %s", exc)
        return 1
    except StorageError as exc:  # --store: the store cannot be opened
        log.error("cannot open store %s: %s (is a gateway running on it?)", args.store, exc)
        return 1
    except KeyboardInterrupt:
        log.error("interrupted: run it again to continue where the target ends")
        return 130
    log.info("migration ran %.1f s", time.monotonic() - started)
    return code
