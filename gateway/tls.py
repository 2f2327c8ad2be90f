"""TLS for the Kafka listener (Kafka's SSL and SASL_SSL security protocols): the server's
``ssl.SSLContext`` from the gateway's settings, the principal a client certificate stands
for, and words for a failed handshake that say what the client probably did wrong.

The context speaks TLS 1.2 and 1.3 only (Kafka's ssl.enabled.protocols default). With a
client CA it asks every client for a certificate signed by that CA and refuses a client
without one (Kafka's ssl.client.auth=required); without one it asks for none (``none``).

A failed handshake is answered with OpenSSL's alert before the connection closes, as
Kafka answers with Java's: asyncio's SSL protocol (and uvloop's) would drop the connection
with the alert unsent, so a Java client without a certificate saw its connection reset
and retried for ever instead of failing with SslAuthenticationException. The context's
SSLObject class reports the failure to the connection's ``Handshake`` and lets the loop
write the alert first (see ``_AlertingSSLObject``).

A client certificate maps to ``User:<CN>``, the subject's commonName (the last one, the
most specific, when there are several); a subject without a commonName maps to the whole
subject in RFC 2253 form, Kafka's default (``User:O=Acme,C=GB``). Apache Kafka's default
``ssl.principal.mapping.rules`` give the whole DN (``User:CN=alice,O=Acme,C=GB``); the CN
alone is what ``RULE:^CN=([^,]*).*$/$1/`` gives there, the rule most deployments set.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Iterable, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .kafka.config import GatewayConfig

TLS_PROTOCOLS = ("SSL", "SASL_SSL")
# RFC 2253's attribute keywords for the names Python's getpeercert() uses; others keep
# Python's name (Java would print their OID).
_KEYWORDS = {
    "commonName": "CN",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}
# OpenSSL's reasons for a failed handshake -> what the operator should check.
_HINTS = {
    "WRONG_VERSION_NUMBER": "not TLS: a plaintext client on the TLS listener?",
    "HTTP_REQUEST": "not TLS: a plaintext client on the TLS listener?",
    "UNKNOWN_PROTOCOL": "not TLS: a plaintext client on the TLS listener?",
    "UNSUPPORTED_PROTOCOL": "the client offers only TLS versions below 1.2",
    "PEER_DID_NOT_RETURN_A_CERTIFICATE": "no client certificate (the listener requires one)",
    "CERTIFICATE_VERIFY_FAILED": "client certificate not trusted by --tls-client-ca",
    "NO_SHARED_CIPHER": "no cipher suite in common with the client",
    # the client's alerts: it refused the gateway's certificate
    "TLSV1_ALERT_UNKNOWN_CA": "the client does not trust --tls-cert (not signed by its CA)",
    "SSLV3_ALERT_BAD_CERTIFICATE": "the client refused --tls-cert (a host name it lacks?)",
    "SSLV3_ALERT_CERTIFICATE_UNKNOWN": "the client refused --tls-cert (a host name it lacks?)",
}


class TlsConfigError(ValueError):
    """The listener's certificate, key or client CA cannot be used; the message names the
    file and says why."""


def listener_context(config: GatewayConfig) -> ssl.SSLContext | None:
    """The Kafka listener's server context; None when its protocol is not SSL/SASL_SSL."""
    if config.security_protocol not in TLS_PROTOCOLS:
        return None
    if not (config.tls_cert and config.tls_key):
        raise TlsConfigError(
            f"security protocol {config.security_protocol} needs a certificate chain and its "
            "private key (--tls-cert, --tls-key)"
        )
    return server_context(config.tls_cert, config.tls_key, config.tls_client_ca)


