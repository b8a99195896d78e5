"""A real serve with a port proxy of its own origin, for the port proxy's tests.

The proxy's origin is `http://localhost:PORT` while the API is used as
`http://127.0.0.1:PORT`: one listener, two origins, as a browser tells them apart.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import UNHURRIED, token_works
from tests.support.serve import free_port, issue_token, running_serve


@dataclass(frozen=True)
class ProxyGateway:
    """Where the API and the proxy are, and the tokens of alice and bob (project proj1);
    `alice_reads`: a token of alice's that may only read."""

    api: str
    proxy: str
    alice: str
    bob: str
    alice_reads: str


@contextmanager
def proxy_gateway(data_dir: Path, **extra_env: str) -> Iterator[ProxyGateway]:
    """A serve whose proxy origin is `localhost` on its own port, polling fast."""
    alice = issue_token(data_dir, "alice", "proj1")
    bob = issue_token(data_dir, "bob", "proj1")
    alice_reads = issue_token(data_dir, "alice", "proj1", options=["--read-only"])
    port = free_port()
    proxy = f"http://localhost:{port}"
    env = {
        **UNHURRIED,
        "IRI_GATEWAY_PROXY_URL": proxy,
        "IRI_GATEWAY_POLL_FAST": "0.2",
        **extra_env,
    }
    with running_serve(data_dir, port=port, extra_env=env, ready=token_works(alice)) as served:
        yield ProxyGateway(served.url, proxy, alice, bob, alice_reads)


def auth(token: str) -> dict[str, str]:
    """The headers of a request made with `token` in project proj1."""
    return {"Authorization": f"Bearer {token}", "X-IRI-Facility-Project": "proj1"}
