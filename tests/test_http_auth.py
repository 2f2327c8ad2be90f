"""HTTPS, authentication and ACL authorization of the HTTP API, over real sockets: a live
gateway with a trustme certificate, --http-auth required and ACLs on (User:admin a super
user), and one over plain HTTP. Every route without credentials (401), wrong and refused
credentials, Basic and bearer tokens (revoked, expired, of a deleted user), every entry of
the permission table denied (403, nothing changed) and then granted on the running
gateway, the SDK with a token, and a fuzz of the Authorization header. Time is the
store's clock, moved by the tests: no test waits."""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tmsgate.client import Forbidden, MessagingClient, Unauthorized
from tmsgate.gateway.acls import (
    CLUSTER_NAME,
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from tmsgate.gateway.http.app import openapi_document, route_table
from tmsgate.gateway.http.auth import CACHE_TTL_S
from tmsgate.gateway.http.config import HttpConfig
from tmsgate.gateway.http.routes import On
from tmsgate.gateway.http.server import check_tls
from tmsgate.gateway.kafka import GatewayConfig
from tmsgate.gateway.services import ServeConfig, Services, serve
from tmsgate.gateway.tokens import Tokens, digest_of
from tmsgate.gateway.users import Users
from tmsgate.storage import TopicId

ADMIN = "admin"
PASSWORD = "s3cret-pw"
TOPICS = "/v1/namespaces/{namespace}/topics"
DOCUMENT = json.loads(openapi_document())


class Gateway:
    """A gateway on its own event loop in a thread, with an HTTP config of the test's and
    a store clock the test moves (``advance``)."""

    def __init__(self, store: Path, http: HttpConfig, **kafka: Any) -> None:
        self.offset_ms = 0
        kafka_config = GatewayConfig(host="127.0.0.1", port=0, **kafka)
        self.config = ServeConfig(f"leveldb://{store}", kafka_config, http, clock=self.now_ms)
        self.services: Services | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, daemon=True)

    def now_ms(self) -> int:
        return int(time.time() * 1000) + self.offset_ms

    def advance(self, seconds: float) -> None:
        self.offset_ms += int(seconds * 1000)

    @property
    def url(self) -> str:
        assert self.services is not None and self.services.http_server is not None
        server = self.services.http_server
        return "{}://{}:{}".format(server.scheme, *server.address)

    def __enter__(self) -> Gateway:
        self._thread.start()
        if not self._ready.wait(30) or self._error is not None:
            raise RuntimeError(f"gateway did not start: {self._error!r}")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)

    def _main(self) -> None:
        async def run() -> None:
            self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()

            def ready(services: Services) -> None:
                self.services = services
                self._ready.set()

            await serve(self.config, stop=self._stop, on_ready=ready, handle_signals=False)

        try:
            asyncio.run(run())
        except BaseException as exc:
            self._error = exc
            self._ready.set()

    # --- users, tokens, ACLs on the running gateway's store -------------------------------
    @property
    def store(self) -> Any:
        assert self.services is not None
        return self.services.store

    def add_user(self, name: str | None = None) -> str:
        name = name or f"u-{uuid.uuid4().hex[:8]}"
        Users(self.store).set_password(name, "SCRAM-SHA-256", PASSWORD)
        return name

    def token(self, user: str, ttl_days: float = 30) -> str:
        return Tokens(self.store).issue(user, ttl_days)[0]

    def grant(
        self,
        user: str,
        rtype: ResourceType,
        name: str,
        *ops: Operation,
        pattern: PatternType = PatternType.LITERAL,
    ) -> None:
        assert self.services is not None
        for op in ops:
            self.services.authorizer.create(
                AclBinding(rtype, name, pattern, f"User:{user}", "*", op, Permission.ALLOW)
            )


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def ca_file(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("ca") / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return str(path)


@pytest.fixture(scope="module")
def gw(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    tmp = tmp_path_factory.mktemp("https")
    cert = ca.issue_cert("127.0.0.1", "localhost")
    cert.private_key_pem.write_to_path(str(tmp / "key.pem"))
    (tmp / "cert.pem").write_bytes(b"".join(pem.bytes() for pem in cert.cert_chain_pems))
    http = HttpConfig(
        host="127.0.0.1",
        port=0,
        tls_cert=str(tmp / "cert.pem"),
        tls_key=str(tmp / "key.pem"),
        auth_required=True,
    )
    with Gateway(tmp / "store", http, authorizer=True, super_users=(f"User:{ADMIN}",)) as g:
        g.add_user(ADMIN)
        yield g


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """Plain HTTP, authentication required, ACLs off."""
    tmp = tmp_path_factory.mktemp("plain")
    with Gateway(tmp / "store", HttpConfig(host="127.0.0.1", port=0, auth_required=True)) as g:
        yield g


@pytest.fixture(scope="module")
def anonymous(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """Plain HTTP, no authentication, ACLs on: everyone is User:ANONYMOUS."""
    tmp = tmp_path_factory.mktemp("anonymous")
    with Gateway(tmp / "store", HttpConfig(host="127.0.0.1", port=0), authorizer=True) as g:
        yield g


def basic(user: str, password: str = PASSWORD) -> dict[str, str]:
    raw = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {raw}"}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture(scope="module")
def anon(gw: Gateway, ca_file: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gw.url, verify=_ctx(ca_file), timeout=30) as client:
        yield client


@pytest.fixture(scope="module")
def admin(gw: Gateway, ca_file: str) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=gw.url, verify=_ctx(ca_file), timeout=30, headers=basic(ADMIN)
    ) as client:
        yield client


def _ctx(ca_file: str) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=ca_file)


def client_of(gw: Gateway, ca_file: str, user: str) -> httpx.Client:
    """A client of a user, with a bearer token of its own."""
    return httpx.Client(
        base_url=gw.url, verify=_ctx(ca_file), timeout=30, headers=bearer(gw.token(user))
    )


def refused(resp: httpx.Response, status: int) -> str:
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"] == "application/json"
    body = resp.json()
    assert body["error"] == {401: "unauthorized", 403: "forbidden"}[status]
    if status == 401:
        assert resp.headers["www-authenticate"] == 'Basic realm="tmsgate", Bearer'
    return str(body["message"])


def topic_url(topic: str, action: str = "", namespace: str = "default") -> str:
    base = f"/v1/namespaces/{namespace}/topics/{topic}"
    return f"{base}/{action}" if action else base


def new_topic(admin: httpx.Client, namespace: str = "default", **props: Any) -> str:
    name = f"t-{uuid.uuid4().hex[:10]}"
    assert admin.put(topic_url(name, namespace=namespace), json=props).status_code == 200
    return name


def publish(client: httpx.Client, topic: str, messages: list[str], wp: int | None = None) -> Any:
    body = {"transactionWritePointer": wp, "messages": messages}
    return client.post(topic_url(topic, "publish"), json=body)


def payloads(client: httpx.Client, topic: str, namespace: str = "default") -> list[str]:
    resp = client.post(topic_url(topic, "poll", namespace), json={})
    assert resp.status_code == 200, resp.text
    return [m["payload"] for m in resp.json()]


# --- the table and the open routes --------------------------------------------------------
def test_the_open_routes(gw: Gateway, anon: httpx.Client) -> None:
    assert gw.services is not None and gw.services.http_server is not None
    assert {r.handler for _, r in route_table() if r.need.on is On.NOTHING} == {
        "healthz",
        "readyz",
        "openapi",
        "docs_page",
        "docs_asset",
        # the gateways' calls to each other: the cluster's secret instead of a user's
        # credentials (tests/test_cluster_transactions.py), 404 without --cluster
        "cluster_call",
    }
    stranger = anon.post("/internal/v1/cluster/tx.snapshot", json={})
    assert stranger.status_code == 404, stranger.text


def test_probes_and_description_are_open(anon: httpx.Client) -> None:
    assert anon.get("/healthz").json() == {"status": "ok"}
    assert anon.get("/readyz").json() == {"status": "ready"}
    assert anon.get("/openapi.json").json() == DOCUMENT


def _every_guarded_request() -> list[tuple[str, str]]:
    fill = {"{namespace}": "default", "{topic}": "some-topic", "{wp}": "12345"}
    found = []
    for path, item in DOCUMENT["paths"].items():
        for method, op in item.items():
            if method == "parameters" or op.get("security") == []:
                continue
            for key, value in fill.items():
                path = path.replace(key, value)
            found.append((method.upper(), path))
    return found


@pytest.mark.parametrize(("method", "path"), _every_guarded_request())
def test_every_other_route_needs_credentials(
    gw: Gateway, anon: httpx.Client, admin: httpx.Client, method: str, path: str
) -> None:
    before = admin.get("/v1/namespaces/default/topics").json()
    message = refused(anon.request(method, path, json={}), 401)
    assert "authentication required" in message
    wrong = anon.request(method, path, json={}, headers=basic(ADMIN, "wrong"))
    assert "invalid user name or password" in refused(wrong, 401)
    assert admin.get("/v1/namespaces/default/topics").json() == before  # nothing changed


# --- credentials ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("header", "why"),
    [
        ("Basic " + base64.b64encode(b"nobody:pw").decode(), "invalid user name or password"),
        ("Basic " + base64.b64encode(b"no-colon").decode(), "malformed Basic"),
        ("Basic %%%", "malformed Basic"),
        ("Bearer", "no bearer token"),
        ("Bearer not-a-token", "unknown, revoked or expired"),
        ("Digest username=admin", "neither Basic nor Bearer"),
        ("Bearer " + "x" * 9000, "too long"),
    ],
)
def test_wrong_credentials(anon: httpx.Client, header: str, why: str) -> None:
    resp = anon.get("/v1/namespaces/default/topics", headers={"Authorization": header})
    assert why in refused(resp, 401)


