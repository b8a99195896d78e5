"""Architecture names and image platforms: `arm64` is `aarch64`, `amd64` is `x86_64`.

Profiles, requirements and flavour platforms written with either name must meet; a flavour
whose image is built for another machine is never chosen, and the reason says so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from iri_gateway.errors import InvalidJobSpecError, ProfileError
from iri_gateway.models.platforms import PlatformError, normalise_arch, parse_platform
from iri_gateway.planning.jobspec_io import parse_jobspec
from iri_gateway.planning.placement import place
from iri_gateway.profiles.loading import ProfileRegistry, builtin_profile
from tests.conftest import plan_for, problems_for


def two_machines(folder: Path, arm_name: str, x86_name: str) -> ProfileRegistry:
    """The shipped `local` profile twice: as an ARM machine `arm` and an x86 machine `x86`,
    each architecture written as given."""
    text = builtin_profile("local").read_text()
    files = []
    for rid, arch in (("arm", arm_name), ("x86", x86_name)):
        path = folder / f"{rid}.yaml"
        path.write_text(
            text.replace("id: local\n  name", f"id: site-{rid}\n  name")
            .replace("  - id: local\n", f"  - id: {rid}\n")
            .replace("arch: x86_64", f"arch: {arch}")
        )
        files.append(path)
    return ProfileRegistry.from_files(files)


def job(requirements: dict[str, Any] | None = None, platform: str | None = None) -> dict[str, Any]:
    flavour: dict[str, Any] = {
        "name": "native",
        "image": "docker.io/lab/app:1.0-native",
        "priority": 10,
    }
    if requirements is not None:
        flavour["requirements"] = requirements
    if platform is not None:
        flavour["platform"] = platform
    return {"executable": "/app/run", "container": {"flavours": [flavour]}}


@pytest.mark.parametrize(
    ("written", "normal"),
    [
        ("arm64", "aarch64"),
        ("aarch64", "aarch64"),
        ("ARM64", "aarch64"),
        ("amd64", "x86_64"),
        ("x86_64", "x86_64"),
        ("x86-64", "x86_64"),
        ("riscv64", "riscv64"),
    ],
)
def test_names_of_one_machine_are_one_name(written: str, normal: str) -> None:
    assert normalise_arch(written) == normal


def test_an_unknown_architecture_is_refused_with_the_closest_names() -> None:
    with pytest.raises(
        PlatformError, match=r"unknown CPU architecture 'amd46'.*closest: amd64 \(= x86_64\)"
    ):
        normalise_arch("amd46")


@pytest.mark.parametrize(
    ("text", "arch", "variant"),
    [
        ("linux/arm64", "aarch64", None),
        ("linux/arm64/v8", "aarch64", "v8"),
        ("linux/amd64", "x86_64", None),
        ("linux/arm/v7", "armv7l", "v7"),
        ("linux/riscv64", "riscv64", None),
    ],
)
def test_oci_platforms_are_parsed(text: str, arch: str, variant: str | None) -> None:
    platform = parse_platform(text)
    assert (platform.os, platform.arch, platform.variant) == ("linux", arch, variant)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("arm64", "write os/arch"),
        ("windows/amd64", "not 'windows'"),
        ("linux/arm64/v7", "only the variant v8"),
        ("linux/sparc", "unknown CPU architecture"),
    ],
)
def test_bad_platforms_say_why(text: str, reason: str) -> None:
    with pytest.raises(PlatformError, match=reason):
        parse_platform(text)


@pytest.mark.parametrize(
    ("profile_arch", "required"),
    [
        ("aarch64", "arm64"),
        ("arm64", "aarch64"),
        ("arm64", "== ARM64"),
        ("aarch64", "in [arm64]"),
    ],
)
def test_arm_requirement_meets_arm_profile_either_way(
    tmp_path: Path, profile_arch: str, required: str
) -> None:
    registry = two_machines(tmp_path, profile_arch, "x86_64")
    plan = plan_for(registry, "arm", job({"cpu_arch": required}))
    assert plan.flavour == "native"
    assert registry.get("arm").facts["cpu_arch"] == "aarch64"
    [problem] = problems_for(registry, "x86", job({"cpu_arch": required}))
    assert "x86 has cpu_arch 'x86_64'" in problem.reason


@pytest.mark.parametrize(
    ("profile_arch", "required"),
    [
        ("amd64", "x86_64"),
        ("x86_64", "amd64"),
        ("amd64", "!= arm64"),
    ],
)
def test_amd64_and_x86_64_are_one_machine(tmp_path: Path, profile_arch: str, required: str) -> None:
    registry = two_machines(tmp_path, "arm64", profile_arch)
    assert plan_for(registry, "x86", job({"cpu_arch": required})).flavour == "native"
    assert registry.get("x86").resource.nodes.cpu.arch == "x86_64"


def test_a_platform_flavour_is_refused_on_the_other_architecture(tmp_path: Path) -> None:
    registry = two_machines(tmp_path, "aarch64", "amd64")
    document = job(platform="linux/arm64/v8")
    assert plan_for(registry, "arm", document).flavour == "native"
    [problem] = problems_for(registry, "x86", document)
    assert problem.field == "container.flavours[0].platform"
    assert problem.reason == (
        "flavour 'native': cpu_arch == aarch64 (platform linux/arm64/v8): x86 has cpu_arch 'x86_64'"
    )
    # Placement: one image per architecture, each placed only on its own machine.
    both = {
        "executable": "/app/run",
        "container": {
            "flavours": [
                {"name": "arm", "image": "docker.io/lab/app:1.0-arm64", "platform": "linux/arm64"},
                {"name": "amd", "image": "docker.io/lab/app:1.0-amd64", "platform": "linux/amd64"},
            ]
        },
    }
    ranked = {p.resource: p.flavour for p in place(parse_jobspec(both), registry)}
    assert ranked == {"arm": "arm", "x86": "amd"}


def test_bad_platform_and_arch_requirement_refused_in_the_jobspec() -> None:
    with pytest.raises(InvalidJobSpecError) as caught:
        parse_jobspec(job(platform="linux/sparc"))
    assert "unknown CPU architecture 'sparc'" in str(caught.value.problems)
    with pytest.raises(InvalidJobSpecError) as caught:
        parse_jobspec(job({"cpu_arch": "armd64"}))
    assert "unknown CPU architecture 'armd64'" in str(caught.value.problems)


def test_a_profile_with_an_unknown_architecture_is_refused_at_its_line(tmp_path: Path) -> None:
    path = tmp_path / "site.yaml"
    path.write_text(builtin_profile("local").read_text().replace("arch: x86_64", "arch: x68"))
    with pytest.raises(ProfileError) as caught:
        ProfileRegistry.from_files([path])
    [issue] = caught.value.issues
    line = 1 + path.read_text().splitlines().index("      cpu: {arch: x68, cores: 2}")
    assert issue.line == line and "unknown CPU architecture 'x68'" in issue.reason
