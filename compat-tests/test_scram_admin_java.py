"""The Java AdminClient (kafka-clients 3.9.0, what kafka-configs.sh uses) managing SCRAM users
on a running `tmsgate serve --kafka-security sasl_plaintext`: alterUserScramCredentials adds
a user who then logs in with the Java producer, changes its password (the old one is
refused), describeUserScramCredentials lists it, and a deletion locks it out. Kafka's
errors reach the client as Kafka's exception classes. (docs/security.md, "Users on a running
gateway"; the Python clients are in tests/test_scram_admin.py.)

The small admin driver is Java source kept below, compiled once per module with javac
against the jars of compat-tests/java/build.sh."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.timeout(300)
ADMIN, ADMIN_PASSWORD = "root", "root-secret"
MECHANISMS = "SCRAM-SHA-256,SCRAM-SHA-512,PLAIN"

DRIVER = r"""
import java.util.*;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.*;

/** ScramAdmin BOOTSTRAP USER PASSWORD upsert NAME MECH ITERATIONS SECRET | delete NAME MECH
 *  | describe [NAME...]: one JSON line per user. */
public class ScramAdmin {
    static String q(String s) {
        return s == null ? "null" : "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }

    static String error(Throwable e) {
        Throwable c = e instanceof ExecutionException && e.getCause() != null ? e.getCause() : e;
        return "\"error\":" + q(c.getClass().getSimpleName()) + ",\"message\":" + q(c.getMessage());
    }

    public static void main(String[] a) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", a[0]);
        p.put("security.protocol", "SASL_PLAINTEXT");
        p.put("sasl.mechanism", "SCRAM-SHA-512");
        p.put("sasl.jaas.config", "org.apache.kafka.common.security.scram.ScramLoginModule "
            + "required username=\"" + a[1] + "\" password=\"" + a[2] + "\";");
        p.put("default.api.timeout.ms", "30000");
        try (Admin admin = Admin.create(p)) {
            String cmd = a[3];
            if (cmd.equals("describe")) {
                List<String> names = Arrays.asList(a).subList(4, a.length);
                DescribeUserScramCredentialsResult r = names.isEmpty()
                    ? admin.describeUserScramCredentials()
                    : admin.describeUserScramCredentials(names);
                for (String user : names.isEmpty() ? r.users().get() : names) {
                    try {
                        StringBuilder infos = new StringBuilder();
                        for (ScramCredentialInfo i : r.description(user).get().credentialInfos()) {
                            if (infos.length() > 0) infos.append(",");
                            infos.append("{\"mechanism\":" + q(i.mechanism().mechanismName())
                                + ",\"iterations\":" + i.iterations() + "}");
                        }
                        System.out.println(
                            "{\"user\":" + q(user) + ",\"credentials\":[" + infos + "]}");
                    } catch (ExecutionException e) {
                        System.out.println("{\"user\":" + q(user) + "," + error(e) + "}");
                    }
                }
                return;
            }
            String user = a[4];
            ScramMechanism mech = ScramMechanism.fromMechanismName(a[5]);
            UserScramCredentialAlteration change = cmd.equals("upsert")
                ? new UserScramCredentialUpsertion(
                    user, new ScramCredentialInfo(mech, Integer.parseInt(a[6])), a[7])
                : new UserScramCredentialDeletion(user, mech);
            try {
                admin.alterUserScramCredentials(List.of(change)).values().get(user).get();
                System.out.println("{\"user\":" + q(user) + ",\"ok\":true}");
            } catch (ExecutionException e) {
                System.out.println("{\"user\":" + q(user) + "," + error(e) + "}");
            }
        }
    }
}
"""


@pytest.fixture(scope="module")
def scram_admin(java_client, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Compiles the driver; calling the result runs it against a bootstrap."""
    build = tmp_path_factory.mktemp("scram-admin-java")
    (build / "ScramAdmin.java").write_text(DRIVER)
    done = subprocess.run(
        ["javac", "-cp", java_client.classpath, "-d", str(build), str(build / "ScramAdmin.java")],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    classpath = f"{build}:{java_client.classpath}"

    def run(bootstrap: str, *args: Any) -> list[dict]:
        cmd = ["java", "-XX:TieredStopAtLevel=1", "-cp", classpath, "ScramAdmin", bootstrap]
        p = subprocess.run(
            [*cmd, ADMIN, ADMIN_PASSWORD, *map(str, args)],
            capture_output=True,
            text=True,
            timeout=90,
        )
        assert p.returncode == 0, p.stderr[-3000:]
        return [json.loads(ln) for ln in p.stdout.splitlines() if ln.startswith("{")]

    return run


@pytest.fixture
def sasl_gateway(private_gateway, tmp_path: Path):
    store = tmp_path / "gw0" / "store"  # where private_gateway's first gateway keeps it
    store.mkdir(parents=True)
    tmsgate = Path(sys.executable).with_name("tmsgate")
    subprocess.run(
        [str(tmsgate), "users", "add", ADMIN, "--password-stdin", "--store", f"leveldb://{store}"],
        input=ADMIN_PASSWORD + "\n",
        text=True,
        check=True,
        capture_output=True,
    )
    return private_gateway(
        extra_args=["--kafka-security", "sasl_plaintext", "--sasl-mechanisms", MECHANISMS]
    )


def produce_as(java_client, bootstrap: str, user: str, password: str, topic: str) -> Any:
    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{user}" password="{password}";'
    )
    props = [
        "--prop", "security.protocol=SASL_PLAINTEXT",
        "--prop", "sasl.mechanism=SCRAM-SHA-256",
        "--prop", f"sasl.jaas.config={jaas}",
    ]  # fmt: skip
    return java_client.run("produce", bootstrap, topic, 3, "none", *props, timeout=60, check=False)


