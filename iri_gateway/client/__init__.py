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
(503 also when the scheduler behind the gateway is down for a moment), `retries` times, after
the pause the answer's `Retry-After` asks for (at most a minute) or growing pauses, so a retry
never submits twice.

Job output is read through the official filesystem operations (`tail`, `view`) on the job's
output file, whose path follows the gateway's rule: a job that names no `directory` runs in
`<job id>/` under the resource's job root (which relative filesystem paths are relative to),
writing `stdout.txt` and `stderr.txt`; a job with a `directory` writes `iri-<job id>.out` and
`.err` there unless it names its own files.
"""

from iri_gateway.client.async_client import AsyncGatewayClient
from iri_gateway.client.calls import SpecLike
from iri_gateway.client.errors import (
    Conflict,
    ConnectionFailed,
    Forbidden,
    GatewayClientError,
    InvalidRequest,
    NotFound,
    ServerError,
    Unauthorized,
)
from iri_gateway.client.models import (
    DEFAULT_URL,
    READ_LIMIT,
    TOKEN_ENV,
    URL_ENV,
    FileContent,
    JobInfo,
    Stream,
    WaitTimeout,
    output_path,
)
from iri_gateway.client.sync_client import GatewayClient

__all__ = [
    "DEFAULT_URL", "READ_LIMIT", "TOKEN_ENV", "URL_ENV", "AsyncGatewayClient", "Conflict",
    "ConnectionFailed", "FileContent", "Forbidden", "GatewayClient", "GatewayClientError",
    "InvalidRequest", "JobInfo", "NotFound", "ServerError", "SpecLike", "Stream",
    "Unauthorized", "WaitTimeout", "output_path",
]