def test_basic_and_bearer_are_accepted(gw: Gateway, anon: httpx.Client) -> None:
    user = gw.add_user()
    gw.grant(user, ResourceType.CLUSTER, CLUSTER_NAME, Operation.DESCRIBE)
    for headers in (basic(user), basic(user), bearer(gw.token(user))):  # the 2nd: cached
        resp = anon.get("/v1/transactions", headers=headers)
        assert resp.status_code == 200, resp.text
    lower = {"Authorization": basic(user)["Authorization"].replace("Basic", "basic")}
    assert anon.get("/v1/transactions", headers=lower).status_code == 200
    refused(anon.get("/v1/transactions", headers=basic(user, PASSWORD + "x")), 401)


def test_basic_is_refused_over_plain_http(plain: Gateway) -> None:
    user = plain.add_user()
    with httpx.Client(base_url=plain.url, timeout=30) as client:
        assert plain.url.startswith("http://")
        message = refused(client.get("/v1/transactions", headers=basic(user)), 401)
        assert "HTTP Basic needs HTTPS" in message
        assert client.get("/v1/transactions", headers=bearer(plain.token(user))).status_code == 200
        refused(client.get("/v1/transactions"), 401)
        assert client.get("/healthz").status_code == 200


def test_without_authentication_everyone_is_anonymous(anonymous: Gateway) -> None:
    topic = "open-topic"
    assert anonymous.services is not None
    anonymous.services.store.create_topic(TopicId("default", topic))
    ignored = {"Authorization": "Bearer whatever"}  # not checked: --http-auth none
    with httpx.Client(base_url=anonymous.url, timeout=30, headers=ignored) as http:
        assert http.get(TOPICS.format(namespace="default")).json() == []
        message = refused(publish(http, topic, ["x"]), 403)
        assert message == f"User:ANONYMOUS may not WRITE TOPIC '{topic}'"
        anonymous.grant("ANONYMOUS", ResourceType.TOPIC, topic, Operation.WRITE)
        assert publish(http, topic, ["x"]).status_code == 200
        assert http.get(TOPICS.format(namespace="default")).json() == [topic]
        assert http.get("/healthz").status_code == 200


