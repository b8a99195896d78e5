"""Slurm's own containers: `srun --container=BUNDLE command...` with an OCI bundle per job.

Slurm 22.05 runs a step in an OCI bundle through the site's `oci.conf` (rootless runc here).
The batch script stays on the host (`sbatch --container` would run the script itself inside
the image, without srun or bash); it prepares the bundle as the job's user and launches the
step with `srun --container`. What 22.05 does with a bundle, found by running it
(docs/runtimes-real.md), shapes everything here:

- slurmstepd always sets `root.path` to `BUNDLE/rootfs`, and runc refuses a symlink there, so
  each job's bundle has its own empty `rootfs` folder and the image's root filesystem (a
  prepared folder, or one staged into the user's cache) is bind-mounted over it as the
  first mount ("/"); runc makes missing mount points in that filesystem, which must then be
  the user's own (a folder someone else owns needs every mount target to exist).
- the step's command replaces `process.args`, and the step's environment is appended to
  `process.env` and wins, so the job's variables are also exported by the script;
- one task per node, and no per-task variables (`SLURM_PROCID`, ...) inside: no MPI;
- the working directory is `process.cwd` (srun's `--chdir` is ignored);
- runc's rootless mapping ties a bundle to one user: the uid and gid are the running
  user's, read by the script (`id -u`, `id -g`).

Every value from the JobSpec goes into config.json through `json.dumps` here and reaches the
script as single-quoted text; the few values known only on the node (uid, gid, the job
directory, the cache folder, site binds) are JSON-escaped there by `iri_json` (see the
template), never spliced into the JSON by the shell otherwise.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from iri_gateway.errors import Problem
from iri_gateway.models.images import ImageRef, for_podman
from iri_gateway.runtimes.base import Invocation, Runtime, command_of, site_binds
from iri_gateway.shell import SiteWord

if TYPE_CHECKING:
    from iri_gateway.models.plan import Decision
    from iri_gateway.models.profile import RuntimeConfig
    from iri_gateway.models.scheduler_facts import SchedulerFacts

STAGED_FORMS = frozenset({"oci", "docker-uri", "shifter"})
"""Image references staged into the user's rootfs cache; a `sandbox` folder runs as it is."""

CH_RUN_OCI_REASON = (
    "ch-run-oci cannot run Slurm's bundles: Charliecloud 0.31's `ch-run-oci create` crashes "
    "(AttributeError on --pid-file), accepts only Buildah's container ids and /tmp/buildah* "
    "bundles and ignores mounts; use an oci.conf that drives runc (docs/runtimes-real.md)"
)
ONE_TASK_REASON = (
    "Slurm 22.05 runs one container task per node (`srun --container` with two tasks on a "
    "node fails: 'unexpected number of tasks 2 > 1')"
)
NO_RANKS_REASON = (
    "Slurm 22.05 gives a container no per-task variables (SLURM_PROCID, SLURM_NODEID, "
    "SLURM_LOCALID), so MPI ranks cannot find each other"
)
_SAFE_KEY = re.compile(r"[^A-Za-z0-9._-]+")

_DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_CAPABILITIES = ["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"]
# The mounts of `runc spec --rootless`, after the image itself, plus a private /tmp.
_SYSTEM_MOUNTS: list[dict[str, Any]] = [
    {"destination": "/proc", "type": "proc", "source": "proc"},
    {
        "destination": "/dev",
        "type": "tmpfs",
        "source": "tmpfs",
        "options": ["nosuid", "strictatime", "mode=755", "size=65536k"],
    },
    {
        "destination": "/dev/pts",
        "type": "devpts",
        "source": "devpts",
        "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"],
    },
    {
        "destination": "/dev/shm",
        "type": "tmpfs",
        "source": "shm",
        "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"],
    },
    {
        "destination": "/dev/mqueue",
        "type": "mqueue",
        "source": "mqueue",
        "options": ["nosuid", "noexec", "nodev"],
    },
    {
        "destination": "/sys",
        "type": "none",
        "source": "/sys",
        "options": ["rbind", "nosuid", "noexec", "nodev", "ro"],
    },
    {
        "destination": "/tmp",
        "type": "tmpfs",
        "source": "tmpfs",
        "options": ["nosuid", "nodev", "mode=1777"],
    },
]
_MASKED = [
    "/proc/acpi",
    "/proc/asound",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/sys/firmware",
    "/proc/scsi",
]
_READ_ONLY = ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"]


@dataclass(frozen=True)
class NodeValue:
    """A config.json value known only on the node: a shell variable set from `expression`
    (a site word or command substitution); `string` ones are JSON-escaped by `iri_json`."""

    variable: str
    expression: str
    string: bool = True


