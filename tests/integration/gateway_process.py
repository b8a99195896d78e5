"""A real `iri-gateway serve` on a profile of the test cluster, for tests that need HTTP.

`serve(profile, data)` starts the server as a child process (its own poller and reconcile,
as in production) with tests/support/serve.py, waits until it answers, yields its URL and a
token for alice (project proj1), and stops it afterwards, whatever happened.
`profile_allowing` derives a profile of the test cluster that also allows some custom
scheduler attributes (e.g. `begin`, to keep jobs pending without using the nodes).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.support.serve import issue_token, running_serve

API = "/api/v2"


@dataclass(frozen=True)
class Gateway:
    """A running server: where it is, alice's token, and its log file."""

    url: str
    token: str
    log: Path
    pid: int = 0
    """The server process (for a test that kills it)."""

    def tracebacks(self, limit: int = 20_000) -> str:
        """The server log from its first traceback on (at most `limit` characters), for an
        assertion's message: a 500 in a CI run says what raised it."""
        text = self.log.read_text(errors="replace")
        start = text.find("Traceback")
        return "(no traceback in the server log)" if start < 0 else text[start : start + limit]

    def headers(self, **extra: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}", "X-IRI-Facility-Project": "proj1", **extra}


def profile_allowing(profile: Path, attributes: list[str], folder: Path) -> Path:
    """A copy of `profile` whose resources also allow the custom `attributes`."""
    document: dict[str, Any] = yaml.safe_load(profile.read_text())
    for resource in document["resources"]:
        scheduler = resource["scheduler"]
        allowed = list(scheduler.get("allowed_custom_attributes", []))
        scheduler["allowed_custom_attributes"] = allowed + [
            name for name in attributes if name not in allowed
        ]
    path = folder / "cluster-allowing.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


@contextmanager
def serve(
    profile: Path, data: Path, *, env: Mapping[str, str] | None = None, port: int | None = None
) -> Iterator[Gateway]:
    """`iri-gateway serve --profiles PROFILE` with its data in `data` (on `port`, else a free
    one); stopped afterwards."""
    data.mkdir(parents=True, exist_ok=True)
    token = issue_token(data, "alice", "proj1", env)
    with running_serve(
        data,
        args=("--profiles", str(profile)),
        extra_env=env,
        log=data / "server.log",
        stop_timeout=30,
        port=port,
    ) as served:
        yield Gateway(served.url, token, served.log, served.process.pid)