def test_create_auto_needs_create_when_the_topic_is_missing(anonymous: Gateway) -> None:
    """?create=auto asks what Kafka's auto-create asks, CREATE on the topic or the
    cluster, besides WRITE; and only when there is a topic to create."""
    topic = f"auto-{uuid.uuid4().hex[:8]}"
    anonymous.grant("ANONYMOUS", ResourceType.TOPIC, topic, Operation.WRITE)
    auto = {"create": "auto"}
    with httpx.Client(base_url=anonymous.url, timeout=30) as http:
        resp = http.post(topic_url(topic, "publish"), params=auto, json={"messages": ["x"]})
        assert refused(resp, 403) == f"User:ANONYMOUS may not CREATE TOPIC '{topic}' (?create=auto)"
        assert anonymous.store.peek_topic(TopicId("default", topic)) is None  # nothing made
        anonymous.grant("ANONYMOUS", ResourceType.TOPIC, topic, Operation.CREATE)
        resp = http.post(topic_url(topic, "publish"), params=auto, json={"messages": ["x"]})
        assert resp.status_code == 200, resp.text
        # Once it exists, WRITE is enough, create=auto or not.
        other = f"auto-{uuid.uuid4().hex[:8]}"
        anonymous.services.store.create_topic(TopicId("default", other))  # type: ignore[union-attr]
        anonymous.grant("ANONYMOUS", ResourceType.TOPIC, other, Operation.WRITE)
        resp = http.post(topic_url(other, "publish"), params=auto, json={"messages": ["y"]})
        assert resp.status_code == 200, resp.text


