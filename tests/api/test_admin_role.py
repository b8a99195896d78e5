"""The facility admin role (issue 15): tokens carry it, `GET /account/me` says it, and only
admins may check profiles (`POST /facility/profile-check` renders and lints many scripts).

Tokens are issued with the real `iri-gateway token` command into the tokens file the app
reads; JWTs are signed and verified against a JWKS on loopback (tests/api/test_jwt_auth.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from iri_gateway.api.app import create_app
from iri_gateway.api.facility import profile_check
from iri_gateway.service.accounts.auth import TokenFile, TokenFileError
from iri_gateway.service.operations.settings import Settings
from iri_gateway.shipped import shipped_dir
from tests.api.test_jwt_auth import AUDIENCE, ISSUER, token
from tests.api.test_tokens import bearer, cli

ENDLESS_WRITER = {"access": "write", "expires": None}
"""What getMe adds for a token that may change and has no end."""

pytestmark = pytest.mark.anyio

CHECK = "/api/v2/facility/profile-check"
ME = "/api/v2/account/me"
LOCAL = shipped_dir("facility_profiles") / "local.yaml"


def issue(app: FastAPI, user: str, *options: str) -> str:
    """A token from `iri-gateway token USER OPTIONS` in the app's data directory."""
    made = cli("token", user, *options, "--data-dir", str(app.state.settings.data_dir))
    assert made.returncode == 0, made.stderr
    return made.stdout.strip()


