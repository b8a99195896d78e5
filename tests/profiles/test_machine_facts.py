"""The `local` resource measured on this machine (`nodes: {detect: true}`).

The detector reads the real /proc, /sys and uname here, and its answers are checked against
what the operating system reports through other means (`lscpu`, `os`, /proc/meminfo). CDI specs
are written by the tests into their own folders. The GPU programs cannot be had on this machine
(no GPUs): their output is given by a stand-in function, named so.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from iri_gateway.errors import ProfileError
from iri_gateway.machine_facts import DetectedGpus, MachineFacts, detect_machine
from iri_gateway.models.platforms import normalise_arch
from iri_gateway.planning.jobspec_io import parse_jobspec
from iri_gateway.planning.placement import place
from iri_gateway.profiles.loading import ProfileRegistry, builtin_profile
from iri_gateway.profiles.local_machine import registry_with_machine, with_machine
from iri_gateway.service.assembly import build_engine
from iri_gateway.service.operations.settings import Settings
from tests.support.paths import TEST_PROFILE

NO_CDI: list[Path] = []


def lscpu_cores() -> int:
    """Physical cores as util-linux counts them (distinct core and socket pairs)."""
    out = subprocess.run(
        ["lscpu", "-p=CORE,SOCKET"], capture_output=True, text=True, check=True
    ).stdout
    return len({line for line in out.splitlines() if not line.startswith("#")})


def expected_mhz() -> int:
    cpufreq = Path("/sys/devices/system/cpu/cpu0/cpufreq")
    for name in ("base_frequency", "cpuinfo_max_freq"):
        if (cpufreq / name).exists():
            return round(int((cpufreq / name).read_text()) / 1000)
    speeds = re.findall(r"^cpu MHz\s*:\s*([0-9.]+)", Path("/proc/cpuinfo").read_text(), re.M)
    return round(max(float(speed) for speed in speeds))


def test_this_machine_as_the_os_reports_it() -> None:
    machine = detect_machine(cdi_dirs=NO_CDI)
    assert machine.warnings == ()
    assert machine.arch == normalise_arch(os.uname().machine)
    assert machine.cores == lscpu_cores()
    assert machine.mhz == expected_mhz()
    total_kib = int(
        re.search(r"^MemTotal:\s*(\d+) kB", Path("/proc/meminfo").read_text(), re.M).group(1)
    )  # type: ignore[union-attr]
    assert machine.memory_gib == round(total_kib / 1024**2, 2)
    # No GPUs here: no nvidia-smi, rocm-smi or GPU device nodes.
    assert machine.gpus is None and not list(Path("/dev").glob("nvidia[0-9]*"))
    assert machine.cdi_devices == ()


CDI_YAML = """\
cdiVersion: "0.6.0"
kind: vendor.example/gpu
devices:
  - name: "0"
    containerEdits: {env: [GPU=0]}
  - name: all
    containerEdits: {env: [GPU=all]}
