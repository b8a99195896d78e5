"""Shell safety: every user string of a JobSpec reaches its program exactly, never the shell.

The rule under test: a user string (executable, arguments, environment values, directory,
name, image, mount paths, extra options, output paths, container workdir) is either refused
with a Problem on its own field, or arrives where it is meant to go byte for byte, with nothing
in it interpreted by bash, sbatch or the container runtime.

How: each generated job is planned with `make_plan` for every runtime x scheduler pair that the
shipped profiles offer, checked with `bash -n`, and run by the real `/bin/bash` with the
STAND-INs of `tests/standins/` first on PATH (srun, mpiexec, apptainer, podman, podman-hpc,
shifter, module: see the README there). The job's program is a recorder script, copied to a
hostile file name, that writes its argv, environment, working directory and stdin to a file.
Payloads such as `$(touch CANARY)` must never create a file called CANARY.

Charliecloud is the exception: its real `ch-run` (Charliecloud 0.31, installed here) runs
every job, on a resource of a profile written by the test, in a directory image made of empty
mount points with the host's /usr (and the folders holding Python) bound in by the site, so the
recorder runs inside a real container. What ch-run cannot do is adapted, not skipped: mount
targets and the workdir are made inside the image (ch-run cannot create them in a read-only
image), and mounts are read-write (read-only ones are refused, see tests/runtimes/test_charliecloud.py).

Cluster jobs (`roles`) are run the same way on every pair whose runtime can bind the members'
hosts file: hostile strings also go into every role field (executable, arguments,
environment, image, mounts, workdir, extra options), and every member must receive exactly
its role's merge of them, launched on its own host (stand-ins `scontrol` and `scancel` for
Slurm, a `$PBS_NODEFILE` written as PBS writes it).

Slurm reads the `#SBATCH` lines itself; `sbatch_words` below follows sbatch's own parser
(`get_argument` and `_opt_batch_script` in src/sbatch/opt.c) and `slurm_output_file` the way
slurmstepd names output files (`fname_create` and `is_path_escaped` in
src/slurmd/slurmstepd/fname.c), so directive values are checked as Slurm will read them.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from iri_gateway.errors import GatewayError, JobRejectedError
from iri_gateway.models.loaded_resource import LoadedResource
from iri_gateway.models.plan import Plan
from iri_gateway.models.profile import Resource, RuntimeConfig
from iri_gateway.planning.jobspec_io import parse_jobspec
from iri_gateway.planning.planner import make_plan
from iri_gateway.profiles.loading import ProfileRegistry

STANDINS = Path(__file__).resolve().parent / "standins"
STANDIN_PROGRAMS = (
    "srun",
    "mpiexec",
    "apptainer",
    "podman",
    "podman-hpc",
    "shifter",
    "module",
    "scontrol",
    "scancel",
)
BASH = "/bin/bash"
REGISTRY = ProfileRegistry.builtin()
CANARY = "CANARY"
STDIN_TEXT = "stdin reached the program\n"
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
PBS_UNSAFE = re.compile(r"[\s\"'\\#]")
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
DIRECTIVE_FIELDS = ("name", "directory", "stdout_path", "stderr_path", "stdin_path")

# Text that means something to bash, sbatch, PBS, getopt or a glob, and some that means nothing.
PAYLOADS = (
    "'",
    '"',
    "$(touch CANARY)",
    "`touch CANARY`",
    "; touch CANARY #",
    "'; touch CANARY; '",
    '"; touch CANARY; "',
    "&& touch CANARY",
    "| touch CANARY",
    "\n",
    "\ntouch CANARY\n",
    "*",
    "?",
    "[",
    "]",
    "[a-z]*",
    "\u00e9",
    "\u65e5\u672c\u8a9e",
    "\U0001f4a5",
    "\u00a0",
    "-",
    "--",
    "-rf",
    "--help",
    "\\",
    "\\'",
    '\\"',
    "#",
    " ",
    "\t",
    "%",
    "%j",
    "%%",
    "$HOME",
    "${IFS}",
    "$0",
    "!!",
    "~",
    ">",
    "<",
    "&",
    "{a,b}",
    "\\n",
    "$'\\x41'",
    "=",
    ",",
    ":",
)


# ---------------------------------------------------------------------------------------------
# Runtime x scheduler pairs
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Combo:
    """One runtime on one shipped resource ('none': no container)."""

    resource_id: str
    runtime: str

    def __str__(self) -> str:
        return f"{self.resource_id}/{self.runtime}"

    @property
    def slug(self) -> str:
        return f"{self.resource_id}-{self.runtime}"

    @property
    def loaded(self) -> LoadedResource:
        return REGISTRY.get(self.resource_id)

    @property
    def resource(self) -> Resource:
        return self.loaded.resource

    @property
    def scheduler(self) -> str:
        return self.resource.scheduler.kind

    @property
    def config(self) -> RuntimeConfig | None:
        return self.resource.runtimes.get(self.runtime)

    @property
    def program(self) -> str | None:
        """The runtime's program as the script calls it (None without a container)."""
        config = self.config
        if config is None:
            return None
        return config.executable or self.runtime

    @property
    def launcher_program(self) -> str:
        mpi = self.resource.mpi
        return mpi.launcher if mpi is not None else {"slurm": "srun"}.get(self.scheduler, "")

    @property
    def takes_file_images(self) -> bool:
        config = self.config
        return config is not None and "sif" in config.image_forms


COMBOS = (
    Combo("perlmutter-gpu", "podman-hpc"),
    Combo("perlmutter-gpu", "shifter"),
    Combo("frontier", "apptainer"),
    Combo("polaris", "apptainer"),
    Combo("aurora", "apptainer"),
    Combo("local", "podman"),
    Combo("cdi-gpu", "podman"),  # Podman under Slurm, CDI devices
    Combo("cdi-gpu", "apptainer"),  # Apptainer in OCI mode
    Combo("local", "none"),
    Combo("frontier", "none"),
    Combo("polaris", "none"),
)
CONTAINER_COMBOS = tuple(combo for combo in COMBOS if combo.runtime != "none")


@functools.cache
def charliecloud_registry() -> ProfileRegistry:
    """A Slurm resource whose charliecloud binds the host's /usr and the folders holding
    Python (the recorder's interpreter) into an image of empty mount points."""
    folder = Path(tempfile.mkdtemp(prefix="iri-ch-profile-"))
    path = folder / "charliecloud.yaml"
    path.write_text(CH_PROFILE.format(binds=json.dumps(["/usr", *python_folders()])))
    return ProfileRegistry.from_files([path])


CH_PROFILE = """
facility: {{id: chtest, name: Charliecloud test, description: The real ch-run.}}
resources:
  - id: ch-host
    name: This machine under a Slurm stand-in
    scheduler: {{kind: slurm}}
    queues: [{{name: q, default: true, max_nodes: 1, max_walltime: 3600}}]
    nodes: {{count: 1, cpu: {{arch: x86_64, cores: 2, mhz: 2000}}, memory_gib: 1}}
    mpi: {{flavour: mpich, launcher: srun}}
    runtimes:
      default: charliecloud
      charliecloud:
        binds: {binds}
        mpi: {{}}
        mounts: {{allowed_sources: [/tmp], read_write: true}}
        image_forms: [sandbox]
        allowed_extra_options: ["--no-passwd"]
"""


def python_folders() -> list[str]:
    """The top folders of the recorder's interpreter (the venv's and the one it links to),
    except those the image already shares with the host."""
    tops = {
        "/" + Path(path).parts[1]
        for path in (sys.executable, os.path.realpath(sys.executable), sys.base_prefix, sys.prefix)
    }
    return sorted(tops - {"/usr", "/tmp"})


@dataclass(frozen=True)
class ChCombo(Combo):
    """Charliecloud on the test's own profile (above), run by the real ch-run."""

    @property
    def loaded(self) -> LoadedResource:
        return charliecloud_registry().get(self.resource_id)


CH_COMBO = ChCombo("ch-host", "charliecloud")
CH_IMAGE = "image"  # the job's image folder, in its root


@pytest.fixture(autouse=True, scope="module")
def _standins_are_executable() -> None:
    """A checkout may lose the executable bits; the scripts call the stand-ins by name."""
    for name in STANDIN_PROGRAMS:
        path = STANDINS / name
        path.chmod(path.stat().st_mode | 0o111)


def test_the_pairs_cover_every_runtime_and_scheduler_the_shipped_profiles_offer() -> None:
    reachable = {
        (runtime, loaded.resource.scheduler.kind)
        for loaded in REGISTRY
        for runtime in [*loaded.resource.runtimes.available(), "none"]
    }
    # slurm-oci needs Slurm itself (the bundle is read by slurmstepd): its pairs run on the
    # real test cluster instead (see "Slurm's own containers" below).
    stand_in_pairs = {(combo.runtime, combo.scheduler) for combo in (*COMBOS, CH_COMBO)}
    assert reachable <= stand_in_pairs | {("slurm-oci", "slurm")}


def test_every_standin_says_it_is_one() -> None:
    readme = (STANDINS / "README.md").read_text()
    for name in STANDIN_PROGRAMS:
        lines = (STANDINS / name).read_text().split("\n")
        assert lines[0] == "#!/usr/bin/env python3", name
        assert lines[1].startswith(f"# STAND-IN for {name}: "), name
        assert f"`{name}`" in readme, name


# ---------------------------------------------------------------------------------------------
# Strategies
# ---------------------------------------------------------------------------------------------


def _shell_variables() -> frozenset[str]:
    """Variables bash itself defines (UID, PPID, BASH_*, ...)."""
    listed = subprocess.run(
        [BASH, "--norc", "--noprofile", "-c", "compgen -v"],
        env={},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return frozenset(listed)


# Names that configure bash, the loader, Python, Slurm/PBS or the runtimes themselves. Setting
# them changes how the script's own tools behave (that is the user's business, not quoting), so
# the generated environments leave them out; names bash cannot export are tested on their own.
RESERVED_NAMES = _shell_variables() | {
    "PATH",
    "HOME",
    "PWD",
    "OLDPWD",
    "IFS",
    "ENV",
    "CDPATH",
    "GLOBIGNORE",
    "SHELLOPTS",
    "BASHOPTS",
    "PS4",
    "LANG",
    "LANGUAGE",
    "TMPDIR",
    "POSIXLY_CORRECT",
    "TZ",
    "TERM",
    "SHELL",
    "USER",
    "LOGNAME",
    "HOSTNAME",
    "container",
    "iri_status",
}
RESERVED_PREFIXES = (
    "BASH",
    "LD_",
    "PYTHON",
    "LC_",
    "APPTAINER",
    "SINGULARITY",
    "SLURM",
    "SPANK",
    "PBS",
    "SHIFTER",
    "PODMAN",
    "IRI_",
)


def hostile(exclude: str = "", max_parts: int = 5, extra: tuple[str, ...] = ()) -> Any:
    """Hostile text: payloads glued to random unicode; characters in `exclude` removed."""
    part = st.one_of(
        st.sampled_from(PAYLOADS + extra),
        st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=3),
    )
    banned = set(exclude) | {"\x00"}
    return (
        st.lists(part, min_size=1, max_size=max_parts)
        .map(lambda parts: "".join(c for c in "".join(parts) if c not in banned))
        .filter(lambda text: 0 < len(text.encode()) <= 150)
    )


