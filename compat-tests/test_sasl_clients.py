"""kcat and the Java client over SASL_PLAINTEXT against `tmsgate serve --kafka-security
sasl_plaintext` (docs/security.md), with a user made by `tmsgate users add` on the stopped
store: SCRAM logins produce and consume; a wrong password fails with Kafka's
authentication error instead of hanging. (confluent-kafka, kafka-python and aiokafka are in
tests/test_sasl.py.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from compat_helpers import require_tool

pytestmark = pytest.mark.timeout(180)
USER, PASSWORD = "carol", "carol-secret"
MECHANISMS = "SCRAM-SHA-256,SCRAM-SHA-512,PLAIN"


@pytest.fixture
def sasl_gateway(private_gateway, tmp_path: Path):
    store = tmp_path / "gw0" / "store"  # where private_gateway's first gateway keeps it
    store.mkdir(parents=True)
    tmsgate = Path(sys.executable).with_name("tmsgate")
    subprocess.run(
        [str(tmsgate), "users", "add", USER, "--password-stdin", "--store", f"leveldb://{store}"],
        input=PASSWORD + "\n",
        text=True,
        check=True,
        capture_output=True,
    )
    return private_gateway(
        extra_args=["--kafka-security", "sasl_plaintext", "--sasl-mechanisms", MECHANISMS]
    )


def kcat_sasl(bootstrap: str, mechanism: str, password: str, *args: str, stdin: str = "") -> Any:
    kcat = require_tool("kcat", "install the Debian package kcat")
    return subprocess.run(
        [
            kcat, "-b", bootstrap,
            "-X", "security.protocol=SASL_PLAINTEXT",
            "-X", f"sasl.mechanism={mechanism}",
            "-X", f"sasl.username={USER}",
            "-X", f"sasl.password={password}",
            *args,
        ],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )  # fmt: skip


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "PLAIN"])
def test_kcat_over_sasl(sasl_gateway, mechanism: str) -> None:
    topic = f"kcat-sasl-{mechanism.lower()}"
    lines = "".join(f"v{i}\n" for i in range(10))
    done = kcat_sasl(sasl_gateway.bootstrap, mechanism, PASSWORD, "-P", "-t", topic, stdin=lines)
    assert done.returncode == 0, done.stderr
    done = kcat_sasl(
        sasl_gateway.bootstrap, mechanism, PASSWORD, "-C", "-t", topic, "-o", "beginning", "-e"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [f"v{i}" for i in range(10)]
    bad = kcat_sasl(sasl_gateway.bootstrap, mechanism, "wrong", "-L")
    assert bad.returncode != 0
    assert "Authentication failed" in bad.stderr or "authentication" in bad.stderr.lower()


def test_java_over_sasl_scram(sasl_gateway, java_client) -> None:
    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{USER}" password="{PASSWORD}";'
    )
    props = [
        "--prop", "security.protocol=SASL_PLAINTEXT",
        "--prop", "sasl.mechanism=SCRAM-SHA-512",
        "--prop", f"sasl.jaas.config={jaas}",
    ]  # fmt: skip
    topic = "java-sasl"
    res = java_client.run("produce", sasl_gateway.bootstrap, topic, 20, "none", *props)
    assert [r["offset"] for r in res.lines] == list(range(20))
    res = java_client.run("consume", sasl_gateway.bootstrap, topic, 0, 20, *props)
    *records, end = res.lines
    assert [r["offset"] for r in records] == list(range(20)) and end["end"] is True
    bad = [p.replace(PASSWORD, "wrong") for p in props]
    res = java_client.run(
        "produce", sasl_gateway.bootstrap, topic, 1, "none", *bad, timeout=60, check=False
    )
    assert res.rc != 0
    assert "SaslAuthenticationException" in (str(res.lines) + res.stderr), res.stderr[-2000:]
