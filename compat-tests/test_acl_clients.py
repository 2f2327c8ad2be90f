"""Kafka ACLs with kcat and the Java client (kafka-clients 3.9.0) against `tmsgate serve
--kafka-security sasl_plaintext --authorizer acl --super-users User:admin`, users made by
`tmsgate users add` on the stopped store: the Java AdminClient's createAcls / describeAcls /
deleteAcls (a small driver compiled here, AclAdmin), and producers and consumers refused
with Kafka's errors until an ACL lets them, then served. (kafka-python, aiokafka and
confluent-kafka are in tests/test_acl_python_clients.py.)"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from compat_helpers import free_port, port_open, require_tool, wait_until

pytestmark = pytest.mark.timeout(180)
ADMIN = "admin"
USERS = [ADMIN, "ann", "ben", "cid", "eli", "fay"]  # each test its own topics
MECHANISMS = "SCRAM-SHA-256,SCRAM-SHA-512,PLAIN"
CLUSTER = "kafka-cluster"


def password(user: str) -> str:
    return f"{user}-secret"


def uid() -> str:
    return uuid.uuid4().hex[:8]


class AclGateway:
    """`tmsgate serve` with SASL and ACLs over its own store, for this module."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.store = f"leveldb://{workdir / 'store'}"
        self.port = free_port()
        self.log_path = workdir / "gateway.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        tmsgate = Path(sys.executable).with_name("tmsgate")
        env = {k: v for k, v in os.environ.items() if not k.startswith("TMSGATE_")}
        env["TMSGATE_GROUP_INITIAL_REBALANCE_DELAY_MS"] = "0"
        for user in USERS:  # on the stopped store, as an operator does
            subprocess.run(
                [str(tmsgate), "users", "add", user, "--password-stdin", "--store", self.store],
                input=password(user) + "\n",
                text=True,
                check=True,
                capture_output=True,
                env=env,
                timeout=60,
            )
        cmd = [
            str(tmsgate), "serve", "--store", self.store, "--kafka-listen", self.bootstrap,
            "--no-http", "--kafka-security", "sasl_plaintext", "--sasl-mechanisms", MECHANISMS,
            "--authorizer", "acl", "--super-users", f"User:{ADMIN}",
        ]  # fmt: skip
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        wait_until(
            lambda: (
                self.proc is not None
                and self.proc.poll() is None
                and port_open("127.0.0.1", self.port)
            ),
            20,
            f"the gateway to listen on {self.bootstrap} (log: {self.log_path})",
        )

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)

    def log_tail(self) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")[-4000:]
        return "<no log>"


@pytest.fixture(scope="module")
def acl_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AclGateway]:
    if os.environ.get("TMSGATE_COMPAT_BOOTSTRAP"):
        pytest.skip("needs a gateway started by the suite (TMSGATE_COMPAT_BOOTSTRAP is set)")
    gw = AclGateway(tmp_path_factory.mktemp("acl-compat"))
    gw.start()
    try:
        yield gw
    finally:
        gw.stop()


# --- the super user's side (confluent-kafka: the ACLs and topics the clients meet) -------
def confluent_conf(gw: AclGateway, user: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": gw.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": user,
        "sasl.password": password(user),
    }


class Super:
    def __init__(self, gw: AclGateway) -> None:
        from confluent_kafka.admin import AdminClient

        self.gw = gw
        self.admin = AdminClient(confluent_conf(gw, ADMIN))

    def topic(self) -> str:
        from confluent_kafka.admin import NewTopic

        name = f"acl-{uid()}"
        for fut in self.admin.create_topics([NewTopic(name, 1, 1)]).values():
            fut.result(20)
        return name

    def grant(self, user: str, rtype: str, name: str, op: str, **kw: Any) -> None:
        from confluent_kafka.admin import (
            AclBinding,
            AclOperation,
            AclPermissionType,
            ResourcePatternType,
            ResourceType,
        )

        b = AclBinding(
            ResourceType[rtype],
            name,
            ResourcePatternType[kw.get("pattern", "LITERAL")],
            f"User:{user}",
            "*",
            AclOperation[op],
            AclPermissionType[kw.get("perm", "ALLOW")],
        )
        assert self.admin.create_acls([b])[b].result(20) is None

    def produce(self, topic: str, *values: bytes) -> None:
        from confluent_kafka import Producer

        p = Producer(confluent_conf(self.gw, ADMIN))
        for v in values:
            p.produce(topic, v)
        assert p.flush(20) == 0

    def end_offset(self, topic: str) -> int:
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer({**confluent_conf(self.gw, ADMIN), "group.id": f"su-{uid()}"})
        try:
            return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=20)[1]
        finally:
            c.close()