def test_revoked_expired_and_deleted_users_tokens_are_refused(
    gw: Gateway, anon: httpx.Client
) -> None:
    user = gw.add_user()
    gw.grant(user, ResourceType.CLUSTER, CLUSTER_NAME, Operation.DESCRIBE)
    revoked, kept, short = gw.token(user), gw.token(user), gw.token(user, ttl_days=1)
    for token in (revoked, kept, short):
        assert anon.get("/v1/transactions", headers=bearer(token)).status_code == 200
    [gone] = [t for t in Tokens(gw.store).list(user) if t.digest == digest_of(revoked)]
    assert Tokens(gw.store).revoke(user, gone.id) == [gone]
    gw.advance(CACHE_TTL_S + 1)  # past what the gateway keeps of a checked token
    refused(anon.get("/v1/transactions", headers=bearer(revoked)), 401)
    assert anon.get("/v1/transactions", headers=bearer(kept)).status_code == 200
    gw.advance(86_400)  # a token's own expiry is exact, cached or not
    assert "expired" in refused(anon.get("/v1/transactions", headers=bearer(short)), 401)
    assert anon.get("/v1/transactions", headers=bearer(kept)).status_code == 200
    assert Users(gw.store).delete(user)  # as kafka-configs.sh would, on the running gateway
    gw.advance(CACHE_TTL_S + 1)
    refused(anon.get("/v1/transactions", headers=bearer(kept)), 401)
    refused(anon.get("/v1/transactions", headers=basic(user)), 401)


# --- topics ------------------------------------------------------------------------------------
def test_create_needs_create_on_the_topic_or_the_cluster(
    gw: Gateway, ca_file: str, admin: httpx.Client
) -> None:
    user, other = gw.add_user(), gw.add_user()
    name = f"c-{uuid.uuid4().hex[:8]}"
    with client_of(gw, ca_file, user) as http, client_of(gw, ca_file, other) as http2:
        message = refused(http.put(topic_url(name), json={"ttl": 60}), 403)
        assert message == f"User:{user} may not CREATE TOPIC '{name}'"
        assert name not in admin.get(TOPICS.format(namespace="default")).json()
        gw.grant(user, ResourceType.TOPIC, name, Operation.CREATE)
        assert http.put(topic_url(name), json={"ttl": 60}).status_code == 200
        gw.grant(other, ResourceType.CLUSTER, CLUSTER_NAME, Operation.CREATE)
        assert http2.put(topic_url(name + "-2")).status_code == 200  # any topic
        assert http2.put(topic_url(name + "-3", namespace="elsewhere")).status_code == 200


