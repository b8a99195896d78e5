"""The console's HTTP side against a real `serve`: where `/` leads, the security headers of
every console answer, and paths outside the console staying the API's 404 problems."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest

from iri_gateway.console.routes import CONTENT_SECURITY_POLICY, STATIC_DIR, asset_version
from tests.console.conftest import Console


def test_the_root_leads_to_the_sites_page(console: Console) -> None:
    answer = httpx.get(f"{console.url}/")
    assert answer.status_code == 307
    assert answer.headers["location"] == "/console/sites"
    assert answer.headers["content-security-policy"] == CONTENT_SECURITY_POLICY


@pytest.mark.parametrize(
    "path",
    ["/console/sign-in", "/console/sites", "/console/jobs", "/console/profiles", "/console/try"],
)
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
    expected = {
        "js": "text/javascript",
        "css": "text/css",
        "svg": "image/svg+xml",
        "json": "application/json",
    }
    assert answer.headers["content-type"].split(";")[0] == expected[name.rsplit(".", 1)[1]]
    assert answer.content == (STATIC_DIR / name).read_bytes()


def test_pages_name_their_assets_under_a_version_the_browser_keeps(console: Console) -> None:
    html = httpx.get(f"{console.url}/console/jobs").text
    named = re.findall(r'(?:src|href)="(/console/static/[^"]+)"', html)
    version = asset_version()
    assert f"/console/static/{version}/jobs.js" in named
    assert f"/console/static/{version}/shell.js" in named, "the imports are preloaded"
    assert all(path.startswith(f"/console/static/{version}/") for path in named), named
    for path in named:
        answer = httpx.get(f"{console.url}{path}")
        assert answer.status_code == 200
        assert answer.headers["cache-control"] == "public, max-age=31536000, immutable"
        assert answer.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        assert answer.content == (STATIC_DIR / path.rsplit("/", 1)[1]).read_bytes()
    # The unversioned address is checked at every use; an old version is gone, with the why.
    assert httpx.get(f"{console.url}/console/static/jobs.js").headers["cache-control"] == "no-cache"
    stale = httpx.get(f"{console.url}/console/static/0123456789abcdef/jobs.js")
    assert stale.status_code == 404
    assert stale.headers["content-type"] == "application/problem+json"
    assert "reload the page" in stale.json()["detail"]
    unknown = httpx.get(f"{console.url}/console/static/{version}/nope.js")
    assert unknown.status_code == 404
    # The API's problem document, though the console imports nothing of api/ (AssetNotFound).
    assert stale.json() == {
        "type": "about:blank",
        "status": 404,
        "title": "Not Found",
        "detail": "the console's assets are no longer version '0123456789abcdef' "
        f"(now {version!r}): reload the page",
        "instance": f"{console.url}/console/static/0123456789abcdef/jobs.js",
    }
    assert unknown.headers["content-type"] == "application/problem+json"
    assert unknown.json() == {
        "type": "about:blank",
        "status": 404,
        "title": "Not Found",
        "detail": "the console has no asset 'nope.js'",
        "instance": f"{console.url}/console/static/{version}/nope.js",
    }


EXAMPLES = sorted(p.name for p in STATIC_DIR.glob("example-*.json"))


def test_the_try_page_ships_its_four_examples() -> None:
    assert EXAMPLES == [
        "example-flavours.json",
        "example-gpu-mpi.json",
        "example-plain.json",
        "example-roles.json",
    ]


@pytest.mark.parametrize("name", EXAMPLES)
def test_every_example_is_a_jobspec_the_gateway_places(console: Console, name: str) -> None:
    """The Try a job page's examples are valid JobSpecs: placement ranks them (no 422)."""
    spec = json.loads((STATIC_DIR / name).read_text(encoding="utf-8"))
    answer = httpx.post(
        f"{console.url}/api/v2/compute/placement",
        json=spec,
        headers={"Authorization": f"Bearer {console.admin}"},
    )
    assert answer.status_code == 200, answer.text
    assert len(answer.json()) == len(console.capabilities())


@pytest.mark.parametrize(
    "path",
    [
        "/nothing",
        "/index.html",
        "/consolex",
        "/console/nothing",
        "/console/static/nope.js",
        "/console/static/..%2Froutes.py",
        "/console/static/%2e%2e/routes.py",
        "/api/v2/nothing",
    ],
)
def test_paths_outside_the_console_stay_404_problems(console: Console, path: str) -> None:
    answer = httpx.get(f"{console.url}{path}")
    assert answer.status_code == 404, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.json()["status"] == 404


def test_the_modules_never_parse_strings_as_html() -> None:
    """Profile and user strings reach the page as text nodes only (dom.js `el`)."""
    for script in STATIC_DIR.glob("*.js"):
        text = script.read_text()
        for sink in (
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "document.write",
            "eval(",
            "new Function",
        ):
            assert sink not in text, f"{script.name} uses {sink}"


def test_the_gpu_mpi_example_is_the_repositorys_own_without_its_account() -> None:
    """The console's copy follows examples/gpu-mpi-job.json; only `attributes.account` (a
    project the signed-in user may not have; the page sends the chosen project) is left out."""
    examples = Path(__file__).resolve().parents[2] / "examples"
    repository = json.loads((examples / "gpu-mpi-job.json").read_text())
    repository["attributes"].pop("account")
    console = json.loads((STATIC_DIR / "example-gpu-mpi.json").read_text())
    assert console == repository