def file_name(exclude: str = "") -> Any:
    """A hostile name for one file or folder (no '/', not '.' or '..')."""
    return hostile(exclude="/" + exclude).filter(lambda name: name not in (".", ".."))


CONTROLS = "".join(map(chr, [*range(32), 127]))
BREAKERS = ("\n", "\t", "\r", "\x1b", "\x7f", "\n#SBATCH --uid=0\n")


def mount_safe() -> Any:
    """Hostile text a mount path may hold: no ':', ',', ';', control characters or '..'."""
    return hostile(exclude=":,;" + CONTROLS).filter(lambda text: ".." not in text.split("/"))


def broken_field(fields: tuple[str, ...]) -> Any:
    """None most of the time, else (one of `fields`, a control sequence to put in it)."""
    return st.one_of(
        st.none(), st.none(), st.tuples(st.sampled_from(fields), st.sampled_from(BREAKERS))
    )


env_names = st.one_of(
    st.sampled_from(["OMP_NUM_THREADS", "MY_VAR", "a", "_", "X1", "data_dir"]),
    st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,12}", fullmatch=True),
).filter(lambda name: name not in RESERVED_NAMES and not name.startswith(RESERVED_PREFIXES))

OCI_IMAGES = (  # (reference as given, what Shifter gets)
    ("ubuntu:22.04", "docker:ubuntu:22.04"),
    ("docker.io/library/python:3.11-slim", "docker:python:3.11-slim"),
    ("registry.example.org:5000/team/app:v1.2", "docker:registry.example.org:5000/team/app:v1.2"),
)
QUALIFIED = {  # what Podman and podman-hpc get: the registry spelled out (Docker Hub's default)
    "ubuntu:22.04": "docker.io/library/ubuntu:22.04",
    "docker.io/library/python:3.11-slim": "docker.io/library/python:3.11-slim",
    "registry.example.org:5000/team/app:v1.2": "registry.example.org:5000/team/app:v1.2",
}


@dataclass
class HostileJob:
    """The user strings of one job, and its shape; `document` makes a JobSpec per pair."""

    executable_name: str = "program"
    arguments: list[str] = field(default_factory=list)
    environment: dict[str, str] = field(default_factory=dict)
    directory_name: str = "work"
    name: str | None = None
    stdout_name: str | None = None
    stderr_name: str | None = None
    stdin_name: str | None = None
    workdir: str | None = None
    mounts: list[tuple[str, str, bool]] = field(default_factory=list)  # (source tail, target, ro)
    sif_name: str = "app"
    oci: tuple[str, str] = OCI_IMAGES[0]
    extra_options: bool = False
    tmpfs: str = "scratch"
    parallel: bool = False
    mpi: bool = False
    gpu: bool = False
    inherit_environment: bool = True


@st.composite
def hostile_jobs(draw: Any) -> HostileJob:
    """Arguments, environment values, the executable's name and the workdir may hold control
    characters; values bound for directive lines are free of them, except (in a third of the
    jobs) one, which must then be refused and is left out of the run."""
    job = HostileJob(
        executable_name=draw(file_name()),
        arguments=draw(st.lists(st.one_of(st.just(""), hostile()), max_size=5)),
        environment=draw(st.dictionaries(env_names, st.one_of(st.just(""), hostile()), max_size=4)),
        directory_name=draw(file_name(exclude=CONTROLS)),
        name=draw(st.none() | hostile(exclude=CONTROLS)),
        stdout_name=draw(st.none() | file_name(exclude=CONTROLS)),
        stderr_name=draw(st.none() | file_name(exclude=CONTROLS)),
        stdin_name=draw(st.none() | file_name(exclude=CONTROLS)),
        workdir=draw(st.none() | hostile().map(lambda text: "/" + text)),
        mounts=draw(st.lists(st.tuples(mount_safe(), mount_safe(), st.booleans()), max_size=2)),
        sif_name=draw(hostile()),
        oci=draw(st.sampled_from(OCI_IMAGES)),
        extra_options=draw(st.booleans()),
        tmpfs=draw(hostile(exclude=" ,")),
        parallel=draw(st.booleans()),
        mpi=draw(st.booleans()),
        gpu=draw(st.booleans()),
    )
    break_one_directive(draw, job)
    return job


def break_one_directive(draw: Any, job: HostileJob) -> None:
    """In a third of the jobs, put a control sequence into one value bound for a directive."""
    broken = draw(
        broken_field(("name", "directory_name", "stdout_name", "stderr_name", "stdin_name"))
    )
    if broken is not None:
        key, breaker = broken
        setattr(job, key, (getattr(job, key) or "x") + breaker)


# ---------------------------------------------------------------------------------------------
# One job on one pair: the JobSpec, what must be refused, the run and what must have arrived
# ---------------------------------------------------------------------------------------------


def extra_options_for(job: HostileJob, combo: Combo) -> list[str]:
    """Options on the pair's allow-list; the podman one carries hostile text its pattern lets
    through (`--tmpfs=/[^ ,]+`)."""
    return {
        "apptainer": ["--writable-tmpfs", "--no-home"],
        "podman-hpc": ["--cvmfs", "--shm-size=64m"],
        "shifter": ["--module=cvmfs"],
        "podman": ["--read-only", f"--tmpfs=/{job.tmpfs}", "--shm-size=1g"],
        "charliecloud": ["--no-passwd"],
    }[combo.runtime]


def image_for(job: HostileJob, combo: Combo) -> str:
    """What the JobSpec names: a file image with a hostile name where the runtime takes files
    (OCI names cannot carry hostile text: see the image tests), else an OCI reference."""
    return f"/images/{job.sif_name}.sif" if combo.takes_file_images else job.oci[0]


def runtime_image(job: HostileJob, combo: Combo) -> str:
    """The image reference the runtime program must receive."""
    if combo.takes_file_images:
        return image_for(job, combo)
    if combo.runtime == "apptainer":  # an OCI-mode site's: OCI names as docker:// URIs
        return f"docker://{QUALIFIED[job.oci[0]]}"
    return job.oci[1] if combo.runtime == "shifter" else QUALIFIED[job.oci[0]]


def mount_source(tail: str, combo: Combo) -> str:
    config = combo.config
    assert config is not None
    return config.mounts.allowed_sources[0].rstrip("/") + "/" + tail


def document(job: HostileJob, combo: Combo, root: Path) -> dict[str, Any]:
    """The JobSpec (as JSON data) of `job` on `combo`, its files under `root`."""
    doc: dict[str, Any] = {
        "executable": str(root / f"exe-{job.executable_name}"),
        "arguments": list(job.arguments),
        "environment": dict(job.environment),
        "directory": str(root / f"dir-{job.directory_name}"),
        "inherit_environment": job.inherit_environment,
    }
    if job.name is not None:
        doc["name"] = job.name
    for key, prefix, name in (
        ("stdout_path", "out-", job.stdout_name),
        ("stderr_path", "err-", job.stderr_name),
        ("stdin_path", "in-", job.stdin_name),
    ):
        if name is not None:
            doc[key] = str(root / f"{prefix}{name}")
    if combo.scheduler != "local":
        resources: dict[str, Any] = {"node_count": 1, "process_count": 2 if job.parallel else 1}
        if job.gpu and combo.resource.nodes.gpus is not None:
            resources["gpu_cores_per_process"] = 1
        doc["resources"] = resources
        if job.parallel and job.mpi and combo.resource.mpi is not None:
            doc["launcher"] = combo.resource.mpi.launcher
    if combo.runtime != "none":
        container: dict[str, Any] = {
            "runtime": combo.runtime,
            "image": image_for(job, combo),
            "volume_mounts": [
                {"source": mount_source(tail, combo), "target": "/" + target, "read_only": ro}
                for tail, target, ro in job.mounts
            ],
        }
        if job.workdir is not None:
            container["workdir"] = job.workdir
        if job.extra_options:
            container["extra_options"] = {combo.runtime: extra_options_for(job, combo)}
        doc["container"] = container
        if combo.runtime == "charliecloud":
            in_charliecloud_image(container, root)
    return doc


def in_charliecloud_image(container: dict[str, Any], root: Path) -> None:
    """Make the job's image (under `root`) and what ch-run needs in it: mount sources on
    the host, mount targets and the workdir inside the image (under /mx and /wd)."""
    image = root / CH_IMAGE
    for folder in (
        "usr",
        "dev",
        "proc",
        "sys",
        "tmp",
        "home",
        "etc",
        "mx",
        "wd",
        *(top.lstrip("/") for top in python_folders()),
    ):
        (image / folder).mkdir(parents=True, exist_ok=True)
    for name in ("bin", "lib", "lib64", "sbin"):
        (image / name).symlink_to(f"usr/{name}")
    for name in ("hosts", "resolv.conf", "passwd", "group"):
        (image / "etc" / name).touch()
    container["image"] = f"{image}/"
    for index, mount in enumerate(container["volume_mounts"]):
        source = root / f"src{index}" / mount["source"].lstrip("/")
        source.mkdir(parents=True, exist_ok=True)
        mount.update(source=str(source), target=f"/mx{mount['target']}", read_only=False)
        (image / mount["target"].lstrip("/")).mkdir(parents=True, exist_ok=True)
    workdir = container.get("workdir")
    if workdir is not None and ".." in workdir.split("/"):
        del container["workdir"]  # would leave the image: the runtime checks nothing here
    elif workdir is not None:
        container["workdir"] = f"/wd{workdir}"
        (image / container["workdir"].lstrip("/")).mkdir(parents=True, exist_ok=True)