def test_describe_alter_delete(gw: Gateway, ca_file: str, admin: httpx.Client) -> None:
    user = gw.add_user()
    topic = new_topic(admin, ttl=60)
    with client_of(gw, ca_file, user) as http:
        refused(http.get(topic_url(topic)), 403)
        refused(http.get(topic_url(topic, "offsets")), 403)
        gw.grant(user, ResourceType.TOPIC, topic, Operation.DESCRIBE)
        assert http.get(topic_url(topic)).json()["properties"] == {"ttl": "60"}
        assert http.get(topic_url(topic, "offsets")).status_code == 200

        message = refused(http.put(topic_url(topic, "properties"), json={"ttl": 5}), 403)
        assert "ALTER_CONFIGS TOPIC" in message
        assert admin.get(topic_url(topic)).json()["properties"] == {"ttl": "60"}
        gw.grant(user, ResourceType.TOPIC, topic, Operation.ALTER_CONFIGS)
        assert http.put(topic_url(topic, "properties"), json={"ttl": 5}).status_code == 200

        assert "DELETE TOPIC" in refused(http.delete(topic_url(topic)), 403)
        assert admin.get(topic_url(topic)).status_code == 200
        gw.grant(user, ResourceType.TOPIC, topic, Operation.DELETE)
        assert http.delete(topic_url(topic)).status_code == 200
        # Allowed on a topic that does not exist: the store's answer (Kafka's order too).
        assert http.get(topic_url(topic)).status_code == 404
        refused(http.get(topic_url("never-granted")), 403)  # denied before it is looked up


def test_listing_shows_only_what_the_principal_may_describe(
    gw: Gateway, ca_file: str, admin: httpx.Client
) -> None:
    user = gw.add_user()
    ns = f"ns-{uuid.uuid4().hex[:6]}"
    shown, hidden = new_topic(admin, ns), new_topic(admin, ns)
    parted = new_topic(admin, ns, **{"kafka.partitions": "3"})
    with client_of(gw, ca_file, user) as http:
        assert http.get(TOPICS.format(namespace=ns)).json() == []
        gw.grant(user, ResourceType.TOPIC, f"/{ns}/{shown}", Operation.DESCRIBE)
        gw.grant(user, ResourceType.TOPIC, f"/{ns}/{parted}", Operation.READ)  # implies it
        partitions = [parted, f"{parted}~1", f"{parted}~2"]
        assert http.get(TOPICS.format(namespace=ns)).json() == sorted([shown, *partitions])
        assert hidden in admin.get(TOPICS.format(namespace=ns)).json()


def test_partitions_share_their_topics_acls(gw: Gateway, ca_file: str, admin: httpx.Client) -> None:
    user = gw.add_user()
    topic = f"p-{uuid.uuid4().hex[:8]}"
    assert admin.put(topic_url(topic), json={"kafka.partitions": "3"}).status_code == 200
    with client_of(gw, ca_file, user) as http:
        assert f"TOPIC '{topic}'" in refused(publish(http, f"{topic}~2", ["x"]), 403)
        gw.grant(user, ResourceType.TOPIC, topic, Operation.WRITE, Operation.READ)
        assert publish(http, f"{topic}~2", ["x"]).status_code == 200
        assert payloads(http, f"{topic}~2") == ["x"]
        assert sorted(http.get(TOPICS.format(namespace="default")).json()) == sorted(
            [topic, f"{topic}~1", f"{topic}~2"]
        )


# --- messages ----------------------------------------------------------------------------------
def test_writes_need_write_and_denied_ones_change_nothing(
    gw: Gateway, ca_file: str, admin: httpx.Client
) -> None:
    user = gw.add_user()
    topic = new_topic(admin)
    wp = admin.post("/v1/transactions").json()["writePointer"]
    store_body = {"transactionWritePointer": wp, "messages": ["stored"]}
    with client_of(gw, ca_file, user) as http:
        assert "WRITE TOPIC" in refused(publish(http, topic, ["denied"]), 403)
        refused(http.post(topic_url(topic, "store"), json=store_body), 403)
        done = publish(admin, topic, ["tx"], wp).json()
        refused(http.post(topic_url(topic, "rollback"), json=done), 403)
        assert payloads(admin, topic) == ["tx"]  # nothing published, stored or rolled back

        gw.grant(user, ResourceType.TOPIC, topic, Operation.WRITE)
        assert publish(http, topic, ["allowed"]).status_code == 200
        assert http.post(topic_url(topic, "store"), json=store_body).status_code == 200
        # One row rolled back now: the denied rollback had rolled back nothing.
        assert http.post(topic_url(topic, "rollback"), json=done).json() == {"rolledBack": 1}
        assert payloads(admin, topic) == ["tx", "allowed"]


