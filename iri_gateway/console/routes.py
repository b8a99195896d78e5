"""The console's routes: `/` (to the sites page), the page shells, and the static assets.

Every console answer carries a strict Content-Security-Policy: scripts, styles, images and
API calls only from this origin, no inline script or style, no framing. The pages insert
every profile and user string with `textContent`, so the policy is a second wall, not the
only one. Paths outside `/` and `/console/` stay the API's (404 problem+json when unknown).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from fastapi import APIRouter, Response
from fastapi.responses import HTMLResponse, RedirectResponse
from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

from iri_gateway import __version__

_HERE = Path(__file__).parent
STATIC_DIR = _HERE / "static"
TEMPLATES_DIR = _HERE / "templates"

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
_MEDIA_TYPES = {
    ".js": "text/javascript",
    ".css": "text/css",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".json": "application/json",
}


class AssetNotFound(LookupError):
    """A console asset that is not shipped, or not under this process's asset version.

    The console's only refusal. The application answers it as a 404 problem, as it answers
    any unknown path (`api/plumbing/problems.py`): the console is a client of the API, built
    beneath it, and never reaches up into it.
    """


@dataclass(frozen=True)
class Page:
    """One page of the console: its path under /console/, title and module.

    An `admin_only` page's menu entry starts hidden and shell.js shows it to facility admins
    (`GET /account/me`); the page itself tells anybody else it is for admins, and the API
    refuses them anyway.
    """

    slug: str
    title: str
    script: str
    in_menu: bool = True
    admin_only: bool = False


PAGES = (
    Page("sign-in", "Sign in", "sign-in.js", in_menu=False),
    Page("sites", "Sites", "sites.js"),
    Page("try", "Try a job", "try.js"),
    Page("jobs", "Jobs", "jobs.js"),
    Page("profiles", "Profiles", "profiles.js", admin_only=True),
    Page("audit", "Audit log", "audit.js", admin_only=True),
)

router = APIRouter(include_in_schema=False)


@cache
def _environment() -> Environment:
    """The page templates, HTML-escaped (unlike the batch-script templates, which are bash)."""
    return Environment(
        loader=FileSystemLoader(TEMPLATES_DIR),
        autoescape=select_autoescape(default=True, default_for_string=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def _assets() -> dict[str, Path]:
    """The shipped assets by name: a fixed list, so no request path ever reaches the disk."""
    return {
        path.name: path
        for path in STATIC_DIR.iterdir()
        if path.suffix in _MEDIA_TYPES and path.is_file()
    }


@router.get("/")
async def home() -> RedirectResponse:
    """The address `serve` prints: the sites page (which sends a stranger to sign in)."""
    return RedirectResponse("/console/sites", status_code=307, headers=_HEADERS)


@router.get("/console")
@router.get("/console/")
async def console_home() -> RedirectResponse:
    return RedirectResponse("/console/sites", status_code=307, headers=_HEADERS)


@cache
def asset_version() -> str:
    """A digest of every shipped asset, taken once per process. The page shells name their
    assets under it (`/console/static/VERSION/NAME`, the modules' relative imports follow),
    so a browser keeps them without asking again; other assets get another version."""
    digest = hashlib.sha256()
    for name, path in sorted(_assets().items()):
        digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _render(page: Page) -> HTMLResponse:
    template = _environment().get_template(f"{page.slug}.html")
    html = template.render(
        page=page,
        pages=[p for p in PAGES if p.in_menu],
        version=__version__,
        static=f"/console/static/{asset_version()}",
    )
    return HTMLResponse(html, headers={**_HEADERS, "Cache-Control": "no-store"})


def _page_route(page: Page) -> None:
    async def show() -> HTMLResponse:
        return _render(page)

    show.__name__ = f"console_{page.slug.replace('-', '_')}"
    show.__doc__ = f"The console's {page.title} page shell."
    router.add_api_route(f"/console/{page.slug}", show, methods=["GET"])


for _page in PAGES:
    _page_route(_page)


def _asset(name: str, cache_control: str) -> Response:
    path = _assets().get(name)
    if path is None:
        raise AssetNotFound(f"the console has no asset {name!r}")
    return Response(
        path.read_bytes(),
        media_type=_MEDIA_TYPES[path.suffix],
        headers={**_HEADERS, "Cache-Control": cache_control},
    )


@router.get("/console/static/{name}")
async def asset(name: str) -> Response:
    """One shipped asset (JavaScript module, style sheet, icon, example JobSpec), or a 404
    problem; checked with the server at every use."""
    return _asset(name, "no-cache")


@router.get("/console/static/{version}/{name}")
async def versioned_asset(version: str, name: str) -> Response:
    """The same asset under this process's asset version, kept by the browser for good (the
    version changes with any asset); another version is a 404 problem saying to reload."""
    if version != asset_version():
        raise AssetNotFound(
            f"the console's assets are no longer version "
            f"{version!r} (now {asset_version()!r}): reload the page"
        )
    return _asset(name, "public, max-age=31536000, immutable")
