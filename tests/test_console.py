"""The console's pages over HTTP (gateway/http/console.py): one live gateway on LevelDB,
authentication required (bearer tokens over plain HTTP) and ACLs on, records produced by
kafka-python, a group's offsets committed by a real consumer. What the pages show, their
4xx pages, and what a principal without rights sees (401, 403, filtered lists). The
browser's view of the same pages: tests/test_console_browser.py."""

from __future__ import annotations

import asyncio
import html
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.structs import OffsetAndMetadata
from tmsgate.gateway.acls import (
    CLUSTER_NAME,
    AclBinding,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from tmsgate.gateway.http.config import HttpConfig
from tmsgate.gateway.http.console import ConsoleHandlers
from tmsgate.gateway.http.lag_history import LagHistory
from tmsgate.gateway.kafka import GatewayConfig
from tmsgate.gateway.services import ServeConfig, Services, serve
from tmsgate.gateway.tokens import Tokens
from tmsgate.gateway.users import Users
from tmsgate.storage import TopicId

ADMIN = "admin"
TOPIC = "console-orders"
SECRET = "console-secret"  # a topic no one but the admin may see
GROUP = "console-group"
XSS = "<script>alert(1)</script>"


class Gateway:
    """A gateway on its own loop in a thread: HTTP with authentication required, ACLs on."""

    def __init__(self, store: Path) -> None:
        # The Kafka listener is PLAINTEXT: its clients (User:ANONYMOUS) fill the store.
        supers = (f"User:{ADMIN}", "User:ANONYMOUS")
        kafka = GatewayConfig(host="127.0.0.1", port=0, authorizer=True, super_users=supers)
        http = HttpConfig(host="127.0.0.1", port=0, auth_required=True)
        self.config = ServeConfig(f"leveldb://{store}", kafka, http)
        self.services: Services | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, daemon=True)

    def _main(self) -> None:
        async def run() -> None:
            self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()

            def ready(services: Services) -> None:
                self.services = services
                self._ready.set()

            await serve(self.config, stop=self._stop, on_ready=ready, handle_signals=False)

        asyncio.run(run())

    def __enter__(self) -> Gateway:
        self._thread.start()
        assert self._ready.wait(30), "the gateway did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None and self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)

    @property
    def services_(self) -> Services:
        assert self.services is not None
        return self.services

    @property
    def url(self) -> str:
        server = self.services_.http_server
        assert server is not None
        return "http://{}:{}".format(*server.address)

    @property
    def bootstrap(self) -> str:
        return "{}:{}".format(*self.services_.kafka_server.address)

    def client(self, user: str) -> httpx.Client:
        store = self.services_.store
        if not Users(store).entries(user):
            Users(store).set_password(user, "SCRAM-SHA-256", "pw-" + user)
        token = Tokens(store).issue(user, 1)[0]
        headers = {"Authorization": f"Bearer {token}"}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)

    def grant(self, user: str, rtype: ResourceType, name: str, *ops: Operation) -> None:
        for op in ops:
            self.services_.authorizer.create(
                AclBinding(
                    rtype, name, PatternType.LITERAL, f"User:{user}", "*", op, Permission.ALLOW
                )
            )

    def sample_lag(self) -> None:
        """One round of the console's lag sampler, now."""
        assert self._loop is not None
        console = self.services_.http_server.app.state.areas[ConsoleHandlers]  # type: ignore[union-attr]
        asyncio.run_coroutine_threadsafe(console.sampler.sample(), self._loop).result(30)


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    with Gateway(tmp_path_factory.mktemp("console") / "store") as g:
        _fill(g)
        yield g


def _fill(g: Gateway) -> None:
    """Two topics with records (a key with markup in it, a binary value, headers), a group
    that committed 3 of TOPIC's 5 records, a TMS transaction that published one record."""
    with g.client(ADMIN) as admin:
        for name in (TOPIC, SECRET):
            resp = admin.put(f"/v1/namespaces/default/topics/{name}", json={"kafka.partitions": 2})
            assert resp.status_code == 200, resp.text
    p = KafkaProducer(bootstrap_servers=g.bootstrap)
    for i in range(4):
        p.send(TOPIC, key=f"key-{i}".encode(), value=f"value-{i}".encode(), partition=0,
               headers=[("trace", b"t-%d" % i)])  # fmt: skip
    p.send(TOPIC, key=XSS.encode(), value=b"\xff\x00binary", partition=0)
    p.send(TOPIC, value=b"on partition 1", partition=1)
    p.send(SECRET, value=b"hidden", partition=0)
    p.flush()
    p.close()
    c = KafkaConsumer(bootstrap_servers=g.bootstrap, group_id=GROUP, enable_auto_commit=False)
    c.commit({TopicPartition(TOPIC, 0): OffsetAndMetadata(3, "", -1)})
    c.commit({TopicPartition(SECRET, 0): OffsetAndMetadata(0, "", -1)})
    c.close()
    g.sample_lag()


