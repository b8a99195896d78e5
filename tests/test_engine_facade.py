"""The layout of issue 24 item 5, held: the engine a façade, the app and the CLI assemblers.

The engine keeps its public methods (the API's one door, tests/test_layers.py), but each is
the method of a part in `iri_gateway/service/jobs/` that does that one job; `api/app.py`
makes the FastAPI app around an engine that `service/operations/assembly.py` builds; and
`cli/app.py` only adds the commands of the audiences' modules to the typer app.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import iri_gateway
from iri_gateway.profiles.loading import ProfileRegistry, builtin_profile
from iri_gateway.service.jobs.engine import Engine
from iri_gateway.service.operations.backends import Backends
from iri_gateway.service.operations.store import JobStore

PACKAGE = Path(iri_gateway.__file__).parent
DOOR = [
    "submit",
    "submit_many",
    "plan",
    "active_jobs",
    "check_launch_quota",
    "cancel",
    "update",
    "restart",
    "elements",
    "cancel_elements",
    "refresh",
    "reconcile",
    "get",
    "known",
    "jobs",
    "job_page",
    "output_path",
    "read_output",
    "files",
    "resource",
    "account",
    "resources",
    "place",
]
ENGINE_OWN = {"__init__", "settle_time", "resubmit_wait", "rate_limiter", "close"}


def defined(path: Path) -> tuple[set[str], set[str]]:
    """The top-level functions and the imported names of a module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    imported = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    return functions, imported


def test_every_public_engine_method_is_one_part_s(tmp_path: Path) -> None:
    registry = ProfileRegistry.from_paths([builtin_profile("local")])
    engine = Engine(
        registry=registry,
        store=JobStore(f"sqlite:///{tmp_path / 'jobs.db'}"),
        backends=Backends(tmp_path),
    )
    try:
        owners = {}
        for name in DOOR:
            method = getattr(engine, name)
            part = type(method.__self__)
            assert part is not Engine, name
            owners[name] = inspect.getmodule(part).__name__  # type: ignore[union-attr]
        parts = ("submission", "bulk", "changes", "arrays", "tracking", "recovery", "reading")
        assert set(owners.values()) == {
            f"iri_gateway.service.jobs.{m}" for m in (*parts, "files", "resources")
        }
        own = {n for n, v in vars(Engine).items() if callable(v) or isinstance(v, property)}
        assert own - {"__init__"} <= ENGINE_OWN
        assert own >= {"__init__", "rate_limiter", "close"}
    finally:
        engine.close()


def test_the_api_app_builds_no_collaborator() -> None:
    functions, imported = defined(PACKAGE / "api" / "app.py")
    assert "build_engine" not in functions
    assert imported.isdisjoint(
        {"JobStore", "Submitter", "Replica", "Backends", "ProfileRegistry", "gateway_files"}
    )
    _, assembly_imports = defined(PACKAGE / "service" / "assembly.py")
    assert {"JobStore", "Submitter", "Replica", "Backends", "Engine"} <= assembly_imports


def test_the_cli_app_only_assembles_the_audiences_commands() -> None:
    functions, _ = defined(PACKAGE / "cli" / "app.py")
    assert functions == {"version", "main"}
    from iri_gateway.cli.app import app

    commands = {
        c.name or c.callback.__name__: c.callback.__module__
        for c in app.registered_commands
        if c.callback is not None
    }
    groups = {
        g.name: {c.callback.__module__ for c in g.typer_instance.registered_commands if c.callback}
        for g in app.registered_groups
        if g.typer_instance is not None
    }
    admin, server = "iri_gateway.cli.admin", "iri_gateway.cli.server"
    scientist = "iri_gateway.cli.scientist.client_commands"
    expected = {name: admin for name in ("render", "plan", "capabilities", "placement", "openapi")}
    expected |= {
        "serve": server,
        "version": "iri_gateway.cli.app",
        "audit": "iri_gateway.cli.audit_command",
    }
    assert {n: m for n, m in commands.items() if m != scientist} == expected
    assert {"submit", "status", "cancel", "wait", "output"} <= {
        n for n, m in commands.items() if m == scientist
    }
    assert groups == {
        "profile": {admin},
        "flavours": {admin},
        "token": {server},
        "template": {"iri_gateway.cli.scientist.job_template_commands"},
        "jobs": {
            "iri_gateway.cli.scientist.job_watch_commands",
            "iri_gateway.cli.scientist.job_port_commands",
            "iri_gateway.cli.scientist.job_array_commands",
        },
    }
