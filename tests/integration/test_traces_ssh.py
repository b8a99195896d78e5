"""Traces on the test cluster: a launch on `cluster-ssh` is one trace from the request to the
`sbatch` the submitter sends over SSH, exported by a real `serve` to a real OTLP receiver;
the SSH spans name the program (argv[0]) and nothing of the command line; a filesystem
request's file agent, started over SSH, is a span of the request too."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from tests.integration.conftest import running_cluster, write_cluster_profile
from tests.integration.gateway_process import API, Gateway, serve
from tests.support.otlp_receiver import ReceivedSpan, Receiver, otlp_receiver

RESOURCE = "cluster-ssh"


@dataclass(frozen=True)
class Traced:
    gateway: Gateway
    receiver: Receiver


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Traced]:
    profile = write_cluster_profile(running_cluster(), tmp_path_factory.mktemp("profile"))
    with otlp_receiver() as receiver:
        env = {
            "IRI_GATEWAY_OTLP_TRACES_ENDPOINT": receiver.url,
            "OTEL_BSP_SCHEDULE_DELAY": "100",
            "IRI_GATEWAY_FILE_AGENTS_WARM": "0",  # each request starts its file agent
        }
        with serve(profile, tmp_path_factory.mktemp("traced-ssh"), env=env) as gateway:
            yield Traced(gateway, receiver)


def of_trace(spans: list[ReceivedSpan], trace_id: str) -> list[ReceivedSpan]:
    return [span for span in spans if span.trace_id == trace_id]


def test_sbatch_over_ssh_is_a_child_of_the_launch(traced: Traced) -> None:
    caller = secrets.token_hex(16)
    marker = f"user-value-{secrets.token_hex(4)}"
    job = {"executable": "/bin/echo", "arguments": [marker], "name": marker}
    gateway = traced.gateway
    launched = httpx.post(
        f"{gateway.url}{API}/compute/job/{RESOURCE}",
        json=job,
        headers=gateway.headers(traceparent=f"00-{caller}-{secrets.token_hex(8)}-01"),
        timeout=60,
    )
    assert launched.status_code == 200, f"{launched.text}\n{gateway.tracebacks()}"

    def sent(spans: list[ReceivedSpan]) -> bool:
        # Both ends of the trace: the server's span and the submitter's come in batches of
        # their own, in either order (CI once read the sbatch before the launch's arrived).
        names = {span.name for span in of_trace(spans, caller)}
        return {"ssh sbatch", "launchJob"} <= names

    spans = of_trace(traced.receiver.wait_for(sent, timeout=60), caller)
    (server,) = [span for span in spans if span.name == "launchJob"]
    # One attempt, or more when the controller was busy (each a retry in the same trace).
    sbatch = [span for span in spans if span.name == "ssh sbatch"][-1]
    (scheduler,) = [span for span in spans if span.span_id == sbatch.parent_span_id]
    assert scheduler.name == "scheduler submit"
    assert scheduler.parent_span_id == server.span_id
    assert scheduler.attributes["iri.scheduler"] == "slurm"
    assert scheduler.attributes["iri.resource"] == RESOURCE
    assert sbatch.parent_span_id == scheduler.span_id
    assert sbatch.attributes == {"iri.transport": "ssh", "process.executable.name": "sbatch"}
    with traced.receiver.lock:
        exported = b"".join(traced.receiver.posts)
    assert marker.encode() not in exported
    assert b"--parsable" not in exported and gateway.token.encode() not in exported


def test_a_file_agent_started_over_ssh_is_a_span_of_the_request(traced: Traced) -> None:
    caller = secrets.token_hex(16)
    gateway = traced.gateway
    listed = httpx.post(
        f"{gateway.url}{API}/filesystem/ls/{RESOURCE}",
        json={"path": ""},  # the folders of her jobs
        headers=gateway.headers(traceparent=f"00-{caller}-{secrets.token_hex(8)}-01"),
        timeout=60,
    )
    assert listed.status_code == 200, listed.text

    def answered(spans: list[ReceivedSpan]) -> bool:
        mine = of_trace(spans, caller)
        return any(span.kind == 2 for span in mine) and any(
            span.attributes.get("iri.transport") == "ssh" for span in mine
        )

    spans = of_trace(traced.receiver.wait_for(answered, timeout=60), caller)
    (server,) = [span for span in spans if span.kind == 2]
    assert server.attributes["http.route"] == "/api/v2/filesystem/ls/{resource_id}"
    (agent,) = [span for span in spans if span.attributes.get("iri.transport") == "ssh"]
    assert agent.name == "ssh python3" and agent.parent_span_id == server.span_id
    assert agent.attributes == {"iri.transport": "ssh", "process.executable.name": "python3"}
    with traced.receiver.lock:
        exported = b"".join(traced.receiver.posts)
    assert b"python3 -I" not in exported  # the agent's command line is not recorded
