"""The health monitor on this machine's `local` resource: a round gives every probe a result,
the snapshot is a read-only copy, and a file root that does not exist degrades the resource
by name (the SSH, Slurm, PBS and time-out cases run in
tests/integration/test_resource_health.py)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import yaml

from iri_gateway.profiles.loading import ProfileRegistry, builtin_profile
from iri_gateway.service.operations.backends import Backends
from iri_gateway.service.resource_health import monitor as monitor_module
from iri_gateway.service.resource_health.checks import Check, fixed_part
from iri_gateway.service.resource_health.monitor import ResourceHealth


def local_profile(folder: Path, roots: list[str]) -> Path:
    """The shipped `local` profile granting `roots`."""
    document = yaml.safe_load(builtin_profile("local").read_text())
    document["resources"][0]["files"] = {"roots": roots}
    profile = folder / "local.yaml"
    profile.write_text(yaml.safe_dump(document, sort_keys=False))
    return profile


def monitor(tmp_path: Path, roots: list[str], interval: float = 60) -> ResourceHealth:
    registry = ProfileRegistry.from_paths([local_profile(tmp_path, roots)])
    return ResourceHealth(registry, Backends(tmp_path), interval=interval, timeout=5)


def test_a_round_on_the_local_resource(tmp_path: Path) -> None:
    health = monitor(tmp_path, [str(tmp_path), "/nonexistent-iri-health/{user}"])
    assert health.condition("local") is None  # not started: the gateway does not probe
    health.start()
    try:
        health.probe_round()
        snapshot = health.snapshot()
        checks = snapshot["local"]
        assert set(checks) == {
            "scheduler",
            "login",
            f"file root {tmp_path}",
            "file root /nonexistent-iri-health/{user}",
        }
        assert checks["scheduler"].ok and checks["login"].ok
        assert checks[f"file root {tmp_path}"].detail == f"{tmp_path}: a folder"
        missing = checks["file root /nonexistent-iri-health/{user}"]
        assert not missing.ok and "No such file or directory" in missing.detail
        assert missing.kind == "file_root" and 0 <= missing.seconds < 5
        assert health.condition("local") == "degraded"
        assert health.since("local") is not None
        with pytest.raises(TypeError):
            snapshot["local"] = {}  # type: ignore[index]
    finally:
        health.stop()
    assert health.condition("local") is None


def test_probing_off(tmp_path: Path) -> None:
    health = monitor(tmp_path, [], interval=0)
    health.start()
    assert not health.probing and health.condition("local") is None
    assert dict(health.snapshot()) == {}


def test_the_fixed_part_of_a_root() -> None:
    assert fixed_part("/pscratch/sd/{account_initial}/{account}") == "/pscratch/sd"
    assert fixed_part("~/{user}/runs") == "~"
    assert fixed_part("/{user}") == "/"
    assert fixed_part("/tmp") == "/tmp"


def test_a_hung_probe_is_cut_and_never_started_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A probe that never ends fails at the time-out; the next round waits for the same one
    (no second thread) and says it hangs; once it ends, the next round starts it again."""
    release = threading.Event()
    started: list[float] = []

    def hanging(timeout: float) -> str:
        started.append(time.monotonic())
        release.wait(30)
        return "answered at last"

    checks = [Check("scheduler", "scheduler", hanging), Check("login", "login", lambda t: "ok")]
    monkeypatch.setattr(monitor_module, "checks_of", lambda loaded, backends: checks)
    health = monitor(tmp_path, [])
    health.timeout = 0.3
    health.start()  # its own first round runs too: both wait for the one probe
    try:
        began = time.monotonic()
        health.probe_round()
        assert time.monotonic() - began < 2
        first = health.snapshot()["local"]["scheduler"]
        assert not first.ok
        assert first.detail == "no answer within 0.3 s" or "hangs" in first.detail, first
        assert health.condition("local") == "down"
        health.probe_round()
        assert "has not ended: it hangs" in health.snapshot()["local"]["scheduler"].detail
        assert len(started) == 1
        release.set()
        deadline = time.monotonic() + 5
        while health.condition("local") != "up":
            assert time.monotonic() < deadline
            health.probe_round()
        assert health.snapshot()["local"]["scheduler"].detail == "answered at last"
    finally:
        release.set()
        health.stop()
