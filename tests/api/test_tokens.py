"""Tokens and projects (issue 11, item 4), against a real `iri-gateway serve`.

Issue and revocation with the `iri-gateway token` commands take effect at the server's next
request, without a restart; a caller may charge only a project its token grants (403
otherwise, saying how one is granted), also with JWTs; the first start's token charges the
README's project `demo`.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from iri_gateway.api.app import create_app
from iri_gateway.service.accounts import auth
from iri_gateway.service.accounts.auth import TokenFile
from iri_gateway.service.operations.settings import Settings
from tests.api.test_jwt_auth import AUDIENCE, ISSUER, token
from tests.conftest import Server
from tests.support.serve import clean_env, running_serve

V2 = "/api/v2"
JOB = {"executable": "/bin/true"}


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """`iri-gateway ARGS` as an administrator runs it beside the server."""
    return subprocess.run(
        [sys.executable, "-m", "iri_gateway", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_env(),
    )


def issue(server: Server, user: str, *projects: str) -> str:
    made = cli(
        "token", user, *(f"--project={p}" for p in projects), "--data-dir", str(server.data_dir)
    )
    assert made.returncode == 0, made.stderr
    return made.stdout.strip()


def bearer(token: str, project: str | None = None) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {token}"}
    return headers if project is None else {**headers, "X-IRI-Facility-Project": project}


def caps(server: Server, token: str) -> httpx.Response:
    return httpx.get(
        f"{server.url}{V2}/compute/capabilities/local", headers=bearer(token), timeout=30
    )


def launch(
    url: str, token: str, project: str | None = None, job: dict[str, Any] | None = None
) -> httpx.Response:
    return httpx.post(
        f"{url}{V2}/compute/job/local", json=job or JOB, headers=bearer(token, project), timeout=30
    )


def test_a_new_token_works_and_a_revoked_one_stops_at_once(server: Server) -> None:
    carol = issue(server, "carol", "proj1")
    assert caps(server, carol).status_code == 200, "a new token must work without a restart"
    revoked = cli("token", "revoke", carol, "--data-dir", str(server.data_dir))
    assert revoked.returncode == 0, revoked.stderr
    refused = caps(server, carol)
    assert refused.status_code == 401
    assert refused.headers["content-type"] == "application/problem+json"
    assert caps(server, server.token).status_code == 200, "other tokens stay valid"


def test_revoke_by_the_id_token_list_shows_and_by_user(server: Server) -> None:
    first, second = issue(server, "dave", "proj1"), issue(server, "dave", "proj1")
    erin = issue(server, "erin", "proj1")
    listed = cli("token", "list", "--json", "--data-dir", str(server.data_dir))
    assert listed.returncode == 0, listed.stderr
    daves = [entry for entry in json.loads(listed.stdout) if entry["user"] == "dave"]
    assert len(daves) == 2 and all(entry["projects"] == ["proj1"] for entry in daves)
    assert first not in listed.stdout and second not in listed.stdout, "never the tokens"

    by_id = cli("token", "revoke", daves[0]["id"], "--data-dir", str(server.data_dir))
    assert by_id.returncode == 0, by_id.stderr
    assert sorted(caps(server, t).status_code for t in (first, second)) == [200, 401]

    by_user = cli("token", "revoke", "--user", "dave", "--data-dir", str(server.data_dir))
    assert by_user.returncode == 0, by_user.stderr
    assert [caps(server, t).status_code for t in (first, second, erin)] == [401, 401, 200]
    nothing = cli("token", "revoke", "--user", "dave", "--data-dir", str(server.data_dir))
    assert nothing.returncode == 1 and "no token matched" in nothing.stderr


def test_a_token_without_projects_may_charge_none(server: Server) -> None:
    frank = issue(server, "frank")
    for project in ("proj1", "someone-elses-project"):
        refused = launch(server.url, frank, project)
        assert refused.status_code == 403, refused.text
        problem = refused.json()
        assert refused.headers["content-type"] == "application/problem+json"
        assert f"project {project!r}" in problem["detail"]
        assert "grants no project" in problem["detail"]
        assert "iri-gateway token frank --project" in problem["detail"]
        assert problem["invalid_params"][0]["name"] == "X-IRI-Facility-Project"
    in_spec = launch(server.url, frank, job={**JOB, "attributes": {"account": "proj1"}})
    assert in_spec.status_code == 403
    assert in_spec.json()["invalid_params"][0]["name"] == "attributes.account"
    projects = httpx.get(f"{server.url}{V2}/account/projects", headers=bearer(frank))
    assert projects.status_code == 200 and projects.json() == []


def test_a_token_charges_only_its_own_projects(server: Server) -> None:
    refused = launch(server.url, server.token, "proj2")
    assert refused.status_code == 403, refused.text
    detail = refused.json()["detail"]
    assert "'proj2'" in detail and "granted: proj1" in detail
    assert "iri-gateway token alice --project" in detail, "say how an admin grants one"
    assert launch(server.url, server.token, "proj1").status_code == 200
    listed = httpx.get(f"{server.url}{V2}/account/projects", headers=bearer(server.token))
    assert [p["id"] for p in listed.json()] == ["proj1"], "account lists what may be charged"


def test_the_first_start_token_runs_the_readme_example(tmp_path: Path) -> None:
    data = tmp_path / "fresh"
    with running_serve(data) as served:
        printed = re.search(r"\(shown once\):\n\s+(\S+)", served.output())
        assert printed is not None, served.output()
        assert "project 'demo'" in served.output()
        assert "X-IRI-Facility-Project: demo" in served.output()
        admin = printed.group(1)
        readme = launch(
            served.url, admin, "demo", {"executable": "/bin/echo", "arguments": ["hello"]}
        )
        assert readme.status_code == 200, readme.text
        assert launch(served.url, admin, "someone-elses-project").status_code == 403
        me = httpx.get(f"{served.url}{V2}/account/me", headers=bearer(admin), timeout=30)
        assert me.json() == {
            "user": "admin",
            "projects": ["demo"],
            "admin": True,
            "access": "write",
            "expires": None,
        }
        assert "an admin token for user 'admin'" in served.output()
    with running_serve(data) as again:
        assert "shown once" not in again.output(), "only the first start makes a token"


@pytest.mark.anyio
async def test_a_jwt_without_the_project_claim_may_charge_none(
    jwks_url: str,
    keys: tuple[Any, Any],
    tmp_path: Path,
) -> None:
    settings = Settings(
        data_dir=tmp_path,
        auth="jwt",
        jwks_url=jwks_url,
        jwt_issuer=ISSUER,
        jwt_audience=AUDIENCE,
        jwt_username_claim="preferred_username",
    )
    app: FastAPI = create_app(settings, run_poller=False)
    bare = token(keys[0], preferred_username="gina", projects=[])
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://test"
    ) as client:
        refused = await client.post(f"{V2}/compute/job/local", json=JOB, headers=bearer(bare, "p1"))
        assert refused.status_code == 403, refused.text
        assert "'projects' claim" in refused.json()["detail"]
        granted = token(keys[0], preferred_username="gina", projects="p1")
        assert (
            await client.post(f"{V2}/compute/job/local", json=JOB, headers=bearer(granted, "p1"))
        ).status_code == 200


def test_concurrent_writers_lose_no_token(tmp_path: Path) -> None:
    """Two administrators (here: threads, each with its own TokenFile) issuing at once."""
    path = tmp_path / "tokens.json"
    issued: list[str] = []
    failures: list[BaseException] = []

    def writer(name: str) -> None:
        tokens = TokenFile(path)
        try:
            for _ in range(25):
                issued.append(tokens.issue(name, ["p"]))
        except BaseException as error:  # reported below, with the lost tokens
            failures.append(error)

    threads = [threading.Thread(target=writer, args=(f"u{i}",)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    reader = TokenFile(path)
    assert len(reader) == 200 and all(reader.authenticate(t) for t in issued)


def test_no_new_token_begins_with_a_dash() -> None:
    """A token is pasted as a command-line argument; one beginning with '-' (1 in 64 of
    `token_urlsafe`'s) made `iri-gateway token revoke TOKEN` fail ("No such option")."""
    made = [auth._new_token() for _ in range(2000)]
    assert not [t for t in made if t.startswith("-")]
    assert len(set(made)) == 2000 and {len(t) for t in made} == {43}


def test_an_older_token_beginning_with_a_dash_is_revoked_after_double_dash(tmp_path: Path) -> None:
    older = "-" + "a" * 42  # as tokens issued before the rule could begin
    (tmp_path / "tokens.json").write_text(
        json.dumps({"tokens": {auth._digest(older): {"user": "old", "projects": []}}}),
        encoding="utf-8",
    )
    refused = cli("token", "revoke", older, "--data-dir", str(tmp_path))
    assert refused.returncode == 2 and "No such option" in refused.stderr
    revoked = cli("token", "revoke", "--data-dir", str(tmp_path), "--", older)
    assert revoked.returncode == 0, revoked.stderr
    assert TokenFile(tmp_path / "tokens.json").entries() == []
