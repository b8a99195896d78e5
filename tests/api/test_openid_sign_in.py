"""The console's OpenID Connect sign-in (issue 31, part 1) against a real OpenID provider
(node-oidc-provider, started here): the authorization code flow with PKCE, the session's
cookies, the CSRF rule, one identity for the console and the API, tokens for another
audience or expired refused, sign-out on every replica, and the attacks on the flow (a
callback in another browser, a replayed one, an open redirect). The gateway runs in-process
(ASGI) at http://gateway.test; the provider is reached over real HTTP. Also opaque access
tokens (`auth = "introspection"`): asked at the provider, and refused once it revokes them,
for a bearer client and for a console session alike."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import create_engine, text

from iri_gateway.api.app import create_app
from iri_gateway.service.accounts import console_sessions
from iri_gateway.service.operations.settings import Settings
from tests.support.openid_provider import (
    OTHER_AUDIENCE,
    Provider,
    access_token,
    running_provider,
    sign_in,
)
from tests.support.serve import free_port

pytestmark = pytest.mark.anyio

PUBLIC = "http://gateway.test"
AUDIENCE = "https://gateway.test/api"
ME = "/api/v2/account/me"


@pytest.fixture(scope="module")
def provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Provider]:
    with running_provider(
        tmp_path_factory.mktemp("provider"),
        redirect_uri=f"{PUBLIC}/console/sign-in/callback",
        audience=AUDIENCE,
    ) as running:
        yield running


def settings_for(provider: Provider, data_dir: Path, **more: Any) -> Settings:
    chosen: dict[str, Any] = {
        "auth": "jwt",
        "jwks_url": provider.jwks_url,
        "jwt_issuer": provider.issuer,
        "jwt_audience": AUDIENCE,
        "jwt_exact_audience": True,
        "jwt_write_scope": "iri.write",
        "openid_issuer": provider.issuer,
        "openid_client_id": "iri-console",
        "openid_client_secret": "console-secret",
        "openid_scopes": "openid profile iri.write",
        "openid_resource": AUDIENCE,
        "public_url": PUBLIC,
    }
    return Settings(data_dir=data_dir, **chosen | more)


@asynccontextmanager
async def gateway(settings: Settings) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    """Another gateway of the test's, and a browser (or client) of it."""
    built = create_app(settings, run_poller=False)
    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=built), base_url=PUBLIC
        ) as client:
            yield built, client
    finally:
        built.state.engine.close()


@pytest.fixture
def app(provider: Provider, tmp_path: Path) -> Iterator[FastAPI]:
    built = create_app(settings_for(provider, tmp_path), run_poller=False)
    yield built
    built.state.engine.close()


@pytest.fixture
async def browser(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """The gateway as one browser sees it: its cookies kept between requests."""
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=PUBLIC) as c:
        yield c


async def begin(browser: httpx.AsyncClient, next_page: str = "/console/jobs") -> str:
    """The provider's address the gateway sends the browser to."""
    answer = await browser.get("/console/sign-in/openid", params={"next": next_page})
    assert answer.status_code == 303, answer.text
    return answer.headers["location"]


async def signed_in(
    provider: Provider, browser: httpx.AsyncClient, user: str = "alice"
) -> httpx.Response:
    """A whole sign-in of `user` in `browser`; the callback's answer."""
    authorize = await begin(browser)
    with httpx.Client(timeout=20) as at_provider:
        back = sign_in(provider, authorize, user, at_provider)
    return await browser.get(back.removeprefix(PUBLIC))


def csrf_of(browser: httpx.AsyncClient) -> dict[str, str]:
    return {"X-CSRF-Token": browser.cookies["iri-csrf"]}


