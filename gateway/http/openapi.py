"""The OpenAPI 3.0 description of the HTTP API, served at /openapi.json (built once).

Request bodies are described in both encodings: Avro JSON as JSON Schema (bytes are
strings of code points 0-255; a union is a bare value or ``{"branch": value}``), Avro
binary as opaque bytes with the Avro schema in the description. Two answers carry no
Content-Type and are described without content: a non-transactional publish (its body is
empty; a transactional one answers the PublishResponse) and a rollback sent as Avro.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from tmsgate.protocol import tms_http

Schema = dict[str, Any]
JSON_TYPE = tms_http.JSON_CONTENT_TYPE
AVRO_TYPE = tms_http.AVRO_CONTENT_TYPE
# Kafka's naming rules, which namespaces share: '.' and '..' alone are refused.
NAME_PATTERN = r"^(?!\.\.?$)[A-Za-z0-9._-]{1,249}$"

_RECEIPT_FIELDS = ("startTimestamp", "startSequenceId", "endTimestamp", "endSequenceId")
COLUMNS_TYPE = "application/vnd.tmsgate.records"
COLUMNS_BODY = {
    "schema": {"type": "string", "format": "binary"},
    "description": "record columns (docs/http-api.md, Bulk reads and writes)",
}
# What Python's str.strip() removes, which the store does around a ttl.
_SPACE = (
    "[\\t\\n\\u000b\\u000c\\r\\u001c-\\u001f \\u0085\\u00a0\\u1680\\u2000-\\u200a"
    "\\u2028\\u2029\\u202f\\u205f\\u3000]"
)
LONG: Schema = {
    "type": "integer",
    "format": "int64",
    "minimum": -(1 << 63),
    "maximum": (1 << 63) - 1,
}
INT: Schema = {
    "type": "integer",
    "format": "int32",
    "minimum": -(1 << 31),
    "maximum": (1 << 31) - 1,
}
BYTES: Schema = {
    "type": "string",
    "pattern": "^[\\u0000-\\u00ff]*$",
    "description": "bytes: each character's code point (0-255) is one byte (ISO-8859-1)",
}
MESSAGE_ID: Schema = {
    **BYTES,
    "minLength": 20,
    "maxLength": 20,
    "description": "a 20-byte message id (publish_ts, seq, write_ts, pseq; big-endian)",
}


def ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def union(branch: str, schema: Schema, *, bare: Schema | None = None) -> list[Schema]:
    """A union branch in Avro JSON: ``{"long": 5}``, and the bare value ``5`` too."""
    wrapped = {
        "type": "object",
        "properties": {branch: schema},
        "required": [branch],
        "additionalProperties": False,
    }
    return [bare or schema, wrapped]


def nullable(schema: Schema) -> Schema:
    return {**schema, "nullable": True}


SCHEMAS: dict[str, Schema] = {
    "Error": {
        "type": "object",
        "required": ["error", "message"],
        "properties": {
            "error": {"type": "string", "description": "what kind of error, e.g. topic_not_found"},
            "message": {"type": "string", "description": "what was wrong"},
            "writePointer": LONG,
            "state": {"type": "string", "description": "the transaction's state (conflicts)"},
            "freeBytes": {"type": "integer"},
            "needBytes": {"type": "integer"},
        },
    },
    "Properties": {
        "type": "object",
        "description": "topic properties; values are strings (numbers are turned into strings)",
        "properties": {
            "ttl": {
                "description": "seconds a message is kept; 0 keeps it forever",
                "anyOf": [
                    {"type": "string", "pattern": f"^{_SPACE}*[0-9]+{_SPACE}*$"},
                    {"type": "integer", "minimum": 0},
                ],
            }
        },
        "additionalProperties": {"anyOf": [{"type": "string"}, {"type": "number"}]},
    },
    "Topic": {
        "type": "object",
        "required": ["name", "properties"],
        "properties": {
            "name": {"type": "string"},
            "properties": {"type": "object", "additionalProperties": {"type": "string"}},
        },
    },
    "TopicList": {"type": "array", "items": {"type": "string"}},
    "PublishRequest": {
        "type": "object",
        "required": ["messages"],
        "additionalProperties": False,
        "properties": {
            "transactionWritePointer": {
                "anyOf": union("long", LONG, bare=nullable(LONG)),
                "description": "an in-progress transaction's write pointer; null: none",
            },
            "messages": {"type": "array", "items": BYTES},
        },
    },
    "PublishResponse": {
        "type": "object",
        "required": ["startTimestamp", "startSequenceId", "endTimestamp", "endSequenceId"],
        "additionalProperties": False,
        "properties": {
            "transactionWritePointer": {"anyOf": union("long", LONG, bare=nullable(LONG))},
            "startTimestamp": LONG,
            "startSequenceId": INT,
            "endTimestamp": LONG,
            "endSequenceId": INT,
        },
    },
    "ConsumeRequest": {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "startFrom": {
                "description": "a message id (bytes), a publish time in ms (long), or null: "
                "from the earliest message",
                "anyOf": [
                    *union("bytes", MESSAGE_ID, bare=nullable(MESSAGE_ID)),
                    *union("long", LONG),
                ],
            },
            "inclusive": {"type": "boolean", "default": True},
            "limit": {
                "description": "at most this many messages (null: 100; capped by the server)",
                "anyOf": union(
                    "int",
                    {**INT, "minimum": 1},
                    bare=nullable({**INT, "minimum": 1}),
                ),
            },
            "transaction": {
                "description": "the encoded bytes of a transaction (POST /v1/transactions): "
                "a transactional read; null: read everything stored",
                "anyOf": union("bytes", BYTES, bare=nullable(BYTES)),
            },
        },
    },
    "MessageList": {
        "type": "array",
        "items": {
            "type": "object",
            "required": ["id", "payload"],
            "properties": {"id": MESSAGE_ID, "payload": BYTES},
        },
    },
    "RollbackResult": {
        "type": "object",
        "required": ["rolledBack"],
        "properties": {"rolledBack": {"type": "integer", "minimum": 0}},
    },
    "TransactionStart": {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "timeoutSeconds": {
                "type": "number",
                "nullable": True,
                "minimum": 0,
                "exclusiveMinimum": True,
                "maximum": 86400,
                "description": "default 30 (also when null or absent)",
            },
            "key": {
                "type": "string",
                "minLength": 1,
                "maxLength": 255,
                "pattern": "^[ -~]+$",
                "description": "a keyed transaction: every start with the key answers the "
                "same transaction while it is in progress, and its final state once it "
                "committed; after an abort or a timeout the key starts a new one",
            },
        },
    },
    "StoreReceipt": {
        "type": "object",
        "required": list(_RECEIPT_FIELDS),
        "properties": {name: {"type": "integer", "minimum": 0} for name in _RECEIPT_FIELDS},
    },
    "Commit": {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "publish": {
                "type": "array",
                "description": "publish only these stores' rows, per topic, then commit",
                "items": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["topic", "stored"],
                    "properties": {
                        "namespace": {"type": "string", "pattern": NAME_PATTERN},
                        "topic": {"type": "string", "pattern": NAME_PATTERN},
                        "stored": {"type": "array", "items": ref("StoreReceipt")},
                    },
                },
            }
        },
    },
    "ReadQuery": {
        "type": "object",
        "additionalProperties": False,
        "required": ["offset"],
        "properties": {
            "offset": {**LONG, "minimum": 0},
            "endOffset": {**LONG, "minimum": 0, "description": "exclusive"},
            "maxRecords": {"type": "integer", "minimum": 1, "maximum": 100000},
            "maxBytes": {"type": "integer", "minimum": 1, "maximum": 1 << 30},
            "isolation": {"type": "string", "enum": ["read_uncommitted", "read_committed"]},
        },
    },
    "Offsets": {
        "type": "object",
        "required": ["earliest", "latest", "stable"],
        "properties": {
            "earliest": LONG,
            "latest": LONG,
            "stable": LONG,
            "forTimestamp": nullable(LONG),
        },
    },
    "Transaction": {
        "type": "object",
        "required": ["writePointer", "readPointer", "inProgress", "invalid", "encoded"],
        "properties": {
            "writePointer": {**LONG, "description": "0 for a snapshot"},
            "readPointer": LONG,
            "inProgress": {"type": "array", "items": LONG},
            "invalid": {"type": "array", "items": LONG},
            "timeoutSeconds": nullable({"type": "number"}),
            "encoded": {**BYTES, "description": "the codec bytes a transactional poll takes"},
        },
    },
    "TransactionState": {
        "type": "object",
        "required": ["writePointer", "state"],
        "properties": {
            "writePointer": LONG,
            "state": {
                "type": "string",
                "enum": ["in_progress", "committed", "aborted", "invalid", "unknown"],
            },
        },
    },
    "TransactionList": {
        "type": "object",
        "required": ["inProgress", "invalid"],
        "properties": {
            "inProgress": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["writePointer", "expiresAtMs"],
                    "properties": {"writePointer": LONG, "expiresAtMs": LONG},
                },
            },
            "invalid": {"type": "array", "items": LONG},
        },
    },
    "Status": {
        "type": "object",
        "required": ["status"],
        "properties": {"status": {"type": "string"}},
    },
}

AVRO_SCHEMAS = {
    "PublishRequest": tms_http.PUBLISH_REQUEST_SCHEMA,
    "PublishResponse": tms_http.PUBLISH_RESPONSE_SCHEMA,
    "ConsumeRequest": tms_http.CONSUME_REQUEST_SCHEMA,
    "MessageList": tms_http.MESSAGES_SCHEMA,
}

ERRORS = {
    400: "bad request: a malformed body, name or value (the message says which)",
    401: "no credentials, or wrong ones, and the gateway requires them (--http-auth "
    "required); the WWW-Authenticate header names the schemes",
    403: "the principal's ACLs do not allow this (the message names the operation and "
    "the resource)",
    404: "no such topic",
    409: "conflict: the topic exists, or the transaction is not in progress (see state)",
    413: "the body is larger than the server's limit",
    415: "unsupported Content-Type",
    503: "the store is closed (the gateway is stopping)",
    507: "the disk is full: writes are refused until space is free",
}


def errors(*statuses: int) -> dict[str, Any]:
    """The error answers of an operation; every one behind authentication can get 401, 403."""
    answers = {
        str(s): {"description": ERRORS[s], "content": {JSON_TYPE: {"schema": ref("Error")}}}
        for s in (*statuses, 401, 403)
    }
    answers["401"]["headers"] = CHALLENGE_HEADER
    return answers


CHALLENGE_HEADER = {
    "WWW-Authenticate": {
        "description": 'the schemes: Basic realm="tmsgate", Bearer',
        "schema": {"type": "string"},
    }
}
# HTTP Basic (over HTTPS only) or a bearer token of `tmsgate users token`; none (the empty
# requirement) when the gateway runs with --http-auth none.
SECURITY = [{"basic": []}, {"bearer": []}, {}]
SECURITY_SCHEMES = {
    "basic": {
        "type": "http",
        "scheme": "basic",
        "description": "a user's password (tmsgate users add); refused over plain HTTP",
    },
    "bearer": {
        "type": "http",
        "scheme": "bearer",
        "description": "a token of `tmsgate users token NAME`",
    },
}
OPEN: dict[str, Any] = {"security": []}  # probes and this document: no credentials


def json_ok(name: str, description: str = "OK") -> dict[str, Any]:
    return {"200": {"description": description, "content": {JSON_TYPE: {"schema": ref(name)}}}}


def avro_body(name: str) -> dict[str, Any]:
    avro = json.dumps(AVRO_SCHEMAS[name])
    return {
        "schema": {"type": "string", "format": "binary"},
        "description": f"Avro binary (schemaless) of {avro}",
    }


def both_bodies(name: str) -> dict[str, Any]:
    return {
        "required": True,
        "content": {JSON_TYPE: {"schema": ref(name)}, AVRO_TYPE: avro_body(name)},
    }


def both_ok(name: str, description: str) -> dict[str, Any]:
    content = {JSON_TYPE: {"schema": ref(name)}, AVRO_TYPE: avro_body(name)}
    return {"200": {"description": description, "content": content}}


def param(name: str, schema: Schema, description: str) -> Schema:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "schema": schema,
        "description": description,
    }


NAMESPACE = param(
    "namespace",
    {"type": "string", "pattern": NAME_PATTERN},
    "namespace (Kafka's topics live in the gateway's --namespace, default 'default')",
)
TOPIC = param("topic", {"type": "string", "pattern": NAME_PATTERN}, "topic name")
WRITE_POINTER = param(
    "wp",
    {"type": "integer", "format": "int64", "minimum": 0, "maximum": (1 << 63) - 1},
    "a transaction's write pointer",
)
EMPTY_OK = {"200": {"description": "OK (empty body)"}}


def op(op_id: str, summary: str, responses: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"operationId": op_id, "summary": summary, "responses": responses, **extra}


def paths() -> dict[str, Any]:
    topics = "/v1/namespaces/{namespace}/topics"
    topic = topics + "/{topic}"
    tx = "/v1/transactions"
    props_body = {
        "required": False,
        "content": {JSON_TYPE: {"schema": ref("Properties")}},
    }
    return {
        topics: {
            "parameters": [NAMESPACE],
            "get": op(
                "listTopics",
                "Names of the namespace's topics, sorted",
                {**json_ok("TopicList"), **errors(400, 503)},
            ),
        },
        topic: {
            "parameters": [NAMESPACE, TOPIC],
            "put": op(
                "createTopic",
                "Create a topic, optionally with properties",
                {**json_ok("Topic"), **errors(400, 409, 413, 415, 503)},
                requestBody=props_body,
            ),
            "get": op(
                "getTopic", "A topic's properties", {**json_ok("Topic"), **errors(400, 404, 503)}
            ),
            "delete": op("deleteTopic", "Delete a topic", {**EMPTY_OK, **errors(400, 404, 503)}),
        },
        topic + "/properties": {
            "parameters": [NAMESPACE, TOPIC],
            "put": op(
                "updateTopic",
                "Replace all of a topic's properties",
                {**json_ok("Topic"), **errors(400, 404, 413, 415, 503)},
                requestBody={**props_body, "required": True},
            ),
        },
        topic + "/publish": {
            "parameters": [NAMESPACE, TOPIC],
            "post": op(
                "publish",
                "Publish messages (to the MessageTable), or make a transaction's stored "
                "messages visible (write pointer and no messages)",
                {
                    "200": {
                        "description": "Published. Non-transactional: empty body, no "
                        "Content-Type. Transactional: a PublishResponse in the request's "
                        "Content-Type; post it back to rollback to undo the publish."
                    },
                    **errors(400, 404, 409, 413, 415, 503, 507),
                },
                requestBody=both_bodies("PublishRequest"),
            ),
        },
        topic + "/store": {
            "parameters": [NAMESPACE, TOPIC],
            "post": op(
                "store",
                "Store messages under a transaction (PayloadTable) for a later publish; "
                "record columns with the header X-Transaction-Write-Pointer keep keys, "
                "headers and timestamps",
                {
                    "200": {
                        "description": "The receipt: a PublishResponse of the rows stored "
                        "(JSON for record columns), for a commit's manifest",
                    },
                    **errors(400, 404, 409, 413, 415, 503, 507),
                },
                requestBody={
                    "required": True,
                    "content": {
                        **both_bodies("PublishRequest")["content"],
                        COLUMNS_TYPE: COLUMNS_BODY,
                    },
                },
            ),
        },
        topic + "/offsets": {
            "parameters": [
                NAMESPACE,
                TOPIC,
                {
                    "name": "timestamp",
                    "in": "query",
                    "required": False,
                    "schema": {"type": "integer", "minimum": 0},
                    "description": "also answer the first offset with a timestamp >= this",
                },
            ],
            "get": op(
                "offsets",
                "Earliest, latest and last stable offsets (and one for a time)",
                {**json_ok("Offsets"), **errors(400, 404, 503)},
            ),
        },
        topic + "/read": {
            "parameters": [NAMESPACE, TOPIC],
            "post": op(
                "read",
                "Read records by offset, with keys, headers, timestamps, message ids and "
                "write pointers, as record columns",
                {
                    "200": {
                        "description": "record columns",
                        "content": {COLUMNS_TYPE: COLUMNS_BODY},
                    },
                    "416": {
                        "description": "the offset is outside [earliest, latest]",
                        "content": {JSON_TYPE: {"schema": ref("Error")}},
                    },
                    **errors(400, 404, 413, 415, 503),
                },
                requestBody={
                    "required": True,
                    "content": {JSON_TYPE: {"schema": ref("ReadQuery")}},
                },
            ),
        },
        topic + "/rollback": {
            "parameters": [NAMESPACE, TOPIC],
            "post": op(
                "rollback",
                "Roll back a transactional publish: the body is its PublishResponse",
                {
                    "200": {
                        "description": 'Rolled back. JSON: {"rolledBack": n} (a '
                        "RollbackResult); Avro: empty body, no Content-Type."
                    },
                    **errors(400, 404, 409, 413, 415, 503),
                },
                requestBody=both_bodies("PublishResponse"),
            ),
        },
        topic + "/poll": {
            "parameters": [NAMESPACE, TOPIC],
            "post": op(
                "poll",
                "Read messages from a message id, a time or the start",
                {
                    **both_ok("MessageList", "Messages, in the request's Content-Type"),
                    **errors(400, 404, 413, 415, 503),
                },
                requestBody=both_bodies("ConsumeRequest"),
            ),
        },
        tx: {
            "post": op(
                "startTransaction",
                "Start a transaction. With Accept: avro/binary the answer is the encoded "
                "transaction itself.",
                {
                    "200": {
                        "description": "The transaction",
                        "content": {
                            JSON_TYPE: {"schema": ref("Transaction")},
                            AVRO_TYPE: {"schema": {"type": "string", "format": "binary"}},
                        },
                    },
                    **errors(400, 413, 415, 503),
                },
                requestBody={
                    "required": False,
                    "content": {JSON_TYPE: {"schema": ref("TransactionStart")}},
                },
            ),
            "get": op(
                "listTransactions",
                "Transactions in progress and the invalid list",
                {**json_ok("TransactionList"), **errors()},
            ),
        },
        tx + "/snapshot": {
            "post": op(
                "snapshot",
                "A read-only snapshot (write pointer 0) for transactional polls",
                {
                    "200": {
                        "description": "The snapshot",
                        "content": {
                            JSON_TYPE: {"schema": ref("Transaction")},
                            AVRO_TYPE: {"schema": {"type": "string", "format": "binary"}},
                        },
                    },
                    **errors(),
                },
            ),
        },
        tx + "/{wp}": {
            "parameters": [WRITE_POINTER],
            "get": op(
                "transactionState",
                "A transaction's state",
                {**json_ok("TransactionState"), **errors(400)},
            ),
        },
        tx + "/{wp}/commit": {
            "parameters": [WRITE_POINTER],
            "post": op(
                "commitTransaction",
                "Commit an in-progress transaction; with a manifest, publish only the "
                "listed stores' rows first (recorded, replayed after a crash)",
                {**json_ok("TransactionState"), **errors(400, 404, 409, 413, 415, 503)},
                requestBody={"required": False, "content": {JSON_TYPE: {"schema": ref("Commit")}}},
            ),
        },
        **{
            f"{tx}/{{wp}}/{action}": {
                "parameters": [WRITE_POINTER],
                "post": op(
                    f"{action}Transaction",
                    f"{action.capitalize()} an in-progress transaction",
                    {**json_ok("TransactionState"), **errors(400, 409, 503)},
                ),
            }
            for action in ("abort", "invalidate")
        },
        "/healthz": {
            "get": op("healthz", "200 while the process serves", json_ok("Status"), **OPEN)
        },
        "/readyz": {
            "get": op(
                "readyz",
                "200 when the store is open and writable, else 503 with the reason",
                {
                    **json_ok("Status"),
                    "503": {
                        "description": "not ready (disk full, store closed, shutting down)",
                        "content": {JSON_TYPE: {"schema": ref("Error")}},
                    },
                },
                **OPEN,
            )
        },
        "/openapi.json": {
            "get": op(
                "openapi",
                "This document",
                {"200": {"description": "OpenAPI 3.0", "content": {JSON_TYPE: {"schema": {}}}}},
                **OPEN,
            )
        },
    }


def build() -> dict[str, Any]:
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "tmsgate TMS HTTP API",
            "version": "1",
            "description": "The CDAP TMS REST API (topics, publish, store, rollback, poll) "
            "and its transaction service, over the store Kafka clients use too. Bodies of "
            "publish, store, rollback and poll are Avro binary (Content-Type: avro/binary) "
            "or Avro JSON (application/json, the default). Errors are JSON "
            '{"error": kind, "message": text}. With --http-auth required every operation '
            "but the probes and this document needs HTTP Basic (over HTTPS) or a bearer "
            "token (401 without); with ACLs on, 403 when the principal may not "
            "(docs/security.md).",
        },
        "security": SECURITY,
        "paths": paths(),
        "components": {"schemas": SCHEMAS, "securitySchemes": SECURITY_SCHEMES},
    }


@functools.cache
def openapi_document() -> bytes:
    return json.dumps(build(), separators=(",", ":")).encode()