@pytest.fixture(scope="module")
def admin(gw: Gateway) -> Iterator[httpx.Client]:
    with gw.client(ADMIN) as client:
        yield client


def text_of(resp: httpx.Response) -> str:
    assert resp.headers["content-type"].startswith("text/html"), resp.headers
    return html.unescape(resp.text)


# --- what the pages show ------------------------------------------------------------------
def test_topics_page_lists_partitions_offsets_sizes_and_configs(admin: httpx.Client) -> None:
    resp = admin.get("/ui")
    assert resp.status_code == 200
    page = text_of(resp)
    assert f'data-topic="{TOPIC}" data-partition="1"' in resp.text
    assert "kafka.partitions=2" in page
    row = resp.text.split(f'data-topic="{TOPIC}" data-partition="0"')[1].split("</tr>")[0]
    cells = [c.split(">")[-1] for c in row.split("</td>")[:-1]]
    # partition, earliest, next, last stable, messages, size; then the configs' cell
    assert cells[-7:-2] == ["0", "0", "5", "5", "5"]
    assert cells[-2].endswith(" B")
    assert "No Kafka transaction is open" in page


def test_groups_page_shows_lag_per_partition_and_a_chart(admin: httpx.Client) -> None:
    resp = admin.get("/ui/groups")
    assert resp.status_code == 200
    page = resp.text
    assert f'data-group="{GROUP}"' in page
    row = page.split(f'<tr data-topic="{TOPIC}" data-partition="0">')[1].split("</tr>")[0]
    assert '<td class="num lag">2</td>' in row  # 5 records, 3 committed
    assert "<polyline" in page and f"{TOPIC}-0 2</text>" in page


def test_topic_page_browses_by_offset_time_and_id(gw: Gateway, admin: httpx.Client) -> None:
    resp = admin.get(f"/ui/topics/{TOPIC}")
    page = text_of(resp)
    for i in range(4):
        assert f"key-{i}" in page and f"value-{i}" in page
    assert "trace" in page and "t-3" in page
    assert "ff 00 62 69 6e 61 72 79" in page  # not UTF-8: shown as hex
    assert XSS not in resp.text and html.escape(XSS) in resp.text  # escaped, never markup
    ids = [part.split("<")[0] for part in resp.text.split('<code class="id">')[1:]]
    assert len(ids) == 5

    by_offset = admin.get(f"/ui/topics/{TOPIC}", params={"offset": 3}).text
    assert _offsets(by_offset) == [3, 4]
    by_id = admin.get(f"/ui/topics/{TOPIC}", params={"id": ids[2]}).text
    assert _offsets(by_id) == [2, 3, 4]
    published = gw.services_.store.read(
        TopicId("default", TOPIC), offset=4, max_messages=1
    ).messages[0]
    by_time = admin.get(f"/ui/topics/{TOPIC}", params={"time": str(published.publish_ts)}).text
    assert 4 in _offsets(by_time) and max(_offsets(by_time)) == 4
    hex_view = admin.get(f"/ui/topics/{TOPIC}", params={"offset": 0, "limit": 1, "view": "hex"})
    assert "76 61 6c 75 65 2d 30" in hex_view.text  # "value-0"
    other = text_of(admin.get(f"/ui/topics/{TOPIC}", params={"partition": 1}))
    assert "on partition 1" in other and "value-0" not in other


def test_open_transactions_and_read_committed(gw: Gateway, admin: httpx.Client) -> None:
    wp = admin.post("/v1/transactions", json={}).json()["writePointer"]
    body = {"transactionWritePointer": wp, "messages": ["uncommitted"]}
    assert admin.post(f"/v1/namespaces/default/topics/{TOPIC}/publish", json=body).is_success
    try:
        overview = admin.get("/ui").text
        assert f"<code>{wp}</code>" in overview and "(HTTP / SDK)" in overview
        uncommitted = admin.get(f"/ui/topics/{TOPIC}", params={"offset": 5}).text
        assert "uncommitted" in uncommitted and f'<td class="num wp">{wp}</td>' in uncommitted
        committed = admin.get(
            f"/ui/topics/{TOPIC}", params={"offset": 5, "isolation": "read_committed"}
        ).text
        assert "uncommitted" not in committed and "held at a transaction" in committed
    finally:
        assert admin.post(f"/v1/transactions/{wp}/abort").is_success


