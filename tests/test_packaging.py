"""The wheel carries the templates, the shipped profiles and schema.json with the code."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from iri_gateway.profiles import builtin_profiles_dir
from iri_gateway.render import builtin_templates_dir

ROOT = Path(__file__).parent.parent


def test_wheel_contains_templates_and_profiles(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", str(tmp_path), str(ROOT)],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    (wheel,) = tmp_path.glob("iri_gateway-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {
        f"iri_gateway/templates/{p.relative_to(builtin_templates_dir())}"
        for p in builtin_templates_dir().rglob("*.j2")
    } | {
        f"iri_gateway/facility_profiles/{p.name}"
        for p in builtin_profiles_dir().iterdir() if p.suffix in (".yaml", ".json")
    }
    assert len(expected) >= 15
    assert expected <= names, sorted(expected - names)
