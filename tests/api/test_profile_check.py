"""`POST /api/v2/facility/profile-check`: a profile's text checked as `iri-gateway profile
check` checks a file. A valid profile answers its matrix (every cell the command line lists,
linted with shellcheck); a broken one a 422 whose `errors` carry the lines, word for word what
the command prints; malformed text (a tab, a lone surrogate, deep nesting, not a mapping) is a
422 and never a 500; an oversized text a 413; no token a 401; nothing lands on disk. The caller is a
facility admin (tests/api/test_admin_role.py: anybody else is refused)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from iri_gateway.api.facility.profile_check import CONCURRENT_CHECKS, MAX_PROFILE_CHARS
from iri_gateway.profiles.text_check import MAX_CELLS
from iri_gateway.shipped import shipped_dir
from tests.support.serve import clean_env

pytestmark = pytest.mark.anyio

URL = "/api/v2/facility/profile-check"
LOCAL = shipped_dir("facility_profiles") / "local.yaml"
# `scheduler:` of the only resource misspelled: line 13 of local.yaml holds it.
BROKEN = LOCAL.read_text(encoding="utf-8").replace("  scheduler:", "  schedular:", 1)


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _cli_check(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "iri_gateway", "profile", "check", "--json", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=clean_env(),
        check=False,
    )


async def test_valid_profile_answers_the_matrix_of_the_command_line(
    client: httpx.AsyncClient, admin_token: str
) -> None:
    answer = await client.post(
        URL,
        json={"profile": LOCAL.read_text(encoding="utf-8"), "name": "local.yaml"},
        headers=_auth(admin_token),
    )
    assert answer.status_code == 200, answer.text
    report = answer.json()
    assert report["passed"] is True and report["failed"] == 0
    assert report["resources"] == 1
    assert report["linted"] == "bash -n and shellcheck -S warning"
    cli = _cli_check(LOCAL)
    assert cli.returncode == 0, cli.stderr
    assert report["cells"] == json.loads(cli.stdout)
    assert {cell["outcome"] for cell in report["cells"]} >= {"ok"}


async def test_broken_profile_is_422_with_its_lines_as_the_command_prints_them(
    client: httpx.AsyncClient, admin_token: str, tmp_path: Path
) -> None:
    answer = await client.post(
        URL, json={"profile": BROKEN, "name": "mine.yaml"}, headers=_auth(admin_token)
    )
    assert answer.status_code == 422, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    errors = answer.json()["errors"]
    assert {
        "file": "mine.yaml",
        "line": 13,
        "field": "resources[0].schedular",
        "reason": "unknown key (check the spelling against schema.json)",
        "message": "mine.yaml:13: resources[0].schedular: unknown key (check the "
        "spelling against schema.json)",
    } in errors
    # Word for word what `iri-gateway profile check mine.yaml` prints.
    (tmp_path / "mine.yaml").write_text(BROKEN, encoding="utf-8")
    cli = subprocess.run(
        [sys.executable, "-m", "iri_gateway", "profile", "check", "mine.yaml"],
        capture_output=True,
        text=True,
        timeout=120,
        env=clean_env(),
        check=False,
        cwd=tmp_path,
    )
    assert cli.returncode == 1
    printed = [line for line in cli.stderr.splitlines() if line.startswith("mine.yaml:")]
    assert printed == [error["message"] for error in errors]


@pytest.mark.parametrize(
    ("text", "line", "reason"),
    [
        ("facility:\n\tid: x\n", 2, "not valid YAML: found character '\\t'"),
        ("facility: {id: x}\nresources: '\ud800'\n", 2, "lone surrogate (U+D800)"),
        ("[" * 20000, None, "not valid YAML"),
        ("- just\n- a list\n", 1, "a profile is a mapping with 'facility' and 'resources'"),
        ("", 1, "a profile is a mapping"),
        (
            LOCAL.read_text(encoding="utf-8").replace(
                "    scheduler:", "    templates_dir: tpl\n    scheduler:", 1
            ),
            13,
            "has no folder beside",
        ),
    ],
)
async def test_malformed_text_is_422_never_500(
    client: httpx.AsyncClient, admin_token: str, text: str, line: int | None, reason: str
) -> None:
    answer = await client.post(
        URL,
        content=json.dumps({"profile": text}),
        headers={**_auth(admin_token), "Content-Type": "application/json"},
    )
    assert answer.status_code == 422, answer.text
    errors: list[dict[str, Any]] = answer.json()["errors"]
    assert any(e["line"] == line and reason in e["reason"] for e in errors), errors


async def test_oversized_profile_is_413(client: httpx.AsyncClient, admin_token: str) -> None:
    text = "# padding\n" * (MAX_PROFILE_CHARS // 10 + 1)
    answer = await client.post(URL, json={"profile": text}, headers=_auth(admin_token))
    assert answer.status_code == 413, answer.text
    assert f"more than the {MAX_PROFILE_CHARS}" in answer.json()["detail"]
    # Past the server's body limit (1 MiB by default): refused before being read whole.
    huge = await client.post(
        URL, json={"profile": "x" * (10 * 1024 * 1024)}, headers=_auth(admin_token)
    )
    assert huge.status_code == 413


async def test_a_matrix_too_big_is_refused_before_rendering(
    client: httpx.AsyncClient, admin_token: str
) -> None:
    text = LOCAL.read_text(encoding="utf-8")
    head, resource = text.split("resources:\n", 1)
    copies = MAX_CELLS // 8 + 1  # local has podman and bare execution: 8 cells each
    many = (
        head
        + "resources:\n"
        + "".join(resource.replace("id: local", f"id: local{n}", 1) for n in range(copies))
    )
    answer = await client.post(URL, json={"profile": many}, headers=_auth(admin_token))
    assert answer.status_code == 422, answer.text
    assert f"more than the {MAX_CELLS} checked here" in answer.json()["errors"][0]["reason"]


async def test_no_token_is_401(client: httpx.AsyncClient) -> None:
    answer = await client.post(URL, json={"profile": LOCAL.read_text(encoding="utf-8")})
    assert answer.status_code == 401
    bad = await client.post(
        URL, json={"profile": "x: 1"}, headers={"Authorization": "Bearer not-a-token"}
    )
    assert bad.status_code == 401


async def test_the_name_is_only_a_label(
    client: httpx.AsyncClient, admin_token: str, app: FastAPI
) -> None:
    for name in ("../../etc/passwd", "/tmp/x.yaml", "a b.yaml"):
        answer = await client.post(
            URL, json={"profile": BROKEN, "name": name}, headers=_auth(admin_token)
        )
        assert answer.status_code == 422
        assert answer.json()["invalid_params"][0]["name"] == "name"
    data_dir: Path = app.state.settings.data_dir
    before = sorted(data_dir.rglob("*"))
    answer = await client.post(
        URL, json={"profile": LOCAL.read_text(encoding="utf-8")}, headers=_auth(admin_token)
    )
    assert answer.status_code == 200
    assert sorted(data_dir.rglob("*")) == before


async def test_checks_past_the_concurrency_bound_are_429_with_retry_after(
    client: httpx.AsyncClient, admin_token: str, app: FastAPI
) -> None:
    text = LOCAL.read_text(encoding="utf-8")
    first = await client.post(URL, json={"profile": text}, headers=_auth(admin_token))
    assert first.status_code == 200
    slots = app.state.profile_check_slots
    taken = [slots.acquire(blocking=False) for _ in range(CONCURRENT_CHECKS)]
    assert all(taken)  # every slot free again after the first check
    try:
        busy = await client.post(URL, json={"profile": text}, headers=_auth(admin_token))
        assert busy.status_code == 429, busy.text
        assert busy.headers["retry-after"] == "2"
    finally:
        for _ in taken:
            slots.release()
    again = await client.post(URL, json={"profile": text}, headers=_auth(admin_token))
    assert again.status_code == 200


async def test_bytes_that_are_not_utf8_are_refused_not_500(
    client: httpx.AsyncClient, admin_token: str
) -> None:
    answer = await client.post(
        URL,
        content=b'{"profile": "facility: \xff\xfe"}',
        headers={**_auth(admin_token), "Content-Type": "application/json"},
    )
    assert answer.status_code in (400, 422), answer.text
    typed = await client.post(URL, json={"profile": 42}, headers=_auth(admin_token))
    assert typed.status_code == 422


async def test_an_unknown_field_is_named_without_blaming_the_jobspec(
    client: httpx.AsyncClient, admin_token: str
) -> None:
    answer = await client.post(
        URL, json={"profile": "x: 1", "colour": "red"}, headers=_auth(admin_token)
    )
    assert answer.status_code == 422, answer.text
    reasons = {p["name"]: p["reason"] for p in answer.json()["invalid_params"]}
    assert reasons == {"colour": "unknown field; this request's schema does not define it"}