def test_java_admin_manages_scram_users(sasl_gateway, scram_admin, java_client) -> None:
    bootstrap = sasl_gateway.bootstrap
    assert scram_admin(bootstrap, "upsert", "erin", "SCRAM-SHA-256", 8192, "erin-1") == [
        {"user": "erin", "ok": True}
    ]
    res = produce_as(java_client, bootstrap, "erin", "erin-1", "java-scram-admin")
    assert res.rc == 0, res.stderr[-2000:]
    assert [r["offset"] for r in res.lines] == [0, 1, 2]

    assert scram_admin(bootstrap, "describe", "erin", "nobody") == [
        {"user": "erin", "credentials": [{"mechanism": "SCRAM-SHA-256", "iterations": 8192}]},
        {
            "user": "nobody",
            "error": "ResourceNotFoundException",
            "message": "Attempt to describe a user credential that does not exist: nobody",
        },
    ]
    everyone = {d["user"] for d in scram_admin(bootstrap, "describe")}
    assert everyone == {ADMIN, "erin"}

    # a new password: the old one is refused, the new one works
    assert scram_admin(bootstrap, "upsert", "erin", "SCRAM-SHA-256", 4096, "erin-2") == [
        {"user": "erin", "ok": True}
    ]
    old = produce_as(java_client, bootstrap, "erin", "erin-1", "java-scram-admin")
    assert old.rc != 0
    assert "SaslAuthenticationException" in (str(old.lines) + old.stderr), old.stderr[-2000:]
    new = produce_as(java_client, bootstrap, "erin", "erin-2", "java-scram-admin")
    assert new.rc == 0, new.stderr[-2000:]

    # Kafka's errors, as Kafka's exception classes
    assert scram_admin(bootstrap, "upsert", "erin", "SCRAM-SHA-512", 20000, "x") == [
        {
            "user": "erin",
            "error": "UnacceptableCredentialException",
            "message": "Too many iterations",
        }
    ]
    assert scram_admin(bootstrap, "delete", "erin", "SCRAM-SHA-512") == [
        {
            "user": "erin",
            "error": "ResourceNotFoundException",
            "message": "Attempt to delete a user credential that does not exist",
        }
    ]

    assert scram_admin(bootstrap, "delete", "erin", "SCRAM-SHA-256") == [
        {"user": "erin", "ok": True}
    ]
    gone = produce_as(java_client, bootstrap, "erin", "erin-2", "java-scram-admin")
    assert gone.rc != 0
    assert {d["user"] for d in scram_admin(bootstrap, "describe")} == {ADMIN}