def expected_refusals(doc: dict[str, Any], combo: Combo) -> set[str]:
    """Fields the gateway documents it refuses: control characters in values that go into
    directive lines; on PBS also blanks, quotes, '\\' and '#' (and ':' in paths); on Slurm
    'hetjob'/'packjob' anywhere in such a value and '\\' in output paths."""
    pbs = combo.scheduler == "pbs"
    slurm = combo.scheduler == "slurm"
    refused = set()
    container = doc.get("container")
    if (
        combo.runtime.startswith("podman")
        and container is not None
        and "workdir" not in container
        and any(c in doc.get("directory", "") for c in ":,")
    ):
        refused.add("directory")  # podman binds the job directory; -v cannot carry ':' ','
    return refused | {
        key
        for key in DIRECTIVE_FIELDS
        if (value := doc.get(key)) is not None
        and (
            CONTROL.search(value)
            or (pbs and key != "directory" and PBS_UNSAFE.search(value))
            or (pbs and key.endswith("_path") and ":" in value)
            or (slurm and ("hetjob" in value.lower() or "packjob" in value.lower()))
            or (slurm and key in ("stdout_path", "stderr_path") and "\\" in value)
        )
    }


def plan(doc: dict[str, Any], combo: Combo) -> tuple[Plan | None, list[str]]:
    """The plan, or the fields of the problems that refused the job."""
    try:
        return make_plan(parse_jobspec(doc), combo.loaded), []
    except JobRejectedError as error:
        return None, [problem.field for problem in error.problems]


def check_syntax(script: str) -> None:
    checked = subprocess.run([BASH, "-n"], input=script.encode("utf-8"), capture_output=True)
    assert checked.returncode == 0, f"bash -n failed: {checked.stderr!r}\n{script}"


RECORDER = """#!{python} -I
import json, os, sys
record = {{"executable": sys.argv[0], "argv": sys.argv[1:], "env": dict(os.environ),
          "cwd": os.getcwd(), "stdin": sys.stdin.read(), "pid": os.getpid()}}
log = os.open({out!r}, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
os.write(log, (json.dumps(record) + "\\n").encode("ascii"))
os.close(log)
"""


def install_recorder(path: Path, out: Path) -> None:
    """The job's program: records argv, environment, cwd, stdin and its process id as one
    JSON line, in one write (the members of a cluster job record at the same time)."""
    assert not re.search(r"\s", sys.executable), sys.executable
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(RECORDER.format(python=sys.executable, out=str(out)), encoding="utf-8")
    path.chmod(0o755)


def read_lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line]


# --- what sbatch and slurmstepd make of the #SBATCH lines ------------------------------------

C_SPACE = b" \t\n\v\f\r"  # isspace() in the C locale: bytes, not unicode


def sbatch_words(script: str) -> list[str]:
    """The arguments sbatch reads from a script's #SBATCH lines, by sbatch's own parser.

    A line containing 'hetjob' or 'packjob' anywhere (any case, even inside quotes) starts a
    new heterogeneous-job component in sbatch; a job without roles never has one, so that
    fails here.
    """
    components = sbatch_components(script)
    assert len(components) == 1, f"sbatch reads {len(components)} het-job components"
    return components[0]


def sbatch_components(script: str) -> list[list[str]]:
    """The arguments of each heterogeneous-job component, by sbatch's own parser.

    Only the gateway's own separator line, exactly `#SBATCH hetjob`, may start a component (a
    cluster job has one per role); any other line containing 'hetjob' or 'packjob' fails.
    """
    components: list[list[str]] = [[]]
    for number, line in enumerate(script.encode("utf-8").split(b"\n"), 1):
        if line.startswith(b"#SBATCH"):
            rest = line[len(b"#SBATCH") :]
        elif line.startswith(b"#SLURM"):
            rest = line[len(b"#SLURM") :]
        else:
            stripped = line.lstrip(C_SPACE)
            if stripped and not stripped.startswith(b"#"):
                break  # sbatch stops at the first command
            continue
        if line == b"#SBATCH hetjob":
            components.append([])
            continue
        lowered = line.lower()
        assert b"hetjob" not in lowered and b"packjob" not in lowered, (
            f"line {number}: sbatch would start a heterogeneous-job component here: {line!r}"
        )
        components[-1] += [word.decode("utf-8") for word in _directive_arguments(rest, number)]
    return components


def _directive_arguments(line: bytes, number: int) -> list[bytes]:
    """get_argument(): quotes group, backslash escapes anything, unquoted '#' ends the line."""
    found: list[bytes] = []
    position, end = 0, len(line)
    while True:
        while position < end and line[position] in C_SPACE:
            position += 1
        if position < end and line[position : position + 1] == b":":
            raise AssertionError(f"line {number}: sbatch: unexpected ':' in {line!r}")
        if position >= end:
            return found
        word = bytearray()
        quote: int | None = None
        escaped = False
        while position < end and (quote is not None or line[position] not in C_SPACE):
            char = line[position]
            if escaped:
                escaped = False
            elif char == ord("\\"):
                escaped = True
                position += 1
                continue
            elif quote is not None:
                if char == quote:
                    quote = None
                    position += 1
                    continue
            elif char in (ord('"'), ord("'")):
                quote = char
                position += 1
                continue
            elif char == ord("#"):
                break
            word.append(char)
            position += 1
        assert quote is None, f"line {number}: sbatch: unmatched quote in {line!r}"
        if not word:
            return found  # an empty argument ends sbatch's scan of the line
        found.append(bytes(word))


def sbatch_options(script: str) -> dict[str, list[str]]:
    """#SBATCH options by name ('--job-name=x' -> {'job-name': ['x']})."""
    return _options_by_name(sbatch_words(script))


def sbatch_component_options(script: str) -> list[dict[str, list[str]]]:
    """#SBATCH options by name, one mapping per heterogeneous-job component."""
    return [_options_by_name(words) for words in sbatch_components(script)]


def _options_by_name(words: list[str]) -> dict[str, list[str]]:
    options: dict[str, list[str]] = {}
    for word in words:
        assert word.startswith("--"), f"sbatch reads {word!r} as something other than an option"
        name, _, value = word[2:].partition("=")
        options.setdefault(name, []).append(value)
    return options


def slurm_output_file(pattern: str) -> str:
    """The file slurmstepd writes a batch job's --output/--error to (absolute patterns).

    fname_create(): a pattern holding any '\\' has its backslashes removed and no '%'
    replaced (is_path_escaped); otherwise '%%' is '%' and other '%x' are replaced.
    """
    if "\\" in pattern:
        return pattern.replace("\\", "")
    out, index = [], 0
    while index < len(pattern):
        if pattern[index] == "%":
            if pattern[index + 1 : index + 2] != "%":
                raise AssertionError(f"{pattern!r}: Slurm replaces {pattern[index : index + 2]!r}")
            index += 1
        out.append(pattern[index])
        index += 1
    return "".join(out)


# --- running one job on one pair --------------------------------------------------------------


@dataclass
class Run:
    """One job run on one pair: what was planned, and what every program saw."""

    combo: Combo
    doc: dict[str, Any]
    plan: Plan
    root: Path
    process: subprocess.CompletedProcess[str]
    recorded: list[dict[str, Any]]
    standins: list[dict[str, Any]]

    def runtime_record(self) -> dict[str, Any]:
        found = [r for r in self.standins if r["program"] == self.combo.program]
        assert len(found) == 1, f"{self.combo}: runtime calls {found}"
        return found[0]


def execute(job: HostileJob, combo: Combo, base: Path) -> Run:
    """Plan `job` on `combo` (asserting documented refusals), then run the script in bash."""
    root = base / combo.slug
    root.mkdir(parents=True)
    doc = document(job, combo, root)
    refused = expected_refusals(doc, combo)
    planned, fields = plan(doc, combo)
    if refused:
        assert planned is None and set(fields) == refused, (
            f"{combo}: expected refusal of exactly {sorted(refused)}, got {fields or 'a plan'}"
        )
        for key in refused:
            del doc[key]
        planned, fields = plan(doc, combo)
    assert planned is not None, f"{combo}: refused {fields}"
    script = planned.script
    check_syntax(script)

    install_recorder(Path(doc["executable"]), root / "recorder.jsonl")
    if "directory" in doc:
        Path(doc["directory"]).mkdir(parents=True, exist_ok=True)
    if "stdin_path" in doc:
        Path(doc["stdin_path"]).write_text(STDIN_TEXT)
    (root / "home").mkdir()
    env = {
        "PATH": f"{STANDINS}:/usr/bin:/bin",
        "HOME": str(root / "home"),
        "LANG": "C.UTF-8",
        "IRI_STANDIN_LOG": str(root / "standins.jsonl"),
    }
    if combo.scheduler == "slurm":
        # What sbatch (and the Shifter SPANK plugin) do with the header before the script runs.
        options = sbatch_options(script)
        if "export" in options:
            env["SLURM_EXPORT_ENV"] = options["export"][-1]
        if "image" in options:
            kind, _, tag = options["image"][-1].partition(":")
            env["SHIFTER_IMAGETYPE"], env["SHIFTER_IMAGE"] = kind, tag
        if "volume" in options:
            env["SHIFTER_VOLUME"] = options["volume"][-1]
    if combo.scheduler == "pbs":
        (root / "nodefile").write_text("localhost\n")
        env["PBS_NODEFILE"] = str(root / "nodefile")
        env["PBS_O_WORKDIR"] = str(root)
    cwd = root
    if combo.scheduler == "slurm" and "chdir" in sbatch_options(script):
        cwd = Path(sbatch_options(script)["chdir"][-1])  # sbatch --chdir, before the script
    path = root / "job.sh"
    path.write_text(script, encoding="utf-8")
    process = subprocess.run(
        [BASH, str(path)],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        encoding="utf-8",
        errors="replace",
        timeout=60,
    )
    return Run(
        combo,
        doc,
        planned,
        root,
        process,
        read_lines(root / "recorder.jsonl"),
        read_lines(root / "standins.jsonl"),
    )


def canaries(folder: Path) -> list[str]:
    return [
        os.path.join(top, name)
        for top, dirs, files in os.walk(folder)
        for name in [*dirs, *files]
        if name == CANARY
    ]


def site_binds(job: HostileJob, combo: Combo) -> list[str]:
    config = combo.config
    assert config is not None
    binds = list(config.binds)
    if job.parallel and job.mpi and config.mpi is not None:
        binds += config.mpi.binds
    return binds