def test_reads_need_read(gw: Gateway, ca_file: str, admin: httpx.Client) -> None:
    user = gw.add_user()
    topic = new_topic(admin)
    publish(admin, topic, ["m"])
    with client_of(gw, ca_file, user) as http:
        assert "READ TOPIC" in refused(http.post(topic_url(topic, "poll"), json={}), 403)
        refused(http.post(topic_url(topic, "read"), json={"offset": 0}), 403)
        gw.grant(user, ResourceType.TOPIC, topic, Operation.READ)
        assert payloads(http, topic) == ["m"]
        assert http.post(topic_url(topic, "read"), json={"offset": 0}).status_code == 200


def test_another_namespace_is_named_with_it(gw: Gateway, ca_file: str, admin: httpx.Client) -> None:
    user = gw.add_user()
    ns = f"ns-{uuid.uuid4().hex[:6]}"
    topic = new_topic(admin, ns)
    with client_of(gw, ca_file, user) as http:
        gw.grant(user, ResourceType.TOPIC, topic, Operation.READ)  # the Kafka topic's name
        # A prefixed ACL meant for Kafka topics does not reach into another namespace.
        gw.grant(user, ResourceType.TOPIC, ns[:3], Operation.READ, pattern=PatternType.PREFIXED)
        message = refused(http.post(topic_url(topic, "poll", ns), json={}), 403)
        assert f"READ TOPIC '/{ns}/{topic}'" in message
        gw.grant(user, ResourceType.TOPIC, f"/{ns}/{topic}", Operation.READ)
        assert payloads(http, topic, ns) == []


def test_a_revoked_acl_denies_again_without_restart(
    gw: Gateway, ca_file: str, admin: httpx.Client
) -> None:
    user = gw.add_user()
    topic = new_topic(admin)
    with client_of(gw, ca_file, user) as http:
        gw.grant(user, ResourceType.TOPIC, topic, Operation.READ)
        assert payloads(http, topic) == []
        assert gw.services is not None
        gw.services.authorizer.delete(AclFilter(principal=f"User:{user}"))
        refused(http.post(topic_url(topic, "poll"), json={}), 403)
        deny = AclBinding(
            ResourceType.TOPIC,
            topic,
            PatternType.LITERAL,
            f"User:{user}",
            "*",
            Operation.READ,
            Permission.DENY,
        )
        gw.grant(user, ResourceType.TOPIC, topic, Operation.ALL)
        gw.services.authorizer.create(deny)  # a DENY wins over any ALLOW
        refused(http.post(topic_url(topic, "poll"), json={}), 403)
        assert publish(http, topic, ["still writes"]).status_code == 200


# --- transactions ------------------------------------------------------------------------------
def test_transactions_need_the_cluster(gw: Gateway, ca_file: str, admin: httpx.Client) -> None:
    user, idem = gw.add_user(), gw.add_user()
    with client_of(gw, ca_file, user) as http, client_of(gw, ca_file, idem) as http2:
        message = refused(http.post("/v1/transactions"), 403)
        assert message == f"User:{user} may not WRITE or IDEMPOTENT_WRITE CLUSTER 'kafka-cluster'"
        wp = admin.post("/v1/transactions").json()["writePointer"]
        for path in (f"/v1/transactions/{wp}/commit", f"/v1/transactions/{wp}/abort"):
            refused(http.post(path), 403)
        refused(http.get("/v1/transactions"), 403)
        refused(http.get(f"/v1/transactions/{wp}"), 403)
        assert http.post("/v1/transactions/snapshot").status_code == 200  # read pointers only
        assert admin.get(f"/v1/transactions/{wp}").json()["state"] == "in_progress"

        gw.grant(user, ResourceType.CLUSTER, CLUSTER_NAME, Operation.WRITE)
        mine = http.post("/v1/transactions").json()["writePointer"]
        assert http.get(f"/v1/transactions/{mine}").json()["state"] == "in_progress"  # implied
        assert http.get("/v1/transactions").status_code == 200
        assert http.post(f"/v1/transactions/{mine}/commit").status_code == 200
        assert http.post(f"/v1/transactions/{wp}/abort").status_code == 200

        # kafka-acls.sh grants IdempotentWrite on --cluster (it refuses Write there).
        gw.grant(idem, ResourceType.CLUSTER, CLUSTER_NAME, Operation.IDEMPOTENT_WRITE)
        theirs = http2.post("/v1/transactions").json()["writePointer"]
        assert "ALTER CLUSTER" in refused(http2.post(f"/v1/transactions/{theirs}/invalidate"), 403)
        gw.grant(idem, ResourceType.CLUSTER, CLUSTER_NAME, Operation.ALTER)
        assert http2.post(f"/v1/transactions/{theirs}/invalidate").status_code == 200


