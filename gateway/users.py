"""Users and their SCRAM credentials, kept in the store's MetadataTable (state area
``users``, one row per user), as Kafka keeps them in its metadata log: the salted keys of
RFC 5802 (salt, StoredKey, ServerKey, iterations) per mechanism, never the password.
SASL/PLAIN logins are checked against the same entry (the password is salted and hashed
as SCRAM would, and compared with StoredKey)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass

from scramp import ScramMechanism
from tmsgate.storage import Store

AREA = "users"
MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
DEFAULT_ITERATIONS = 4096  # Kafka's default for kafka-configs.sh, and its minimum
MAX_ITERATIONS = 16384  # Kafka's maximum
_HASH = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
_NAME = re.compile(r"[^\x00-\x1f,=]{1,255}")  # no control characters; ',' and '=' are SCRAM's


class UserError(ValueError):
    """A name, password or mechanism that cannot be used; the message says why."""


@dataclass(frozen=True, slots=True)
class ScramEntry:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def as_auth_info(self) -> tuple[bytes, bytes, bytes, int]:
        """What scramp's server asks for a user."""
        return self.salt, self.stored_key, self.server_key, self.iterations


def check_name(name: str) -> str:
    if not _NAME.fullmatch(name):
        raise UserError(
            f"user name {name[:40]!r}: 1 to 255 characters, without ',' '=' or control characters"
        )
    return name


def make_entry(mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS) -> ScramEntry:
    if mechanism not in MECHANISMS:
        raise UserError(f"mechanism {mechanism!r}: expected one of {', '.join(MECHANISMS)}")
    if not DEFAULT_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise UserError(f"iterations: {DEFAULT_ITERATIONS} to {MAX_ITERATIONS}, got {iterations}")
    if not password:
        raise UserError("the password is empty")
    salt, stored, server, its = ScramMechanism(mechanism).make_auth_info(password, iterations)
    return ScramEntry(salt, stored, server, its)


def entry_from_salted_password(
    mechanism: str, salt: bytes, salted_password: bytes, iterations: int
) -> ScramEntry:
    """The entry for what AlterUserScramCredentials sends (KIP-554): the client salts and
    hashes the password, SaltedPassword = Hi(password, salt, i), and the server keeps
    StoredKey = H(HMAC(SaltedPassword, "Client Key")), ServerKey = HMAC(SaltedPassword,
    "Server Key"), as Kafka's controller does."""
    algo = _HASH[mechanism]
    client_key = hmac.new(salted_password, b"Client Key", algo).digest()
    server_key = hmac.new(salted_password, b"Server Key", algo).digest()
    return ScramEntry(salt, hashlib.new(algo, client_key).digest(), server_key, iterations)


def password_matches(entry: ScramEntry, mechanism: str, password: str) -> bool:
    """RFC 5802: StoredKey = H(HMAC(Hi(password, salt, i), "Client Key"))."""
    algo = _HASH[mechanism]
    salted = hashlib.pbkdf2_hmac(algo, password.encode("utf-8"), entry.salt, entry.iterations)
    client_key = hmac.new(salted, b"Client Key", algo).digest()
    return hmac.compare_digest(hashlib.new(algo, client_key).digest(), entry.stored_key)


def _encode(entries: dict[str, ScramEntry]) -> bytes:
    b64 = base64.b64encode
    doc = {
        mech: {
            "salt": b64(e.salt).decode(),
            "storedKey": b64(e.stored_key).decode(),
            "serverKey": b64(e.server_key).decode(),
            "iterations": e.iterations,
        }
        for mech, e in sorted(entries.items())
    }
    return json.dumps(doc, separators=(",", ":")).encode()


def _decode(raw: bytes) -> dict[str, ScramEntry]:
    b = base64.b64decode
    return {
        mech: ScramEntry(b(e["salt"]), b(e["storedKey"]), b(e["serverKey"]), int(e["iterations"]))
        for mech, e in json.loads(raw).items()
    }


class Users:
    """The users of one store. Blocking calls (they read or write the store)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        # One user's row is read, changed and written back: changes of one process (the
        # gateway's I/O threads) go one at a time, so none is lost.
        self._lock = threading.Lock()

    def entries(self, name: str) -> dict[str, ScramEntry]:
        raw = self._store.get_state(AREA, name)
        return _decode(raw) if raw is not None else {}

    def entry(self, name: str, mechanism: str) -> ScramEntry | None:
        return self.entries(name).get(mechanism)

    def set_password(
        self, name: str, mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS
    ) -> None:
        """Add the user, or replace its credential for ``mechanism`` (others stay)."""
        check_name(name)
        entry = make_entry(mechanism, password, iterations)
        with self._lock:
            entries = self.entries(name)
            entries[mechanism] = entry
            self._store.put_state(AREA, name, _encode(entries))

    def alter(self, changes: Mapping[tuple[str, str], ScramEntry | None]) -> set[tuple[str, str]]:
        """Set (an entry) or delete (None) credentials of (user, mechanism) in one durable
        write, all or none (AlterUserScramCredentials). Deleting a credential that does not
        exist changes nothing: those deletions are returned."""
        for (name, _), entry in changes.items():
            if entry is not None:
                check_name(name)
        missing: set[tuple[str, str]] = set()
        touched: dict[str, dict[str, ScramEntry]] = {}
        with self._lock:
            for (name, mechanism), entry in changes.items():
                entries = touched[name] if name in touched else self.entries(name)
                if entry is None and entries.pop(mechanism, None) is None:
                    missing.add((name, mechanism))
                    continue
                if entry is not None:
                    entries[mechanism] = entry
                touched[name] = entries
            if touched:
                self._store.put_states(
                    {(AREA, n): _encode(e) if e else None for n, e in touched.items()}
                )
        return missing

    def delete(self, name: str, mechanism: str | None = None) -> bool:
        """Drop one mechanism's credential, or the user; False if there was nothing."""
        with self._lock:
            entries = self.entries(name)
            if not entries or (mechanism is not None and mechanism not in entries):
                return False
            if mechanism is None:
                entries.clear()
            else:
                del entries[mechanism]
            self._store.put_state(AREA, name, _encode(entries) if entries else None)
            return True

    def list(self) -> dict[str, dict[str, int]]:
        """name -> {mechanism: iterations}."""
        return {
            name: {m: e.iterations for m, e in _decode(raw).items()}
            for name, raw in self._store.scan_state(AREA)
        }

    def check_plain(self, name: str, password: str) -> bool:
        """A SASL/PLAIN login: the password against the user's SCRAM credential."""
        entries = self.entries(name)
        if not entries:
            return False
        mechanism = min(entries)  # SCRAM-SHA-256's entry when the user has one
        return password_matches(entries[mechanism], mechanism, password)
