"""The API docs pages and the browser-facing headers of the console's origin (issue 23, item 7),
on a real `iri-gateway serve`.

`/docs` and `/redoc` load Swagger UI and ReDoc from a CDN onto the origin where a signed-in
console tab keeps its token: off by default (404), on with the setting `api_docs`, and then
under a policy that allows exactly the CDN and the page's own inline script (by hash), no
framing. Every other answer (the API's JSON and errors, `/openapi.json`, the console) carries
a Content-Security-Policy, X-Frame-Options, X-Content-Type-Options and Referrer-Policy.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from tests.conftest import Server
from tests.support.serve import RunningServe, running_serve

PROTECTION = (
    "Content-Security-Policy",
    "X-Frame-Options",
    "X-Content-Type-Options",
    "Referrer-Policy",
)


def _directives(policy: str) -> dict[str, list[str]]:
    parts = [part.split() for part in policy.split(";") if part.strip()]
    return {part[0]: part[1:] for part in parts}


def _protected(answer: httpx.Response) -> dict[str, list[str]]:
    """The answer's policy, after checking it carries every protection header."""
    for name in PROTECTION:
        assert answer.headers.get(name), (answer.url, name, dict(answer.headers))
    assert answer.headers["X-Frame-Options"] == "DENY"
    assert answer.headers["X-Content-Type-Options"] == "nosniff"
    assert answer.headers["Referrer-Policy"] == "no-referrer"
    policy = _directives(answer.headers["Content-Security-Policy"])
    assert policy["frame-ancestors"] == ["'none'"], policy
    assert policy["default-src"] == ["'none'"], policy
    return policy


@pytest.mark.parametrize("path", ["/docs", "/redoc", "/docs/oauth2-redirect"])
def test_the_docs_pages_are_off_by_default(server: Server, path: str) -> None:
    answer = httpx.get(f"{server.url}{path}", timeout=30)
    assert answer.status_code == 404, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    _protected(answer)


@pytest.mark.parametrize(
    "path",
    [
        "/openapi.json",
        "/api/v2/facility",
        "/api/v2/compute/jobs",
        "/api/v2/no-such-thing",
        "/console/sites",
        "/console/static/favicon.svg",
        "/health",
    ],
)
def test_every_answer_of_the_origin_is_protected(server: Server, path: str) -> None:
    answer = httpx.get(
        f"{server.url}{path}", timeout=30, headers={"Authorization": f"Bearer {server.token}"}
    )
    assert answer.status_code in (200, 404), answer.text
    _protected(answer)


@pytest.fixture(scope="module")
def with_docs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServe]:
    data: Path = tmp_path_factory.mktemp("docs-on") / "data"
    with running_serve(data, extra_env={"IRI_GATEWAY_API_DOCS": "true"}) as serve:
        yield serve


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}" if parts.netloc else "'self'"


@pytest.mark.parametrize("path", ["/docs", "/redoc"])
def test_the_docs_pages_when_on_run_only_what_their_policy_names(
    with_docs: RunningServe, path: str
) -> None:
    answer = httpx.get(f"{with_docs.url}{path}", timeout=30)
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/html")
    policy = _protected(answer)
    html = answer.text
    scripts = policy["script-src"]
    assert "'unsafe-inline'" not in scripts and "'unsafe-eval'" not in scripts, scripts
    assert policy["connect-src"] == ["'self'"]
    for source in re.findall(r'<script src="([^"]+)"', html):
        assert _origin(source) in scripts, (source, scripts)
    for body in re.findall(r"<script>(.*?)</script>", html, flags=re.DOTALL):
        digest = base64.b64encode(hashlib.sha256(body.encode()).digest()).decode()
        assert f"'sha256-{digest}'" in scripts, scripts
    for sheet in re.findall(
        r'<link[^>]*rel="stylesheet"[^>]*>|<link[^>]*href="[^"]+"[^>]*'
        r'rel="stylesheet"[^>]*>',
        html,
    ):
        href = re.search(r'href="([^"]+)"', sheet)
        assert href and _origin(href.group(1)) in policy["style-src"], (sheet, policy)
    # Every third-party origin the page names is one the policy names; nothing else loads.
    named = set(re.findall(r'(?:src|href)="(https://[^/"]+)', html))
    allowed = {source for values in policy.values() for source in values}
    assert named <= allowed, (named, allowed)
    assert httpx.get(f"{with_docs.url}/openapi.json", timeout=30).status_code == 200
