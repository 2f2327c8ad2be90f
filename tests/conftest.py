"""Shared fixtures for the storage tests (tests/test_storage_*.py): a controllable clock and
stores on a real LevelDB directory under tmp_path (and, for the engine-independent
modules, on the memory:// engine too)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator

import pytest
from tmsgate.storage import Store, TopicId, open_store

EPOCH_MS = 1_700_000_000_000


class FakeClock:
    """A clock for ``open_store(url, clock=...)``: epoch milliseconds, moved by hand."""

    def __init__(self, now_ms: int = EPOCH_MS) -> None:
        self.now = now_ms

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> int:
        self.now += ms
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store_url(tmp_path) -> str:
    return f"leveldb://{tmp_path / 'store'}"


# Storage engines the engine-independent store tests run on (their modules say
# ``store_url = any_engine_url``). memory:// keeps only the backend contract (atomic per
# row), so those tests also cover the store without multi-row atomicity.
# hbase:// runs against tests/hbase_standin.py, a Thrift 1 stand-in (not HBase), one
# server for the session and a table prefix per test.
ENGINES = ["leveldb", "memory", "hbase"]


@pytest.fixture(scope="session")
def hbase_standin() -> Iterator[str]:
    pytest.importorskip("happybase", reason="the hbase engine needs tmsgate[hbase]")
    from hbase_standin import running_standin

    with running_standin() as address:
        yield address


@pytest.fixture(params=ENGINES)
def any_engine_url(request: pytest.FixtureRequest, tmp_path) -> Iterator[str]:
    if request.param == "leveldb":
        yield f"leveldb://{tmp_path / 'store'}"
        return
    if request.param == "hbase":
        if request.node.get_closest_marker("slow_on_hbase") and not os.environ.get(
            "TMSGATE_TEST_HBASE_SLOW"
        ):
            pytest.skip("slow on hbase:// (many rows written); TMSGATE_TEST_HBASE_SLOW=1 runs it")
        address = request.getfixturevalue("hbase_standin")
        yield f"hbase://{address}/t{uuid.uuid4().hex[:12]}"
        return
    from tmsgate.storage import memory

    name = f"test-{uuid.uuid4().hex}"
    yield f"memory://{name}"
    memory.drop(name)


@pytest.fixture
def open_test_store(store_url: str, clock: FakeClock) -> Iterator[Callable[..., Store]]:
    """``open_test_store()`` opens the test's store with the fake clock (again, after a
    close); every store it opened is closed at teardown."""
    opened: list[Store] = []

    def _open(**options: object) -> Store:
        options.setdefault("clock", clock)
        store = open_store(store_url, **options)
        opened.append(store)
        return store

    yield _open
    for store in reversed(opened):
        store.close()


@pytest.fixture
def store(open_test_store: Callable[..., Store]) -> Store:
    return open_test_store()


@pytest.fixture
def topic(store: Store) -> TopicId:
    t = TopicId("default", "events")
    store.create_topic(t)
    return t


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """One local[2] SparkSession for every Spark test (it takes seconds to start), with the
    tms data source registered. Spark's Python workers run this interpreter."""
    from tmsgate.pipelines.examples.session import local_session

    session = local_session("tmsgate-tests")
    yield session
    session.stop()
