"""Start-up of the command line: a command imports only what it needs (issue 12, section 7).

Scripts call `iri-gateway` in loops, so `--help` and the offline commands must not pay for the
server (FastAPI, SQLAlchemy, uvicorn), SSH (paramiko) or the SDK's HTTP client (httpx). Each
command runs in a fresh interpreter that records `sys.modules` when it ends. No timing here:
benchmarks/bench_cli.py measures start-up (docs/benchmarks.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from iri_gateway.profiles.loading import ProfileRegistry
from tests.support.paths import ROOT

EXAMPLE = ROOT / "examples" / "gpu-mpi-job.json"
NOT_FOR_THE_COMMAND_LINE = ("fastapi", "starlette", "sqlalchemy", "paramiko", "uvicorn", "httpx")
NOT_FOR_HELP = (
    *NOT_FOR_THE_COMMAND_LINE,
    "pydantic",
    "jinja2",
    "ruamel",
    "iri_gateway.models.jobspec",
    "iri_gateway.planning",
    "iri_gateway.profiles",
    "iri_gateway.client.sync_client",
)
PROBE = (
    "import json, os, runpy, sys\n"
    "try:\n"
    "    runpy.run_module('iri_gateway', run_name='__main__', alter_sys=True)\n"
    "finally:\n"
    "    with open(os.environ['MODULES_FILE'], 'w', encoding='utf-8') as record:\n"
    "        json.dump(sorted(sys.modules), record)\n"
)


def run(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """Run `iri-gateway ARGS` with its own cache folder; its result and the modules it loaded."""
    modules_file = tmp_path / "modules.json"
    result = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={
            **os.environ,
            "MODULES_FILE": str(modules_file),
            "XDG_CACHE_HOME": str(tmp_path / "cache"),
        },
    )
    return result, json.loads(modules_file.read_text(encoding="utf-8"))


def loaded(modules: list[str], roots: tuple[str, ...]) -> list[str]:
    return [
        name
        for name in modules
        if any(name == root or name.startswith(root + ".") for root in roots)
    ]


def test_help_loads_neither_the_server_nor_the_models(tmp_path: Path) -> None:
    result, modules = run(tmp_path, "--help")
    assert result.returncode == 0, result.stderr
    assert "render" in result.stdout
    assert "iri_gateway.cli.app" in modules
    assert loaded(modules, NOT_FOR_HELP) == []


@pytest.mark.parametrize(
    "command",
    [
        ["render", str(EXAMPLE), "--resource", "perlmutter-gpu"],
        ["plan", str(EXAMPLE), "--resource", "perlmutter-gpu"],
        ["capabilities"],
        ["capabilities", "--json"],
        ["render", "--help"],
    ],
    ids=["render", "plan", "capabilities", "capabilities-json", "render-help"],
)
def test_offline_commands_load_no_server_ssh_or_http(tmp_path: Path, command: list[str]) -> None:
    result, modules = run(tmp_path, *command)
    assert result.returncode == 0, result.stderr
    assert loaded(modules, NOT_FOR_THE_COMMAND_LINE) == []


def test_render_with_a_warm_cache_prints_the_same_without_parsing_yaml(tmp_path: Path) -> None:
    command = ("render", str(EXAMPLE), "--resource", "perlmutter-gpu")
    cold, cold_modules = run(tmp_path, *command)
    warm, warm_modules = run(tmp_path, *command)
    assert cold.returncode == warm.returncode == 0, cold.stderr + warm.stderr
    assert (warm.stdout, warm.stderr) == (cold.stdout, cold.stderr)
    assert cold.stdout.startswith("#!/bin/bash\n#SBATCH")
    assert "ruamel.yaml" in cold_modules
    assert loaded(warm_modules, ("ruamel",)) == []
    entries = list((tmp_path / "cache" / "iri-gateway" / "profile-trees").glob("*.json"))
    assert len(entries) == len(ProfileRegistry.builtin_files())
