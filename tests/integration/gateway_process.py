"""A real `iri-gateway serve` on a profile of the test cluster, for tests that need HTTP.

`serve(profile, data)` starts the server as a child process (its own poller and reconcile,
as in production) with tests/support/serve.py, waits until it answers, yields its URL and a
token for alice (project proj1), and stops it afterwards, whatever happened.
`profile_allowing` derives a profile of the test cluster that also allows some custom
scheduler attributes (e.g. `begin`, to keep jobs pending without using the nodes).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.support.serve import free_port, issue_token, running_serve

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


def sent_status(
    url: str, job_id: str, headers: Mapping[str, str], *, resource: str = "cluster"
) -> dict[str, Any]:
    """The job's status (getJob's `status`) once it has left `new`: the gateway sent it to
    the scheduler, or gave up; at most 120 s."""
    deadline = time.monotonic() + 120
    while True:
        status: dict[str, Any] = httpx.get(
            f"{url}{API}/compute/status/{resource}/{job_id}", headers=headers, timeout=30
        ).json()["status"]
        if status["state"] != "new":
            return status
        assert time.monotonic() < deadline, f"not sent after 120 s: {status}"
        time.sleep(0.3)


@contextmanager
def serve_with_proxy(
    profile: Path, data: Path, *, host: str = "localhost", env: Mapping[str, str] | None = None
) -> Iterator[Gateway]:
    """`serve` with its port proxy on `http://HOST:<its port>` (the console's origin being
    127.0.0.1) and a quick poll, so a service job's state follows soon."""
    port = free_port()
    settings = {
        "IRI_GATEWAY_PROXY_URL": f"http://{host}:{port}",
        "IRI_GATEWAY_POLL_FAST": "0.5",
        **(env or {}),
    }
    with serve(profile, data, env=settings, port=port) as gateway:
        yield gateway


def launch(gateway: Gateway, resource: str, spec: dict[str, Any]) -> str:
    """launchJob as alice; the new job's id (the server's tracebacks when refused)."""
    answer = httpx.post(
        f"{gateway.url}{API}/compute/job/{resource}",
        json=spec,
        headers=gateway.headers(),
        timeout=60,
    )
    assert answer.status_code == 200, f"{answer.text}\n{gateway.tracebacks()}"
    job_id: str = answer.json()["id"]
    return job_id


def status(gateway: Gateway, resource: str, job_id: str) -> dict[str, Any]:
    """getJob's `status` of alice's job."""
    answer = httpx.get(
        f"{gateway.url}{API}/compute/status/{resource}/{job_id}",
        headers=gateway.headers(),
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    document: dict[str, Any] = answer.json()["status"]
    return document


def cancel(gateway: Gateway, resource: str, job_id: str) -> None:
    """cancelJob of alice's job, whatever the answer (a test's clean-up)."""
    httpx.delete(
        f"{gateway.url}{API}/compute/cancel/{resource}/{job_id}",
        headers=gateway.headers(),
        timeout=60,
    )
