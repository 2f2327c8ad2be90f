"""The few HTTP calls the Spark source and sink make to a gateway (docs/http-api.md), with
the server's error kind and message kept in the exceptions. Synchronous httpx: Spark calls
a data source from plain threads, on the driver and in its Python workers."""

from __future__ import annotations

import re
import ssl
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx
from tmsgate.protocol.columns import MEDIA_TYPE

TIMEOUT_S = 60.0
PARTITION_MARK = "~"  # partition p > 0 of Kafka topic t is the TMS topic "t~p"


class GatewayError(RuntimeError):
    """An answer other than 2xx: ``status``, the server's ``kind`` and its ``doc``."""

    def __init__(self, status: int, kind: str, message: str, doc: dict[str, Any]) -> None:
        super().__init__(f"{message} (HTTP {status} {kind})")
        self.status, self.kind, self.doc = status, kind, doc


def tms_topic(topic: str, partition: int) -> str:
    return topic if partition == 0 else f"{topic}{PARTITION_MARK}{partition}"


@dataclass(frozen=True)
class Offsets:
    earliest: int
    latest: int
    stable: int
    for_timestamp: int | None = None


class Gateway:
    def __init__(
        self,
        url: str,
        namespace: str = "default",
        *,
        token: str | None = None,
        ca_file: str | None = None,
    ) -> None:
        """``token``: a bearer token of `tmsgate users token` (a gateway with
        --http-auth required); ``ca_file``: the PEM CA that signed an HTTPS gateway's
        certificate (default: the system's)."""
        self.url = url.rstrip("/")
        self.namespace = namespace
        headers = {"Authorization": f"Bearer {token}"} if token else None
        verify = ssl.create_default_context(cafile=ca_file) if ca_file else True
        self.http = httpx.Client(
            base_url=self.url, timeout=TIMEOUT_S, headers=headers, verify=verify
        )

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Gateway:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _topic(self, topic: str, tail: str = "") -> str:
        return (
            f"/v1/namespaces/{quote(self.namespace, safe='')}/topics/{quote(topic, safe='~')}{tail}"
        )

    @staticmethod
    def _check(resp: httpx.Response) -> httpx.Response:
        if resp.is_success:
            return resp
        try:
            doc = resp.json()
        except ValueError:
            doc = {"error": "http_error", "message": resp.text[:300]}
        raise GatewayError(resp.status_code, doc.get("error", "?"), doc.get("message", ""), doc)

    # --- topics -------------------------------------------------------------------------
    def partitions(self) -> dict[str, int]:
        """Kafka topic -> partition count, from the TMS topic list (``t``, ``t~1``, ...)."""
        names = self._check(
            self.http.get(f"/v1/namespaces/{quote(self.namespace, safe='')}/topics")
        ).json()
        counts: dict[str, int] = {}
        for name in names:
            base, mark, part = name.partition(PARTITION_MARK)
            p = int(part) if mark and part.isdigit() else 0
            counts[base] = max(counts.get(base, 0), p + 1)
        return counts

    def ensure_topic(self, topic: str) -> None:
        """Create ``topic`` (one partition) unless it exists."""
        resp = self.http.put(self._topic(topic))
        if resp.status_code != 409:  # 409: it exists
            self._check(resp)

    def matching(self, subscribe: list[str] | None, pattern: str | None) -> dict[str, int]:
        known = self.partitions()
        if pattern is not None:
            regex = re.compile(pattern)
            return {t: n for t, n in sorted(known.items()) if regex.fullmatch(t)}
        missing = [t for t in subscribe or [] if t not in known]
        if missing:
            raise ValueError(
                f"subscribe: topic {missing[0]!r} does not exist in namespace "
                f"{self.namespace!r} of {self.url}"
            )
        return {t: known[t] for t in subscribe or []}

    def offsets(self, topic: str, timestamp: int | None = None) -> Offsets:
        params = {} if timestamp is None else {"timestamp": str(timestamp)}
        doc = self._check(self.http.get(self._topic(topic, "/offsets"), params=params)).json()
        return Offsets(doc["earliest"], doc["latest"], doc["stable"], doc.get("forTimestamp"))

    # --- records ------------------------------------------------------------------------
    def read(self, topic: str, offset: int, end: int, isolation: str, limit: int) -> bytes:
        query = {"offset": offset, "endOffset": end, "isolation": isolation, "maxRecords": limit}
        return self._check(self.http.post(self._topic(topic, "/read"), json=query)).content

    def store(
        self, topic: str, write_pointer: int, body: bytes, *, auto_create: bool = False
    ) -> dict[str, int]:
        """``auto_create`` (``?create=auto``): a missing topic is created as the gateway's
        Kafka listener creates one for a producer. Without it, or on a gateway run with
        --no-auto-create-topics, a missing topic is a 404 GatewayError."""
        headers = {"content-type": MEDIA_TYPE, "x-transaction-write-pointer": str(write_pointer)}
        params = {"create": "auto"} if auto_create else None
        resp = self.http.post(
            self._topic(topic, "/store"), content=body, headers=headers, params=params
        )
        return self._check(resp).json()

    # --- transactions -------------------------------------------------------------------
    def start(self, timeout_s: float, key: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"timeoutSeconds": timeout_s}
        if key is not None:
            body["key"] = key
        return self._check(self.http.post("/v1/transactions", json=body)).json()

    def commit(self, write_pointer: int, publish: list[dict[str, Any]]) -> str:
        """-> "committed"; a transaction that already committed (a replay) is not an error."""
        resp = self.http.post(f"/v1/transactions/{write_pointer}/commit", json={"publish": publish})
        if resp.status_code == 409 and resp.json().get("state") == "committed":
            return "committed"
        return self._check(resp).json()["state"]

    def abort(self, write_pointer: int) -> None:
        resp = self.http.post(f"/v1/transactions/{write_pointer}/abort")
        if resp.status_code != 409:  # 409: already ended, nothing to undo
            self._check(resp)


def find_http_url(bootstrap: str) -> str:
    """The HTTP API of the gateway at a Kafka ``bootstrap``: its broker config
    ``tmsgate.http.url`` (DescribeConfigs, through kafka-python's admin client)."""
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="tmsgate-spark")
    try:
        node = admin.describe_cluster()["brokers"][0]["broker_id"]
        res = admin.describe_configs(
            [ConfigResource(ConfigResourceType.BROKER, str(node))], config_filter="all"
        )
    finally:
        admin.close()
    entry = res.get("broker", {}).get(str(node), {}).get("tmsgate.http.url")
    if entry is None:
        raise ValueError(
            f"bootstrap {bootstrap} does not say where its HTTP API is (no broker config "
            "tmsgate.http.url): is it a tmsgate gateway with HTTP on? Give the url option"
        )
    return str(entry["value"])