async def test_an_admin_token_checks_profiles_and_says_so(
    client: httpx.AsyncClient, app: FastAPI
) -> None:
    root = issue(app, "root", "--project", "ops", "--admin")
    me = await client.get(ME, headers=bearer(root))
    assert me.status_code == 200, me.text
    assert me.json() == {
        "user": "root",
        "projects": ["ops"],
        "admin": True,
        "access": "write",
        "expires": None,
    }
    answer = await client.post(
        CHECK, json={"profile": LOCAL.read_text(encoding="utf-8")}, headers=bearer(root)
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["passed"] is True


async def test_anyone_else_is_refused_with_how_to_become_admin_and_nothing_runs(
    client: httpx.AsyncClient, app: FastAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran: list[str] = []
    monkeypatch.setattr(
        profile_check, "check_text", lambda text, *args: ran.append(text)
    )  # must never be reached
    alice = issue(app, "alice", "--project", "proj1")
    me = await client.get(ME, headers=bearer(alice))
    assert me.json() == {
        "user": "alice",
        "projects": ["proj1"],
        "admin": False,
        "access": "write",
        "expires": None,
    }
    for body in (
        {"profile": LOCAL.read_text(encoding="utf-8")},
        {"profile": "x" * (profile_check.MAX_PROFILE_CHARS + 1)},
        {"profile": "x: 1", "colour": "red"},
    ):
        refused = await client.post(CHECK, json=body, headers=bearer(alice))
        assert refused.status_code == 403, refused.text
        assert refused.headers["content-type"] == "application/problem+json"
        detail = refused.json()["detail"]
        assert (
            "user 'alice' is not a facility admin, and only facility admins may call "
            "POST /api/v2/facility/profile-check" in detail
        ), detail
        assert "`iri-gateway token alice --admin`" in detail
    assert ran == []
    assert getattr(app.state, "profile_check_slots", None) is None, "not even a slot taken"


async def test_a_revoked_admin_token_is_401(client: httpx.AsyncClient, app: FastAPI) -> None:
    root = issue(app, "root", "--admin")
    text = LOCAL.read_text(encoding="utf-8")
    assert (
        await client.post(CHECK, json={"profile": text}, headers=bearer(root))
    ).status_code == 200
    revoked = cli("token", "revoke", root, "--data-dir", str(app.state.settings.data_dir))
    assert revoked.returncode == 0, revoked.stderr
    refused = await client.post(CHECK, json={"profile": text}, headers=bearer(root))
    assert refused.status_code == 401, refused.text
    assert (await client.get(ME, headers=bearer(root))).status_code == 401


async def test_me_needs_a_token(client: httpx.AsyncClient) -> None:
    assert (await client.get(ME)).status_code == 401
    assert (await client.get(ME, headers=bearer("not-a-token"))).status_code == 401


def test_token_list_shows_the_role(tmp_path: Path) -> None:
    for user, options in (("root", ("--admin",)), ("bob", ("--project", "bobs"))):
        assert cli("token", user, *options, "--data-dir", str(tmp_path)).returncode == 0
    listed = cli("token", "list", "--json", "--data-dir", str(tmp_path))
    assert listed.returncode == 0, listed.stderr
    assert {(e["user"], e["admin"]) for e in json.loads(listed.stdout)} == {
        ("root", True),
        ("bob", False),
    }
    table = cli("token", "list", "--data-dir", str(tmp_path))
    rows = {
        line.split("│")[2].strip(): line.split("│")[4].strip()
        for line in table.stdout.splitlines()
        if line.count("│") == 7
    }
    assert rows == {"root": "admin", "bob": "-"}, table.stdout
    assert "┃ admin ┃" in table.stdout, "the role has its column"


async def test_an_older_tokens_file_without_the_field_is_not_admin(tmp_path: Path) -> None:
    tokens = TokenFile(tmp_path / "tokens.json")
    issued = tokens.issue("old", ["p"], admin=True)
    document = json.loads(tokens.path.read_text(encoding="utf-8"))
    for entry in document["tokens"].values():
        del entry["admin"]  # as the files written before the role existed
    tokens.path.write_text(json.dumps(document), encoding="utf-8")
    app = create_app(Settings(data_dir=tmp_path), run_poller=False)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://test"
    ) as client:
        me = await client.get(ME, headers=bearer(issued))
        assert me.json() == {
            "user": "old",
            "projects": ["p"],
            "admin": False,
            "access": "write",
            "expires": None,
        }
        assert (
            await client.post(CHECK, json={"profile": "x: 1"}, headers=bearer(issued))
        ).status_code == 403
    assert [e.admin for e in TokenFile(tokens.path).entries()] == [False]


def test_an_admin_field_that_is_not_true_or_false_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    path.write_text(
        json.dumps({"tokens": {"ab" * 32: {"user": "eve", "admin": "yes"}}}), encoding="utf-8"
    )
    with pytest.raises(TokenFileError, match="'admin' must be true or false, not 'yes'"):
        TokenFile(path)


@pytest.mark.parametrize(
    ("settings", "claims", "admin"),
    [
        ({"jwt_admin_role": "iri-admin"}, {"roles": ["user", "iri-admin"]}, True),
        ({"jwt_admin_role": "iri-admin"}, {"roles": "user,iri-admin"}, True),
        ({"jwt_admin_role": "iri-admin"}, {"roles": ["user"]}, False),
        ({"jwt_admin_role": "iri-admin"}, {}, False),
        (
            {"jwt_admin_role": "iri-admin", "jwt_roles_claim": "realm_access.roles"},
            {"realm_access": {"roles": ["iri-admin"]}},
            True,
        ),
        (
            {"jwt_admin_role": "iri-admin", "jwt_roles_claim": "realm_access.roles"},
            {"roles": ["iri-admin"]},
            False,
        ),
        ({}, {"roles": ["admin", "iri-admin"]}, False),  # no admin role configured: nobody
    ],
    ids=["list", "string", "other-role", "no-claim", "nested", "nested-elsewhere", "unset"],
)
async def test_a_jwt_is_admin_when_its_roles_claim_holds_the_admin_role(
    jwks_url: str,
    keys: tuple[Any, Any],
    tmp_path: Path,
    settings: dict[str, str],
    claims: dict[str, Any],
    admin: bool,
) -> None:
    app = create_app(
        Settings(
            data_dir=tmp_path,
            auth="jwt",
            jwks_url=jwks_url,
            jwt_issuer=ISSUER,
            jwt_audience=AUDIENCE,
            jwt_username_claim="preferred_username",
            **settings,
        ),
        run_poller=False,
    )
    signed = token(keys[0], **claims)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://test"
    ) as client:
        me = await client.get(ME, headers=bearer(signed))
        shown = me.json()
        assert shown.pop("expires").endswith("Z")  # the JWT's `exp`
        assert shown == {
            "user": "carol",
            "projects": ["p1", "p2"],
            "admin": admin,
            "access": "write",
        }
        checked = await client.post(CHECK, json={"profile": "x: 1"}, headers=bearer(signed))
    if admin:
        assert checked.status_code == 422, checked.text  # checked: not a profile
    else:
        assert checked.status_code == 403, checked.text
        detail = checked.json()["detail"]
        assert (
            "IRI_GATEWAY_JWT_ADMIN_ROLE" in detail
            if not settings
            else "claim holding 'iri-admin'" in detail
        ), detail
