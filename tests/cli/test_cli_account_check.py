"""`iri-gateway profile check --identity`: for sample identities (JSON files of claims), the
account each resource would run their work as and what decided it, and the projects each
resource's project rules grant and which rule; bad identity files are named with the
reason."""

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


PROJECT_RULES = """\
    project_rules:
      - claim: groups
        match: 'project-(?P<p>[a-z0-9]+)'
        project: '{p}'
      - claim: email
        match: '[a-z]+@(?P<lab>[a-z]+)\\.example\\.org'
        project: 'lab-{lab}'
"""


def test_each_identity_gets_the_projects_every_matching_rule_grants(tmp_path: Path) -> None:
    assert "    runtimes:\n" in PROFILE
    profile = write(
        tmp_path,
        "site.yaml",
        PROFILE.replace("    runtimes:\n", PROJECT_RULES + "    runtimes:\n", 1),
    )
    identities = [
        write(
            tmp_path,
            "eve.json",
            json.dumps(
                {
                    "sub": "e1",
                    "groups": ["x", "project-q7", "project-b2"],
                    "email": "eve@lab.example.org",
                }
            ),
        ),
        write(tmp_path, "zed.json", json.dumps({"sub": "z1", "groups": ["project-../x"]})),
    ]
    options = [arg for path in identities for arg in ("--identity", path)]
    result = cli("profile", "check", "--no-shellcheck", "--json", *options, profile)
    assert result.returncode == 0, result.stdout + result.stderr
    shown = json.loads(result.stdout)["projects"]
    eve = [(row["project"], row["how"]) for row in shown if row["identity"] == "eve.json"]
    assert [project for project, _ in eve] == ["q7", "b2", "lab-lab"]
    assert eve[0][1] == "project_rules[0] (claim 'groups' matches 'project-(?P<p>[a-z0-9]+)')"
    assert eve[2][1].startswith("project_rules[1] (claim 'email'")
    assert {row["resource"] for row in shown} == {"login"}
    zed = [row for row in shown if row["identity"] == "zed.json"]
    assert zed == [
        {
            "identity": "zed.json",
            "resource": "login",
            "project": None,
            "how": "no project rule matches: the token's own projects only",
        }
    ]

    table = cli("profile", "check", "--no-shellcheck", *options, profile)
    assert table.returncode == 0, table.stderr
    assert "Projects the resources' rules grant" in table.stdout
    assert "lab-lab" in table.stdout and "project_rules[1]" in table.stdout

    plain = cli(
        "profile",
        "check",
        "--no-shellcheck",
        "--json",
        "--identity",
        identities[0],
        write(tmp_path, "plain.yaml", PROFILE),
    )
    assert (
        json.loads(plain.stdout)["projects"][0]["how"]
        == "no project rules: the token's own projects only"
    )
