"""`iri-gateway profile check --identity`: for sample identities (JSON files of claims), the
account each resource would run their work as and what decided it; bad identity files are
named with the reason."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.test_cli import cli
from tests.service.operations.test_job_accounts import PROFILE


def write(folder: Path, name: str, text: str) -> str:
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_each_identity_gets_the_account_of_the_first_mapping_that_matches(
    tmp_path: Path,
) -> None:
    profile = write(tmp_path, "site.yaml", PROFILE)
    identities = [
        write(tmp_path, "alice.json", json.dumps({"sub": "alice"})),
        write(tmp_path, "dana.json", json.dumps({"sub": "d1", "email": "dana@lab.example.org"})),
        write(tmp_path, "eve.json", json.dumps({"sub": "e1", "groups": ["x", "project-q7"]})),
        write(tmp_path, "zed.json", json.dumps({"sub": "z1", "email": "zed@nowhere"})),
    ]
    options = [arg for path in identities for arg in ("--identity", path)]
    result = cli("profile", "check", "--no-shellcheck", "--json", *options, profile)
    assert result.returncode == 0, result.stdout + result.stderr
    shown = json.loads(result.stdout)
    assert {row["outcome"] for row in shown["samples"]} <= {"ok", "unsupported"}
    accounts = {row["identity"]: row for row in shown["accounts"]}
    assert accounts["alice.json"]["account"] == "alice-by-name"
    assert accounts["alice.json"]["how"] == "user_mapping['alice']"
    assert accounts["dana.json"]["account"] == "dana"
    assert accounts["dana.json"]["how"].startswith("account_rules[0] (claim 'email'")
    assert accounts["eve.json"]["account"] == "svc-q7"
    assert accounts["eve.json"]["how"].startswith("account_rules[1] (claim 'groups'")
    assert accounts["zed.json"]["account"] is None
    assert "refused (403)" in accounts["zed.json"]["how"]

    table = cli("profile", "check", "--no-shellcheck", *options, profile)
    assert table.returncode == 0, table.stderr
    assert "Accounts of the sample identities" in table.stdout
    assert "svc-q7" in table.stdout and "account_rules[1]" in table.stdout


def test_a_bad_identity_file_is_named_with_the_reason(tmp_path: Path) -> None:
    profile = write(tmp_path, "site.yaml", PROFILE)
    cases = {
        "list.json": ("[1, 2]", "not a JSON object of claims"),
        "broken.json": ("{", "not JSON"),
        "nameless.json": ('{"email": "a@b"}', "claim 'sub' (the user's name) is missing"),
        "huge.json": ('{"sub": "' + "x" * (1 << 20) + '"}', "larger than"),
    }
    for name, (text, reason) in cases.items():
        path = write(tmp_path, name, text)
        result = cli("profile", "check", "--no-shellcheck", "--identity", path, profile)
        assert result.returncode != 0
        assert f"--identity {path}: " in result.stderr and reason in result.stderr, result.stderr
    missing = str(tmp_path / "absent.json")
    result = cli("profile", "check", "--no-shellcheck", "--identity", missing, profile)
    assert result.returncode != 0 and "cannot read it" in result.stderr
    by_name = write(tmp_path, "named.json", '{"preferred_username": "alice"}')
    result = cli(
        "profile",
        "check",
        "--no-shellcheck",
        "--json",
        "--identity",
        by_name,
        "--username-claim",
        "preferred_username",
        profile,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["accounts"][0]["account"] == "alice-by-name"