def user_binds(run: Run) -> list[str]:
    mounts = run.doc.get("container", {}).get("volume_mounts", [])
    if run.combo.runtime == "shifter":
        return [f"{m['source']}:{m['target']}" + (":ro" if m["read_only"] else "") for m in mounts]
    binds = [f"{m['source']}:{m['target']}:{'ro' if m['read_only'] else 'rw'}" for m in mounts]
    container = run.doc.get("container", {})
    if (
        run.combo.runtime.startswith("podman")
        and "workdir" not in container
        and ("directory" in run.doc)
    ):
        # Podman has no view of the host: the gateway binds the job directory to run in it.
        binds.append(f"{run.doc['directory']}:{run.doc['directory']}:rw")
    return binds


def assert_ran_exactly(job: HostileJob, run: Run, check_stdin: bool = True) -> None:
    """The invariants of the rule, for one run."""
    combo, doc = run.combo, run.doc
    where = f"{combo}\n--- script ---\n{run.plan.script}\n--- stderr ---\n{run.process.stderr}"
    assert run.process.returncode == 0, f"exit {run.process.returncode}: {where}"
    assert canaries(run.root) == [], f"a payload ran: {where}"

    # The program ran once, with exactly the arguments, environment, directory and stdin.
    assert len(run.recorded) == 1, f"the program ran {len(run.recorded)} times: {where}"
    seen = run.recorded[0]
    assert seen["argv"] == doc["arguments"], where
    for name, value in doc["environment"].items():
        assert seen["env"].get(name) == value, f"environment {name!r}: {where}"
    assert seen["cwd"] == doc.get("directory", str(run.root)), where
    if check_stdin:
        assert seen["stdin"] == (STDIN_TEXT if "stdin_path" in doc else ""), where
    if combo.scheduler == "local":
        for key in ("stdout_path", "stderr_path"):
            if key in doc:
                assert Path(doc[key]).is_file(), f"{key} not written: {where}"

    # Only the expected programs were called: launcher, modules, runtime.
    expected: Counter[str] = Counter()
    if job.parallel and combo.scheduler != "local":
        expected[combo.launcher_program] = 1
    if combo.program is not None:
        expected[combo.program] = 1
    modules = sum(1 for line in run.plan.script.split("\n") if line.split(" ")[0] == "module")
    if modules:
        expected["module"] = modules
    assert Counter(r["program"] for r in run.standins) == expected, where
    command = [doc["executable"], *doc["arguments"]]
    for launch in (r["launch"] for r in run.standins if "launch" in r):
        if combo.program is None:
            assert launch["command"] == command, where
        else:
            assert Path(launch["command"][0]).name == combo.program, where

    # The runtime got the image, mounts, workdir, environment and command exactly.
    if combo.program is None:
        return
    called = run.runtime_record()
    container = called["container"]
    assert container["image"] == runtime_image(job, combo), where
    assert container["command"] == command, where
    assert container["workdir"] == doc["container"].get("workdir", doc.get("directory")), where
    binds = user_binds(run)
    if combo.runtime == "shifter":
        assert container["mounts"] == binds, where
        assert container["env"] == doc["environment"], where
    else:
        assert container["mounts"] == site_binds(job, combo) + binds, where
        for name, value in doc["environment"].items():
            assert container["env"].get(name) == value, f"container env {name!r}: {where}"
    for option in doc["container"].get("extra_options", {}).get(combo.runtime, []):
        if combo.runtime == "shifter" and option.startswith("--module="):
            # Shifter keeps only the last --module, so the gateway merges them into one list.
            (modules,) = [a for a in called["argv"] if a.startswith("--module=")]
            assert option.removeprefix("--module=") in modules.removeprefix("--module=").split(
                ","
            ), f"extra option {option!r}: {where}"
        else:
            assert option in called["argv"], f"extra option {option!r}: {where}"
    if combo.scheduler == "slurm":
        options = sbatch_options(run.plan.script)
        if "directory" in doc:
            assert options["chdir"] == [doc["directory"]], where
        if "name" in doc:
            assert options["job-name"] == [doc["name"]], where


@contextmanager
def scratch() -> Iterator[Path]:
    """A fresh temporary folder (symlinks resolved), removed afterwards."""
    base = Path(tempfile.mkdtemp(prefix="iri-shell-safety-")).resolve()
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def check_job(job: HostileJob) -> None:
    """Run `job` on every pair, one bash run each, and check everything arrived exactly."""
    with scratch() as base:
        for combo in COMBOS:
            run = execute(job, combo, base)
            # Podman gives a container stdin only with -i: see test_stdin_path_reaches_podman.
            assert_ran_exactly(job, run, check_stdin=combo.runtime not in ("podman", "podman-hpc"))
        assert_ran_in_charliecloud(job, execute(job, CH_COMBO, base))
        assert canaries(base) == []


def assert_ran_in_charliecloud(job: HostileJob, run: Run) -> None:
    """The real ch-run started the program once, inside the image, with exactly the job's
    arguments, environment, working directory and stdin, and nothing of them ran."""
    doc = run.doc
    where = f"{run.combo}\n--- script ---\n{run.plan.script}\n--- stderr ---\n{run.process.stderr}"
    assert run.process.returncode == 0, f"exit {run.process.returncode}: {where}"
    assert canaries(run.root) == [], f"a payload ran: {where}"
    assert len(run.recorded) == 1, f"the program ran {len(run.recorded)} times: {where}"
    seen = run.recorded[0]
    assert "CH_RUNNING" in seen["env"], f"not inside ch-run: {where}"
    assert seen["argv"] == doc["arguments"], where
    for name, value in doc["environment"].items():
        assert seen["env"].get(name) == value, f"environment {name!r}: {where}"
    directory = doc.get("directory", str(run.root))  # a refused one: where bash started
    assert seen["cwd"] == doc["container"].get("workdir", directory), where
    assert seen["stdin"] == (STDIN_TEXT if "stdin_path" in doc else ""), where
    launched = [r["program"] for r in run.standins]
    assert launched == (["srun"] if job.parallel else []), where
    for mount in doc["container"]["volume_mounts"]:
        assert f"-b {shlex.quote(mount['source'] + ':' + mount['target'])}" in (
            run.plan.script.replace(" \\\n    ", " ")
        ), f"mount {mount}: {where}"


# ---------------------------------------------------------------------------------------------
# The property, and the nastiest cases spelled out
# ---------------------------------------------------------------------------------------------


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(job=hostile_jobs())
def test_every_user_string_reaches_its_program_exactly(job: HostileJob) -> None:
    check_job(job)


def test_argument_with_a_quote_and_command_substitution_arrives_intact() -> None:
    check_job(
        HostileJob(
            arguments=[
                "it's $(whoami)",
                "`touch CANARY`",
                "; touch CANARY #",
                "'; touch CANARY; '",
                "$(touch CANARY)",
                "",
                "--help",
                "*",
                "a\nb",
                "\\",
                "-n",
            ],
            parallel=True,
            mpi=True,
        )
    )


def test_environment_value_with_a_newline_arrives_intact() -> None:
    check_job(
        HostileJob(
            environment={
                "GREETING": "line one\nline two",
                "QUOTES": 'it\'s "$(touch CANARY)" `touch CANARY`',
                "EMPTY": "",
                "COMMA": "a,b=c;d",
                "DOLLARS": "$HOME:${PATH}:$NOPE",  # ch-run expands these unless --env-no-expand
            }
        )
    )


def test_executable_path_with_a_space_and_a_quote_runs() -> None:
    check_job(
        HostileJob(
            executable_name='my prog\'s "v2" $(touch CANARY)',
            directory_name="run dir; touch CANARY #",
            workdir="/work dir/it's $(touch CANARY)",
            mounts=[("data set's $(touch CANARY)", "in put #1", True)],
            sif_name="it's an image",
            stdout_name="out file's %j",
        )
    )


# ---------------------------------------------------------------------------------------------
# Slurm's own containers (slurm-oci): arguments and environment through the real Slurm OCI path
# ---------------------------------------------------------------------------------------------
#
# No stand-in: the script is planned for the test cluster's `cluster-oci` resource and
# submitted with the real sbatch; slurmstepd reads the bundle the script wrote and rootless
# runc starts the image, whose /bin/sh writes every argument and the job's variables,
# NUL-separated, into the job directory (bound into the container as its working directory).

# The variables are written first: the loop's own variable (`a`) may be one of them.
OCI_REPORT = '{names}for a in "$@"; do printf "%s\\0" "$a"; done > args.bin; pwd > cwd.txt'


@pytest.fixture(scope="module")
def oci_resource(tmp_path_factory: pytest.TempPathFactory) -> LoadedResource:
    from tests.integration.conftest import running_cluster, write_cluster_profile

    cluster = running_cluster()
    os.environ["SLURM_CONF"] = str(cluster.slurm_conf)
    profile = write_cluster_profile(cluster, tmp_path_factory.mktemp("oci-profile"))
    return ProfileRegistry.from_files([profile]).get("cluster-oci")


def run_in_slurm_oci(
    resource: LoadedResource, arguments: list[str], environment: dict[str, str]
) -> None:
    """One job through sbatch, srun --container and runc; its program must see exactly
    `arguments` and `environment`, and no payload may run."""
    names = "".join(f'printf "%s\\0" "${{{name}-<unset>}}" >> env.bin; ' for name in environment)
    with scratch() as base:
        base.chmod(0o755)
        directory = base / "job"
        directory.mkdir()
        doc = {
            "executable": "/bin/sh",
            "arguments": ["-c", OCI_REPORT.format(names=names), "sh", *arguments],
            "environment": environment,
            "directory": str(directory),
            "container": {"image": "localhost/iri-test/app:cpu"},
        }
        script = make_plan(parse_jobspec(doc), resource).script
        (base / "job.sh").write_text(script, encoding="utf-8")
        done = subprocess.run(
            ["sbatch", "--wait", "--quiet", str(base / "job.sh")],
            capture_output=True,
            text=True,
            timeout=180,
            cwd=base,
        )
        where = f"{done.stderr}\n{script}"
        assert done.returncode == 0, where
        assert (directory / "cwd.txt").read_text() == f"{directory}\n", where
        recorded = (directory / "args.bin").read_bytes().split(b"\0")[:-1]
        assert [arg.decode("utf-8") for arg in recorded] == arguments, where
        if environment:
            values = (directory / "env.bin").read_bytes().split(b"\0")[:-1]
            assert dict(zip(environment, (v.decode("utf-8") for v in values), strict=True)) == (
                environment
            ), where
        assert canaries(base) == [] and not Path(CANARY).exists(), where