@pytest.fixture(scope="module")
def su(acl_gateway: AclGateway) -> Super:
    pytest.importorskip("confluent_kafka")
    return Super(acl_gateway)


# --- kcat --------------------------------------------------------------------------------
def kcat(gw: AclGateway, user: str, *args: str, stdin: str = "", timeout: float = 30) -> Any:
    """kcat logged in as ``user``; a run still going after ``timeout`` is stopped and
    returned with returncode None (what a consumer that never reports an error does)."""
    path = require_tool("kcat", "install the Debian package kcat")
    cmd = [
        path, "-b", gw.bootstrap,
        "-X", "security.protocol=SASL_PLAINTEXT",
        "-X", "sasl.mechanism=SCRAM-SHA-512",
        "-X", f"sasl.username={user}",
        "-X", f"sasl.password={password(user)}",
        *args,
    ]  # fmt: skip
    try:
        return subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
        err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else exc.stderr or ""
        return subprocess.CompletedProcess(cmd, None, out, err)  # type: ignore[arg-type]


def kcat_read(gw: AclGateway, user: str, topic: str, timeout: float = 30) -> Any:
    return kcat(gw, user, "-C", "-t", topic, "-o", "beginning", "-e", timeout=timeout)


def test_kcat_produce_needs_topic_write(acl_gateway: AclGateway, su: Super) -> None:
    topic = su.topic()
    su.grant("ann", "TOPIC", topic, "DESCRIBE")
    lines = "".join(f"v{i}\n" for i in range(5))
    refused = kcat(acl_gateway, "ann", "-P", "-t", topic, stdin=lines)
    assert refused.returncode != 0, refused
    assert "Topic authorization failed" in refused.stderr, refused.stderr
    assert su.end_offset(topic) == 0  # nothing written
    su.grant("ann", "TOPIC", topic, "WRITE")
    done = kcat(acl_gateway, "ann", "-P", "-t", topic, stdin=lines)
    assert done.returncode == 0, done.stderr
    read = kcat_read(acl_gateway, ADMIN, topic)
    assert read.returncode == 0 and read.stdout.split() == [f"v{i}" for i in range(5)]


def test_kcat_lists_only_describable_topics(acl_gateway: AclGateway, su: Super) -> None:
    seen, by_read, hidden = su.topic(), su.topic(), su.topic()
    su.grant("ben", "TOPIC", seen, "DESCRIBE")
    su.grant("ben", "TOPIC", by_read, "READ")  # Read implies Describe
    done = kcat(acl_gateway, "ben", "-L", "-J")
    assert done.returncode == 0, done.stderr
    listed = {t["topic"] for t in json.loads(done.stdout)["topics"]}
    assert {seen, by_read} <= listed and hidden not in listed
    done = kcat(acl_gateway, "ben", "-L", "-J", "-t", hidden)
    [t] = json.loads(done.stdout)["topics"]
    assert "authorization" in json.dumps(t).lower(), t


def test_kcat_consumes_with_topic_read(acl_gateway: AclGateway, su: Super) -> None:
    topic = su.topic()
    su.produce(topic, b"a", b"b")
    su.grant("cid", "TOPIC", topic, "READ")
    # librdkafka asks for a coordinator of its default group even when not subscribing.
    su.grant("cid", "GROUP", "*", "READ")
    read = kcat_read(acl_gateway, "cid", topic)
    assert read.returncode == 0, read.stderr
    assert read.stdout.split() == ["a", "b"]


def test_kcat_consume_without_read_is_refused(acl_gateway: AclGateway, su: Super) -> None:
    """(kcat's librdkafka fetches by topic name, Fetch v11: Kafka's error reaches it.)"""
    topic = su.topic()
    su.produce(topic, b"secret")
    su.grant("cid", "TOPIC", topic, "DESCRIBE")
    su.grant("cid", "GROUP", "*", "READ")
    read = kcat_read(acl_gateway, "cid", topic, timeout=8)
    assert "secret" not in read.stdout
    assert read.returncode not in (0, None), read
    assert "Topic authorization failed" in read.stderr, read.stderr


