"""The contract every container runtime plug-in fulfils, and helpers they share.

A runtime is one module in this package that defines `RUNTIME`, an instance of a `Runtime`
subclass, plus its launch-line template `templates/runtimes/<name>.sh.j2`. The runtime knows its
own command line: which image forms it can run and how to turn a `Decision` into the options,
image reference and command that its template lays out. Its `name` is written nowhere else:
the JobSpec's accepted runtimes, the profile's runtime blocks, local detection and the template
are all found through the registry (`iri_gateway.runtimes.RUNTIMES`). See docs/plugins.md.

This module and the runtime modules import no negotiation, profile or plan code at run time
(only for type checking): the JobSpec model takes its runtime names from the registry, and the
SDK imports the JobSpec without the server.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from iri_gateway.models.images import ImageForm, ImageRef
from iri_gateway.shell import SiteWord

if TYPE_CHECKING:
    from iri_gateway.errors import Problem
    from iri_gateway.models.plan import Decision
    from iri_gateway.models.profile import RuntimeConfig
    from iri_gateway.models.scheduler_facts import SchedulerFacts

Which = Callable[[str], str | None]
"""Finds a program on this machine's PATH, as `shutil.which` does."""


def env_assignment(key: str, value: str, prefix: str = "") -> str:
    """`prefix` + `KEY=value` as one option word. A site word's value (a gateway-made
    expansion, such as an array element's `${SLURM_ARRAY_TASK_ID}`) keeps the whole word a
    site word, so that the script expands it; a user's value stays literal."""
    word = f"{prefix}{key}={value}"
    return SiteWord(word) if type(value) is SiteWord else word


@dataclass(frozen=True)
class Invocation:
    """What a runtime fragment needs to write the launch line."""

    executable: SiteWord
    options: list[str]
    image: str | None
    command: list[str]
    container_env: dict[str, str] = field(default_factory=dict)
    scheduler_options: list[tuple[str, str]] = field(default_factory=list)


