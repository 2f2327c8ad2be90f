"""The OpenAPI 3.0 description of the HTTP API, served at /openapi.json: built from the
route table (routes.py: every route's path, method, permission and ``Doc``), with the
schemas and the helpers the routes' ``Doc`` entries use.

Request bodies are described in both encodings: Avro JSON as JSON Schema (a union is a
bare value or ``{"branch": value}``; payloads are strings whose form ``?payload=`` picks),
Avro binary as opaque bytes with the Avro schema in the description. Two answers carry no
Content-Type and are described without content: a non-transactional publish (its body is
empty; a transactional one answers the PublishResponse) and a rollback sent as Avro.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from tmsgate.protocol import tms_http

from .routes import On, Route, operation_id

Schema = dict[str, Any]
JSON_TYPE = tms_http.JSON_CONTENT_TYPE
AVRO_TYPE = tms_http.AVRO_CONTENT_TYPE
# Kafka's naming rules, which namespaces share: '.' and '..' alone are refused.
NAME_PATTERN = r"^(?!\.\.?$)[A-Za-z0-9._-]{1,249}$"

_RECEIPT_FIELDS = ("startTimestamp", "startSequenceId", "endTimestamp", "endSequenceId")
COLUMNS_TYPE = "application/vnd.tmsgate.records"
# A Media Type Object has no description of its own: it goes in the schema.
COLUMNS_BODY = {
    "schema": {
        "type": "string",
        "format": "binary",
        "description": "record columns (docs/http-api.md, Bulk reads and writes)",
    }
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
PAYLOAD: Schema = {
    "type": "string",
    "description": "a payload; ?payload=avro (the default): code points 0-255 are the bytes; "
    "utf-8: the text, stored as its UTF-8 bytes; base64: standard base64 with padding",
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
            "messages": {"type": "array", "items": PAYLOAD},
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
            "required": ["id", "idHex", "payload"],
            "properties": {
                "id": MESSAGE_ID,
                "idHex": {
                    "type": "string",
                    "pattern": "^[0-9a-f]{40}$",
                    "description": "the message id in hex (what id carries, readable)",
                },
                "payload": PAYLOAD,
                "payloadEncoding": {
                    "type": "string",
                    "enum": ["utf-8", "base64"],
                    "description": "with ?payload=utf-8 or base64: how this payload is "
                    "written (base64 where a utf-8 poll meets bytes that are not UTF-8)",
                },
            },
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
    404: "no such topic (topic_not_found), or no such namespace (namespace_not_found)",
    409: "conflict: the topic exists, or the transaction is not in progress (see state)",
    413: "the body is larger than the server's limit",
    415: "unsupported Content-Type",
    421: "several gateways: another leads the topic now; nothing was stored, and "
    "leaderUrl names where to send the write (not_leader)",
    503: "the store is closed (the gateway is stopping), or another gateway of the cluster "
    "is out of reach for a moment",
    504: "serve --workers: the write was sent on to the worker leading the topic, which "
    "died before answering; it may be stored (outcome_unknown)",
    507: "the disk is full: writes are refused until space is free",
}


def errors(statuses: tuple[int, ...], *, guarded: bool, topical: bool) -> dict[str, Any]:
    """The error answers of an operation: its own, and what any guarded one can get (401;
    403 unless any login will do)."""
    wanted = set(statuses) | ({401} if guarded else set()) | ({403} if topical else set())
    answers = {
        str(s): {"description": ERRORS[s], "content": {JSON_TYPE: {"schema": ref("Error")}}}
        for s in sorted(wanted)
    }
    if "401" in answers:
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


def json_ok(name: str, description: str = "OK") -> dict[str, Any]:
    return {"200": {"description": description, "content": {JSON_TYPE: {"schema": ref(name)}}}}


def avro_body(name: str) -> dict[str, Any]:
    avro = json.dumps(AVRO_SCHEMAS[name])
    return {
        "schema": {
            "type": "string",
            "format": "binary",
            "description": f"Avro binary (schemaless) of {avro}",
        }
    }


def both_bodies(name: str) -> dict[str, Any]:
    return {
        "required": True,
        "content": {JSON_TYPE: {"schema": ref(name)}, AVRO_TYPE: avro_body(name)},
    }


def both_ok(name: str, description: str) -> dict[str, Any]:
    content = {JSON_TYPE: {"schema": ref(name)}, AVRO_TYPE: avro_body(name)}
    return {"200": {"description": description, "content": content}}


def path_param(name: str, schema: Schema, description: str) -> Schema:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "schema": schema,
        "description": description,
    }


def query_param(name: str, schema: Schema, description: str) -> Schema:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "schema": schema,
        "description": description,
    }


PATH_PARAMETERS = {
    "namespace": path_param(
        "namespace",
        {"type": "string", "pattern": NAME_PATTERN},
        "namespace (Kafka's topics live in the gateway's --namespace, default 'default'; "
        "another exists while it has a topic)",
    ),
    "topic": path_param("topic", {"type": "string", "pattern": NAME_PATTERN}, "topic name"),
    "wp": path_param(
        "wp",
        {"type": "integer", "format": "int64", "minimum": 0, "maximum": (1 << 63) - 1},
        "a transaction's write pointer",
    ),
}
PAYLOAD_PARAM = query_param(
    "payload",
    {"type": "string", "enum": list(tms_http.PAYLOAD_MODES), "default": "avro"},
    "how JSON bodies carry payloads (request messages, answered payloads): avro (Avro "
    "JSON: code points 0-255 are the bytes), utf-8 (text) or base64. avro/binary bodies "
    "take only avro.",
)
CREATE_PARAM = query_param(
    "create",
    {"type": "string", "enum": ["auto"]},
    "auto: create a missing topic as Kafka's auto-create does (the gateway's partition "
    "count and defaults; 404 with --no-auto-create-topics); needs CREATE on the topic or "
    "the cluster",
)
EMPTY_OK = {"200": {"description": "OK (empty body)"}}


def operation(route: Route) -> dict[str, Any]:
    doc = route.doc
    assert doc is not None
    guarded = route.need.on is not On.NOTHING
    topical = guarded and route.need.on is not On.LOGIN
    statuses = doc.errors
    if "namespace" in route.path_parameters:
        statuses += (404,)  # an unknown namespace
    if doc.query:
        statuses += (400,)
    out: dict[str, Any] = {
        "operationId": operation_id(route),
        "summary": doc.summary,
        "responses": {**doc.responses, **errors(statuses, guarded=guarded, topical=topical)},
    }
    params = [PATH_PARAMETERS[name] for name in route.path_parameters] + list(doc.query)
    if params:
        out["parameters"] = params
    if doc.body is not None:
        out["requestBody"] = doc.body
    if not guarded:
        out["security"] = []  # probes and this document: no credentials
    return out


def build(routes: Iterable[Route]) -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        if route.doc is not None:
            paths.setdefault(route.document_path, {})[route.method.lower()] = operation(route)
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "tmsgate TMS HTTP API",
            "version": "1",
            "description": "The CDAP TMS REST API (topics, publish, store, rollback, poll) "
            "and its transaction service, over the store Kafka clients use too. Bodies of "
            "publish, store, rollback and poll are Avro binary (Content-Type: avro/binary) "
            "or Avro JSON (application/json, the default); ?payload=utf-8 or base64 carries "
            "JSON payloads as text or base64 instead. Errors are JSON "
            '{"error": kind, "message": text}. With --http-auth required every operation '
            "but the probes and this document needs HTTP Basic (over HTTPS) or a bearer "
            "token (401 without); with ACLs on, 403 when the principal may not "
            "(docs/security.md).",
        },
        "security": SECURITY,
        "paths": paths,
        "components": {"schemas": SCHEMAS, "securitySchemes": SECURITY_SCHEMES},
    }


def document_bytes(routes: Iterable[Route]) -> bytes:
    return json.dumps(build(routes), separators=(",", ":")).encode()
