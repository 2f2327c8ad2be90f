"""The embedded default backend: one LevelDB database (plyvel) for all tables."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence

import plyvel

from .backend import Mutation
from .errors import BackendError


class LevelDBBackend:
    def __init__(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)
        self.path = path
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
            raise BackendError(f"cannot open LevelDB at {path}: {exc}") from exc

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