@dataclass(frozen=True)
class OciInvocation(Invocation):
    """The launch line, plus the bundle the script writes before it."""

    config_pieces: list[str] = field(default_factory=list)
    node_values: list[NodeValue] = field(default_factory=list)
    bundle_name: str = ""
    rootfs: str = ""
    staging: list[str] = field(default_factory=list)


class _Placeholders:
    """Stand-ins for node values inside the config, split out after `json.dumps`.

    A stand-in is a JSON string holding NUL, which no JobSpec value can contain
    (negotiation refuses NUL), so user text never matches one.
    """

    def __init__(self) -> None:
        self.values: list[NodeValue] = []

    def add(self, expression: str, string: bool = True) -> str:
        number = len(self.values)
        self.values.append(NodeValue(f"iri_oci_v{number}", expression, string))
        return f"\0{number}"

    def pieces(self, text: str) -> list[str]:
        """`text` as alternating literal JSON (user words) and `$iri_oci_vN` (site words)."""
        parts = re.split(r'"\\u0000([0-9]+)"', text)
        pieces: list[str] = [parts[0]]
        for number, literal in zip(parts[1::2], parts[2::2], strict=True):
            pieces += [SiteWord(f"${self.values[int(number)].variable}"), literal]
        return pieces


class SlurmOci(Runtime):
    name = "slurm-oci"
    program = "srun"
    image_forms = frozenset({"oci", "docker-uri", "shifter", "sandbox"})
    rank = 60
    stages_in_launch = True
    mpi_refusal = NO_RANKS_REASON
    max_processes_per_node = 1

    def image_reference(self, ref: ImageRef) -> str | None:
        if ref.form == "sandbox":
            folder = ref.text.rstrip("/")
            return folder or None
        if ref.form in STAGED_FORMS:
            return for_podman(ref)
        return None

    def config_errors(self, config: RuntimeConfig, scheduler: SchedulerFacts) -> list[str]:
        errors = []
        if not scheduler.offers_oci_containers:
            errors.append(
                f"oci_conf: slurm-oci runs through Slurm's `srun --container`; a "
                f"{scheduler.kind} resource cannot offer it"
            )
        if config.oci_conf is None:
            errors.append("oci_conf: required: the runtime the site's oci.conf drives ('runc')")
        elif config.oci_conf == "ch-run-oci":
            errors.append(f"oci_conf: {CH_RUN_OCI_REASON}")
        staged = sorted(STAGED_FORMS & set(config.image_forms))
        if staged and (config.staging.when != "job" or config.rootfs_cache is None):
            errors.append(
                f"staging: {', '.join(staged)} images are staged by the batch script, as the "
                "job's user, into rootfs_cache: set staging.when 'job', staging.command and "
                "rootfs_cache (or accept only 'sandbox' folders)"
            )
        if config.staging.when == "submit":
            errors.append(
                "staging.when: 'submit' stages on the login node, but the bundle's "
                "root filesystem is staged by the batch script ('job')"
            )
        if config.gpu is not None:
            errors.append(
                "gpu: this gateway writes no GPU devices into a slurm-oci bundle "
                "(no device nodes or CDI in its config.json), so it offers no GPUs"
            )
        if config.mpi is not None:
            errors.append(f"mpi: {NO_RANKS_REASON}")
        if "none" in config.networks:
            errors.append("networks: slurm-oci bundles run on the host network only")
        return errors

    def refusals(self, decision: Decision) -> list[Problem]:
        spec = decision.spec
        shape = decision.shape
        problems: list[Problem] = []
        if spec.executable is None:
            problems.append(
                Problem(
                    "executable",
                    "slurm-oci needs the program to run: Slurm 22.05 replaces the "
                    "bundle's process.args with the step's command, so the image's own "
                    "entrypoint is not known",
                    "an executable",
                )
            )
        limit = self.max_processes_per_node or shape.processes_on_busiest_node
        if shape.processes_on_busiest_node > limit:
            where = (
                "resources.processes_per_node"
                if shape.processes_per_node is not None
                else "resources.process_count"
            )
            problems.append(
                Problem(
                    where,
                    ONE_TASK_REASON,
                    f"one process per node: process_count at most node_count ({shape.node_count})",
                )
            )
        if decision.launcher == "mpi" and not decision.use_mpi:  # use_mpi: see mpi_refusal
            problems.append(Problem("launcher", NO_RANKS_REASON, "single, multiple"))
        return problems

    def invocation(self, decision: Decision) -> Invocation:
        config = decision.runtime_config
        assert config is not None and decision.image is not None
        staged = decision.image_form in STAGED_FORMS
        slots = _Placeholders()
        rootfs: Any = decision.image
        staging: list[str] = []
        rootfs_word = decision.image
        if staged:
            assert config.rootfs_cache is not None
            rootfs_word = SiteWord(f"{config.rootfs_cache}/{cache_key(decision.image)}")
            rootfs = slots.add(SiteWord("$iri_oci_rootfs"))
            staging = [*(SiteWord(word) for word in config.staging.command), decision.image]
        document = _config(decision, rootfs, slots)
        text = json.dumps(document, ensure_ascii=False)
        digest = hashlib.sha256(text.encode()).hexdigest()[:12]
        options: list[str] = []
        if decision.launcher == "none":
            options += ["--nodes=1", "--ntasks=1"]
        options.append("--ntasks-per-node=1")
        options += decision.extra_options
        options.append(SiteWord("--container=$iri_oci_bundle"))
        return OciInvocation(
            executable=self.executable(decision),
            options=options,
            image=decision.image,
            command=command_of(decision),
            container_env=dict(decision.environment),
            config_pieces=slots.pieces(text),
            node_values=slots.values,
            bundle_name=f".iri-oci-{digest}",
            rootfs=rootfs_word,
            staging=staging,
        )