def server_context(cert: str, key: str, client_ca: str | None = None) -> ssl.SSLContext:
    """A TLS 1.2+ server context for the PEM chain ``cert`` and its unencrypted ``key``;
    with ``client_ca``, clients must present a certificate that CA signed."""
    _check_pem(cert, "certificate chain (--tls-cert)", "CERTIFICATE")
    _check_pem(key, "private key (--tls-key)", "PRIVATE KEY")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.sslobject_class = _AlertingSSLObject
    try:
        # A callable password: an encrypted key fails here instead of OpenSSL prompting
        # on the terminal for a pass phrase.
        ctx.load_cert_chain(cert, key, password=lambda: _encrypted(key))
    except ssl.SSLError as exc:
        raise TlsConfigError(
            f"private key {key} does not go with certificate {cert} or cannot be read: "
            f"{exc.reason or exc}"
        ) from None
    if client_ca:
        _check_pem(client_ca, "client CA (--tls-client-ca)", "CERTIFICATE")
        try:
            ctx.load_verify_locations(cafile=client_ca)
        except ssl.SSLError as exc:
            raise TlsConfigError(f"client CA {client_ca}: {exc.reason or exc}") from None
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def _encrypted(key: str) -> str:
    raise TlsConfigError(f"private key (--tls-key) {key} is encrypted; give it unencrypted")


def _check_pem(path: str, what: str, label: str) -> None:
    try:
        with open(path, "rb") as f:
            text = f.read()
    except OSError as exc:
        raise TlsConfigError(f"{what} {path}: {exc.strerror or exc}") from None
    if f"{label}-----".encode() not in text:
        raise TlsConfigError(f"{what} {path}: no PEM {label} in it")


# --- failed handshakes --------------------------------------------------------------------
class Handshake:
    """One server-side handshake under way: set as ``current_handshake`` in the context the
    connection's transport is made in, so that its SSLObject can report a failure."""

    __slots__ = ("error", "on_failure")

    def __init__(self, on_failure: Callable[[], object] = lambda: None) -> None:
        self.error: ssl.SSLError | None = None
        self.on_failure = on_failure  # called once the alert is written: close it now


current_handshake: ContextVar[Handshake | None] = ContextVar("tls_handshake", default=None)


class _AlertingSSLObject(ssl.SSLObject):
    """On a failed handshake OpenSSL leaves its alert in the outgoing buffer and raises;
    the loop's SSL protocol then closes the transport without writing it. Raised the
    first time as "want read" instead, the loop writes the alert (what it does for any
    handshake step), and ``on_failure`` closes the connection right after."""

    def do_handshake(self) -> None:
        try:
            super().do_handshake()
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            raise
        except ssl.SSLError as exc:
            handshake = current_handshake.get()
            if handshake is None or handshake.error is not None:
                raise
            handshake.error = exc
            handshake.on_failure()
            raise ssl.SSLWantReadError("handshake failed; the alert goes out first") from exc


def handshake_failure(exc: BaseException) -> str:
    """Words for the log: OpenSSL's reason and what it usually means."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"{_HINTS['CERTIFICATE_VERIFY_FAILED']}: {exc.verify_message}"
    if isinstance(exc, ssl.SSLError) and exc.reason:
        hint = _HINTS.get(exc.reason)
        return f"{hint} ({exc.reason})" if hint else str(exc.reason)
    return str(exc) or type(exc).__name__


# --- principals ---------------------------------------------------------------------------
def principal(peercert: dict[str, Any] | None) -> str | None:
    """The principal of a verified client certificate (``getpeercert()``'s dict): None
    without one (or with an empty subject), which is User:ANONYMOUS."""
    subject: Sequence[Sequence[tuple[str, str]]] = (peercert or {}).get("subject", ())
    names = [value for rdn in subject for name, value in rdn if name == "commonName"]
    if names:
        return f"User:{names[-1]}"
    dn = distinguished_name(subject)
    return f"User:{dn}" if dn else None


def transport_principal(transport: Any) -> str | None:
    """The client certificate's principal on a TLS transport (None on any other)."""
    if transport is None:
        return None
    return principal(transport.get_extra_info("peercert"))


def distinguished_name(subject: Iterable[Sequence[tuple[str, str]]]) -> str:
    """A subject in RFC 2253 form, as Java's X500Principal.getName() writes it: the most
    specific RDN first, multi-valued RDNs joined by '+', special characters escaped."""
    rdns = ["+".join(f"{_KEYWORDS.get(n, n)}={_escape(v)}" for n, v in rdn) for rdn in subject]
    return ",".join(reversed(rdns))


def _escape(value: str) -> str:
    out = "".join("\\" + c if c in ',+"\\<>;' else c for c in value)
    if value.startswith(("#", " ")):
        out = "\\" + out
    if value.endswith(" ") and len(value) > 1:
        out = out[:-1] + "\\ "
    return out