def test_kcat_group_consumer_needs_group_read(acl_gateway: AclGateway, su: Super) -> None:
    topic, group = su.topic(), f"g-{uid()}"
    su.produce(topic, b"a", b"b")
    su.grant("ann", "TOPIC", topic, "READ")
    args = ["-G", group, "-X", "auto.offset.reset=earliest", "-e", topic]
    refused = kcat(acl_gateway, "ann", *args, timeout=15)
    assert "a" not in refused.stdout.split()
    # The code is Kafka's (GROUP_AUTHORIZATION_FAILED); the words differ: Kafka 4.1 sends
    # no message (librdkafka prints "Group authorization failed"), the gateway
    # "Authorization failed.".
    assert "authorization failed" in refused.stderr.lower(), refused
    su.grant("ann", "GROUP", group, "READ")
    done = kcat(acl_gateway, "ann", *args, timeout=30)
    assert done.stdout.split() == ["a", "b"], done


# --- the Java client ---------------------------------------------------------------------
ACL_ADMIN = r"""
import java.time.Duration;
import java.util.*;
import java.util.concurrent.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.common.acl.*;
import org.apache.kafka.common.resource.*;

// AclAdmin <bootstrap> <command>:<spec>[;<spec>...] ... [--prop key=value]...
// command: create (bindings), describe (one filter), delete (filters), run in order;
// spec: TYPE,NAME,PATTERN,PRINCIPAL,HOST,OPERATION,PERMISSION ("-": null in a filter).
// One JSON line per command: {"created":[true|{"error":..},...]}, {"acls":[...]},
// {"deleted":[[...],...]} or {"error":"<ExceptionClass>","message":...}.
public final class AclAdmin {
    static String q(String s) {
        if (s == null) return "null";
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') b.append('\\').append(c);
            else if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
            else b.append(c);
        }
        return b.append('"').toString();
    }
    static String nul(String s) { return s.equals("-") ? null : s; }
    static AclBinding binding(String spec) {
        String[] f = spec.split(",", -1);
        return new AclBinding(
            new ResourcePattern(ResourceType.valueOf(f[0]), f[1], PatternType.valueOf(f[2])),
            new AccessControlEntry(f[3], f[4], AclOperation.valueOf(f[5]),
                                   AclPermissionType.valueOf(f[6])));
    }
    static AclBindingFilter filter(String spec) {
        String[] f = spec.split(",", -1);
        return new AclBindingFilter(
            new ResourcePatternFilter(ResourceType.valueOf(f[0]), nul(f[1]),
                                      PatternType.valueOf(f[2])),
            new AccessControlEntryFilter(nul(f[3]), nul(f[4]), AclOperation.valueOf(f[5]),
                                         AclPermissionType.valueOf(f[6])));
    }
    static String json(AclBinding b) {
        return "[" + q(b.pattern().resourceType().name()) + "," + q(b.pattern().name()) + ","
            + q(b.pattern().patternType().name()) + "," + q(b.entry().principal()) + ","
            + q(b.entry().host()) + "," + q(b.entry().operation().name()) + ","
            + q(b.entry().permissionType().name()) + "]";
    }
    static String error(Throwable t) {
        while (t instanceof ExecutionException && t.getCause() != null) t = t.getCause();
        return "{\"error\":" + q(t.getClass().getSimpleName()) + ",\"message\":"
            + q(String.valueOf(t.getMessage())) + "}";
    }
    static String run(Admin admin, String command, List<String> specs) throws Exception {
        try {
            switch (command) {
                case "create": {
                    List<AclBinding> bs = new ArrayList<>();
                    for (String s : specs) bs.add(binding(s));
                    Map<AclBinding, org.apache.kafka.common.KafkaFuture<Void>> r =
                        admin.createAcls(bs).values();
                    List<String> parts = new ArrayList<>();
                    for (AclBinding b : bs) {
                        try {
                            r.get(b).get(20, TimeUnit.SECONDS);
                            parts.add("true");
                        } catch (ExecutionException e) {
                            parts.add(error(e));
                        }
                    }
                    return "{\"created\":[" + String.join(",", parts) + "]}";
                }
                case "describe": {
                    Collection<AclBinding> got = admin.describeAcls(filter(specs.get(0)))
                        .values().get(20, TimeUnit.SECONDS);
                    List<String> parts = new ArrayList<>();
                    for (AclBinding b : got) parts.add(json(b));
                    Collections.sort(parts);
                    return "{\"acls\":[" + String.join(",", parts) + "]}";
                }
                case "delete": {
                    List<AclBindingFilter> fs = new ArrayList<>();
                    for (String s : specs) fs.add(filter(s));
                    List<String> parts = new ArrayList<>();
                    for (AclBinding b : admin.deleteAcls(fs).all().get(20, TimeUnit.SECONDS)) {
                        parts.add(json(b));
                    }
                    Collections.sort(parts);
                    return "{\"deleted\":[" + String.join(",", parts) + "]}";
                }
                default:
                    throw new IllegalArgumentException("unknown command " + command);
            }
        } catch (ExecutionException e) {
            return error(e);
        }
    }
    public static void main(String[] argv) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", argv[0]);
        p.put("request.timeout.ms", "10000");
        p.put("default.api.timeout.ms", "20000");
        List<String> commands = new ArrayList<>();
        for (int i = 1; i < argv.length; i++) {
            if (argv[i].equals("--prop")) {
                String kv = argv[++i];
                int eq = kv.indexOf('=');
                p.put(kv.substring(0, eq), kv.substring(eq + 1));
            } else {
                commands.add(argv[i]);
            }
        }
        Admin admin = Admin.create(p);
        for (String c : commands) {
            int colon = c.indexOf(':');
            List<String> specs = Arrays.asList(c.substring(colon + 1).split(";"));
            System.out.println(run(admin, c.substring(0, colon), specs));
            System.out.flush();
        }
        admin.close(Duration.ofSeconds(2));
        Runtime.getRuntime().halt(0);
    }
}
"""