async def test_a_sign_in_opens_a_session_that_the_api_knows_as_the_user(
    provider: Provider, browser: httpx.AsyncClient
) -> None:
    authorize = await begin(browser)
    asked = parse_qs(urlsplit(authorize).query)
    assert authorize.startswith(f"{provider.issuer}/auth?")
    assert asked["code_challenge_method"] == ["S256"] and len(asked["code_challenge"][0]) == 43
    assert asked["redirect_uri"] == [f"{PUBLIC}/console/sign-in/callback"]
    assert asked["resource"] == [AUDIENCE] and asked["client_id"] == ["iri-console"]
    assert "code_verifier" not in asked  # the verifier never leaves the gateway
    with httpx.Client(timeout=20) as at_provider:
        back = sign_in(provider, authorize, "alice", at_provider)
    finished = await browser.get(back.removeprefix(PUBLIC))
    assert finished.status_code == 303, finished.text
    assert finished.headers["location"] == "/console/jobs"
    cookies = {c.split("=", 1)[0]: c for c in finished.headers.get_list("set-cookie")}
    assert "HttpOnly" in cookies["iri-session"] and "SameSite=Strict" in cookies["iri-session"]
    assert "HttpOnly" not in cookies["iri-csrf"] and "SameSite=Strict" in cookies["iri-csrf"]
    assert cookies["iri-sign-in"].startswith("iri-sign-in=;")  # the attempt's binding gone
    me = await browser.get(ME)
    assert me.status_code == 200, me.text
    assert me.json()["user"] == "alice"
    assert me.json()["projects"] == ["demo"] and me.json()["access"] == "write"
    session = (await browser.get("/console/session")).json()
    assert session["signed_in"] and session["user"] == "alice" and session["openid"]


async def test_a_change_needs_the_csrf_token_beside_the_cookie(
    provider: Provider, browser: httpx.AsyncClient
) -> None:
    await signed_in(provider, browser)
    job = {"executable": "/bin/true", "attributes": {"account": "demo"}}
    launch = "/api/v2/compute/job/local"
    forged = await browser.post(launch, json=job)
    assert forged.status_code == 403 and "X-CSRF-Token" in forged.json()["detail"]
    wrong = await browser.post(launch, json=job, headers={"X-CSRF-Token": "guessed"})
    assert wrong.status_code == 403
    made = await browser.post(launch, json=job, headers=csrf_of(browser))
    assert made.status_code == 200, made.text
    assert (await browser.get(f"/api/v2/compute/status/local/{made.json()['id']}")).is_success


async def test_the_providers_access_token_is_the_same_caller_on_the_api(
    provider: Provider, browser: httpx.AsyncClient, app: FastAPI
) -> None:
    await signed_in(provider, browser)
    job = {"executable": "/bin/true", "attributes": {"account": "demo"}}
    made = await browser.post("/api/v2/compute/job/local", json=job, headers=csrf_of(browser))
    token = access_token(provider, "alice")
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url=PUBLIC
    ) as cli:  # a command-line client: a bearer token, no cookies
        bearer = {"Authorization": f"Bearer {token}"}
        assert (await cli.get(ME, headers=bearer)).json()["user"] == "alice"
        seen = await cli.get(f"/api/v2/compute/status/local/{made.json()['id']}", headers=bearer)
        assert seen.status_code == 200  # the console's job is the same user's
        other = access_token(provider, "carol")
        hidden = await cli.get(
            f"/api/v2/compute/status/local/{made.json()['id']}",
            headers={"Authorization": f"Bearer {other}"},
        )
        assert hidden.status_code == 404


async def test_tokens_for_another_audience_or_expired_are_refused(
    provider: Provider, app: FastAPI
) -> None:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=PUBLIC) as cli:
        elsewhere = access_token(provider, "alice", resource=OTHER_AUDIENCE)
        refused = await cli.get(ME, headers={"Authorization": f"Bearer {elsewhere}"})
        assert refused.status_code == 401 and "audience" in refused.json()["detail"].lower()
        brief = access_token(provider, "alice", client_id="iri-console-brief")
        assert (await cli.get(ME, headers={"Authorization": f"Bearer {brief}"})).is_success
        time.sleep(4)  # its life is 3 s
        expired = await cli.get(ME, headers={"Authorization": f"Bearer {brief}"})
        assert expired.status_code == 401 and "expired" in expired.json()["detail"].lower()


async def test_a_sign_in_whose_token_the_api_would_refuse_fails_with_its_reason(
    provider: Provider, tmp_path: Path
) -> None:
    async with gateway(settings_for(provider, tmp_path, openid_resource=OTHER_AUDIENCE)) as (
        _,
        browser,
    ):
        finished = await signed_in(provider, browser)
        assert finished.status_code == 303
        failed = parse_qs(urlsplit(finished.headers["location"]).query)["failed"][0]
        assert "refused the identity provider's token" in failed and "Audience" in failed
        assert "iri-session" not in browser.cookies
        assert (await browser.get(ME)).status_code == 401


