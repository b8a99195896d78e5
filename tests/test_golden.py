"""Golden scripts: every shipped profile (and the test site) x runtime x {cpu, gpu, mpi, gpu+mpi}.

A rendered script is compared byte for byte with `tests/golden/<resource>/<runtime>-<sample>.sh`;
a refused combination with `<runtime>-<sample>.rejected` (one problem per line). After a
deliberate change, regenerate with `IRI_UPDATE_GOLDEN=1 pytest tests/test_golden.py` and read
the diff. Every golden script must pass `bash -n` and `shellcheck -S warning`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from iri_gateway.errors import JobRejectedError
from iri_gateway.planner import make_plan
from iri_gateway.profile_check import SAMPLES, sample_job
from iri_gateway.profiles import ProfileRegistry
from tests.conftest import TEST_PROFILE

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("IRI_UPDATE_GOLDEN") == "1"

_REGISTRY = ProfileRegistry.from_files([*ProfileRegistry.builtin_files(), TEST_PROFILE])
CASES = [
    (loaded.id, runtime, sample)
    for loaded in _REGISTRY
    for runtime in [*loaded.resource.runtimes.available(), "none"]
    for sample in SAMPLES
]


def _render(resource: str, runtime: str, sample: str) -> tuple[str, str]:
    loaded = _REGISTRY.get(resource)
    spec = sample_job(sample, loaded, runtime)  # type: ignore[arg-type]  # str from CASES
    try:
        return ".sh", make_plan(spec, loaded).script
    except JobRejectedError as error:
        return ".rejected", "".join(f"{problem}\n" for problem in error.problems)


@pytest.mark.parametrize(("resource", "runtime", "sample"), CASES)
def test_golden(resource: str, runtime: str, sample: str) -> None:
    suffix, text = _render(resource, runtime, sample)
    stem = GOLDEN / resource / f"{runtime}-{sample.replace('+', '-')}"
    path = stem.with_suffix(suffix)
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        for stale in (stem.with_suffix(".sh"), stem.with_suffix(".rejected")):
            stale.unlink(missing_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"no golden {path.name}; run with IRI_UPDATE_GOLDEN=1 and review"
    assert text == path.read_text(encoding="utf-8")


def test_cpu_sample_runs_everywhere() -> None:
    rejected = [case for case in CASES if case[2] == "cpu" and _render(*case)[0] != ".sh"]
    assert rejected == []


def test_every_site_renders_gpu_and_mpi_somewhere() -> None:
    for resource in ("perlmutter-gpu", "frontier", "polaris", "aurora"):
        rendered = {s for r, rt, s in CASES if r == resource and _render(r, rt, s)[0] == ".sh"}
        assert rendered == set(SAMPLES), resource


def test_golden_scripts_pass_bash_syntax_check() -> None:
    scripts = sorted(GOLDEN.glob("*/*.sh"))
    assert len(scripts) >= 40
    for script in scripts:
        result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert result.returncode == 0, f"{script}: {result.stderr}"


def test_golden_scripts_are_shellcheck_clean() -> None:
    shellcheck = shutil.which("shellcheck")
    assert shellcheck, "shellcheck is required (scripts/test-all installs Debian's shellcheck)"
    scripts = [str(p) for p in sorted(GOLDEN.glob("*/*.sh"))]
    result = subprocess.run(
        [shellcheck, "-S", "warning", "-s", "bash", *scripts], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_no_stale_goldens() -> None:
    expected = {f"{r}/{rt}-{s.replace('+', '-')}" for r, rt, s in CASES}
    present = {f"{p.parent.name}/{p.stem}" for p in GOLDEN.glob("*/*") if p.is_file()}
    assert present == expected