@pytest.mark.parametrize(
    ("path", "params", "status", "says"),
    [
        ("/ui/topics/nope", {}, 404, "does not exist"),
        (f"/ui/topics/{TOPIC}~1", {}, 404, f"partition 1 of topic '{TOPIC}'"),
        ("/ui/topics/bad name!", {}, 400, "topic name"),
        (f"/ui/topics/{TOPIC}", {"offset": "abc"}, 400, "offset 'abc': expected a whole number"),
        (f"/ui/topics/{TOPIC}", {"offset": "99"}, 416, "99"),
        (f"/ui/topics/{TOPIC}", {"partition": "2"}, 400, "partitions 0-1"),
        (f"/ui/topics/{TOPIC}", {"offset": "1", "id": "00"}, 400, "not offset and id"),
        (f"/ui/topics/{TOPIC}", {"id": "xyz"}, 400, "40 hex digits"),
        (f"/ui/topics/{TOPIC}", {"time": "yesterday"}, 400, "ISO 8601"),
        (f"/ui/topics/{TOPIC}", {"limit": "0"}, 400, "limit 0"),
        (f"/ui/topics/{TOPIC}", {"view": "pdf"}, 400, "auto, text, hex"),
    ],
)
def test_bad_requests_get_an_html_page_saying_what_was_wrong(
    admin: httpx.Client, path: str, params: dict[str, str], status: int, says: str
) -> None:
    resp = admin.get(path, params=params)
    assert resp.status_code == status
    message = text_of(resp).split('id="error-message">')[1].split("</p>")[0]
    assert says in message


def test_read_only_and_authenticated(gw: Gateway, admin: httpx.Client) -> None:
    assert admin.post("/ui").status_code == 405
    assert admin.delete(f"/ui/topics/{TOPIC}").status_code == 405
    with httpx.Client(base_url=gw.url) as anonymous:
        for path in ("/ui", "/ui/groups", f"/ui/topics/{TOPIC}"):
            resp = anonymous.get(path)
            assert resp.status_code == 401
            assert "Bearer" in resp.headers["www-authenticate"]


def test_a_principal_sees_only_what_its_acls_allow(gw: Gateway) -> None:
    user = f"viewer-{uuid.uuid4().hex[:6]}"
    with gw.client(user) as http:
        page = text_of(http.get("/ui"))
        assert TOPIC not in page and "2 topic(s) not shown" in page
        assert "need DESCRIBE on the cluster" in page
        assert GROUP not in http.get("/ui/groups").text
        denied = http.get(f"/ui/topics/{TOPIC}")
        assert denied.status_code == 403
        assert f"User:{user} may not DESCRIBE TOPIC '{TOPIC}'" in text_of(denied)

        gw.grant(user, ResourceType.TOPIC, TOPIC, Operation.DESCRIBE)
        gw.grant(user, ResourceType.GROUP, GROUP, Operation.DESCRIBE)
        assert f'data-topic="{TOPIC}"' in http.get("/ui").text
        groups = http.get("/ui/groups").text
        assert f'data-group="{GROUP}"' in groups
        assert f'data-topic="{TOPIC}"' in groups and SECRET not in groups  # its offsets too
        page = text_of(http.get(f"/ui/topics/{TOPIC}"))
        assert "Browsing needs READ" in page and "value-0" not in page
        assert http.get(f"/ui/topics/{TOPIC}", params={"offset": 0}).status_code == 403

        gw.grant(user, ResourceType.TOPIC, TOPIC, Operation.READ)
        gw.grant(user, ResourceType.CLUSTER, CLUSTER_NAME, Operation.DESCRIBE)
        assert "value-0" in text_of(http.get(f"/ui/topics/{TOPIC}", params={"offset": 0}))
        assert "need DESCRIBE on the cluster" not in text_of(http.get("/ui"))
        assert http.get(f"/ui/topics/{SECRET}").status_code == 403


def _offsets(page: str) -> list[int]:
    return [int(part.split('"')[0]) for part in page.split('<tr class="message" data-offset="')[1:]]


def test_lag_history_keeps_a_bounded_window() -> None:
    history = LagHistory(samples_kept=3, max_series=2)
    for i in range(5):
        history.record(i * 5000, [(("g", "t", 0), i), (("g", "t", 1), 10 + i)])
    assert history.of_group("g")[("t", 0)] == [(10_000, 2), (15_000, 3), (20_000, 4)]
    history.record(25_000, [(("g", "t", 2), 1)])  # a third series: past the cap, not kept
    assert sorted(history.of_group("g")) == [("t", 0), ("t", 1)]
    history.record(40_000, [])  # the window (3 samples of 5 s) has passed their last sample
    assert len(history) == 0 and history.of_group("g") == {}


@settings(max_examples=150, deadline=None)
@example(params={"time": str(1 << 64)}, topic=TOPIC)  # was a 500: past the row keys' 64 bits
@example(params={"offset": str(1 << 64)}, topic=TOPIC)
@given(
    params=st.dictionaries(
        st.sampled_from(["partition", "offset", "time", "id", "limit", "view", "isolation"]),
        st.text(max_size=48) | st.integers(-5, 1 << 64).map(str),
        max_size=4,
    ),
    topic=st.sampled_from([TOPIC, SECRET, "nope", f"{TOPIC}~1", "x" * 300, "a b", "café", "%00"]),
)
def test_fuzzed_queries_get_a_page_never_a_server_error(
    admin: httpx.Client, params: dict[str, str], topic: str
) -> None:
    resp = admin.get(f"/ui/topics/{topic}", params=params)
    assert resp.status_code in (200, 400, 404, 416), resp.text
    assert resp.headers["content-type"].startswith("text/html"), (topic, resp.text)