async def test_sign_out_ends_the_session_on_every_replica(
    provider: Provider, browser: httpx.AsyncClient, tmp_path: Path
) -> None:
    await signed_in(provider, browser)
    other = create_app(settings_for(provider, tmp_path), run_poller=False)  # same store
    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=other), base_url=PUBLIC, cookies=browser.cookies
        ) as elsewhere:
            assert (await elsewhere.get(ME)).json()["user"] == "alice"
            forged = await browser.post("/console/sign-out")
            assert forged.status_code == 403  # no CSRF token: a cross-site sign-out
            out = await browser.post("/console/sign-out", headers=csrf_of(browser))
            assert out.status_code == 200, out.text
            then = urlsplit(out.json()["then"])
            assert f"{then.scheme}://{then.netloc}{then.path}" == f"{provider.issuer}/session/end"
            assert parse_qs(then.query)["post_logout_redirect_uri"] == [
                f"{PUBLIC}/console/sign-in?signed-out=1"
            ]
            gone = await elsewhere.get(ME)
            assert gone.status_code == 401 and "session has ended" in gone.json()["detail"]
    finally:
        other.state.engine.close()


async def test_a_callback_in_another_browser_or_twice_is_refused(
    provider: Provider, app: FastAPI
) -> None:
    transport = httpx.ASGITransport(app=app)
    async with (
        httpx.AsyncClient(transport=transport, base_url=PUBLIC) as victim,
        httpx.AsyncClient(transport=transport, base_url=PUBLIC) as attacker,
    ):
        authorize = await begin(attacker)
        with httpx.Client(timeout=20) as at_provider:
            back = sign_in(provider, authorize, "carol", at_provider)
        lured = await victim.get(back.removeprefix(PUBLIC))  # the attacker's code, login CSRF
        assert (
            "unknown to this browser"
            in parse_qs(urlsplit(lured.headers["location"]).query)["failed"][0]
        )
        assert "iri-session" not in victim.cookies
        again = await attacker.get(back.removeprefix(PUBLIC))  # the attempt was spent
        assert "failed=" in again.headers["location"] and "iri-session" not in attacker.cookies


async def test_the_providers_refusal_and_a_foreign_next_page(
    provider: Provider, browser: httpx.AsyncClient
) -> None:
    refused = await browser.get(
        "/console/sign-in/callback",
        params={"error": "access_denied", "error_description": "the user said no"},
    )
    failed = parse_qs(urlsplit(refused.headers["location"]).query)["failed"][0]
    assert failed == "the identity provider did not sign you in (access_denied: the user said no)"
    authorize = await begin(browser, next_page="https://evil.example/steal")
    with httpx.Client(timeout=20) as at_provider:
        back = sign_in(provider, authorize, "alice", at_provider)
    finished = await browser.get(back.removeprefix(PUBLIC))
    assert finished.headers["location"] == "/console/sites"


async def test_the_store_holds_no_usable_token(
    provider: Provider, browser: httpx.AsyncClient, tmp_path: Path
) -> None:
    await signed_in(provider, browser)
    cookie = browser.cookies["iri-session"]
    engine = create_engine(f"sqlite:///{tmp_path / 'jobs.db'}")
    with engine.connect() as connection:
        rows = connection.execute(text("SELECT * FROM console_sessions")).mappings().all()
    engine.dispose()
    assert len(rows) == 1
    row = dict(rows[0])
    identifier = cookie.split(".")[0]
    assert identifier not in str(row) and "eyJ" not in str(row)  # no id, no JWT in clear
    browser.cookies.set("iri-session", f"{identifier}.{'A' * 43}", domain="gateway.test")
    assert (await browser.get(ME)).status_code == 401  # the id without its key opens nothing


async def test_without_openid_no_cookie_is_an_identity(tmp_path: Path) -> None:
    async with gateway(Settings(data_dir=tmp_path)) as (_, browser):
        browser.cookies.set("iri-session", "x" * 60 + "." + "A" * 43)
        assert (await browser.get(ME)).status_code == 401
        assert (await browser.get("/console/sign-in/openid")).status_code == 404
        assert (await browser.get("/console/session")).json()["openid"] is False