def test_arguments_with_quotes_and_substitutions_reach_a_slurm_oci_container(
    oci_resource: LoadedResource,
) -> None:
    run_in_slurm_oci(
        oci_resource,
        [
            "it's $(whoami)",
            "`touch CANARY`",
            "; touch CANARY #",
            "'; touch CANARY; '",
            "$(touch CANARY)",
            "",
            "--help",
            "*",
            "a\nb",
            "\\",
            "-n",
            '{"x": "\\u0000"}',
        ],
        {},
    )


def test_environment_values_reach_a_slurm_oci_container(oci_resource: LoadedResource) -> None:
    run_in_slurm_oci(
        oci_resource,
        [],
        {
            "GREETING": "line one\nline two",
            "QUOTES": 'it\'s "$(touch CANARY)" `touch CANARY`',
            "EMPTY": "",
            "COMMA": "a,b=c;d",
            "JSONISH": '"\\u0000", "x": [',
        },
    )


@settings(
    max_examples=4,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    arguments=st.lists(st.one_of(st.just(""), hostile()), max_size=4),
    environment=st.dictionaries(env_names, st.one_of(st.just(""), hostile()), max_size=3),
)
def test_hostile_arguments_and_environment_reach_a_slurm_oci_container(
    oci_resource: LoadedResource,
    arguments: list[str],
    environment: dict[str, str],
) -> None:
    run_in_slurm_oci(oci_resource, arguments, environment)


# ---------------------------------------------------------------------------------------------
# Cluster jobs: hostile strings in role fields, and the job's fields every role inherits
# ---------------------------------------------------------------------------------------------
#
# A job with `roles` runs one member per role member, each started on its host by the
# scheduler's launcher (srun --het-group/--nodelist, mpiexec --hosts, or directly), found by
# name through a hosts file bound at /etc/hosts. The script runs under real bash with the
# stand-ins, plus `scontrol` and `scancel` for Slurm; `getent`, `sed` and `awk` are real. What
# sbatch or PBS would give the job (het-group node lists, $PBS_NODEFILE) is derived here from
# the script's own directives. Every program record carries its process id: a launcher, the
# runtime it starts and the member's program are one process (each `exec`s the next), which
# ties every member's launch to what it ran.

ROLE_NAMES = ("master", "worker", "param-server")
CLUSTER_COMBOS = tuple(combo for combo in COMBOS if combo.runtime != "shifter")  # no /etc/hosts
SLURM_JOB_ID = "4242"
PBS_JOB_ID = "4242.pbs-standin"


@dataclass
class HostileRole:
    """The user strings of one role; every field left None (or empty) is the job's."""

    name: str
    count: int = 1
    per_node: int = 1
    executable_name: str | None = None
    arguments: list[str] | None = None
    environment: dict[str, str] = field(default_factory=dict)
    sif_name: str | None = None  # the role's image where the runtime takes files
    oci: tuple[str, str] | None = None  # the role's image where it takes OCI names
    mounts: list[tuple[str, str, bool]] = field(default_factory=list)
    workdir: str | None = None
    extra_options: bool = False
    tmpfs: str = "role-scratch"


@dataclass
class HostileClusterJob:
    """A job of roles; `job` holds the top-level fields, the defaults of every role."""

    job: HostileJob
    roles: list[HostileRole]


def mount_lists(max_size: int) -> Any:
    """Mounts (source tail, target, read-only), no two with the same target."""
    return st.lists(
        st.tuples(mount_safe(), mount_safe(), st.booleans()),
        max_size=max_size,
        unique_by=lambda mount: mount[1],
    )


@st.composite
def hostile_roles(draw: Any, name: str) -> HostileRole:
    return HostileRole(
        name=name,
        count=draw(st.integers(1, 2)),
        per_node=draw(st.integers(1, 2)),
        executable_name=draw(st.none() | file_name()),
        arguments=draw(st.none() | st.lists(st.one_of(st.just(""), hostile()), max_size=3)),
        environment=draw(st.dictionaries(env_names, st.one_of(st.just(""), hostile()), max_size=3)),
        sif_name=draw(st.none() | hostile()),
        oci=draw(st.none() | st.sampled_from(OCI_IMAGES)),
        mounts=draw(mount_lists(1)),
        workdir=draw(st.none() | hostile().map(lambda text: "/" + text)),
        extra_options=draw(st.booleans()),
        tmpfs=draw(hostile(exclude=" ,")),
    )


@st.composite
def hostile_cluster_jobs(draw: Any) -> HostileClusterJob:
    """One or two roles of one or two members, over a job whose own strings are hostile too
    (in a third of the jobs with one directive value broken, which must be refused)."""
    job = HostileJob(
        executable_name=draw(file_name()),
        arguments=draw(st.lists(st.one_of(st.just(""), hostile()), max_size=3)),
        environment=draw(st.dictionaries(env_names, st.one_of(st.just(""), hostile()), max_size=3)),
        directory_name=draw(file_name(exclude=CONTROLS)),
        name=draw(st.none() | hostile(exclude=CONTROLS)),
        stdout_name=draw(st.none() | file_name(exclude=CONTROLS)),
        stderr_name=draw(st.none() | file_name(exclude=CONTROLS)),
        stdin_name=draw(st.none() | file_name(exclude=CONTROLS)),
        workdir=draw(st.none() | hostile().map(lambda text: "/" + text)),
        mounts=draw(mount_lists(2)),
        sif_name=draw(hostile()),
        oci=draw(st.sampled_from(OCI_IMAGES)),
        extra_options=draw(st.booleans()),
        tmpfs=draw(hostile(exclude=" ,")),
    )
    break_one_directive(draw, job)
    names = draw(st.lists(st.sampled_from(ROLE_NAMES), min_size=1, max_size=2, unique=True))
    return HostileClusterJob(job, [draw(hostile_roles(name)) for name in names])


def role_extra_options(role: HostileRole, combo: Combo) -> list[str]:
    """Options a role adds after the job's, on the pair's allow-list (podman's carries
    hostile text)."""
    return {
        "apptainer": ["--no-home"],
        "podman-hpc": ["--scratch"],
        "podman": [f"--tmpfs=/{role.tmpfs}"],
    }[combo.runtime]


def cluster_document(cluster: HostileClusterJob, combo: Combo, root: Path) -> dict[str, Any]:
    """The JobSpec of a cluster job on `combo`: the job's fields, then a role each."""
    doc = document(cluster.job, combo, root)
    doc.pop("resources", None)  # every member is one process on one node
    doc.pop("launcher", None)
    roles: list[dict[str, Any]] = []
    for role in cluster.roles:
        entry: dict[str, Any] = {
            "name": role.name,
            "count": role.count,
            "environment": dict(role.environment),
        }
        if role.per_node != 1 and combo.scheduler != "local":
            entry["resources"] = {"processes_per_node": role.per_node}
        if role.executable_name is not None:
            entry["executable"] = str(root / f"exe-{role.name}-{role.executable_name}")
        if role.arguments is not None:
            entry["arguments"] = list(role.arguments)
        if combo.runtime != "none":
            container = role_container(role, combo)
            if container:
                entry["container"] = container
        roles.append(entry)
    doc["roles"] = roles
    # Every member must run to its own end here (each is checked); under the default
    # primary_ends_all a quick primary would stop the others first.
    doc["cluster_lifecycle"] = "all_must_end"
    return doc


def role_container(role: HostileRole, combo: Combo) -> dict[str, Any]:
    """The role's own container fields (an empty mapping: all the job's)."""
    container: dict[str, Any] = {}
    if combo.takes_file_images and role.sif_name is not None:
        container["image"] = f"/images/{role.sif_name}.sif"
    elif not combo.takes_file_images and role.oci is not None:
        container["image"] = role.oci[0]
    if role.mounts:
        container["volume_mounts"] = [
            {"source": mount_source(tail, combo), "target": "/" + target, "read_only": ro}
            for tail, target, ro in role.mounts
        ]
    if role.workdir is not None:
        container["workdir"] = role.workdir
    if role.extra_options:
        container["extra_options"] = {combo.runtime: role_extra_options(role, combo)}
    return container


def cluster_refusals(doc: dict[str, Any], combo: Combo) -> set[str]:
    """The documented refusals of the job's own fields (see `expected_refusals`); with a
    container, a job directory holding ':' or ',' too: every member binds the hosts file
    from the cluster folder inside it, and no runtime's bind syntax can carry those."""
    plain = {key: value for key, value in doc.items() if key not in ("container", "roles")}
    refused = expected_refusals(plain, combo)
    if combo.runtime != "none" and any(c in doc.get("directory", "") for c in ":,"):
        refused.add("directory")
    return refused


@dataclass
class ExpectedMember:
    """What one member must run: by the documented merge of the job's and its role's fields."""

    name: str
    role: str
    index: int
    role_number: int
    per_node: int
    executable: str
    arguments: list[str]
    environment: dict[str, str]
    container: dict[str, Any] | None

    @property
    def slot(self) -> int:
        return self.index - 1


def merged_container(
    job: dict[str, Any] | None, role: dict[str, Any] | None
) -> dict[str, Any] | None:
    """image < job < role: the role's image and workdir win; a role mount replaces the job's
    mount on the same target, others are added; the role's extra options follow the job's."""
    if job is None:
        return None
    role = role or {}
    mounts = {mount["target"]: mount for mount in job.get("volume_mounts", [])}
    mounts.update({mount["target"]: mount for mount in role.get("volume_mounts", [])})
    options = {runtime: list(listed) for runtime, listed in job.get("extra_options", {}).items()}
    for runtime, listed in role.get("extra_options", {}).items():
        options[runtime] = options.get(runtime, []) + list(listed)
    merged = {**job, "volume_mounts": list(mounts.values()), "extra_options": options}
    merged.update({key: role[key] for key in ("image", "workdir") if key in role})
    return merged


