"""kcat and the Java client over TLS against `tmsgate serve --kafka-security ssl|sasl_ssl`
(docs/security.md), with certificates made at test time by trustme: over SSL with client
certificates required (the certificate's CN is the principal: the only super user of an
ACL-checking gateway), and over SASL_SSL with a SCRAM login; a client without a
certificate, or speaking plaintext to the TLS port, fails at once instead of hanging.
(confluent-kafka, kafka-python and aiokafka are in tests/test_tls.py.)"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trustme
from compat_helpers import require_tool
from cryptography.hazmat.primitives import serialization

pytestmark = pytest.mark.timeout(180)
USER, PASSWORD = "carol", "carol-secret"


@dataclass(frozen=True)
class Certs:
    ca: str
    server_cert: str
    server_key: str
    client_cert: str  # CN=carol, signed by the CA
    client_key: str  # PKCS#8, as Java's PEM key store wants it

    def serve_args(self, client_auth: bool) -> list[str]:
        args = ["--tls-cert", self.server_cert, "--tls-key", self.server_key]
        return args + (["--tls-client-ca", self.ca] if client_auth else [])


@pytest.fixture
def certs(tmp_path: Path) -> Certs:
    d = tmp_path / "certs"
    d.mkdir()
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(d / "ca.pem"))
    for name, cert in (
        ("server", ca.issue_cert("127.0.0.1", "localhost")),
        ("client", ca.issue_cert("carol@example.com", common_name=USER)),
    ):
        (d / f"{name}.pem").write_bytes(b"".join(b.bytes() for b in cert.cert_chain_pems))
        key = serialization.load_pem_private_key(cert.private_key_pem.bytes(), None)
        (d / f"{name}.key").write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
    return Certs(*(str(d / f) for f in ("ca.pem", "server.pem", "server.key")),
                 str(d / "client.pem"), str(d / "client.key"))  # fmt: skip


@pytest.fixture
def ssl_gateway(private_gateway, certs: Certs):
    """SSL, client certificates required, ACLs on with carol the only super user."""
    return private_gateway(
        extra_args=[
            "--kafka-security", "ssl", *certs.serve_args(client_auth=True),
            "--authorizer", "acl", "--super-users", f"User:{USER}",
        ]
    )  # fmt: skip


@pytest.fixture
def sasl_ssl_gateway(private_gateway, certs: Certs, tmp_path: Path):
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
        extra_args=[
            "--kafka-security", "sasl_ssl", *certs.serve_args(client_auth=False),
            "--sasl-mechanisms", "SCRAM-SHA-256,SCRAM-SHA-512,PLAIN",
        ]
    )  # fmt: skip


# --- kcat ---------------------------------------------------------------------------------
def kcat(bootstrap: str, settings: list[str], *args: str, stdin: str = "") -> Any:
    exe = require_tool("kcat", "install the Debian package kcat")
    options = [x for kv in settings for x in ("-X", kv)]
    return subprocess.run(
        [exe, "-b", bootstrap, *options, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


def kcat_round_trip(bootstrap: str, settings: list[str], topic: str) -> None:
    lines = "".join(f"v{i}\n" for i in range(10))
    done = kcat(bootstrap, settings, "-P", "-t", topic, stdin=lines)
    assert done.returncode == 0, done.stderr
    done = kcat(bootstrap, settings, "-C", "-t", topic, "-o", "beginning", "-e")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [f"v{i}" for i in range(10)]


def test_kcat_over_ssl_with_a_client_certificate(ssl_gateway, certs: Certs) -> None:
    settings = [
        "security.protocol=SSL",
        f"ssl.ca.location={certs.ca}",
        f"ssl.certificate.location={certs.client_cert}",
        f"ssl.key.location={certs.client_key}",
    ]
    kcat_round_trip(ssl_gateway.bootstrap, settings, "kcat-ssl")
    no_cert = kcat(ssl_gateway.bootstrap, settings[:2], "-L", "-m", "3")
    assert no_cert.returncode != 0
    assert "alert certificate required" in no_cert.stderr, no_cert.stderr  # the TLS alert
    plaintext = kcat(ssl_gateway.bootstrap, [], "-L", "-m", "3")
    assert plaintext.returncode != 0
    assert "connecting to a SSL listener?" in plaintext.stderr, plaintext.stderr
    log = ssl_gateway.log_tail(200)
    assert "TLS handshake failed: no client certificate" in log
    assert "TLS handshake failed: not TLS: a plaintext client" in log


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "PLAIN"])
def test_kcat_over_sasl_ssl(sasl_ssl_gateway, certs: Certs, mechanism: str) -> None:
    settings = [
        "security.protocol=SASL_SSL",
        f"ssl.ca.location={certs.ca}",
        f"sasl.mechanism={mechanism}",
        f"sasl.username={USER}",
        f"sasl.password={PASSWORD}",
    ]
    kcat_round_trip(sasl_ssl_gateway.bootstrap, settings, f"kcat-sasl-ssl-{mechanism.lower()}")
    bad = kcat(sasl_ssl_gateway.bootstrap, [*settings[:-1], "sasl.password=wrong"], "-L")
    assert bad.returncode != 0
    assert "authentication" in bad.stderr.lower(), bad.stderr


# --- Java ---------------------------------------------------------------------------------
def java_round_trip(java_client, bootstrap: str, props: list[str], topic: str) -> None:
    args = [x for p in props for x in ("--prop", p)]
    res = java_client.run("produce", bootstrap, topic, 20, "none", *args)
    assert [r["offset"] for r in res.lines] == list(range(20))
    res = java_client.run("consume", bootstrap, topic, 0, 20, *args)
    *records, end = res.lines
    assert [r["offset"] for r in records] == list(range(20)) and end["end"] is True


def java_trust(certs: Certs) -> list[str]:
    # Java 17 reads PEM trust stores; the server certificate names 127.0.0.1, so the
    # default endpoint identification (https) stays on.
    return ["ssl.truststore.type=PEM", f"ssl.truststore.location={certs.ca}"]


def test_java_over_ssl_with_a_client_certificate(ssl_gateway, certs: Certs, java_client) -> None:
    key_store = [
        "ssl.keystore.type=PEM",
        f"ssl.keystore.certificate.chain={Path(certs.client_cert).read_text()}",
        f"ssl.keystore.key={Path(certs.client_key).read_text()}",
    ]
    props = ["security.protocol=SSL", *java_trust(certs), *key_store]
    java_round_trip(java_client, ssl_gateway.bootstrap, props, "java-ssl")
    args = [x for p in props[:3] for x in ("--prop", p)]  # no key store: no certificate
    res = java_client.run(
        "produce", ssl_gateway.bootstrap, "java-ssl", 1, "none", *args, timeout=60, check=False
    )
    assert res.rc != 0
    assert "SslAuthenticationException" in (str(res.lines) + res.stderr), res.stderr[-2000:]


def test_java_over_sasl_ssl_scram(sasl_ssl_gateway, certs: Certs, java_client) -> None:
    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{USER}" password="{PASSWORD}";'
    )
    props = [
        "security.protocol=SASL_SSL",
        *java_trust(certs),
        "sasl.mechanism=SCRAM-SHA-512",
        f"sasl.jaas.config={jaas}",
    ]
    java_round_trip(java_client, sasl_ssl_gateway.bootstrap, props, "java-sasl-ssl")
