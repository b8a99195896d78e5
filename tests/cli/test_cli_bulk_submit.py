"""`iri-gateway submit` of several files: one bulk launch against a real `iri-gateway serve`
(the suite's `server`), a line per file, exit 2 when a file was refused as invalid; one file
behaves as it always did."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from tests.cli.test_cli_client import cli, shell
from tests.conftest import Server


def write(folder: Path, name: str, document: object) -> str:
    path = folder / name
    path.write_text(json.dumps(document))
    return str(path)


def test_several_files_go_in_one_bulk_launch_each_with_its_line(
    server: Server, tmp_path: Path
) -> None:
    good = write(tmp_path, "good.json", shell("echo good"))
    bad = write(tmp_path, "bad.json", shell("true", resources={"node_count": 0}))
    other = write(tmp_path, "other.json", shell("echo other"))
    key = str(uuid.uuid4())
    args = ("submit", good, bad, other, "-r", "local", "--project", "proj1")
    result = cli(server, *args, "--idempotency-key", key)
    assert result.returncode == 2, result.stderr
    lines = result.stdout.splitlines()
    assert [line.split("  ")[1] for line in lines] == [good, other], result.stdout
    launched = [line.split("  ")[0] for line in lines]
    assert all(len(job_id) == 36 for job_id in launched)
    assert f"{bad}: refused (422)" in result.stderr
    assert "  resources.node_count: Input should be greater than or equal to 1" in result.stderr
    assert "1 of 3 files refused, 2 launched" in result.stderr
    # The same key again: the same jobs, said to be an earlier call's; nothing new.
    again = cli(server, *args, "--idempotency-key", key)
    assert again.returncode == 2
    assert [line.split("  ")[0] for line in again.stdout.splitlines()] == launched
    assert "made by an earlier call with this key" in again.stdout
    waited = cli(server, "submit", good, other, "-r", "local", "--project", "proj1", "--wait")
    assert waited.returncode == 0, waited.stderr
    for line in waited.stdout.splitlines():
        assert f"job {line.split('  ')[0]} completed" in waited.stderr, waited.stderr


def test_one_file_is_submitted_as_before_and_an_unreadable_one_stops_all(
    server: Server, tmp_path: Path
) -> None:
    good = write(tmp_path, "good.json", shell("true"))
    single = cli(server, "submit", good, "-r", "local", "--project", "proj1")
    assert single.returncode == 0 and len(single.stdout.strip()) == 36, single.stderr
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    stopped = cli(server, "submit", good, str(broken), "-r", "local", "--project", "proj1")
    assert stopped.returncode == 2 and stopped.stdout == ""
    assert stopped.stderr.startswith(f"{broken}: (document): not JSON"), stopped.stderr
    alone = cli(server, "submit", str(broken), "-r", "local", "--project", "proj1")
    assert alone.returncode == 2 and alone.stderr.startswith("(document): not JSON")