def expected_members(doc: dict[str, Any], combo: Combo) -> list[ExpectedMember]:
    """Every member in order (master1, worker1, worker2, ...), with what it must receive."""
    slots = [
        (number, role, index)
        for number, role in enumerate(doc["roles"])
        for index in range(1, role["count"] + 1)
    ]
    names = [f"{role['name']}{index}" for _, role, index in slots]
    cluster_env = {"IRI_CLUSTER_SIZE": str(len(names)), "IRI_CLUSTER_HOSTS": ",".join(names)}
    members = []
    for (number, role, index), name in zip(slots, names, strict=True):
        if "arguments" in role:
            arguments = role["arguments"]
        else:
            arguments = [] if "executable" in role else doc["arguments"]
        per_node = role.get("resources", {}).get("processes_per_node", 1)
        members.append(
            ExpectedMember(
                name=name,
                role=role["name"],
                index=index,
                role_number=number,
                per_node=role["count"] if combo.scheduler == "local" else per_node,
                executable=role.get("executable", doc["executable"]),
                arguments=arguments,
                environment={
                    **doc["environment"],
                    **role["environment"],
                    **cluster_env,
                    "IRI_CLUSTER_ROLE": role["name"],
                    "IRI_CLUSTER_ROLE_INDEX": str(index),
                },
                container=merged_container(doc.get("container"), role.get("container")),
            )
        )
    return members


def slurm_allocation(script: str, roles: int) -> tuple[list[list[str]], dict[str, str]]:
    """The nodes sbatch gives each het-job component (its --nodes) and the variables it sets:
    SLURM_JOB_NODELIST_HET_GROUP_<n> per component of a het job, SLURM_JOB_NODELIST."""
    components = sbatch_component_options(script)
    assert len(components) == roles, f"{len(components)} het-job components for {roles} roles"
    nodes: list[list[str]] = []
    lists: list[str] = []
    env = {"SLURM_JOB_ID": SLURM_JOB_ID, "SLURM_JOBID": SLURM_JOB_ID}
    for number, options in enumerate(components):
        (count,) = options["nodes"]
        nodes.append([f"nid{number}{k:03d}" for k in range(int(count))])
        lists.append(f"nid{number}[000-{int(count) - 1:03d}]")
        if roles > 1:
            env[f"SLURM_JOB_NODELIST_HET_GROUP_{number}"] = lists[-1]
    env["SLURM_JOB_NODELIST"] = ",".join(lists)
    return nodes, env


def pbs_allocation(script: str, roles: int) -> tuple[list[list[str]], str]:
    """The hosts PBS gives each select chunk (place=scatter: a host of its own each) and the
    $PBS_NODEFILE it writes: every host once per `mpiprocs` of its chunk, in select order.
    The hosts are loopback addresses, so that the real `getent` resolves each to itself."""
    (line,) = [text for text in script.split("\n") if text.startswith("#PBS -l select=")]
    chunks = line.removeprefix("#PBS -l select=").split("+")
    assert len(chunks) == roles, f"{len(chunks)} select chunks for {roles} roles: {line}"
    nodes: list[list[str]] = []
    nodefile: list[str] = []
    for chunk in chunks:
        count, *resources = chunk.split(":")
        mpiprocs = int(dict(item.split("=", 1) for item in resources).get("mpiprocs", "1"))
        hosts = [f"127.0.0.{sum(map(len, nodes)) + k + 1}" for k in range(int(count))]
        nodefile += [host for host in hosts for _ in range(mpiprocs)]
        nodes.append(hosts)
    return nodes, "".join(f"{host}\n" for host in nodefile)


@dataclass
class ClusterRun:
    """One cluster job on one pair: the script, the allocation, what every program saw."""

    combo: Combo
    doc: dict[str, Any]
    plan: Plan
    root: Path
    script_path: Path
    cwd: Path
    env: dict[str, str]
    nodes: list[list[str]]  # per role: the hosts the scheduler gave it
    addresses: list[list[str]]  # the same hosts' addresses
    job_id: str
    process: subprocess.CompletedProcess[str] | None = None

    @property
    def recorded(self) -> list[dict[str, Any]]:
        return read_lines(self.root / "recorder.jsonl")

    @property
    def standins(self) -> list[dict[str, Any]]:
        return read_lines(self.root / "standins.jsonl")


def prepare_cluster(cluster: HostileClusterJob, combo: Combo, base: Path) -> ClusterRun:
    """Plan the cluster job on `combo` (asserting documented refusals) and set up its run."""
    root = base / combo.slug
    root.mkdir(parents=True)
    doc = cluster_document(cluster, combo, root)
    refused = cluster_refusals(doc, combo)
    planned, fields = plan(doc, combo)
    if refused:
        assert planned is None and set(fields) == refused, (
            f"{combo}: expected refusal of exactly {sorted(refused)}, got {fields or 'a plan'}"
        )
        for key in refused:
            del doc[key]
        planned, fields = plan(doc, combo)
    assert planned is not None, f"{combo}: refused {fields}"
    script = planned.script
    check_syntax(script)

    for role in [doc, *doc["roles"]]:
        if "executable" in role:
            install_recorder(Path(role["executable"]), root / "recorder.jsonl")
    if "directory" in doc:
        Path(doc["directory"]).mkdir(parents=True, exist_ok=True)
    if "stdin_path" in doc:
        Path(doc["stdin_path"]).write_text(STDIN_TEXT)
    (root / "home").mkdir()
    env = {
        "PATH": f"{STANDINS}:/usr/bin:/bin",
        "HOME": str(root / "home"),
        "LANG": "C.UTF-8",
        "IRI_STANDIN_LOG": str(root / "standins.jsonl"),
    }
    roles = len(doc["roles"])
    cwd = root
    if combo.scheduler == "slurm":
        first = sbatch_component_options(script)[0]
        if "chdir" in first:
            cwd = Path(first["chdir"][-1])  # sbatch --chdir, before the script
        nodes, variables = slurm_allocation(script, roles)
        env.update(variables)
        addresses = [["127.0.0.1"] * len(hosts) for hosts in nodes]  # scontrol's NodeAddr
        job_id = SLURM_JOB_ID
    elif combo.scheduler == "pbs":
        nodes, nodefile = pbs_allocation(script, roles)
        (root / "nodefile").write_text(nodefile)
        env.update(
            PBS_NODEFILE=str(root / "nodefile"), PBS_O_WORKDIR=str(root), PBS_JOBID=PBS_JOB_ID
        )
        addresses = nodes
        job_id = PBS_JOB_ID
    else:
        nodes = [[socket.gethostname()]] * roles  # bash's $HOSTNAME
        addresses = [["127.0.0.1"]] * roles
        env["IRI_LOCAL_JOB_ID"] = SLURM_JOB_ID
        job_id = SLURM_JOB_ID
    path = root / "job.sh"
    path.write_text(script, encoding="utf-8")
    return ClusterRun(combo, doc, planned, root, path, cwd, env, nodes, addresses, job_id)


def run_cluster(run: ClusterRun) -> ClusterRun:
    run.process = subprocess.run(
        [BASH, str(run.script_path)],
        cwd=run.cwd,
        env=run.env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        encoding="utf-8",
        errors="replace",
        timeout=60,
    )
    return run


def options_of(record: dict[str, Any]) -> dict[str, list[str | None]]:
    """A launcher's parsed options by name."""
    options: dict[str, list[str | None]] = {}
    for name, value in record["launch"]["options"]:
        options.setdefault(name, []).append(value)
    return options


