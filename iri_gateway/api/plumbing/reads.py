"""Which requests change nothing: the rule the read budget (`rate_limit`) and the token
classes (`token_use`: a token that may only read) both follow, and the OpenAPI documents.

A read is a GET or HEAD, or one of the operations the IRI API sends as POST with its
parameters in a body although they only look (`READ_OPERATIONS`); a write is every other
request. The port proxy's requests reach a job's service, which may do anything (a Jupyter
kernel runs code): they are writes, whatever their method.
"""

from __future__ import annotations

from fastapi import Request
from fastapi.routing import APIRoute

READ_METHODS = frozenset({"GET", "HEAD"})
READ_OPERATIONS = frozenset(
    {
        "getJobs",
        "planJob",
        "placeJob",
        "getFilesystemResources",
        "ls",
        "head",
        "view",
        "tail",
        "stat",
        "checksum",
        "file",
        "download",
    }
)
"""The operations sent as POST that change nothing: counted as reads, so that a client
browsing files (the official `ls`, `stat`, `head`, ... are all POST) is not held to the
budget of launches and changes."""


def is_read(request: Request) -> bool:
    """True when `request` changes nothing (`READ_METHODS`, or a route in `READ_OPERATIONS`)."""
    if request.method in READ_METHODS:
        return True
    route = request.scope.get("route")
    return isinstance(route, APIRoute) and route.operation_id in READ_OPERATIONS


def route_reads(route: APIRoute, method: str) -> bool:
    """True when `method` on `route` changes nothing (the OpenAPI's view of `is_read`)."""
    return method.upper() in READ_METHODS or route.operation_id in READ_OPERATIONS
