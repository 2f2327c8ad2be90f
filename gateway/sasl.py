"""SASL mechanisms on the server side, without sockets: PLAIN (RFC 4616) and SCRAM-SHA-256 /
SCRAM-SHA-512 (RFC 5802, 7677; the exchange itself is scramp's). An exchange takes the
client's tokens one at a time (``step``) and answers the server's, until ``principal`` is
set; any failure raises AuthenticationFailed with Kafka's wording. Credentials come from a
lookup the caller gives (gateway/users.py), so this module never reads the store."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from scramp import ScramException, ScramMechanism

from .users import MECHANISMS as SCRAM_MECHANISMS
from .users import ScramEntry

PLAIN = "PLAIN"
ALL_MECHANISMS = (PLAIN, *SCRAM_MECHANISMS)
# Kafka's words for a failed login (Kafka 4.1, measured), the same for an unknown user and a
# wrong password: PLAIN's, and SCRAM's with the mechanism named.
INVALID_CREDENTIALS = "Authentication failed: Invalid username or password"


def scram_failure(mechanism: str) -> str:
    return (
        "Authentication failed during authentication due to invalid credentials with SASL "
        f"mechanism {mechanism}"
    )


class AuthenticationFailed(Exception):
    """The login failed; the message is what the client is told."""


class Exchange(Protocol):
    principal: str | None  # "User:<name>" once authenticated

    def step(self, token: bytes) -> bytes: ...


CheckPlain = Callable[[str, str], bool]  # (user, password) -> ok
LookupScram = Callable[[str, str], ScramEntry | None]  # (user, mechanism) -> entry


class PlainExchange:
    """One token: ``authzid NUL authcid NUL password``."""

    def __init__(self, check: CheckPlain) -> None:
        self._check = check
        self.principal: str | None = None

    def step(self, token: bytes) -> bytes:
        if self.principal is not None:
            raise AuthenticationFailed("PLAIN takes one token; the login is already done")
        try:
            authzid, user, password = token.decode("utf-8").split("\x00")
        except ValueError:
            raise AuthenticationFailed(
                "Invalid SASL/PLAIN response: expected 3 tokens, separated by NUL"
            ) from None
        if not user:
            raise AuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise AuthenticationFailed("Authentication failed: password not specified")
        if authzid and authzid != user:
            raise AuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is "
                "different from username"
            )
        if not self._check(user, password):
            raise AuthenticationFailed(INVALID_CREDENTIALS)
        self.principal = f"User:{user}"
        return b""


class ScramExchange:
    """Two tokens: client-first (-> server-first), client-final (-> server-final)."""

    def __init__(self, mechanism: str, lookup: LookupScram) -> None:
        self.mechanism = mechanism
        self._lookup = lookup
        self._user: str | None = None
        self._server = ScramMechanism(mechanism).make_server(self._auth_info)
        self._stage = 0
        self._unknown_user = False
        self.principal: str | None = None

    def _auth_info(self, user: str) -> tuple[bytes, bytes, bytes, int] | None:
        """scramp's lookup (it has unescaped the saslname's '=2C' and '=3D')."""
        entry = self._lookup(user, self.mechanism)
        if entry is None:
            self._unknown_user = True
            return None
        self._user = user
        return entry.as_auth_info()

    def _accept_repeated_client_nonce(self, client_final: str) -> None:
        """librdkafka before 2.x (Debian's kcat) sends the client nonce twice in its final
        message (client nonce + the server's nonce, which already starts with it). Older
        Kafka accepted a nonce ending with the server's; Kafka 4.1 refuses it (measured,
        docs/compatibility.md). It is accepted here: the proof still covers the message as
        sent."""
        nonce = self._server.nonce  # scramp's Nonce
        sent, expected = _attribute(client_final, "r"), str(nonce)
        if sent is not None and sent != expected and sent.endswith(expected):
            self._server.nonce = type(nonce)(sent)

    def step(self, token: bytes) -> bytes:
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationFailed(f"Invalid {self.mechanism} message: not UTF-8") from None
        try:
            if self._stage == 0:
                if ",tokenauth=" in text:
                    raise AuthenticationFailed(
                        "Authentication failed: delegation tokens are not supported"
                    )
                self._server.set_client_first(text)
                self._stage = 1
                return self._server.get_server_first().encode()
            if self._stage == 1:
                self._stage = 2
                self._accept_repeated_client_nonce(text)
                self._server.set_client_final(text)
                self.principal = f"User:{self._user}"
                return self._server.get_server_final().encode()
        except ScramException as exc:
            wrong = self._unknown_user or "proof" in str(exc)
            raise AuthenticationFailed(
                scram_failure(self.mechanism)
                if wrong
                else f"Invalid {self.mechanism} message: {exc}"
            ) from None
        raise AuthenticationFailed(f"{self.mechanism} takes two tokens; the login is done")


def _attribute(message: str, name: str) -> str | None:
    for part in message.split(","):
        if part.startswith(name + "="):
            return part[len(name) + 1 :]
    return None


def exchange(mechanism: str, check_plain: CheckPlain, lookup: LookupScram) -> Exchange:
    if mechanism == PLAIN:
        return PlainExchange(check_plain)
    if mechanism in SCRAM_MECHANISMS:
        return ScramExchange(mechanism, lookup)
    raise ValueError(f"unknown SASL mechanism {mechanism!r}")
