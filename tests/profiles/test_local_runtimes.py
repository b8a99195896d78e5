"""The local resource offers only the runtimes installed on this machine ("Podman when
present, else no container")."""

from __future__ import annotations

from pathlib import Path

from iri_gateway.planning.jobspec_io import parse_jobspec
from iri_gateway.planning.planner import make_plan
from iri_gateway.profiles.loading import ProfileRegistry, builtin_profile
from iri_gateway.profiles.local_runtimes import registry_for_this_machine
from iri_gateway.service.assembly import build_engine
from iri_gateway.service.operations.settings import Settings

JOB = {
    "executable": "/bin/echo",
    "arguments": ["hi"],
    "container": {"image": "docker.io/library/busybox:latest"},
}


def test_without_podman_local_jobs_run_without_containers() -> None:
    registry, notes = registry_for_this_machine(
        ProfileRegistry.from_paths([builtin_profile("local")]), which=lambda name: None
    )
    local = registry.get("local")
    assert local.resource.runtimes.available() == []
    assert local.resource.runtimes.default == "none"
    assert notes == ["local: podman not found on this machine; jobs there run without it"]
    plan = make_plan(parse_jobspec(JOB), local)
    assert plan.runtime == "none" and "podman" not in plan.script
    assert any("is not used" in warning for warning in plan.warnings)
    assert local.facts["runtime"] == ["none"], "the facts follow what is really offered"


def test_with_podman_nothing_changes() -> None:
    original = ProfileRegistry.from_paths([builtin_profile("local")])
    registry, notes = registry_for_this_machine(original, which=lambda name: f"/usr/bin/{name}")
    assert notes == [] and registry.get("local") is original.get("local")


def test_serve_builds_its_registry_for_this_machine(tmp_path: Path) -> None:
    engine = build_engine(Settings(data_dir=tmp_path))  # type: ignore[call-arg]
    runtimes = engine.registry.get("local").resource.runtimes.available()
    # This machine has Podman (the test cluster installs it), so it is offered.
    assert runtimes == ["podman"]
