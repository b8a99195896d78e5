"""The gateway's Python SDK: a typed client for its REST API, synchronous and asynchronous.

    with GatewayClient("http://127.0.0.1:8000", token) as gateway:
        job = gateway.submit("local", {"executable": "/bin/echo", "arguments": ["hi"]},
                             project="proj1")
        job = gateway.wait("local", job.id, timeout=60, progress=True)
        print(job.state, gateway.output("local", job.id))

    async with AsyncGatewayClient() as gateway:   # same methods, awaited
        job = await gateway.submit("local", spec, project="proj1")

The server comes from the argument, else `$IRI_GATEWAY_URL`, else http://127.0.0.1:8000; the
bearer token from the argument, else `$IRI_GATEWAY_TOKEN`. Every error answer becomes a typed
`GatewayClientError` (`InvalidRequest`, `NotFound`, ...) carrying the problem+json fields;
no answer at all is `ConnectionFailed`. Calls that change nothing, and submissions (always
sent with an `Idempotency-Key`), are sent again after a connection failure or a 502/503/504
(503 also when the scheduler behind the gateway is down for a moment) or a 429 (the caller's
request rate used up for now; `TooManyRequests` once the retries are spent), `retries`
times, after the pause the answer's `Retry-After` asks for (at most a minute) or growing
pauses, so a retry never submits twice.

Job output is read through the official filesystem operations (`tail`, `view`) on the job's
output file, whose path follows the gateway's rule: a job that names no `directory` runs in
`<job id>/` under the resource's job root (which relative filesystem paths are relative to),
writing `stdout.txt` and `stderr.txt`; a job with a `directory` writes `iri-<job id>.out` and
`.err` there unless it names its own files.

The names below are loaded on first use (PEP 562), so that importing one light part of the
SDK, such as `iri_gateway.client.models` for its defaults, does not load httpx and every
client: the command line builds its client commands from those defaults at each start.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from iri_gateway.client.async_client import AsyncGatewayClient
    from iri_gateway.client.calls import SpecLike
    from iri_gateway.client.errors import (
        Conflict,
        ConnectionFailed,
        Forbidden,
        GatewayClientError,
        Gone,
        InvalidRequest,
        NotFound,
        ServerError,
        TooManyRequests,
        Unauthorized,
    )
    from iri_gateway.client.events import JobEvent, StreamBroken, StreamUnavailable
    from iri_gateway.client.models import (
        DEFAULT_URL,
        READ_LIMIT,
        TOKEN_ENV,
        URL_ENV,
        ArrayElement,
        ElementPage,
        FileContent,
        JobInfo,
        JobPort,
        LaunchResult,
        PortLink,
        Stream,
        WaitTimeout,
        output_path,
    )
    from iri_gateway.client.port_forward import PortForward
    from iri_gateway.client.sync_client import GatewayClient

_HOMES = {
    "AsyncGatewayClient": "async_client",
    "SpecLike": "calls",
    **dict.fromkeys(
        (
            "Conflict",
            "ConnectionFailed",
            "Forbidden",
            "GatewayClientError",
            "InvalidRequest",
            "NotFound",
            "Gone",
            "ServerError",
            "TooManyRequests",
            "Unauthorized",
        ),
        "errors",
    ),
    **dict.fromkeys(
        (
            "DEFAULT_URL",
            "READ_LIMIT",
            "TOKEN_ENV",
            "URL_ENV",
            "ArrayElement",
            "ElementPage",
            "FileContent",
            "JobInfo",
            "JobPort",
            "LaunchResult",
            "PortLink",
            "Stream",
            "WaitTimeout",
            "output_path",
        ),
        "models",
    ),
    "GatewayClient": "sync_client",
    "PortForward": "port_forward",
    **dict.fromkeys(("JobEvent", "StreamBroken", "StreamUnavailable"), "events"),
}
"""Each public name and the module of this package that defines it."""

__all__ = [
    "DEFAULT_URL",
    "READ_LIMIT",
    "TOKEN_ENV",
    "URL_ENV",
    "ArrayElement",
    "AsyncGatewayClient",
    "Conflict",
    "ConnectionFailed",
    "ElementPage",
    "FileContent",
    "Forbidden",
    "GatewayClient",
    "GatewayClientError",
    "Gone",
    "InvalidRequest",
    "JobEvent",
    "JobInfo",
    "JobPort",
    "LaunchResult",
    "NotFound",
    "PortForward",
    "PortLink",
    "ServerError",
    "SpecLike",
    "Stream",
    "StreamBroken",
    "StreamUnavailable",
    "TooManyRequests",
    "Unauthorized",
    "WaitTimeout",
    "output_path",
]


def __getattr__(name: str) -> Any:
    """Load a public name from its module on first use, then keep it here."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