def sasl_props(user: str) -> list[str]:
    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{user}" password="{password(user)}";'
    )
    return [
        "--prop", "security.protocol=SASL_PLAINTEXT",
        "--prop", "sasl.mechanism=SCRAM-SHA-256",
        "--prop", f"sasl.jaas.config={jaas}",
    ]  # fmt: skip


class AclAdmin:
    """The Java AdminClient's ACL calls (the AclAdmin driver above), in one JVM per run."""

    def __init__(self, classpath: str, gw: AclGateway) -> None:
        self.classpath, self.gw = classpath, gw

    def run(self, user: str, *commands: tuple[str, list[str]]) -> list[dict[str, Any]]:
        args = [f"{command}:{';'.join(specs)}" for command, specs in commands]
        cmd = ["java", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", self.classpath,
               "AclAdmin", self.gw.bootstrap, *args, *sasl_props(user)]  # fmt: skip
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=90)
        assert p.returncode == 0, f"AclAdmin exited {p.returncode}:\n{p.stderr[-3000:]}"
        out = [json.loads(ln) for ln in p.stdout.splitlines() if ln.startswith("{")]
        assert len(out) == len(commands), p.stdout + p.stderr[-3000:]
        return out


@pytest.fixture(scope="module")
def acl_admin(java_client, acl_gateway: AclGateway, tmp_path_factory) -> AclAdmin:
    out = tmp_path_factory.mktemp("acl-admin")
    (out / "AclAdmin.java").write_text(ACL_ADMIN)
    lib = Path(__file__).resolve().parent / "java" / "lib"
    built = subprocess.run(
        ["javac", "-nowarn", "-cp", f"{lib}/*", "-d", str(out), str(out / "AclAdmin.java")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert built.returncode == 0, built.stderr
    return AclAdmin(f"{out}:{java_client.classpath}", acl_gateway)


def spec(rtype: str, name: str, pattern: str, who: str, op: str, perm: str, host: str = "*"):
    return ",".join([rtype, name, pattern, who, host, op, perm])


def test_java_admin_creates_describes_and_deletes_acls(acl_admin: AclAdmin) -> None:
    x = uid()
    who = f"User:{x}"
    made = [
        spec("TOPIC", f"{x}-orders", "LITERAL", who, "READ", "ALLOW"),
        spec("TOPIC", f"{x}-", "PREFIXED", who, "WRITE", "DENY", host="10.1.2.3"),
        spec("GROUP", f"{x}-g", "LITERAL", "User:*", "READ", "ALLOW"),
        spec("CLUSTER", CLUSTER, "LITERAL", who, "IDEMPOTENT_WRITE", "ALLOW"),
    ]
    bad = spec("CLUSTER", "not-the-cluster", "LITERAL", who, "ALTER", "ALLOW")
    mine = spec("ANY", "-", "ANY", who, "ANY", "ANY", "-")

    def rows(*specs: str) -> list[list[str]]:
        return sorted((s.split(",") for s in specs), key=json.dumps)

    created, listed, matched, everyone, deleted, left = acl_admin.run(
        ADMIN,
        ("create", [*made, bad]),
        ("describe", [mine]),
        ("describe", [spec("TOPIC", f"{x}-orders", "MATCH", who, "ANY", "ANY", "-")]),
        ("describe", [spec("GROUP", "-", "ANY", "User:*", "ANY", "ANY", "-")]),
        (
            "delete",
            [
                spec("TOPIC", "-", "PREFIXED", who, "ANY", "ANY", "-"),
                spec("ANY", "-", "LITERAL", who, "ANY", "ANY", "-"),
                spec("GROUP", f"{x}-g", "LITERAL", "User:*", "ANY", "ANY", "-"),
            ],
        ),
        ("describe", [mine]),
    )
    assert created["created"][:4] == [True] * 4, created
    assert created["created"][4]["error"] == "InvalidRequestException", created
    assert listed == {"acls": rows(made[0], made[1], made[3])}
    # MATCH: the bindings that apply to that topic (its literal one and the prefix).
    assert matched == {"acls": rows(made[0], made[1])}
    assert rows(made[2])[0] in everyone["acls"]
    # Each filter deletes what it matches (no two overlap), and the bindings come back.
    assert deleted == {"deleted": rows(*made)}
    assert left == {"acls": []}
    # Refused to a user without Alter (Describe) on the cluster, in Kafka's words.
    refused = acl_admin.run("ben", ("create", [made[0]]), ("delete", [mine]), ("describe", [mine]))
    errors = [refused[0]["created"][0], refused[1], refused[2]]
    assert [e["error"] for e in errors] == ["ClusterAuthorizationException"] * 3, refused


def test_java_producer_needs_write(java_client, acl_admin: AclAdmin, su: Super) -> None:
    gw, topic = acl_admin.gw, su.topic()
    su.grant("eli", "TOPIC", topic, "DESCRIBE")
    # Idempotent by default: InitProducerId needs IdempotentWrite or Write on some topic.
    res = java_client.run("produce", gw.bootstrap, topic, 3, "none", *sasl_props("eli"),
                          check=False)  # fmt: skip
    assert res.rc != 0 and "ClusterAuthorizationException" in str(res.lines), res.lines
    plain = ["--prop", "enable.idempotence=false"]
    res = java_client.run("produce", gw.bootstrap, topic, 3, "none", *sasl_props("eli"),
                          *plain, check=False)  # fmt: skip
    assert res.rc != 0 and "TopicAuthorizationException" in str(res.lines), res.lines
    assert su.end_offset(topic) == 0
    # The admin grants Write through the Java AdminClient: now the idempotent producer runs.
    [ok] = acl_admin.run(
        ADMIN, ("create", [spec("TOPIC", topic, "LITERAL", "User:eli", "WRITE", "ALLOW")])
    )
    assert ok == {"created": [True]}
    res = java_client.run("produce", gw.bootstrap, topic, 3, "none", *sasl_props("eli"))
    assert [r["offset"] for r in res.lines] == [0, 1, 2]
    assert su.end_offset(topic) == 3


def test_java_consumer_with_read(java_client, acl_gateway: AclGateway, su: Super) -> None:
    topic = su.topic()
    su.produce(topic, b"a", b"b", b"c")
    su.grant("fay", "TOPIC", topic, "READ")
    res = java_client.run("consume", acl_gateway.bootstrap, topic, 0, 3, *sasl_props("fay"))
    *records, end = res.lines
    assert [r["offset"] for r in records] == [0, 1, 2] and end["end"] is True


def test_java_consumer_without_read_is_refused(
    java_client, acl_gateway: AclGateway, su: Super
) -> None:
    topic = su.topic()
    su.produce(topic, b"secret")
    su.grant("fay", "TOPIC", topic, "DESCRIBE")
    res = java_client.run("consume", acl_gateway.bootstrap, topic, 0, 1, "--timeout-ms", "6000",
                          *sasl_props("fay"), check=False)  # fmt: skip
    assert not [r for r in res.lines if "value" in r]
    assert res.rc == 3 and "TopicAuthorizationException" in str(res.lines), res.lines


def test_gateway_still_running(acl_gateway: AclGateway) -> None:
    assert acl_gateway.proc is not None and acl_gateway.proc.poll() is None, acl_gateway.log_tail()
