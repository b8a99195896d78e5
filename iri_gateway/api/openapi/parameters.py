"""Parameters as a client can send them: a query, path or header parameter is a string in
the request, so it can be absent but never JSON `null`.

FastAPI publishes an optional parameter (`x: T | None = None`) as `anyOf: [T, {type: null}]`.
Read literally, that says `null` is a value a client may send; generated clients and
Schemathesis then send the text `null`, which the server rightly refuses where `T` is an
enumeration or a date ("the request is not valid" for a request the document allows). The
parameter's `required: false` already says it may be left out; the `null` branch is dropped.
"""

from __future__ import annotations

from typing import Any

from iri_gateway.api.plumbing.deps import UNKNOWN_QUERY

_NULL = {"type": "null"}


def without_null_parameters(document: dict[str, Any]) -> dict[str, Any]:
    """`document` (changed in place and returned) with no `null` branch in any parameter's
    schema."""
    for item in document.get("paths", {}).values():
        for operation in item.values():
            if not isinstance(operation, dict):
                continue
            for parameter in operation.get("parameters", []):
                schema = parameter.get("schema", {})
                branches = schema.get("anyOf")
                if not branches or _NULL not in branches:
                    continue
                kept = [branch for branch in branches if branch != _NULL]
                del schema["anyOf"]
                if len(kept) == 1:
                    schema.update({k: v for k, v in kept[0].items() if k not in schema})
                else:
                    schema["anyOf"] = kept
    return document


UNKNOWN_QUERY_DESCRIPTION = (
    "A query parameter the operation does not define is refused with 422, the problem's "
    "`invalid_params` naming it and the parameters the operation takes: a misspelt `offest` "
    "or `limt` is never silently ignored. OpenAPI cannot say this of a parameter list, hence "
    "the extension `x-iri-gateway-unknown-query-parameters: refused` on the document and on "
    "each operation."
)


def refusing_unknown_query(document: dict[str, Any]) -> dict[str, Any]:
    """`document` (changed in place and returned) saying on itself and on every operation that
    an unknown query parameter is refused (`deps.known_query`, `deps.UNKNOWN_QUERY`)."""
    document[UNKNOWN_QUERY] = "refused"
    info = document.setdefault("info", {})
    info["description"] = f"{info.get('description', '')}\n\n{UNKNOWN_QUERY_DESCRIPTION}".strip()
    for item in document.get("paths", {}).values():
        for operation in item.values():
            if isinstance(operation, dict) and "operationId" in operation:
                operation[UNKNOWN_QUERY] = "refused"
    return document