def assert_cluster_ran_exactly(run: ClusterRun) -> None:
    """Every member ran once, on its host, with exactly its role's strings; nothing else ran."""
    combo, doc, process = run.combo, run.doc, run.process
    assert process is not None
    where = f"{combo}\n--- script ---\n{run.plan.script}\n--- stderr ---\n{process.stderr}"
    assert process.returncode == 0, f"exit {process.returncode}: {where}"
    assert canaries(run.root) == [], f"a payload ran: {where}"
    members = expected_members(doc, combo)
    pwd = doc.get("directory", str(run.root))
    cluster_dir = f"{pwd}/.iri-cluster-{run.job_id}"

    # Each member's program ran exactly once (told apart by the role and index it was given).
    seen: dict[tuple[str, str], dict[str, Any]] = {}
    for record in run.recorded:
        key = (record["env"].get("IRI_CLUSTER_ROLE"), record["env"].get("IRI_CLUSTER_ROLE_INDEX"))
        assert key not in seen, f"member {key} ran twice: {where}"
        seen[key] = record
    assert sorted(seen) == sorted((m.role, str(m.index)) for m in members), where

    # Only the expected programs were called: per member a launcher and a runtime; scontrol
    # once per role (its nodes) and once per member (its address); modules; no scancel.
    expected: Counter[str] = Counter()
    if combo.scheduler != "local":
        expected[combo.launcher_program] = len(members)
    if combo.program is not None:
        expected[combo.program] = len(members)
    if combo.scheduler == "slurm":
        expected["scontrol"] = len(doc["roles"]) + len(members)
    modules = sum(1 for line in run.plan.script.split("\n") if line.split(" ")[0] == "module")
    if modules:
        expected["module"] = modules
    assert Counter(r["program"] for r in run.standins) == expected, where
    # A member's launcher and runtime records carry its program's process id (they `exec`).
    chained = {p for p in (combo.launcher_program, combo.program) if p}
    by_pid: dict[int, dict[str, dict[str, Any]]] = {}
    for record in run.standins:
        if record["program"] in chained:
            assert record["program"] not in by_pid.get(record["pid"], {}), where
            by_pid.setdefault(record["pid"], {})[record["program"]] = record

    hosts: list[str] = []
    for number, member in enumerate(members):
        mine = f"{member.name}: {where}"
        got = seen[(member.role, str(member.index))]
        assert got["executable"] == member.executable, mine
        assert got["argv"] == member.arguments, mine
        for name, value in member.environment.items():
            assert got["env"].get(name) == value, f"environment {name!r} of {mine}"
        assert got["cwd"] == pwd, mine
        assert got["stdin"] == (STDIN_TEXT if number == 0 and "stdin_path" in doc else ""), mine
        host = run.nodes[member.role_number][member.slot // member.per_node]
        hosts.append(host)
        chain = by_pid.get(got["pid"], {})
        assert set(chain) == chained, mine
        command = [member.executable, *member.arguments]
        if combo.scheduler == "slurm":
            launch = options_of(chain["srun"])
            assert launch.get("het-group") == (
                [str(member.role_number)] if len(doc["roles"]) > 1 else None
            ), mine
            assert launch["nodelist"] == [host], mine
            assert (launch["nodes"], launch["ntasks"]) == (["1"], ["1"]), mine
        elif combo.scheduler == "pbs":
            launch = options_of(chain["mpiexec"])
            assert (launch["hosts"], launch["np"]) == ([host], ["1"]), mine
        for record in chain.values():
            if "launch" in record and combo.program is None:
                assert record["launch"]["command"] == command, mine
        if combo.program is None:
            continue
        container, merged = chain[combo.program]["container"], member.container
        assert merged is not None
        given = QUALIFIED.get(merged["image"], merged["image"])
        if combo.runtime == "apptainer" and not combo.takes_file_images:
            given = f"docker://{given}"  # an OCI-mode site's: OCI names as docker:// URIs
        assert container["image"] == given, mine
        assert container["command"] == command, mine
        assert container["workdir"] == merged.get("workdir", doc.get("directory")), mine
        binds = [
            f"{m['source']}:{m['target']}:{'ro' if m['read_only'] else 'rw'}"
            for m in merged["volume_mounts"]
        ]
        if combo.runtime.startswith("podman") and "workdir" not in merged and "directory" in doc:
            binds.append(f"{doc['directory']}:{doc['directory']}:rw")
        assert container["mounts"] == [
            *site_binds(HostileJob(), combo),
            f"{cluster_dir}/hosts:/etc/hosts:ro",
            *binds,
        ], mine
        # SRC:DST[:OPTIONS] is how each runtime reads a bind: a ':' more moves the mount.
        assert all(len(mount.split(":")) <= 3 for mount in container["mounts"]), mine
        for name, value in member.environment.items():
            assert container["env"].get(name) == value, f"container env {name!r} of {mine}"
        for option in merged["extra_options"].get(combo.runtime, []):
            assert option in chain[combo.program]["argv"], f"extra option {option!r} of {mine}"

    # The scheduler's nodes were asked for and found; the members' names lead to their hosts.
    for role, allocated in zip(doc["roles"], run.nodes, strict=True):
        per_node = role.get("resources", {}).get("processes_per_node", 1)
        if combo.scheduler != "local":
            assert len(allocated) == -(-role["count"] // per_node), where
    if combo.scheduler == "slurm":
        queries = [r["scontrol"] for r in run.standins if r["program"] == "scontrol"]
        assert [q["output"] for q in queries if q["command"][1] == "hostnames"] == run.nodes
        assert [q["output"] for q in queries if q["command"][1] == "node"] == [
            [host] for host in hosts
        ], where
    address = {
        host: a
        for names, addrs in zip(run.nodes, run.addresses, strict=True)
        for host, a in zip(names, addrs, strict=True)
    }
    folder = Path(cluster_dir)
    assert (folder / "members").read_text().split("\n")[:-1] == [
        f"{m.name}\t{m.role}\t{m.index}\t{host}\t{address[host]}"
        for m, host in zip(members, hosts, strict=True)
    ], where
    assert (folder / "hosts").read_text().split("\n")[:-1] == [
        "127.0.0.1\tlocalhost",
        *(f"{address[host]}\t{m.name}" for m, host in zip(members, hosts, strict=True)),
    ], where
    assert sorted((folder / "exits").read_text().split("\n")[:-1]) == sorted(
        f"{m.name}\t0" for m in members
    ), where
    if combo.scheduler == "slurm":
        options = sbatch_component_options(run.plan.script)[0]
        if "directory" in doc:
            assert options["chdir"] == [doc["directory"]], where
        if "name" in doc:
            assert options["job-name"] == [doc["name"]], where


def check_cluster_job(
    cluster: HostileClusterJob, combos: tuple[Combo, ...] = CLUSTER_COMBOS
) -> None:
    """Plan the job on every pair, run the scripts side by side (each waits for its members
    at least a second), then check every member of every run."""
    with scratch() as base:
        prepared = [prepare_cluster(cluster, combo, base) for combo in combos]
        with ThreadPoolExecutor(max_workers=len(prepared)) as pool:
            runs = list(pool.map(run_cluster, prepared))
        for run in runs:
            assert_cluster_ran_exactly(run)
        assert canaries(base) == []


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cluster=hostile_cluster_jobs())
def test_every_user_string_of_a_cluster_job_reaches_each_member_exactly(
    cluster: HostileClusterJob,
) -> None:
    check_cluster_job(cluster)


def test_role_strings_with_quotes_and_substitutions_reach_each_member() -> None:
    """The nastiest role fields spelled out; the workers share nodes two by two, the last
    node holding one (so PBS lists that node twice in $PBS_NODEFILE for one member)."""
    job = HostileJob(
        executable_name="job's prog $(touch CANARY)",
        arguments=["it's $(whoami)", "`touch CANARY`", ""],
        environment={"SHARED": "from the job; touch CANARY", "OVERRIDDEN": "job"},
        directory_name="run dir #1",
        mounts=[("data set's $(touch CANARY)", "in put", True)],
        workdir="/job work dir",
        stdin_name="in put's",
        extra_options=True,
    )
    worker = HostileRole(
        name="worker",
        count=3,
        per_node=2,
        executable_name='worker\'s "v2" `touch CANARY`',
        arguments=["--conf", "a=b; touch CANARY", "$HOME", "\n", "*"],
        environment={"OVERRIDDEN": "it's the worker's\nsecond line", "EMPTY": ""},
        sif_name="worker image's $(touch CANARY)",
        oci=OCI_IMAGES[2],
        mounts=[("role's data", "in put", False)],
        workdir="/worker's dir $(touch CANARY)",
        extra_options=True,
        tmpfs="role's-tmp$(touch${IFS}CANARY)\\n",
    )
    master = HostileRole(name="master", arguments=[], environment={"ROLE_ONLY": "'\"\\"})
    check_cluster_job(HostileClusterJob(job, [worker, master]))


def test_a_failing_member_stops_the_others() -> None:
    """Under first_failure_ends_all, when one member fails the script TERMs the members
    still running (their srun, which passes the signal to its step), records them as
    stopped, and exits with the failed member's code once every member has ended."""
    combo = Combo("frontier", "none")
    cluster = HostileClusterJob(
        HostileJob(),
        [
            HostileRole(name="master"),
            HostileRole(name="worker"),
        ],
    )
    with scratch() as base:
        run = prepare_cluster(cluster, combo, base)
        master, worker = run.doc["roles"]
        worker["executable"] = "/bin/sh"  # fails at once, while the master still runs
        worker["arguments"] = ["-c", "exit 3"]
        master["executable"] = "/bin/sleep"
        master["arguments"] = ["30"]
        run.doc["cluster_lifecycle"] = "first_failure_ends_all"
        replanned, fields = plan(run.doc, combo)
        assert replanned is not None, fields
        run.script_path.write_text(replanned.script)
        run_cluster(run)
        assert run.process is not None
        assert run.process.returncode == 3, run.process.stderr
        assert "member worker1 exited with 3; stopping the others" in run.process.stderr
        exits = Path(run.doc["directory"]) / f".iri-cluster-{SLURM_JOB_ID}" / "exits"
        lines = exits.read_text().split("\n")[:-1]
        assert lines[0] == "worker1\t3"
        assert lines[1].startswith("master1\t") and lines[1].endswith("\tstopped"), lines


# ---------------------------------------------------------------------------------------------
# Refusals: what runtimes or directive lines cannot carry is refused on its own field
# ---------------------------------------------------------------------------------------------

OCI_ALPHABET = re.compile(r"[^A-Za-z0-9._:/@+-]")


@settings(max_examples=120, deadline=None)
@given(
    text=hostile(),
    shape=st.sampled_from(
        ["@", "ubuntu:@", "@/app:1.0", "registry.example.org/@", "@app", "docker://@"]
    ),
)
def test_oci_image_names_cannot_carry_hostile_text(text: str, shape: str) -> None:
    """OCI names follow a strict grammar: hostile text is refused on `container.image`.
    (References that start with '-': test_image_that_reads_as_an_option_is_refused.)"""
    image = shape.replace("@", text)
    for combo in CONTAINER_COMBOS:
        if combo.takes_file_images and image.startswith(("/", "oras://", "library://", "shub://")):
            continue  # for Apptainer a file path or a non-OCI URI, not an OCI name
        planned, fields = plan(
            {"executable": "/bin/true", "container": {"runtime": combo.runtime, "image": image}},
            combo,
        )
        if planned is not None:
            check_syntax(planned.script)
        if OCI_ALPHABET.search(image):
            assert planned is None and "container.image" in fields, (combo, image, fields)


FORBIDDEN_IN_MOUNTS = (":", ",", ";", "\n", "\t", "\r", "\x01", "\x7f", "/../")


@settings(max_examples=80, deadline=None)
@given(
    before=mount_safe(),
    bad=st.sampled_from(FORBIDDEN_IN_MOUNTS),
    after=mount_safe(),
    good=mount_safe(),
    where=st.sampled_from(["source", "target", "outside"]),
    read_only=st.booleans(),
)
def test_mount_paths_runtimes_cannot_express_are_refused(
    before: str, bad: str, after: str, good: str, where: str, read_only: bool
) -> None:
    for combo in CONTAINER_COMBOS:
        broken = f"/{before}{bad}{after}"
        source = {"source": mount_source(broken.lstrip("/"), combo), "outside": "/etc/" + good}.get(
            where, mount_source(good, combo)
        )
        target = broken if where == "target" else "/" + good
        doc = {
            "executable": "/bin/true",
            "container": {
                "runtime": combo.runtime,
                "image": image_for(HostileJob(), combo),
                "volume_mounts": [{"source": source, "target": target, "read_only": read_only}],
            },
        }
        planned, fields = plan(doc, combo)
        field_name = "source" if where == "outside" else where
        assert planned is None, (combo, source, target)
        assert fields == [f"container.volume_mounts[0].{field_name}"], (combo, fields)


@settings(max_examples=80, deadline=None)
@given(
    option=st.one_of(
        hostile(),
        st.tuples(
            st.sampled_from(
                [
                    "--writable-tmpfs",
                    "--no-home",
                    "--cvmfs",
                    "--read-only",
                    "--module=cvmfs",
                    "--tmpfs=/x",
                    "--shm-size=1g",
                ]
            ),
            hostile(),
        ).map("".join),
    )
)
def test_extra_options_off_the_allow_list_are_refused(option: str) -> None:
    for combo in CONTAINER_COMBOS:
        config = combo.config
        assert config is not None
        if any(re.fullmatch(pattern, option) for pattern in config.allowed_extra_options):
            continue  # on the list: it is passed as one quoted word (see the property above)
        doc = {
            "executable": "/bin/true",
            "container": {
                "runtime": combo.runtime,
                "image": image_for(HostileJob(), combo),
                "extra_options": {combo.runtime: [option]},
            },
        }
        planned, fields = plan(doc, combo)
        assert planned is None, (combo, option)
        assert fields == [f"container.extra_options.{combo.runtime}[0]"], (combo, fields)


def test_a_hostile_extra_option_is_refused() -> None:
    for combo in CONTAINER_COMBOS:
        doc = {
            "executable": "/bin/true",
            "container": {
                "runtime": combo.runtime,
                "image": image_for(HostileJob(), combo),
                "extra_options": {combo.runtime: ["--no-home; touch CANARY", "--privileged"]},
            },
        }
        _, fields = plan(doc, combo)
        assert fields == [
            f"container.extra_options.{combo.runtime}[0]",
            f"container.extra_options.{combo.runtime}[1]",
        ], combo


@settings(max_examples=60, deadline=None)
@given(name=hostile().filter(lambda name: IDENTIFIER.fullmatch(name) is None))
def test_environment_names_that_are_not_identifiers_are_refused(name: str) -> None:
    for combo in COMBOS:
        planned, fields = plan({"executable": "/bin/true", "environment": {name: "x"}}, combo)
        assert planned is None and fields == [f"environment.{name}"], (combo, fields)


SLURM_WORDS = ("hetjob", "PackJob")
DIRECTIVE_KEYS = ("name", "directory", "stdout_path", "stderr_path", "attributes.account")


def directive_text() -> Any:
    return hostile(exclude=CONTROLS, extra=SLURM_WORDS)


def pbs_safe(text: str) -> str:
    """`text` without what PBS directive lines cannot carry (blanks, quotes, '\\', '#', ':')."""
    return re.sub(r"[\s\"'\\#:]", "", text) or "x"


@settings(max_examples=100, deadline=None, report_multiple_bugs=False)
@given(
    name=directive_text(),
    directory=directive_text(),
    stdout=directive_text(),
    stderr=directive_text(),
    account=directive_text(),
    broken=broken_field(DIRECTIVE_KEYS),
)
def test_directive_values_are_refused_or_read_back_exactly(
    name: str,
    directory: str,
    stdout: str,
    stderr: str,
    account: str,
    broken: tuple[str, str] | None,
) -> None:
    """#SBATCH and #PBS lines: a value is refused (control characters; on PBS also blanks,
    quotes, '\\', '#' and ':' in paths) or read by the scheduler as exactly the value given,
    output file names included."""
    values = {
        "name": name,
        "directory": "/" + directory,
        "stdout_path": "/" + stdout,
        "stderr_path": "/" + stderr,
        "attributes.account": account,
    }
    if broken is not None:
        values[broken[0]] += broken[1]
    for resource_id in ("perlmutter-gpu", "frontier", "polaris", "aurora", "local"):
        combo = Combo(resource_id, "none")
        check_directives(combo, values)
        if combo.scheduler == "pbs" and broken is None:
            check_directives(combo, {key: pbs_safe(value) for key, value in values.items()})


def check_directives(combo: Combo, values: dict[str, str]) -> None:
    doc: dict[str, Any] = {
        "executable": "/bin/true",
        "attributes": {"account": values["attributes.account"]},
    }
    doc.update({key: value for key, value in values.items() if "." not in key})
    refused = expected_refusals(doc, combo)
    account = values["attributes.account"]
    if (
        CONTROL.search(account)
        or (combo.scheduler == "pbs" and PBS_UNSAFE.search(account))
        or (combo.scheduler == "slurm" and re.search("hetjob|packjob", account, re.I))
    ):
        refused.add("attributes.account")
    planned, fields = plan(doc, combo)
    if refused:
        assert planned is None and set(fields) == refused, (combo, fields, refused)
        return
    assert planned is not None, (combo, fields)
    if combo.scheduler == "slurm":
        options = sbatch_options(planned.script)
        assert options["job-name"] == [doc["name"]]
        assert options["chdir"] == [doc["directory"]]
        assert options["account"] == [account]
        assert [slurm_output_file(p) for p in options["output"]] == [doc["stdout_path"]]
        assert [slurm_output_file(p) for p in options["error"]] == [doc["stderr_path"]]
    elif combo.scheduler == "pbs":
        lines = planned.script.split("\n")
        for line in (
            f"#PBS -N {doc['name']}",
            f"#PBS -A {account}",
            f"#PBS -o {doc['stdout_path']}",
            f"#PBS -e {doc['stderr_path']}",
        ):
            assert line in lines, (combo, line)
    check_syntax(planned.script)


@pytest.mark.parametrize("key", ["name", "directory", "stdout_path", "stderr_path"])
def test_control_characters_in_directive_values_are_refused(key: str) -> None:
    for combo in COMBOS:
        value = "/tmp/a\nb" if key != "name" else "a\n#SBATCH --uid=0"
        planned, fields = plan({"executable": "/bin/true", key: value}, combo)
        assert planned is None and fields == [key], (combo, fields)


# ---------------------------------------------------------------------------------------------
# Known failures: package bugs found by these tests (left failing on purpose until fixed)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("resource_id", ["perlmutter-gpu", "frontier"])
def test_slurm_directive_value_containing_hetjob_is_refused_or_kept_whole(
    resource_id: str,
) -> None:
    """sbatch starts a new heterogeneous-job component at any #SBATCH line that contains
    'hetjob' or 'packjob', in any case and even inside quotes."""
    doc = {
        "executable": "/bin/true",
        "name": "nightly-hetjob-run",
        "directory": "/pscratch/u/repackjob",
    }
    planned, _ = plan(doc, Combo(resource_id, "none"))
    if planned is not None:
        options = sbatch_options(planned.script)
        assert options["job-name"] == [doc["name"]]


@pytest.mark.parametrize("resource_id", ["perlmutter-gpu", "frontier"])
def test_slurm_output_path_with_a_backslash_is_refused_or_written_where_asked(
    resource_id: str,
) -> None:
    """slurmstepd strips every backslash from an output pattern that holds one (and then
    leaves '%%' doubled): the file lands elsewhere."""
    doc = {"executable": "/bin/true", "stdout_path": "/pscratch/u/a\\b/out-100%.txt"}
    planned, _ = plan(doc, Combo(resource_id, "none"))
    if planned is not None:
        written = [slurm_output_file(p) for p in sbatch_options(planned.script)["output"]]
        assert written == [doc["stdout_path"]]


@pytest.mark.parametrize(
    "combo", [Combo("local", "podman"), Combo("perlmutter-gpu", "podman-hpc")], ids=str
)
def test_image_that_reads_as_an_option_is_refused(combo: Combo) -> None:
    """`-v/etc` passes the OCI grammar (a registry host may contain '-'), and lands on the
    podman command line where the image should be: podman reads `-v /etc` and takes the
    user's first argument as the image."""
    planned, fields = plan(
        {
            "executable": "/bin/echo",
            "arguments": ["hi"],
            "container": {"runtime": combo.runtime, "image": "-v/etc"},
        },
        combo,
    )
    assert planned is None and "container.image" in fields, planned and planned.script


@pytest.mark.parametrize("where", ["arguments", "environment", "executable"])
def test_nul_in_a_user_string_is_refused(where: str) -> None:
    """A NUL cannot be passed in argv or the environment, and bash will not run a script that
    holds one ('cannot execute binary file'): the job must be refused, not rendered."""
    doc: dict[str, Any] = {"executable": "/bin/echo"}
    if where == "arguments":
        doc["arguments"] = ["a\x00b"]
    elif where == "environment":
        doc["environment"] = {"K": "a\x00b"}
    else:
        doc["executable"] = "/bin/ec\x00ho"
    with pytest.raises(GatewayError):
        make_plan(parse_jobspec(doc), REGISTRY.get("local"))


@pytest.mark.parametrize(
    "combo", [Combo("local", "podman"), Combo("perlmutter-gpu", "podman-hpc")], ids=str
)
def test_stdin_path_reaches_podman(combo: Combo) -> None:
    """`podman run` without -i/--interactive gives the container end-of-file on stdin, so
    `podman run ... < stdin_path` never feeds the file to the program."""
    with scratch() as base:
        run = execute(HostileJob(stdin_name="input.txt"), combo, base)
    assert run.process.returncode == 0, run.process.stderr
    assert [seen["stdin"] for seen in run.recorded] == [STDIN_TEXT], run.plan.script


@pytest.mark.parametrize(
    "combo", [Combo("frontier", "none"), Combo("frontier", "apptainer")], ids=str
)
def test_environment_reaches_srun_tasks_without_inherit_environment(combo: Combo) -> None:
    """With inherit_environment false the script says `#SBATCH --export=NONE`; sbatch then
    sets SLURM_EXPORT_ENV=NONE in the job, srun reads it as its own --export default, and the
    variables the script exports (the job's, APPTAINERENV_*) never reach the tasks."""
    job = HostileJob(environment={"GREETING": "hello"}, parallel=True, inherit_environment=False)
    with scratch() as base:
        run = execute(job, combo, base)
    assert run.process.returncode == 0, run.process.stderr
    assert [seen["env"].get("GREETING") for seen in run.recorded] == ["hello"], run.plan.script


def test_job_directory_cannot_add_apptainer_binds_through_the_site_pwd() -> None:
    """Frontier's profile once set APPTAINER_BINDPATH="...,${PWD}" while the gateway refuses
    no ',' or ':' in `directory`: a directory named `.../data,/opt` bound the host's /opt,
    outside the mount allow-list. The site binds must stay exactly the profile's own
    (Apptainer binds the working directory by itself)."""
    combo = Combo("frontier", "apptainer")
    with scratch() as base:
        run = execute(HostileJob(directory_name="data,/opt"), combo, base)
    assert run.process.returncode == 0, run.process.stderr
    binds = run.runtime_record()["container"]["env_binds"]
    assert binds == ["/usr/share/libdrm", "/var/spool/slurmd", "/opt/cray"], run.plan.script


@pytest.mark.parametrize("name", ["UID", "EUID", "PPID", "_"])
def test_environment_name_bash_cannot_export_is_refused_or_delivered(name: str) -> None:
    """Runtime none exports the job's variables in the script's own bash: bash's read-only
    variables (UID, EUID, PPID) cannot be exported, and bash sets `_` to the program's path
    itself, so the program never sees the values asked for."""
    combo = Combo("local", "none")
    planned, _ = plan({"executable": "/bin/true", "environment": {name: "12345"}}, combo)
    if planned is None:
        return
    with scratch() as base:
        run = execute(HostileJob(environment={name: "12345"}), combo, base)
    assert [seen["env"].get(name) for seen in run.recorded] == ["12345"], run.process.stderr
