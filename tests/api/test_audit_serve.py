"""The audit log of a real `iri-gateway serve`: the operator's token commands, a launch and a
cancel with the client's `X-Request-ID`, a refused call and a read, then `iri-gateway audit`
(table and `--json`, with filters) as the admin; bob is refused by the command as by the API.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from tests.support.serve import clean_env, running_serve


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "iri_gateway", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**clean_env(), "COLUMNS": "250", **(env or {})},
    )


def token(data: Path, user: str, *options: str) -> str:
    made = cli("token", user, *options, "--data-dir", str(data))
    assert made.returncode == 0, made.stderr
    return made.stdout.strip()


def test_a_real_serve_records_changes_and_the_audit_command_reads_them(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with running_serve(data) as served:
        root = token(data, "root", "--admin")
        alice = token(data, "alice", "--project", "proj1")
        bob = token(data, "bob", "--project", "proj1")
        listed = cli("token", "list", "--data-dir", str(data), "--json")
        bob_id = next(e["id"] for e in json.loads(listed.stdout) if e["user"] == "bob")
        revoked = cli("token", "revoke", bob_id, "--data-dir", str(data))
        assert revoked.returncode == 0, revoked.stderr
        bob = token(data, "bob", "--project", "proj1")

        def sent(token: str, request_id: str) -> dict[str, str]:
            return {
                "Authorization": f"Bearer {token}",
                "X-IRI-Facility-Project": "proj1",
                "X-Request-ID": request_id,
            }

        api = f"{served.url}/api/v2"
        launched = httpx.post(
            f"{api}/compute/job/local",
            json={"executable": "/bin/sleep", "arguments": ["30"]},
            headers=sent(alice, "serve-launch"),
            timeout=30,
        )
        assert launched.status_code == 200, launched.text
        job_id = launched.json()["id"]
        cancel = httpx.delete(
            f"{api}/compute/cancel/local/{job_id}", headers=sent(alice, "serve-cancel"), timeout=30
        )
        assert cancel.status_code == 204, cancel.text
        stolen = httpx.delete(
            f"{api}/compute/cancel/local/{job_id}", headers=sent(bob, "serve-bob"), timeout=30
        )
        assert stolen.status_code == 404, stolen.text
        read = httpx.get(
            f"{api}/compute/status/local/{job_id}", headers=sent(alice, "serve-read"), timeout=30
        )
        assert read.status_code == 200

        server = ("--server", served.url)
        as_json = cli("audit", "--json", *server, "--token", root)
        assert as_json.returncode == 0, as_json.stderr
        page: dict[str, Any] = json.loads(as_json.stdout)
        found = {(r["operation"], r["request_id"]): r for r in page["records"]}
        launch = found[("launchJob", "serve-launch")]
        assert launch["user"] == "alice" and launch["target"] == f"job {job_id}"
        assert launch["outcome"] == "succeeded" and launch["status"] == 200
        assert found[("cancelJob", "serve-cancel")]["status"] == 204
        refused = found[("cancelJob", "serve-bob")]
        assert refused["user"] == "bob" and refused["outcome"] == "refused"
        assert refused["status"] == 404 and refused["target"] == f"job {job_id}"
        assert not any(r["request_id"] == "serve-read" for r in page["records"])
        tokens = [r for r in page["records"] if r["operation"] in ("createToken", "revokeToken")]
        assert {r["target"] for r in tokens} >= {
            "user admin; admin",  # the first start's token
            "user root; admin",
            "user alice",
            "user bob",
            f"user bob; token id {bob_id}",
        }
        assert all(r["admin"] and r["request_id"] is None for r in tokens)
        for secret in (root, alice, bob):
            assert secret not in as_json.stdout

        table = cli("audit", "--user", "bob", "--operation", "cancelJob", *server, "--token", root)
        assert table.returncode == 0, table.stderr
        assert "serve-bob" in table.stdout and "refused 404 Not Found" in table.stdout
        assert "serve-launch" not in table.stdout

        bad = cli("audit", "--since", "last week", *server, "--token", root)
        assert bad.returncode == 2 and "since" in bad.stderr, bad.stderr
        denied = cli("audit", *server, "--token", bob)
        assert denied.returncode == 1 and "not a facility admin" in denied.stderr
        assert "serve-launch" not in denied.stdout + denied.stderr


def test_a_token_command_whose_store_is_away_says_so_and_keeps_the_change(
    tmp_path: Path,
) -> None:
    away = {"IRI_GATEWAY_DATABASE_URL": "postgresql://gw:secret@127.0.0.1:1/jobs"}
    made = cli("token", "carol", "--project", "p", "--data-dir", str(tmp_path), env=away)
    assert made.returncode == 0, made.stderr
    issued = made.stdout.strip()
    assert "warning: createToken (user carol) is done but not (all) in the audit log" in (
        made.stderr
    )
    assert "secret" not in made.stderr and issued not in made.stderr
    listed = cli("token", "list", "--json", "--data-dir", str(tmp_path))
    assert [e["user"] for e in json.loads(listed.stdout)] == ["carol"]