"""


def test_cdi_specs_in_the_given_folders_are_found(tmp_path: Path) -> None:
    static, dynamic = tmp_path / "etc-cdi", tmp_path / "run-cdi"
    static.mkdir()
    dynamic.mkdir()
    (static / "gpu.yaml").write_text(CDI_YAML)
    (dynamic / "fpga.json").write_text(
        json.dumps(
            {
                "cdiVersion": "0.6.0",
                "kind": "fpga.example/card",
                "devices": [{"name": "slot1", "containerEdits": {}}],
            }
        )
    )
    (dynamic / "notes.txt").write_text("not a spec")
    machine = detect_machine(cdi_dirs=[static, dynamic, tmp_path / "missing"])
    assert machine.cdi_devices == (
        "vendor.example/gpu=0",
        "vendor.example/gpu=all",
        "fpga.example/card=slot1",
    )
    assert machine.warnings == ()


def test_a_broken_or_unreadable_cdi_spec_is_a_warning_and_the_others_count(
    tmp_path: Path,
) -> None:
    (tmp_path / "a.yaml").write_text("kind: [unclosed\n")
    (tmp_path / "b.yaml").write_text("cdiVersion: 0.6.0\ndevices: []\n")
    (tmp_path / "c.yaml").write_text(CDI_YAML)
    (tmp_path / "d.yaml").mkdir()  # a folder named like a spec: cannot be read as one
    machine = detect_machine(cdi_dirs=[tmp_path])
    assert machine.cdi_devices == ("vendor.example/gpu=0", "vendor.example/gpu=all")
    warnings = "\n".join(machine.warnings)
    assert f"CDI spec {tmp_path / 'a.yaml'} is not YAML or JSON" in warnings
    assert f"CDI spec {tmp_path / 'b.yaml'} has no 'kind: vendor/class'" in warnings
    assert f"cannot read {tmp_path / 'd.yaml'}" in warnings


def test_unreadable_files_are_warnings_never_guesses(tmp_path: Path) -> None:
    """An empty /proc and /sys: nothing is read, start-up goes on, and each gap is said."""
    machine = detect_machine(
        proc=tmp_path,
        sys_dir=tmp_path,
        dev=tmp_path,
        cdi_dirs=NO_CDI,
        machine="sparc64",
        which=lambda name: None,
    )
    assert (machine.arch, machine.mhz, machine.memory_gib) == (None, None, None)
    warnings = "\n".join(machine.warnings)
    assert f"cannot read {tmp_path / 'meminfo'}" in warnings
    assert f"cannot read {tmp_path / 'cpuinfo'}" in warnings
    assert "unknown CPU architecture 'sparc64'" in warnings
    assert "cpu_cores counted as os.cpu_count()" in warnings
    assert machine.cores == os.cpu_count()
    loaded = ProfileRegistry.from_files([builtin_profile("local")]).get("local")
    measured, notes = with_machine(loaded, machine)
    assert "local: memory_gib not detected; the profile's 24.0 is used" in notes
    assert "local: cpu_arch not detected; the profile's 'x86_64' is used" in notes
    assert "local: cpu_mhz not detected and not in the profile: local has none" in notes
    assert any(f"cannot read {tmp_path / 'meminfo'}" in note for note in notes)
    assert measured.facts["memory_gib"] == 24 and "memory_gib" not in measured.detected
    assert "cpu_mhz" not in measured.facts


def standin_nvidia_smi(argv: list[str]) -> str:
    """STAND-IN for nvidia-smi (no NVIDIA GPU here): its answers, in its documented formats."""
    if "--query-gpu=name,memory.total" in argv:
        return "NVIDIA A100-SXM4-40GB, 40960\nNVIDIA A100-SXM4-40GB, 40960\n"
    return (
        "+-----------------------------------------------------------------------------+\n"
        "| NVIDIA-SMI 535.104.05   Driver Version: 535.104.05   CUDA Version: 12.2     |\n"
    )


def test_nvidia_gpus_become_facts(tmp_path: Path) -> None:
    machine = detect_machine(
        cdi_dirs=NO_CDI,
        dev=tmp_path,
        run=standin_nvidia_smi,
        which=lambda name: f"/usr/bin/{name}" if name == "nvidia-smi" else None,
    )
    assert machine.gpus == DetectedGpus(
        count=2, vendor="nvidia", model="NVIDIA A100-SXM4-40GB", memory_gib=40.0, cuda="12.2"
    )
    loaded = ProfileRegistry.from_files([builtin_profile("local")]).get("local")
    measured, _ = with_machine(loaded, machine)
    assert {fact: measured.facts[fact] for fact in ("gpu_count", "gpu_vendor", "nvidia_cuda")} == {
        "gpu_count": 2,
        "gpu_vendor": "nvidia",
        "nvidia_cuda": "12.2",
    }
    assert {"gpu_count", "nvidia_cuda", "gpu_memory_gib"} <= set(measured.detected)


def standin_rocm_smi(argv: list[str]) -> str:
    """STAND-IN for rocm-smi (no AMD GPU here): `--showproductname --json` as it prints it."""
    assert argv[1:] == ["--showproductname", "--json"]
    card = {
        "Card series": "AMD Instinct MI250X",
        "Card model": "0x7408",
        "Card vendor": "Advanced Micro Devices, Inc. [AMD/ATI]",
    }
    return json.dumps({"card0": card, "card1": card, "system": {"Driver version": "6.2.4"}})


def test_amd_gpus_become_facts(tmp_path: Path) -> None:
    version = tmp_path / "version"
    version.write_text("6.2.4-120\n")
    machine = detect_machine(
        cdi_dirs=NO_CDI,
        dev=tmp_path,
        run=standin_rocm_smi,
        which=lambda name: "/opt/rocm/bin/rocm-smi" if name == "rocm-smi" else None,
        rocm_version_file=version,
    )
    assert machine.gpus == DetectedGpus(
        count=2, vendor="amd", model="AMD Instinct MI250X", rocm="6.2.4"
    )
    assert machine.warnings == ()


def test_a_failing_gpu_program_is_a_warning(tmp_path: Path) -> None:
    def failing(argv: list[str]) -> str:
        raise subprocess.CalledProcessError(
            9,
            argv,
            "",
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver",
        )

    machine = detect_machine(
        cdi_dirs=NO_CDI,
        dev=tmp_path,
        run=failing,
        which=lambda name: f"/usr/bin/{name}" if name == "nvidia-smi" else None,
    )
    assert machine.gpus is None
    assert machine.warnings == (
        "/usr/bin/nvidia-smi failed: exit 9: NVIDIA-SMI has failed "
        "because it couldn't communicate with the NVIDIA driver; "
        "NVIDIA GPUs not detected",
    )


def test_gpu_device_nodes_without_nvidia_smi_are_counted_and_said(tmp_path: Path) -> None:
    for name in ("nvidia0", "nvidia1", "nvidiactl"):
        (tmp_path / name).touch()
    machine = detect_machine(cdi_dirs=NO_CDI, dev=tmp_path, which=lambda name: None)
    assert machine.gpus == DetectedGpus(count=2, vendor="nvidia", model="unknown")
    assert any("no nvidia-smi on PATH" in warning for warning in machine.warnings)


def fast_workstation(cores: int = 8) -> MachineFacts:
    return MachineFacts(
        arch="aarch64",
        cores=cores,
        mhz=3200,
        memory_gib=64.0,
        gpus=None,
        cdi_devices=("nvidia.com/gpu=all",),
    )


def test_the_workstation_case_the_cpu_flavour_matches_local() -> None:
    """The proposal's cpu flavour (`cpu_mhz > 1400`) cannot match the written local profile
    (no MHz); measured, it does, and the measured facts are what negotiation uses."""
    job = parse_jobspec(
        {
            "executable": "/app/run",
            "container": {
                "flavours": [
                    {
                        "name": "cuda",
                        "image": "docker.io/lab/app:cuda",
                        "priority": 100,
                        "requirements": [{"gpu_count": ">= 2"}, {"nvidia_cuda": "> 11"}],
                    },
                    {
                        "name": "cpu",
                        "image": "docker.io/lab/app:cpu",
                        "priority": 20,
                        "requirements": [{"cpu_mhz": "> 1400"}, {"cpu_arch": "arm64"}],
                    },
                ]
            },
        }
    )
    written = ProfileRegistry.from_files([builtin_profile("local")])
    [before] = place(job, written)
    assert not before.runnable
    registry, notes = registry_with_machine(written, detect=fast_workstation)
    assert notes == []
    [after] = place(job, registry)
    assert after.runnable and after.flavour == "cpu"
    local = registry.get("local")
    assert local.resource.nodes.cpu.cores == 8 and local.resource.nodes.memory_gib == 64.0
    assert local.facts["cdi_devices"] == ["nvidia.com/gpu=all"]
    assert set(local.detected) == {
        "cpu_arch",
        "cpu_cores",
        "cpu_mhz",
        "memory_gib",
        "gpu_count",
        "cdi_devices",
    }


def test_detect_is_only_for_the_local_scheduler(tmp_path: Path) -> None:
    text = TEST_PROFILE.read_text()
    path = tmp_path / "site.yaml"
    path.write_text(
        text.replace(
            "    nodes:\n      count: 4\n", "    nodes:\n      detect: true\n      count: 4\n", 1
        )
    )
    with pytest.raises(
        ProfileError,
        match=re.escape(
            "nodes.detect measures the gateway's own machine, so it needs scheduler kind "
            "'local', not 'slurm'"
        ),
    ):
        ProfileRegistry.from_files([path])


def test_serve_and_the_command_line_measure_local(tmp_path: Path) -> None:
    machine = detect_machine()
    engine = build_engine(Settings(data_dir=tmp_path))  # type: ignore[call-arg]
    try:
        facts = engine.registry.get("local").facts
    finally:
        engine.close()
    assert (facts["cpu_arch"], facts["cpu_cores"], facts["memory_gib"]) == (
        machine.arch,
        machine.cores,
        machine.memory_gib,
    )
    assert facts["cdi_devices"] == list(machine.cdi_devices)
    shown = subprocess.run(
        [sys.executable, "-m", "iri_gateway", "capabilities", "--resource", "local", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr
    [document] = json.loads(shown.stdout)
    assert document["hardware"]["cpu_mhz"] == machine.mhz
    assert document["hardware"]["cpu_cores"] == machine.cores
    assert {"cpu_arch", "cpu_cores", "cpu_mhz", "memory_gib", "cdi_devices"} <= set(
        document["detected"]
    )
    human = subprocess.run(
        [sys.executable, "-m", "iri_gateway", "capabilities", "--resource", "local"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "150"},
    )
    assert f"cpu_mhz: {machine.mhz} (detected)" in human.stdout
    assert "node_count: 1" in human.stdout, human.stdout
    assert "node_count: 1 (detected)" not in human.stdout, "written facts are not marked"
