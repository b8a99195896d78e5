"""Traces: a real `iri-gateway serve` exports its spans over OTLP/HTTP to a real receiver
(tests/support/otlp_receiver.py) when `IRI_GATEWAY_OTLP_TRACES_ENDPOINT` is set: a server
span per request named after its operation id, continuing a client's W3C `traceparent`,
with child spans for the store and, from the submitter's thread, the scheduler command; no
user value in any of them. A hostile `traceparent` never breaks a request; with tracing off
nothing is sent and the OpenTelemetry SDK is not even imported."""

from __future__ import annotations

import json
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from iri_gateway.api.app import create_app
from iri_gateway.service.operations.request_context import trace_id
from iri_gateway.service.operations.settings import Settings
from tests.support.otlp_receiver import ReceivedSpan, Receiver, otlp_receiver
from tests.support.serve import CLI, clean_env, issue_token, running_serve

V2 = "/api/v2"
CAPABILITIES = f"{V2}/compute/capabilities/local"
SERVER, CLIENT = 2, 3  # OTLP's span kinds
QUICK_EXPORT = {"OTEL_BSP_SCHEDULE_DELAY": "100"}
"""The SDK's batch delay in milliseconds (its own variable): spans within a tenth of a second."""


def traceparent(trace_id: str, span_id: str) -> str:
    return f"00-{trace_id}-{span_id}-01"


class Traced:
    """A traced server, its receiver and alice's token."""

    def __init__(self, url: str, pid: int, receiver: Receiver, token: str) -> None:
        self.url = url
        self.pid = pid
        self.receiver = receiver
        self.headers = {"Authorization": f"Bearer {token}", "X-IRI-Facility-Project": "proj1"}
        self.token = token


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Traced]:
    data_dir = tmp_path_factory.mktemp("traced")
    token = issue_token(data_dir, "alice", "proj1")
    with otlp_receiver() as receiver:
        env = {
            "IRI_GATEWAY_OTLP_TRACES_ENDPOINT": receiver.url,
            "IRI_GATEWAY_TRACE_SERVICE_NAME": "gateway-under-test",
            **QUICK_EXPORT,
        }
        with running_serve(data_dir, extra_env=env) as served:
            yield Traced(served.url, served.process.pid, receiver, token)


def server_span(receiver: Receiver, answer: httpx.Response) -> ReceivedSpan:
    """The server span of the request ANSWER answers (found by its request id)."""
    request_id = answer.headers["X-Request-ID"]

    def found(spans: list[ReceivedSpan]) -> bool:
        return any(span.attributes.get("iri.request_id") == request_id for span in spans)

    spans = receiver.wait_for(found)
    (server,) = [span for span in spans if span.attributes.get("iri.request_id") == request_id]
    return server


def in_trace(spans: list[ReceivedSpan], trace_id: str) -> list[ReceivedSpan]:
    return [span for span in spans if span.trace_id == trace_id]


def test_a_launch_is_one_trace_from_the_request_to_the_scheduler(traced: Traced) -> None:
    caller_trace, caller_span = secrets.token_hex(16), secrets.token_hex(8)
    marker = f"user-value-{secrets.token_hex(4)}"
    job = {"executable": "/bin/echo", "arguments": [marker], "name": marker}
    launched = httpx.post(
        f"{traced.url}{V2}/compute/job/local",
        json=job,
        headers={**traced.headers, "traceparent": traceparent(caller_trace, caller_span)},
        timeout=30,
    )
    assert launched.status_code == 200, launched.text

    def complete(spans: list[ReceivedSpan]) -> bool:
        names = {span.name for span in in_trace(spans, caller_trace)}
        return {"launchJob", "scheduler submit"} <= names

    spans = in_trace(traced.receiver.wait_for(complete), caller_trace)
    (server,) = [span for span in spans if span.name == "launchJob"]
    assert server.parent_span_id == caller_span  # the caller's trace, continued
    assert server.kind == SERVER and server.service == "gateway-under-test"
    assert server.instance == f"{socket.gethostname()}:{traced.pid}"  # this process's spans
    assert server.attributes["http.route"] == "/api/v2/compute/job/{resource_id}"
    assert server.attributes["http.request.method"] == "POST"
    assert server.attributes["http.response.status_code"] == 200
    assert server.attributes["iri.operation_id"] == "launchJob"
    assert server.attributes["iri.request_id"] == launched.headers["X-Request-ID"]

    statements = [span for span in spans if "db.operation.name" in span.attributes]
    inserted = [span for span in statements if span.name == "INSERT jobs"]
    assert inserted and all(span.parent_span_id == server.span_id for span in inserted)
    assert inserted[0].kind == CLIENT and inserted[0].attributes["db.system.name"] == "sqlite"

    # Sent by a submitter worker, after (or while) the request answered: still its trace.
    scheduler = next(span for span in spans if span.name == "scheduler submit")
    assert scheduler.parent_span_id == server.span_id
    assert scheduler.attributes["iri.resource"] == "local"
    assert scheduler.attributes["iri.scheduler"] == "local"
    assert scheduler.status_code != 2  # not an error

    # Nothing of the user's job, and never the token, in anything exported.
    with traced.receiver.lock:
        sent = b"".join(traced.receiver.posts)
    assert marker.encode() not in sent
    assert traced.token.encode() not in sent