def test_a_keyed_start_needs_write_on_its_transactional_id(
    gw: Gateway, ca_file: str, admin: httpx.Client
) -> None:
    """A keyed start returns the key's open transaction (whoever started it), so the key is
    guarded as a Kafka transactional id is."""
    user = gw.add_user()
    key = f"orders-{uuid.uuid4().hex[:6]}"
    wp = admin.post("/v1/transactions", json={"key": key}).json()["writePointer"]
    gw.grant(user, ResourceType.CLUSTER, CLUSTER_NAME, Operation.IDEMPOTENT_WRITE)
    with client_of(gw, ca_file, user) as http:
        assert http.post("/v1/transactions").status_code == 200  # unkeyed: the cluster's
        message = refused(http.post("/v1/transactions", json={"key": key}), 403)
        assert message == f"User:{user} may not WRITE TRANSACTIONAL_ID {key!r}"
        gw.grant(user, ResourceType.TRANSACTIONAL_ID, key, Operation.WRITE)
        assert http.post("/v1/transactions", json={"key": key}).json()["writePointer"] == wp


def test_a_commit_manifest_needs_write_on_its_topics(
    gw: Gateway, ca_file: str, admin: httpx.Client
) -> None:
    user = gw.add_user()
    mine, theirs = new_topic(admin), new_topic(admin)
    gw.grant(user, ResourceType.CLUSTER, CLUSTER_NAME, Operation.WRITE)
    gw.grant(user, ResourceType.TOPIC, mine, Operation.WRITE)
    with client_of(gw, ca_file, user) as http:
        wp = http.post("/v1/transactions").json()["writePointer"]
        body = {"transactionWritePointer": wp, "messages": ["a"]}
        receipt = http.post(topic_url(mine, "store"), json=body).json()
        receipt.pop("transactionWritePointer")
        entry = {"topic": mine, "stored": [receipt]}
        manifest = {"publish": [entry, {"topic": theirs, "stored": [receipt]}]}
        commit = f"/v1/transactions/{wp}/commit"
        assert f"WRITE TOPIC '{theirs}'" in refused(http.post(commit, json=manifest), 403)
        assert admin.get(f"/v1/transactions/{wp}").json()["state"] == "in_progress"
        bad = http.post(commit, json={"publish": "nothing"})  # no manifest: the handler's 400
        assert bad.status_code == 400 and "publish" in bad.json()["message"]
        assert http.post(commit, json={"publish": [entry]}).status_code == 200
        assert payloads(admin, mine) == ["a"]


# --- the SDK ------------------------------------------------------------------------------------
def test_sdk_with_a_token_and_basic(gw: Gateway, ca_file: str, admin: httpx.Client) -> None:
    user = gw.add_user()
    topic = new_topic(admin)
    gw.grant(user, ResourceType.TOPIC, topic, Operation.WRITE, Operation.READ)
    gw.grant(user, ResourceType.CLUSTER, CLUSTER_NAME, Operation.WRITE)
    with MessagingClient(gw.url, token=gw.token(user), verify=ca_file) as tms:
        tms.publish(topic, b"sdk")
        with tms.transaction() as tx:
            tx.publish(topic, b"in a transaction")
        assert [m.payload for m in tms.fetch(topic, read_committed=True)] == [
            b"sdk",
            b"in a transaction",
        ]
        with pytest.raises(Forbidden) as denied:
            tms.create_topic("not-mine")
        assert denied.value.status == 403 and "CREATE TOPIC 'not-mine'" in denied.value.message
    with MessagingClient(gw.url, auth=(user, PASSWORD), verify=_ctx(ca_file)) as tms:
        assert len(tms.poll(topic)) == 2
    with MessagingClient(gw.url, verify=ca_file) as tms, pytest.raises(Unauthorized):
        tms.poll(topic)
    with pytest.raises(ValueError):
        MessagingClient(gw.url, token="t", auth=("u", "p"))


