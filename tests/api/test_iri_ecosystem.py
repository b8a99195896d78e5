"""The IRI client ecosystem finds the gateway (issue 27, item 5), against a real serve.

The official client toolkit (doe-iri/iri-facility-api-toolkit,
`amscrot/serviceclient/amsc_iri/version_prober.py`) decides which API version a facility
speaks like this: for each version, highest first (2, then 1), it sends
`GET <base URL>/api/v<N>/openapi.json` (with `Authorization: Bearer <key>` when it has one,
5 s connect and read time-outs, certificates not checked) and takes the first that answers
HTTP 200; when none does (another status or an error), it falls back to the lowest, 1. It
reads neither the body nor its content type. `toolkit_version` below is that rule, written
again here from those facts (the toolkit released on PyPI, amscrot-py 1.2.0, does not ship
the prober yet, so the toolkit itself cannot be run). It must say 2 for a real
`iri-gateway serve`, and 1 for servers without the path, so this test can fail.

The same serve answers the reference implementation's `whoami`, and `/api/v2`, the docs
page, as the setting `api_docs` says.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from iri_gateway import __version__
from iri_gateway.api.app import create_app
from iri_gateway.service.operations.settings import Settings
from tests.support.serve import free_port, issue_token, running_serve

PROBE_VERSIONS = (2, 1)


def toolkit_version(base_url: str, api_key: str | None = None) -> int:
    """The toolkit's version-probing rule (see the module's docstring)."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    base = base_url.rstrip("/")
    with httpx.Client(verify=False, timeout=httpx.Timeout(5.0)) as http:
        for version in PROBE_VERSIONS:
            try:
                answer = http.get(f"{base}/api/v{version}/openapi.json", headers=headers)
            except httpx.HTTPError:
                continue
            if answer.status_code == 200:
                return version
    return PROBE_VERSIONS[-1]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """A real `iri-gateway serve` (default settings: the docs pages off) and alice's token."""
    data = tmp_path_factory.mktemp("ecosystem") / "data"
    token = issue_token(data, "alice", "proj1")
    with running_serve(data) as serve:
        yield serve.url, token


class _Only(BaseHTTPRequestHandler):
    """Answers 200 with a small JSON document on the paths of `ok`, 404 elsewhere."""

    ok: frozenset[str] = frozenset()

    def do_GET(self) -> None:
        found = self.path in self.ok
        body = b'{"openapi": "3.1.0"}' if found else b"not found"
        self.send_response(200 if found else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def plain_server() -> Iterator[type[_Only]]:
    """A plain HTTP server on 127.0.0.1 (its handler class, whose `ok` paths the test sets;
    its URL is the class's `url`)."""
    handler = type("Handler", (_Only,), {})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    handler.url = f"http://127.0.0.1:{server.server_address[1]}"  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield handler
    finally:
        server.shutdown()
        server.server_close()


def test_the_toolkit_rule_finds_v2_on_a_real_serve(served: tuple[str, str]) -> None:
    url, token = served
    assert toolkit_version(url) == 2
    assert toolkit_version(url + "/", api_key=token) == 2  # as the toolkit sends it, keyed
    versioned = httpx.get(f"{url}/api/v2/openapi.json", timeout=30)
    assert versioned.status_code == 200
    assert versioned.headers["content-type"] == "application/json"
    document = versioned.json()
    assert document["openapi"].startswith("3.")
    assert document["info"]["version"] == __version__
    assert document == httpx.get(f"{url}/openapi.json", timeout=30).json()
    assert "/api/v2/account/whoami" in document["paths"]
    # v1 is not served: its probe is the toolkit's fallback, and it must not pass by accident.
    assert httpx.get(f"{url}/api/v1/openapi.json", timeout=30).status_code == 404


def test_the_rule_says_v1_where_the_path_is_missing(plain_server: type[_Only]) -> None:
    url: str = plain_server.url  # type: ignore[attr-defined]
    assert toolkit_version(url) == 1  # nothing answers 200: the fallback
    plain_server.ok = frozenset({"/api/v1/openapi.json"})
    assert toolkit_version(url) == 1
    plain_server.ok = frozenset({"/api/v2/openapi.json"})
    assert toolkit_version(url) == 2  # the rule itself can say 2
    assert toolkit_version(f"http://127.0.0.1:{free_port()}") == 1  # nobody listens


def test_whoami_as_the_reference_answers_it(served: tuple[str, str]) -> None:
    url, token = served
    answer = httpx.get(
        f"{url}/api/v2/account/whoami", headers={"Authorization": f"Bearer {token}"}, timeout=30
    )
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"username": "alice"}
    for headers in ({}, {"Authorization": "Bearer not-a-token"}):
        refused = httpx.get(f"{url}/api/v2/account/whoami", headers=headers, timeout=30)
        assert refused.status_code == 401, refused.text
        assert refused.headers["content-type"] == "application/problem+json"
        assert "username" not in refused.text
    document = httpx.get(f"{url}/api/v2/openapi.json", timeout=30).json()
    operation = document["paths"]["/api/v2/account/whoami"]["get"]
    assert operation["operationId"] == "whoami"
    assert set(operation["tags"]) == {"account", "extensions"}
    assert operation["x-iri"]["implementation"]["level"] == "required"
    schema = operation["responses"]["200"]["content"]["application/json"]["schema"]
    assert document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]["required"] == [
        "username"
    ]


def test_the_v2_docs_page_is_off_by_default_and_says_where_the_document_is(
    served: tuple[str, str],
) -> None:
    url, _ = served
    for path in ("/api/v2", "/api/v2/docs"):
        answer = httpx.get(url + path, timeout=30)
        assert answer.status_code == 404, answer.text
        assert answer.headers["content-type"] == "application/problem+json"
        assert "api_docs" in answer.json()["detail"]
        assert "/api/v2/openapi.json" in answer.json()["detail"]


@pytest.mark.anyio
async def test_the_v2_docs_page_when_turned_on(tmp_path: Path) -> None:
    app = create_app(Settings(data_dir=tmp_path, api_docs=True), run_poller=False)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        for path in ("/api/v2", "/api/v2/docs"):
            page = await client.get(path)
            assert page.status_code == 200
            assert page.headers["content-type"].startswith("text/html")
            assert "/api/v2/openapi.json" in page.text
            assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
        assert (await client.get("/api/v2/openapi.json")).status_code == 200