def test_a_request_without_traceparent_starts_a_trace_of_its_own(traced: Traced) -> None:
    answer = httpx.get(f"{traced.url}{CAPABILITIES}", headers=traced.headers, timeout=30)
    assert answer.status_code == 200
    server = server_span(traced.receiver, answer)
    assert server.name == "getComputeCapabilities" and server.parent_span_id == ""
    assert server.attributes["http.route"] == "/api/v2/compute/capabilities/{resource_id}"


def test_a_cancel_sent_by_the_submitter_continues_the_cancel_request(traced: Traced) -> None:
    job = {"executable": "/bin/sleep", "arguments": ["60"]}
    launched = httpx.post(
        f"{traced.url}{V2}/compute/job/local", json=job, headers=traced.headers, timeout=30
    )
    assert launched.status_code == 200, launched.text
    job_id = launched.json()["id"]
    caller = secrets.token_hex(16)
    canceled = httpx.delete(
        f"{traced.url}{V2}/compute/cancel/local/{job_id}",
        headers={**traced.headers, "traceparent": traceparent(caller, secrets.token_hex(8))},
        timeout=30,
    )
    assert canceled.status_code in (200, 204), canceled.text

    def sent(spans: list[ReceivedSpan]) -> bool:
        names = {span.name for span in in_trace(spans, caller)}
        return {"cancelJob", "scheduler cancel"} <= names

    spans = in_trace(traced.receiver.wait_for(sent), caller)
    (server,) = [span for span in spans if span.name == "cancelJob"]
    (cancel,) = [span for span in spans if span.name == "scheduler cancel"]
    assert cancel.parent_span_id == server.span_id
    assert server.attributes["http.route"] == "/api/v2/compute/cancel/{resource_id}/{job_id}"


def test_a_head_request_is_named_after_the_get_it_answers_as(traced: Traced) -> None:
    answer = httpx.head(f"{traced.url}{CAPABILITIES}", headers=traced.headers, timeout=30)
    assert answer.status_code == 200
    server = server_span(traced.receiver, answer)
    assert server.name == "getComputeCapabilities"
    assert server.attributes["http.request.method"] == "HEAD"


def test_an_unknown_path_and_method_are_not_copied_into_the_span(traced: Traced) -> None:
    secret = f"secret-{secrets.token_hex(4)}"
    answer = httpx.request("PROPFIND", f"{traced.url}/nowhere/{secret}", timeout=30)
    assert answer.status_code in (404, 405), answer.text
    server = server_span(traced.receiver, answer)
    assert server.name == "_OTHER" and "http.route" not in server.attributes
    assert server.attributes["http.request.method"] == "_OTHER"
    with traced.receiver.lock:
        assert secret.encode() not in b"".join(traced.receiver.posts)


HOSTILE = [
    "garbage",
    "00-" + "0" * 32 + "-" + "1" * 16 + "-01",  # the all-zero trace id is invalid
    "00-" + "1" * 32 + "-" + "0" * 16 + "-01",  # and the all-zero span id
    "ff-" + "1" * 32 + "-" + "1" * 16 + "-01",  # version ff is forbidden
    "00-" + "A" * 32 + "-" + "1" * 16 + "-01",  # upper case
    "00-" + "2" * 32 + "-" + "2" * 16 + "-01" + "x" * 8000,  # huge
    "00-" + "3" * 32 + "-" + "3" * 16 + "-01\u00e9",  # not ASCII
]


