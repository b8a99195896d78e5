"""The console's HTTP side against a real `serve`: where `/` leads, the security headers of
every console answer, and paths outside the console staying the API's 404 problems."""

from __future__ import annotations

import re

import httpx
import pytest

from iri_gateway.console.routes import CONTENT_SECURITY_POLICY, STATIC_DIR
from tests.console.conftest import Console


def test_the_root_leads_to_the_sites_page(console: Console) -> None:
    answer = httpx.get(f"{console.url}/")
    assert answer.status_code == 307
    assert answer.headers["location"] == "/console/sites"
    assert answer.headers["content-security-policy"] == CONTENT_SECURITY_POLICY


@pytest.mark.parametrize("path", ["/console/sign-in", "/console/sites", "/console/jobs",
                                  "/console/profiles"])
def test_pages_are_shells_under_a_strict_content_security_policy(
    console: Console, path: str
) -> None:
    answer = httpx.get(f"{console.url}{path}")
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "text/html; charset=utf-8"
    policy = answer.headers["content-security-policy"]
    assert "script-src 'self';" in policy and "default-src 'none';" in policy
    assert answer.headers["x-content-type-options"] == "nosniff"
    html = answer.text
    # No inline script or style the policy would have to allow; every asset from this server.
    assert re.findall(r"<script(?![^>]*\ssrc=)", html) == []
    assert " style=" not in html and "<style" not in html
    assert re.findall(r'(?:src|href)="(?![/#])', html) == []


@pytest.mark.parametrize("name", sorted(p.name for p in STATIC_DIR.iterdir()))
def test_every_shipped_asset_is_served_with_its_type(console: Console, name: str) -> None:
    answer = httpx.get(f"{console.url}/console/static/{name}")
    assert answer.status_code == 200
    expected = {"js": "text/javascript", "css": "text/css", "svg": "image/svg+xml"}
    assert answer.headers["content-type"].split(";")[0] == expected[name.rsplit(".", 1)[1]]
    assert answer.content == (STATIC_DIR / name).read_bytes()


@pytest.mark.parametrize("path", [
    "/nothing", "/index.html", "/consolex", "/console/nothing", "/console/static/nope.js",
    "/console/static/..%2Froutes.py", "/console/static/%2e%2e/routes.py", "/api/v2/nothing",
])
def test_paths_outside_the_console_stay_404_problems(console: Console, path: str) -> None:
    answer = httpx.get(f"{console.url}{path}")
    assert answer.status_code == 404, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.json()["status"] == 404


def test_the_modules_never_parse_strings_as_html() -> None:
    """Profile and user strings reach the page as text nodes only (dom.js `el`)."""
    for script in STATIC_DIR.glob("*.js"):
        text = script.read_text()
        for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write",
                     "eval(", "new Function"):
            assert sink not in text, f"{script.name} uses {sink}"
