"""The embedded default backend: one LevelDB database (plyvel) for all tables."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence

import plyvel

from .backend import Mutation
from .errors import BackendError


class LevelDBBackend:
    def __init__(self, path: str, temporary: bool = False) -> None:
        os.makedirs(path, exist_ok=True)
        self.path = path
        self._temporary = temporary
        try:
            self._db = plyvel.DB(
                path,
                create_if_missing=True,
                write_buffer_size=64 << 20,
                lru_cache_size=128 << 20,
                block_size=16 << 10,
                bloom_filter_bits=10,
                # Payloads are mostly already compressed or random; snappy costs more than it saves.
                compression=None,
            )
        except plyvel.IOError as exc:
            hint = " (is a gateway running on it?)" if "lock" in str(exc).lower() else ""
            raise BackendError(f"cannot open LevelDB at {path}: {exc}{hint}") from exc

    def write(self, mutations: Sequence[Mutation], sync: bool = True) -> None:
        try:
            with self._db.write_batch(sync=sync) as batch:
                put, delete = batch.put, batch.delete
                for key, value in mutations:
                    if value is None:
                        delete(key)
                    else:
                        put(key, value)
        except plyvel.Error as exc:
            raise BackendError(f"LevelDB write failed: {exc}") from exc

    def get(self, key: bytes) -> bytes | None:
        return self._db.get(key)

    def scan(
        self,
        start: bytes,
        stop: bytes,
        *,
        reverse: bool = False,
        include_start: bool = True,
    ) -> Iterator[tuple[bytes, bytes]]:
        it = self._db.iterator(start=start, stop=stop, reverse=reverse, include_start=include_start)
        try:
            yield from it
        finally:
            it.close()

    def close(self) -> None:
        if not self._db.closed:
            self._db.close()
        if self._temporary:
            shutil.rmtree(self.path, ignore_errors=True)


def snapshot_copy(path: str) -> str:
    """Copy a LevelDB directory that another process may hold open.

    Table files never change once written, so they are hard-linked; the log, manifest and
    CURRENT are copied. LevelDB recovers the copy like a crashed database, which is what
    an acknowledged-and-fsynced write survives anyway."""
    if not os.path.isdir(path):
        raise BackendError(f"no store at {path}")
    dest = tempfile.mkdtemp(prefix="tmsgate-snapshot-")
    for name in sorted(os.listdir(path), key=lambda n: not n.endswith((".ldb", ".sst"))):
        if name == "LOCK":
            continue
        src = os.path.join(path, name)
        try:
            if name.endswith((".ldb", ".sst")):
                os.link(src, os.path.join(dest, name))
            else:
                shutil.copy2(src, os.path.join(dest, name))
        except FileNotFoundError:
            continue  # compacted away while copying; the manifest copied later won't need it
        except OSError:
            shutil.copy2(src, os.path.join(dest, name))
    return dest
