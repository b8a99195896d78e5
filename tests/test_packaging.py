"""The wheel carries the templates, the shipped profiles and schema.json with the code, and an
installed wheel renders with them from any folder.

The profiles and templates live at the top of the repository (`facility_profiles/`,
`templates/`); the wheel carries them as `iri_gateway/_shipped/...` (see iri_gateway/shipped.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from iri_gateway import shipped
from iri_gateway.errors import ShippedDataError
from iri_gateway.planning.render import builtin_templates_dir
from iri_gateway.profiles.loading import builtin_profiles_dir
from iri_gateway.service.operations.migrations import head_revision

ROOT = Path(__file__).parent.parent
SHIPPED = "iri_gateway/_shipped"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel `pip wheel` builds from this checkout (no isolation: works offline)."""
    folder = tmp_path_factory.mktemp("wheel")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(folder),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    (built,) = folder.glob("iri_gateway-*.whl")
    return built


def test_the_shipped_folders_are_at_the_top_of_the_checkout() -> None:
    assert builtin_profiles_dir() == (ROOT / "facility_profiles").resolve()
    assert builtin_templates_dir() == (ROOT / "templates").resolve()


def test_missing_shipped_folders_are_an_installation_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shipped, "_PACKAGE", tmp_path / "iri_gateway")
    with pytest.raises(ShippedDataError) as caught:
        shipped.shipped_dir("templates")
    assert caught.value.looked_in == [
        tmp_path / "iri_gateway" / "_shipped" / "templates",
        tmp_path / "templates",
    ]
    assert "reinstall iri-gateway" in str(caught.value)


def test_wheel_contains_templates_and_profiles(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {
        f"{SHIPPED}/templates/{p.relative_to(builtin_templates_dir()).as_posix()}"
        for p in builtin_templates_dir().rglob("*.j2")
    } | {
        f"{SHIPPED}/facility_profiles/{p.name}"
        for p in builtin_profiles_dir().iterdir()
        if p.suffix in (".yaml", ".json")
    }
    assert len(expected) >= 15
    assert f"{SHIPPED}/facility_profiles/schema.json" in expected
    assert expected <= names, sorted(expected - names)


def test_wheel_contains_the_store_migrations(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    folder = ROOT / "iri_gateway" / "service" / "operations" / "migrations"
    expected = {
        f"iri_gateway/service/operations/migrations/{p.relative_to(folder).as_posix()}"
        for p in folder.rglob("*.py")
    }
    assert "iri_gateway/service/operations/migrations/env.py" in expected
    assert len([name for name in expected if "/versions/r0" in name]) >= 2
    assert expected <= names, sorted(expected - names)


def test_wheel_contains_the_console(wheel: Path) -> None:
    """The web console's templates and assets ship in the wheel (no CDN, no Node build)."""
    names = set(zipfile.ZipFile(wheel).namelist())
    folder = ROOT / "iri_gateway" / "console"
    expected = {
        f"iri_gateway/console/{p.relative_to(folder).as_posix()}"
        for p in folder.rglob("*")
        if p.suffix in (".html", ".js", ".css", ".svg")
    }
    assert {
        "iri_gateway/console/templates/base.html",
        "iri_gateway/console/static/sites.js",
        "iri_gateway/console/static/console.css",
    } <= expected
    assert expected <= names, sorted(expected - names)


def test_installed_wheel_renders_from_another_folder(wheel: Path, tmp_path: Path) -> None:
    """A fresh venv holding only the wheel (its dependencies are this venv's) renders the
    example from a folder that is not the checkout, with the profiles and templates it ships."""
    venv = tmp_path / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120
    )
    python = venv / "bin" / "python"
    installed = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            str(wheel),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert installed.returncode == 0, installed.stderr
    # The dependencies come from this venv's site-packages, added as a plain path: its .pth
    # files (among them the editable install of this checkout) are not processed.
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout.strip()
    )
    (site / "dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}

    where = subprocess.run(
        [
            str(python),
            "-c",
            "import iri_gateway.shipped as s; print(s.shipped_dir('templates'))"
            "; print(s.shipped_dir('facility_profiles'))",
        ],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert where.returncode == 0, where.stderr
    assert where.stdout.split() == [
        str(site / SHIPPED / "templates"),
        str(site / SHIPPED / "facility_profiles"),
    ]

    example = ROOT / "examples" / "gpu-mpi-job.json"
    command = ["render", str(example), "--resource", "perlmutter-gpu"]
    rendered = subprocess.run(
        [str(venv / "bin" / "iri-gateway"), *command],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert rendered.returncode == 0, rendered.stderr
    from_checkout = subprocess.run(
        [sys.executable, "-m", "iri_gateway", *command],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert from_checkout.returncode == 0, from_checkout.stderr
    assert rendered.stdout == from_checkout.stdout
    assert "podman-hpc run" in rendered.stdout

    # The store migrates a new database with the migrations the wheel installed.
    migrated = subprocess.run(
        [
            str(python),
            "-c",
            "import iri_gateway.service.operations.migrations as m; print(m.__file__); "
            "from iri_gateway.service.operations.store import JobStore; "
            f"JobStore('sqlite:///{elsewhere}/jobs.db'); print(m.head_revision())",
        ],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert migrated.returncode == 0, migrated.stderr
    assert migrated.stdout.split() == [
        str(site / "iri_gateway" / "service" / "operations" / "migrations" / "__init__.py"),
        head_revision(),
    ]  # the checkout's newest migration, shipped in the wheel too