OPAQUE = "urn:example:opaque-api"


def introspecting(provider: Provider, data_dir: Path) -> Settings:
    """A gateway whose tokens are opaque: each asked at the provider (RFC 7662), no cache."""
    return settings_for(
        provider,
        data_dir,
        auth="introspection",
        jwks_url=None,
        jwt_audience=OPAQUE,
        jwt_introspection_url=f"{provider.issuer}/token/introspection",
        jwt_introspection_client_id="iri-gateway",
        jwt_introspection_client_secret="gateway-secret",
        jwt_introspection_cache=0,
        openid_resource=OPAQUE,
    )


def revoke(provider: Provider, token: str) -> None:
    """The token revoked at the provider (RFC 7009), as its client."""
    answer = httpx.post(
        f"{provider.issuer}/token/revocation",
        data={"token": token},
        auth=("iri-console", "console-secret"),
        timeout=10,
    )
    assert answer.status_code == 200, answer.text


async def test_opaque_tokens_are_asked_at_the_provider_and_a_revoked_one_refused(
    provider: Provider, tmp_path: Path
) -> None:
    async with gateway(introspecting(provider, tmp_path)) as (_, cli):
        token = access_token(provider, "alice", resource=OPAQUE)
        assert token.count(".") != 2  # not a JWT: only the provider can read it
        bearer = {"Authorization": f"Bearer {token}"}
        me = await cli.get(ME, headers=bearer)
        assert me.status_code == 200, me.text
        assert me.json()["user"] == "alice" and me.json()["projects"] == ["demo"]
        assert me.json()["access"] == "write"
        revoke(provider, token)
        refused = await cli.get(ME, headers=bearer)
        assert refused.status_code == 401 and "not active" in refused.json()["detail"]
        elsewhere = access_token(provider, "alice", resource="urn:example:opaque-other")
        other = await cli.get(ME, headers={"Authorization": f"Bearer {elsewhere}"})
        assert other.status_code == 401 and "not meant for this gateway" in other.text


async def test_a_console_session_ends_when_the_provider_revokes_its_token(
    provider: Provider, tmp_path: Path
) -> None:
    async with gateway(introspecting(provider, tmp_path)) as (built, browser):
        finished = await signed_in(provider, browser)
        assert finished.headers["location"] == "/console/jobs", finished.headers
        assert (await browser.get(ME)).json()["user"] == "alice"
        # The provider's administrator revokes the token the session holds.
        session = built.state.engine.console_sessions.find(browser.cookies["iri-session"])
        assert session is not None
        revoke(provider, session.access_token)
        ended = await browser.get(ME)
        assert ended.status_code == 401 and "not active" in ended.json()["detail"]


async def test_a_flood_of_sign_ins_begun_is_bounded(
    provider: Provider, browser: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Beginning a sign-in needs no account, and each is kept until it ends: the store keeps
    at most so many at once, and refuses more with a reason until some end."""
    monkeypatch.setattr(console_sessions, "PENDING_ATTEMPTS", 3)
    for _ in range(3):
        await begin(browser)
    refused = await browser.get("/console/sign-in/openid")
    assert refused.status_code == 303
    failed = parse_qs(urlsplit(refused.headers["location"]).query)["failed"][0]
    assert (
        failed == "3 sign-ins are under way, as many as this gateway keeps; try again in a minute"
    )


async def test_a_sign_in_while_the_provider_cannot_say_if_the_token_is_active_fails_closed(
    provider: Provider, tmp_path: Path
) -> None:
    closed = f"http://127.0.0.1:{free_port()}/token/introspection"  # nothing listens there
    settings = introspecting(provider, tmp_path).model_copy(
        update={"jwt_introspection_url": closed}
    )
    async with gateway(settings) as (_, browser):
        finished = await signed_in(provider, browser)
        failed = parse_qs(urlsplit(finished.headers["location"]).query)["failed"][0]
        assert failed.startswith("cannot ask the identity provider whether the token is still")
        assert "iri-session" not in browser.cookies
