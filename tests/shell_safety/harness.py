"""The shell-safety harness: hostile jobs, every runtime x scheduler pair, one real run each.

Each generated job is planned with `make_plan` for every runtime x scheduler pair that the
shipped profiles offer (`COMBOS`), checked with `bash -n`, and run by the real `/bin/bash`
with the STAND-INs of `tests/standins/` first on PATH (srun, mpiexec, apptainer, podman,
podman-hpc, shifter, module: see the README there). The job's program is a recorder script,
copied to a hostile file name, that writes its argv, environment, working directory and stdin
to a file; `assert_ran_exactly` compares what arrived with what was asked. Payloads such as
`$(touch CANARY)` must never create a file called CANARY.

Charliecloud is the exception: its real `ch-run` (Charliecloud 0.31, installed here) runs
every job, on a resource of a profile written by the harness, in a directory image made of
empty mount points with the host's /usr (and the folders holding Python) bound in by the site,
so the recorder runs inside a real container. What ch-run cannot do is adapted, not skipped:
mount targets and the workdir are made inside the image (ch-run cannot create them in a
read-only image), and mounts are read-write (read-only ones are refused, see
tests/runtimes/test_charliecloud.py).

The tests are in test_shell_safety*.py beside this module; cluster jobs are
cluster_harness.py's, the reading of `#SBATCH` lines slurm_directives.py's.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from iri_gateway.errors import JobRejectedError
from iri_gateway.models.loaded_resource import LoadedResource
from iri_gateway.models.plan import Plan
from iri_gateway.models.profile import Resource, RuntimeConfig
from iri_gateway.planning.jobspec_io import parse_jobspec
from iri_gateway.planning.planner import make_plan
from iri_gateway.profiles.loading import ProfileRegistry
from tests.shell_safety.slurm_directives import sbatch_options
from tests.support.paths import STANDINS

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
PBS_JOB_NAME = re.compile(r"[A-Za-z0-9_+.-]{1,230}")  # qsub's check_job_name
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
    directive lines; on PBS also what qsub misreads (`pbs_refuses`); on Slurm
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
            or (pbs and pbs_refuses(key, value))
            or (slurm and ("hetjob" in value.lower() or "packjob" in value.lower()))
            or (slurm and key in ("stdout_path", "stderr_path") and "\\" in value)
        )
    }


def pbs_refuses(key: str, value: str) -> bool:
    """What the real qsub of OpenPBS 23.06.06 misreads in a `#PBS` value (issue 26): blanks,
    quotes, '\\', '#' (no quoting), anything outside ASCII (refused or mangled), a job name
    of more than letters, digits and '_+.-', ':' in a path (host:path), ',' in a `-l` value
    (another resource) and '&' there (qsub: "illegal -l value ... illegal character"), '@' in a
    queue (queue@server), and a lone '--' anywhere (the end of qsub's options). `directory`
    and `stdin_path` are no directives (the script's quoted `cd` and `<`)."""
    if key in ("directory", "stdin_path"):
        return False
    return bool(
        PBS_UNSAFE.search(value)
        or not value.isascii()
        or value == "--"
        or (key == "name" and PBS_JOB_NAME.fullmatch(value) is None)
        or (key.endswith("_path") and ":" in value)
        or (key.startswith("attributes.custom_attributes.") and ("," in value or "&" in value))
        or (key in ("attributes.queue_name", "attributes.reservation_id") and "@" in value)
    )


def plan(doc: dict[str, Any], combo: Combo) -> tuple[Plan | None, list[str]]:
    """The plan, or the fields of the problems that refused the job."""
    try:
        return make_plan(parse_jobspec(doc), combo.loaded), []
    except JobRejectedError as error:
        return None, [problem.field for problem in error.problems]


def accepted_plan(doc: dict[str, Any], refused: set[str], combo: Combo) -> Plan:
    """The plan of `doc` on `combo`, once exactly the `refused` fields were refused (then
    taken out of `doc`); any other refusal, or none where one was expected, fails."""
    planned, fields = plan(doc, combo)
    if refused:
        assert planned is None and set(fields) == refused, (
            f"{combo}: expected refusal of exactly {sorted(refused)}, got {fields or 'a plan'}"
        )
        for key in refused:
            del doc[key]
        planned, fields = plan(doc, combo)
    assert planned is not None, f"{combo}: refused {fields}"
    return planned


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
    planned = accepted_plan(doc, refused, combo)
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