def test_the_spark_sources_client_sends_its_token(
    gw: Gateway, ca_file: str, admin: httpx.Client
) -> None:
    """The `tms` data source's options token and caFile (docs/spark.md), through the client
    its driver and executors use."""
    from tmsgate.pipelines.spark.gateway import Gateway as SparkGateway
    from tmsgate.pipelines.spark.gateway import GatewayError
    from tmsgate.pipelines.spark.options import parse

    user = gw.add_user()
    topic = new_topic(admin)
    gw.grant(user, ResourceType.TOPIC, topic, Operation.READ)
    options = parse({"url": gw.url, "token": gw.token(user), "caFile": ca_file})
    with options.gateway(gw.url) as spark_gw:
        assert spark_gw.offsets(topic, None).latest == 0
    with SparkGateway(gw.url, ca_file=ca_file) as spark_gw, pytest.raises(GatewayError) as no:
        spark_gw.offsets(topic, None)
    assert no.value.status == 401


# --- fuzz -------------------------------------------------------------------------------------
_SAFE = st.binary(max_size=120).filter(lambda b: not set(b) & {0, 10, 13})
_HEADERS = st.one_of(
    _SAFE,
    st.builds(lambda b: b"Basic " + b, _SAFE),
    st.builds(lambda b: b"Bearer " + b, _SAFE),
    st.builds(
        lambda u, p: b"Basic " + base64.b64encode(u + b":" + p),
        st.binary(max_size=20),
        st.binary(max_size=20),
    ),
)


def test_fuzzed_authorization_headers_never_get_5xx(gw: Gateway, ca_file: str) -> None:
    with httpx.Client(base_url=gw.url, verify=_ctx(ca_file), timeout=30) as client:

        @given(header=_HEADERS)
        @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
        def run(header: bytes) -> None:
            try:
                resp = client.get("/v1/transactions", headers={b"Authorization": header})
            except httpx.LocalProtocolError:
                return  # httpx itself refuses to send such a header
            assert resp.status_code < 500, resp.text
            if resp.status_code == 401:
                refused(resp, 401)

        run()


# --- the users CLI ------------------------------------------------------------------------------
def test_users_token_command(tmp_path: Path) -> None:
    tmsgate = [str(Path(sys.executable).with_name("tmsgate")), "users"]
    store = ["--store", f"leveldb://{tmp_path / 'store'}"]

    def run(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*tmsgate, *args, *store], input=stdin, capture_output=True, text=True, timeout=60
        )

    assert run("token", "zed").returncode == 2  # no such user
    assert run("add", "zed", "--password-stdin", stdin="pw\n").returncode == 0
    first, second = run("token", "zed"), run("token", "zed", "--ttl-days", "2")
    assert first.returncode == second.returncode == 0
    token = first.stdout.strip()
    assert len(token) == 43 and "expires" in first.stderr
    listed = [json.loads(line) for line in run("tokens", "zed", "--json").stdout.splitlines()]
    assert len(listed) == 2 and {t["user"] for t in listed} == {"zed"}
    assert all(token not in json.dumps(t) for t in listed)  # only ids: the store has no token
    assert run("token", "zed", "--revoke", "000000000000").returncode == 1
    assert run("token", "zed", "--revoke", listed[0]["id"]).returncode == 0
    assert len(run("tokens", "--json").stdout.splitlines()) == 1
    assert "its 1 tokens" in run("delete", "zed").stdout  # a deleted user's tokens go with it
    assert run("tokens").stdout == ""


def test_a_certificate_that_does_not_load_is_an_oserror(tmp_path: Path) -> None:
    (tmp_path / "bad.pem").write_text("not a certificate")
    for cert, key in ((str(tmp_path / "none.pem"),) * 2, (str(tmp_path / "bad.pem"),) * 2):
        with pytest.raises(OSError, match="do not load"):
            check_tls(HttpConfig(tls_cert=cert, tls_key=key))