def cache_key(image: str) -> str:
    """The folder of an image in the rootfs cache: legible, and unique by a digest."""
    legible = _SAFE_KEY.sub("_", image).strip("._-")[:60] or "image"
    return f"{legible}-{hashlib.sha256(image.encode()).hexdigest()[:16]}"


def _bind(source: str, target: str, read_only: bool) -> dict[str, Any]:
    return {
        "destination": target,
        "type": "none",
        "source": source,
        "options": ["rbind", "ro" if read_only else "rw"],
    }


def _site_bind(bind: str, slots: _Placeholders) -> dict[str, Any]:
    """A profile bind `SRC[:DST[:ro|rw]]`; its words may hold `$VAR`, so the node fills them."""
    parts = bind.split(":")
    source = parts[0]
    target = parts[1] if len(parts) > 1 and parts[1] else source
    read_only = len(parts) > 2 and parts[2] == "ro"
    return _bind(slots.add(SiteWord(source)), slots.add(SiteWord(target)), read_only)


def _config(decision: Decision, rootfs: str, slots: _Placeholders) -> dict[str, Any]:
    """The bundle's config.json, with stand-ins for what only the node knows."""
    uid = slots.add(SiteWord("$(id -u)"), string=False)
    gid = slots.add(SiteWord("$(id -g)"), string=False)
    mounts: list[dict[str, Any]] = [
        {"destination": "/", "type": "none", "source": rootfs, "options": ["rbind"]}
    ]
    mounts += _SYSTEM_MOUNTS
    workdir = decision.workdir or "/"
    if isinstance(decision.workdir, SiteWord):  # the job directory, bound where it is
        workdir = slots.add(decision.workdir)
        mounts.append(_bind(workdir, workdir, read_only=False))
    mounts += [_site_bind(bind, slots) for bind in site_binds(decision)]
    mounts += [_bind(m.source, m.target, m.read_only) for m in decision.mounts]
    env = [f"PATH={_DEFAULT_PATH}"]
    # A site word's value (an array element's index) is only known on the node: the script
    # exports it (`container_env`), and Slurm's step environment, appended, wins.
    env += [
        f"{name}={value}"
        for name, value in decision.environment.items()
        if type(value) is not SiteWord
    ]
    return {
        "ociVersion": "1.0.2-dev",
        "process": {
            "terminal": False,
            "user": {"uid": 0, "gid": 0},
            "args": command_of(decision),
            "env": env,
            "cwd": workdir,
            "capabilities": {
                kind: _CAPABILITIES for kind in ("bounding", "effective", "permitted", "ambient")
            },
            "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
            "noNewPrivileges": True,
        },
        "root": {"path": "rootfs", "readonly": True},
        "mounts": mounts,
        "linux": {
            "uidMappings": [{"containerID": 0, "hostID": uid, "size": 1}],
            "gidMappings": [{"containerID": 0, "hostID": gid, "size": 1}],
            "namespaces": [{"type": "pid"}, {"type": "ipc"}, {"type": "mount"}, {"type": "user"}],
            "maskedPaths": _MASKED,
            "readonlyPaths": _READ_ONLY,
        },
    }


RUNTIME = SlurmOci()