class Runtime(ABC):
    """A container runtime plug-in: its name, what it can do, and its command line."""

    name: ClassVar[str]
    """The one name of the runtime: `container.runtime` and `extra_options` keys in a JobSpec,
    its block under `runtimes` in a profile, its template `runtimes/<name>.sh.j2`."""
    program: ClassVar[str]
    """The command when the profile names no `executable`; local detection looks for it."""
    image_forms: ClassVar[frozenset[ImageForm]]
    """Image reference forms the runtime can run (a profile may accept fewer)."""
    rank: ClassVar[int] = 100
    """Position in lists (the JSON Schema's enum, capabilities, hints): lower first, then by
    name. The shipped runtimes keep the order they have always been listed in."""
    container: ClassVar[bool] = True
    """False only for bare execution (`none`): always offered, never configured in a profile."""
    supports_network_none: ClassVar[bool] = False
    """The runtime can run a container without a network (`container.network: none`)."""
    supports_cdi: ClassVar[bool] = False
    """The runtime can inject CDI devices (`container.devices`)."""
    oci_mode_flag: ClassVar[str | None] = None
    """The flag of the runtime's OCI mode, for a runtime that injects CDI devices only in it
    (Apptainer: `--oci`); a profile turns the mode on with `oci_mode: true`."""
    binds_hosts_file: ClassVar[bool] = True
    """The runtime can bind the members' hosts file at /etc/hosts (needed by cluster jobs)."""
    binds_job_directory: ClassVar[bool] = False
    """The runtime binds the job directory into the container itself, so the directory's path
    must be expressible in its mount syntax (no ':' or ',')."""
    max_processes_per_node: ClassVar[int | None] = None
    """Processes one node may run in this runtime (None: only the hardware limits it)."""
    mpi_refusal: ClassVar[str | None] = None
    """Why this runtime can never bind MPI, whatever a profile says (the reason a job asking
    for MPI in it is refused with); None: it can when the profile gives an MPI binding."""
    stages_in_launch: ClassVar[bool] = False
    """The runtime's template stages the image itself (into the user's cache, as the job's
    user), so the profile's `staging` command is not run as a separate step."""
    slurm_spank_options: ClassVar[bool] = False
    """Under Slurm, the image and volumes go into `#SBATCH` lines (SPANK plug-in options), so
    they must not hold Slurm's separators."""
    read_only_refusal: ClassVar[str | None] = None
    """None when the runtime can bind a path read-only; otherwise why it cannot, and a
    read-only mount is refused at planning with this reason (Charliecloud's `-b`)."""
    entrypoint_refusal: ClassVar[str | None] = None
    """None when the runtime can run an image's own entrypoint (a job without executable or
    arguments); otherwise why it cannot, and such a job is refused at planning."""

    @property
    def template(self) -> str:
        """The launch-line template, looked up in the site's folder, then the shipped one."""
        return f"runtimes/{self.name}.sh.j2"

    @abstractmethod
    def image_reference(self, ref: ImageRef) -> str | None:
        """The image in this runtime's own form, or None when it cannot run that form."""

    @abstractmethod
    def invocation(self, decision: Decision) -> Invocation:
        """Options, image and command for the launch line."""

    def config_errors(self, config: RuntimeConfig, scheduler: SchedulerFacts) -> list[str]:
        """What a profile asks of this runtime that it cannot do (`field: reason` each; the
        profile is refused with them); `scheduler` answers what the resource's batch system
        offers. The Slurm OCI settings belong to runtimes that run
        bundles through Slurm; every other runtime refuses them rather than ignore them."""
        errors = []
        if config.oci_conf is not None:
            errors.append(
                f"oci_conf: {self.name} is not run through Slurm's oci.conf (a slurm-oci setting)"
            )
        if config.rootfs_cache is not None:
            errors.append(
                f"rootfs_cache: {self.name} stages no root filesystems (a slurm-oci setting)"
            )
        return errors

    def refusals(self, decision: Decision) -> list[Problem]:
        """Why the negotiated job cannot run in this runtime, beyond the checks every
        runtime shares (each names the JobSpec field); none by default."""
        return []

    def staging_commands(self, decision: Decision) -> list[list[str]]:
        """The commands that stage the job's image: the profile's staging command with the
        image appended. A runtime may stage only some image forms, or add commands (run
        once, where the profile's `staging.when` says, never per rank)."""
        config = decision.runtime_config
        if config is None or decision.image is None:
            return []
        return [[*(SiteWord(word) for word in config.staging.command), decision.image]]

    def injects_cdi(self, config: RuntimeConfig | None) -> bool:
        """True when the runtime, configured as `config`, can inject CDI devices."""
        if not self.supports_cdi:
            return False
        return self.oci_mode_flag is None or (config is not None and config.oci_mode)

    def installed(self, config: RuntimeConfig, which: Which) -> bool:
        """True when this machine has the runtime (a `local` resource offers only those)."""
        return which(str(config.executable or self.program)) is not None

    def executable(self, decision: Decision) -> SiteWord:
        """The runtime's program: the profile's `executable`, else its usual name."""
        config = decision.runtime_config
        return SiteWord(config.executable if config and config.executable else self.program)


def site_words(words: list[str]) -> list[str]:
    """Mark profile strings as site words (double-quoted, `$VAR` expands)."""
    return [SiteWord(word) for word in words]


def command_of(decision: Decision) -> list[str]:
    """The user's executable and arguments (empty: the image's own entrypoint)."""
    spec = decision.spec
    if spec.executable is None:
        return list(spec.arguments)
    return [spec.executable, *spec.arguments]


def site_flags(decision: Decision) -> list[str]:
    """Flags the profile puts on every launch, then GPU and MPI binding flags, then binds."""
    config = decision.runtime_config
    if config is None:
        return []
    return [*site_words(config.flags), *decision.gpu_flags, *mpi_flags(decision)]


def mpi_flags(decision: Decision) -> list[str]:
    """The MPI binding's flags when the job uses MPI (its `gpu_flags` when it also uses
    GPUs and the site gives them)."""
    config = decision.runtime_config
    if not decision.use_mpi or config is None or config.mpi is None:
        return []
    mpi = config.mpi
    return site_words(
        mpi.gpu_flags if decision.use_gpu and mpi.gpu_flags is not None else mpi.flags
    )


def site_binds(decision: Decision) -> list[str]:
    """Bind paths the site always adds, MPI binds when MPI is used, and the gateway's own
    (a cluster member's hosts file)."""
    config = decision.runtime_config
    if config is None:
        return []
    binds = list(config.binds)
    if decision.use_mpi and config.mpi is not None:
        binds += config.mpi.binds
    return site_words(binds) + list(decision.binds)
