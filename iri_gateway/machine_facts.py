"""The hardware of the machine the gateway runs on, measured at start for the `local` resource.

A profile's facts are written by hand; for the `local` resource that means guesses (always
x86_64, no CPU MHz, no GPUs), so a flavour asking `cpu_mhz > 1400` never matched a
workstation. With `nodes: {detect: true}` the gateway reads them from this machine instead:
architecture (`uname`, normalised), cores and CPU MHz (`/sys`, `/proc/cpuinfo`), memory
(`/proc/meminfo`), NVIDIA and AMD GPUs (`nvidia-smi`, `rocm-smi`, else their `/dev` nodes) and
CDI devices (the specs in `/etc/cdi` and `/var/run/cdi`). Every place read is a parameter, so
tests can point the detector at their own files.

Detection never stops the gateway: what cannot be read becomes a warning that names the file
or program and why, and the value is left undetected (None), never guessed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from iri_gateway.models.platforms import PlatformError, normalise_arch

DEFAULT_CDI_DIRS = (Path("/etc/cdi"), Path("/var/run/cdi"))
"""Where CDI specs are kept (the CDI specification's static and dynamic folders)."""
_SPEC_SUFFIXES = (".yaml", ".yml", ".json")
_CUDA = re.compile(r"CUDA Version:\s*([0-9][0-9.]*)")
_COMMAND_TIMEOUT = 20

Runner = Callable[[list[str]], str]
"""Runs a program (argv) and returns its stdout; raises OSError or CalledProcessError."""
Which = Callable[[str], str | None]


def run_program(argv: list[str]) -> str:
    """The program's stdout; CalledProcessError when it fails, TimeoutExpired when it hangs."""
    return subprocess.run(
        argv, capture_output=True, text=True, check=True, timeout=_COMMAND_TIMEOUT
    ).stdout


@dataclass(frozen=True)
class DetectedGpus:
    """The GPUs found, as the profile's `nodes.gpus` describes them."""

    count: int
    vendor: str
    model: str
    memory_gib: float | None = None
    cuda: str | None = None
    rocm: str | None = None


@dataclass(frozen=True)
class MachineFacts:
    """What was measured; None where nothing could be read (a warning then says why)."""

    arch: str | None
    cores: int | None
    mhz: int | None
    memory_gib: float | None
    gpus: DetectedGpus | None
    cdi_devices: tuple[str, ...]
    warnings: tuple[str, ...] = field(default=())


def detect_machine(
    *,
    proc: Path = Path("/proc"),
    sys_dir: Path = Path("/sys"),
    dev: Path = Path("/dev"),
    cdi_dirs: Sequence[Path] = DEFAULT_CDI_DIRS,
    machine: str | None = None,
    which: Which = shutil.which,
    run: Runner = run_program,
    rocm_version_file: Path = Path("/opt/rocm/.info/version"),
) -> MachineFacts:
    """Measure this machine (`machine`: the `uname -m` to use, default this one's)."""
    warnings: list[str] = []
    arch = _arch(os.uname().machine if machine is None else machine, warnings)
    cpuinfo = _read(proc / "cpuinfo", warnings)
    return MachineFacts(
        arch=arch,
        cores=_cores(cpuinfo, warnings),
        mhz=_mhz(sys_dir, cpuinfo, proc / "cpuinfo", warnings),
        memory_gib=_memory(proc / "meminfo", warnings),
        gpus=(
            _nvidia(dev, which, run, warnings) or _amd(dev, which, run, rocm_version_file, warnings)
        ),
        cdi_devices=tuple(cdi_devices(cdi_dirs, warnings)),
        warnings=tuple(warnings),
    )


def _read(path: Path, warnings: list[str]) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError as error:
        warnings.append(f"cannot read {path}: {error.strerror or error}")
        return None


def _arch(machine: str, warnings: list[str]) -> str | None:
    try:
        return normalise_arch(machine)
    except PlatformError as error:
        warnings.append(f"architecture from uname: {error}")
        return None


def _cpuinfo_blocks(cpuinfo: str) -> list[dict[str, str]]:
    blocks = []
    for text in cpuinfo.split("\n\n"):
        entries = {}
        for line in text.splitlines():
            key, sep, value = line.partition(":")
            if sep:
                entries[key.strip()] = value.strip()
        if "processor" in entries:
            blocks.append(entries)
    return blocks


def _cores(cpuinfo: str | None, warnings: list[str]) -> int | None:
    """Physical cores: distinct (physical id, core id) pairs of /proc/cpuinfo; where it lists
    none (ARM, which has no SMT), every processor is a core, as os.cpu_count() says."""
    if cpuinfo is not None:
        pairs = {
            (b.get("physical id"), b["core id"]) for b in _cpuinfo_blocks(cpuinfo) if "core id" in b
        }
        if pairs:
            return len(pairs)
    else:
        warnings.append(
            "cpu_cores counted as os.cpu_count() (logical CPUs, hyper-threads "
            "included), since the CPU list could not be read"
        )
    return os.cpu_count()


def _mhz(sys_dir: Path, cpuinfo: str | None, cpuinfo_path: Path, warnings: list[str]) -> int | None:
    """The base clock (cpufreq `base_frequency`, else `cpuinfo_max_freq`, in kHz), else the
    highest `cpu MHz` of /proc/cpuinfo."""
    cpufreq = sys_dir / "devices" / "system" / "cpu" / "cpu0" / "cpufreq"
    for name in ("base_frequency", "cpuinfo_max_freq"):
        path = cpufreq / name
        if not path.exists():
            continue
        text = _read(path, warnings)
        if text is not None and text.strip().isdigit():
            return round(int(text.strip()) / 1000)
        if text is not None:
            warnings.append(f"{path}: {text.strip()!r} is not a frequency in kHz")
    if cpuinfo is None:
        return None
    speeds = []
    for block in _cpuinfo_blocks(cpuinfo):
        try:
            speeds.append(float(block["cpu MHz"]))
        except (KeyError, ValueError):
            continue
    if not speeds:
        warnings.append(
            f"no CPU clock found: neither {cpufreq}/base_frequency nor "
            f"cpuinfo_max_freq, nor 'cpu MHz' in {cpuinfo_path}"
        )
        return None
    return round(max(speeds))


def _memory(meminfo: Path, warnings: list[str]) -> float | None:
    text = _read(meminfo, warnings)
    if text is None:
        return None
    match = re.search(r"^MemTotal:\s*(\d+)\s*kB", text, re.MULTILINE)
    if match is None:
        warnings.append(f"{meminfo} has no 'MemTotal: N kB' line")
        return None
    return round(int(match.group(1)) / 1024**2, 2)


def _device_count(dev: Path, pattern: str) -> int:
    return sum(1 for _ in dev.glob(pattern)) if dev.is_dir() else 0


def _nvidia(dev: Path, which: Which, run: Runner, warnings: list[str]) -> DetectedGpus | None:
    program = which("nvidia-smi")
    nodes = len([p for p in dev.glob("nvidia*") if p.name[6:].isdigit()]) if dev.is_dir() else 0
    if program is None:
        if nodes:
            warnings.append(
                f"{nodes} NVIDIA GPU device(s) in {dev} but no nvidia-smi on PATH: "
                "their model, memory and CUDA version are not known"
            )
            return DetectedGpus(count=nodes, vendor="nvidia", model="unknown")
        return None
    try:
        listing = run([program, "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"])
        summary = run([program])
    except (OSError, subprocess.SubprocessError) as error:
        warnings.append(f"{program} failed: {_failure(error)}; NVIDIA GPUs not detected")
        return None
    rows = [line.split(",") for line in listing.splitlines() if line.strip()]
    if not rows:
        return None
    memory = None
    try:
        memory = round(float(rows[0][1]) / 1024, 2) or None
    except (IndexError, ValueError):
        warnings.append(f"{program}: no GPU memory in {listing.splitlines()[0]!r}")
    cuda = _CUDA.search(summary)
    if cuda is None:
        warnings.append(f"{program} shows no 'CUDA Version': nvidia_cuda not detected")
    return DetectedGpus(
        count=len(rows),
        vendor="nvidia",
        model=rows[0][0].strip(),
        memory_gib=memory,
        cuda=cuda.group(1) if cuda else None,
    )


def _amd(
    dev: Path, which: Which, run: Runner, version_file: Path, warnings: list[str]
) -> DetectedGpus | None:
    program = which("rocm-smi")
    if program is None:
        if (dev / "kfd").exists():
            count = _device_count(dev / "dri", "renderD*")
            warnings.append(
                f"{dev / 'kfd'} exists but no rocm-smi on PATH: {count} AMD GPU(s) "
                f"counted by their render nodes, model and ROCm version not known"
            )
            return DetectedGpus(count=count, vendor="amd", model="unknown") if count else None
        return None
    try:
        cards: Any = json.loads(run([program, "--showproductname", "--json"]))
    except (OSError, subprocess.SubprocessError, ValueError) as error:
        warnings.append(f"{program} failed: {_failure(error)}; AMD GPUs not detected")
        return None
    names = (
        [value for key, value in cards.items() if key.startswith("card")]
        if isinstance(cards, dict)
        else []
    )
    if not names:
        return None
    first = names[0] if isinstance(names[0], dict) else {}
    model = str(first.get("Card series") or first.get("Card model") or "unknown")
    version = None
    if version_file.exists():
        text = _read(version_file, warnings)
        version = text.strip().split("-")[0] if text else None
    return DetectedGpus(count=len(names), vendor="amd", model=model, rocm=version)


def _failure(error: BaseException) -> str:
    if isinstance(error, subprocess.CalledProcessError):
        return f"exit {error.returncode}: {(error.stderr or '').strip()[:200]}"
    return str(error)


def cdi_devices(dirs: Sequence[Path], warnings: list[str]) -> list[str]:
    """Every device the CDI specs in `dirs` define, as `vendor/class=name`, in file order.

    A folder that does not exist is normal (no specs); a spec that cannot be read or is not a
    CDI spec is named in a warning and skipped.
    """
    found: list[str] = []
    for folder in dirs:
        if not folder.is_dir():
            continue
        try:
            files = sorted(p for p in folder.iterdir() if p.suffix in _SPEC_SUFFIXES)
        except OSError as error:
            warnings.append(f"cannot list {folder}: {error.strerror or error}")
            continue
        for path in files:
            for device in _spec_devices(path, warnings):
                if device not in found:
                    found.append(device)
    return found


def _spec_devices(path: Path, warnings: list[str]) -> list[str]:
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    text = _read(path, warnings)
    if text is None:
        return []
    try:
        spec = YAML(typ="safe", pure=True).load(text)
    except YAMLError as error:
        warnings.append(f"CDI spec {path} is not YAML or JSON: {str(error).splitlines()[0]}")
        return []
    kind = spec.get("kind") if isinstance(spec, dict) else None
    devices = spec.get("devices") if isinstance(spec, dict) else None
    if not isinstance(kind, str) or "/" not in kind or not isinstance(devices, list):
        warnings.append(f"CDI spec {path} has no 'kind: vendor/class' and 'devices' list")
        return []
    names = [d.get("name") for d in devices if isinstance(d, dict)]
    if not all(isinstance(name, str) and name for name in names):
        warnings.append(f"CDI spec {path}: a device without a name is left out")
    return [f"{kind}={name}" for name in names if isinstance(name, str) and name]