@pytest.mark.parametrize("offered", HOSTILE)
def test_a_hostile_traceparent_never_breaks_a_request(traced: Traced, offered: str) -> None:
    answer = httpx.get(
        f"{traced.url}{CAPABILITIES}",
        headers={
            **{name.encode(): value.encode() for name, value in traced.headers.items()},
            b"traceparent": offered.encode("utf-8"),
            b"tracestate": b"k=v," * 2000,
        },
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    server = server_span(traced.receiver, answer)
    assert server.parent_span_id == ""  # ignored: a trace of its own
    assert server.trace_id not in offered


def test_two_traceparent_headers_are_ignored_not_an_error(traced: Traced) -> None:
    first, second = traceparent("4" * 32, "4" * 16), traceparent("5" * 32, "5" * 16)
    answer = httpx.get(
        f"{traced.url}{CAPABILITIES}",
        headers=[*traced.headers.items(), ("traceparent", first), ("traceparent", second)],
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    server = server_span(traced.receiver, answer)
    assert server.parent_span_id == "" and server.trace_id not in ("4" * 32, "5" * 32)


def test_tracing_off_sends_nothing_even_with_otel_variables(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    token = issue_token(data_dir, "alice", "proj1")
    headers = {"Authorization": f"Bearer {token}", "X-IRI-Facility-Project": "proj1"}
    with otlp_receiver() as receiver:
        base = receiver.url.removesuffix("/v1/traces")
        env = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": base,  # the SDK's variables alone turn nothing on
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": receiver.url,
            **QUICK_EXPORT,
        }
        with running_serve(data_dir, extra_env=env) as served:
            job = {"executable": "/bin/true"}
            launched = httpx.post(
                f"{served.url}{V2}/compute/job/local", json=job, headers=headers, timeout=30
            )
            assert launched.status_code == 200, launched.text
            assert httpx.get(f"{served.url}{V2}/facility", timeout=30).status_code == 200
            time.sleep(1.0)  # ten batch delays: a span would have been sent by now
        assert receiver.posts == []


LOADED_MODULES = """
import json, sys
from pathlib import Path
from iri_gateway.api.app import create_app
from iri_gateway.api.app import create_app
from iri_gateway.service.operations.request_context import trace_id
from iri_gateway.service.operations.settings import Settings
create_app(Settings(data_dir=Path(sys.argv[1]), otlp_traces_endpoint=sys.argv[2] or None))
print(json.dumps(sorted(m for m in sys.modules if m.startswith("opentelemetry.sdk")
                        or m.startswith("opentelemetry.exporter"))))
"""


@pytest.mark.parametrize("endpoint", ["", "http://127.0.0.1:9/v1/traces"])
def test_the_sdk_is_loaded_only_when_tracing_is_on(tmp_path: Path, endpoint: str) -> None:
    """Nothing slower to start with tracing off: neither the SDK nor the exporter (with
    its protobuf and requests) is imported."""
    ran = subprocess.run(
        [sys.executable, "-c", LOADED_MODULES, str(tmp_path), endpoint],
        capture_output=True,
        text=True,
        timeout=120,
        env=clean_env(),
    )
    assert ran.returncode == 0, ran.stderr
    loaded = json.loads(ran.stdout.strip().splitlines()[-1])
    if endpoint:
        assert "opentelemetry.sdk.trace" in loaded
        assert any(name.startswith("opentelemetry.exporter.otlp") for name in loaded)
    else:
        assert loaded == []


@pytest.mark.parametrize(
    "endpoint",
    [
        "collector:4318",
        "ftp://collector/v1/traces",
        "http:///v1/traces",
        "http://collector:99999/v1/traces",
        "http://collector:4318/v1/traces?x=1",
    ],
)
def test_a_malformed_endpoint_is_refused_naming_the_setting(endpoint: str) -> None:
    with pytest.raises(ValueError, match="otlp_traces_endpoint") as refused:
        Settings(otlp_traces_endpoint=endpoint)
    assert "http://collector:4318/v1/traces" in str(refused.value)  # an example of a good one


def test_serve_stops_on_a_malformed_endpoint_without_echoing_its_password(tmp_path: Path) -> None:
    ran = subprocess.run(
        [*CLI, "serve", "--port", "9", "--data-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        env={
            **clean_env(),
            "IRI_GATEWAY_OTLP_TRACES_ENDPOINT": "http://user:secret@collector:4318/v1/traces",
        },
    )
    assert ran.returncode != 0
    assert "IRI_GATEWAY_OTLP_TRACES_ENDPOINT" in ran.stderr, ran.stderr
    assert "credentials" in ran.stderr and "secret" not in ran.stderr + ran.stdout


def test_settings_refuse_a_bad_sample_ratio() -> None:
    with pytest.raises(ValueError, match="trace_sample_ratio"):
        Settings(trace_sample_ratio=1.5)


@pytest.mark.anyio
async def test_trace_id_names_the_trace_of_the_request_being_served(tmp_path: Path) -> None:
    """What the access log and the audit log record as the trace id (`trace_id()`) is the
    trace the request's spans are in: the caller's, continued."""
    with otlp_receiver() as receiver:
        app = create_app(
            Settings(data_dir=tmp_path, otlp_traces_endpoint=receiver.url), run_poller=False
        )
        seen: list[str | None] = []

        @app.get("/test-only/trace-id")
        def probe() -> dict[str, str]:  # a sync route: runs in the thread pool
            seen.append(trace_id())
            return {}

        caller = secrets.token_hex(16)
        transport = httpx.ASGITransport(app=app)
        # The lifespan's end exports the spans while the receiver still listens.
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=transport, base_url="http://test") as client,
        ):
            headers = {"traceparent": traceparent(caller, secrets.token_hex(8))}
            assert (await client.get("/test-only/trace-id", headers=headers)).status_code == 200
            assert (await client.get("/test-only/trace-id")).status_code == 200
        assert seen[0] == caller
        assert seen[1] is not None and seen[1] != caller
        spans = receiver.wait_for(lambda spans: len(spans) >= 2)
        assert {span.trace_id for span in spans if span.kind == SERVER} == set(seen)
        assert trace_id() is None  # outside a request
