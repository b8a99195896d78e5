"""The facility profile: what a site's admin writes in YAML to describe its machines.

A profile names the facility and its resources. Each resource says which scheduler runs it,
how it is reached, its queues and their limits, its node hardware, how MPI is bound, and, per
container runtime, how GPUs, MPI, mounts, networks, images and extra options work there.

Strings that an admin writes into shell positions (module names, site environment values,
launcher arguments, runtime flags, bind paths) are *site words*: they are trusted, written into
the batch script inside double quotes, so `$VAR` references expand on the compute node. Values
from a user's JobSpec are never treated that way.

The JSON Schema of `FacilityProfile` is shipped as `facility_profiles/schema.json`.
"""

from __future__ import annotations

import ipaddress
import posixpath
import re
from collections.abc import Collection, Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from iri_gateway.models import job_arrays
from iri_gateway.models.account_rules import AccountRule, first_match
from iri_gateway.models.constraints import STANDARD_FACTS
from iri_gateway.models.images import ImageForm
from iri_gateway.models.job_template_names import TemplateName
from iri_gateway.models.job_templates import ClusterTemplate, TaskTemplate, Template
from iri_gateway.models.platforms import normalise_arch
from iri_gateway.models.project_rules import ProjectRule, ResourceProjects, project_grants
from iri_gateway.models.runtime_names import RuntimeBlockName, RuntimeName
from iri_gateway.models.scheduler_facts import SchedulerFacts, schedulers_of
from iri_gateway.models.scheduler_kinds import RegisteredKind
from iri_gateway.models.storage import Storage
from iri_gateway.runtimes import RUNTIMES

Identifier = Annotated[
    str,
    Field(pattern=r"^[a-z0-9][a-z0-9._-]*$", max_length=63),
]
SiteWord = Annotated[
    str,
    Field(
        min_length=1,
        description="A shell word written by the site admin; `$VAR` expands at run time.",
    ),
]
SetupLine = Annotated[
    str,
    Field(
        min_length=1,
        pattern=r"^[^\n\r]*$",
        description="One line of shell written by the site admin, run as written.",
    ),
]
EnvName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]


class _Strict(BaseModel):
    """Profile objects refuse unknown keys and wrong types ('8' is not a core count), so a
    typo is an error, never a silent default; the same rules as schema.json."""

    model_config = ConfigDict(extra="forbid", strict=True)


class FacilityInfo(_Strict):
    """Who runs these machines."""

    id: Identifier = Field(description="Short facility id, e.g. 'nersc'")
    name: str = Field(description="Human-readable facility name")
    description: str = Field(default="", description="One paragraph about the facility")
    url: str | None = Field(default=None, description="Facility home page")
    example: bool = Field(
        default=False,
        description="True for profiles shipped as examples modelled on public documentation; "
        "they are not endorsed by the facility.",
    )
    sources: list[str] = Field(
        default_factory=list, description="Public documents the profile follows"
    )


class SshCertificates(_Strict):
    """Short-lived SSH user certificates, signed by the gateway per login account (issue 31),
    instead of one long-lived key in every account's `authorized_keys`: the login node's
    sshd trusts the CA (`TrustedUserCAKeys`)."""

    ca_key: str | None = Field(
        default=None,
        description="The certificate authority's private key (OpenSSH format, unencrypted), "
        "read by the gateway; or `sign_command`",
    )
    sign_command: list[str] | None = Field(
        default=None,
        min_length=1,
        max_length=20,
        description="A program of the site that signs instead (argv, no shell): run with the "
        "account and the validity in seconds as its two last arguments and the public key "
        "(an OpenSSH line) on its input, it prints the certificate (an OpenSSH line)",
    )
    validity: int = Field(
        default=600,
        ge=60,
        le=86400,
        description="Seconds a certificate is valid; renewed when a quarter of it is left",
    )
    source_addresses: list[str] = Field(
        default_factory=list,
        max_length=20,
        description="The addresses (CIDR) a certificate may be used from (its "
        "`source-address`); empty: the address this machine reaches the login node from",
    )
    port_forwarding: bool = Field(
        default=False,
        description="Let certificates open forwarded connections (`permit-port-forwarding`): "
        "the port proxy reaches jobs' ports through the login node so; off, as FirecREST "
        "advises, unless the proxy is used",
    )

    @model_validator(mode="after")
    def _one_signer(self) -> SshCertificates:
        if (self.ca_key is None) == (self.sign_command is None):
            raise ValueError("give exactly one of ca_key (a key file) and sign_command")
        for address in self.source_addresses:
            try:
                ipaddress.ip_network(address, strict=False)
            except ValueError:
                raise ValueError(
                    f"source_addresses: {address!r} is not an address or network (CIDR)"
                ) from None
        return self


class SshConnection(_Strict):
    """How the gateway reaches a login node over SSH (used by job submission)."""

    host: str = Field(description="Login node host name or address")
    port: int = Field(default=22, ge=1, le=65535, description="SSH port")
    known_hosts: str = Field(description="known_hosts file pinning the login node's host key")
    key_file: str | None = Field(default=None, description="Private key of the gateway")
    certificates: SshCertificates | None = Field(
        default=None,
        description="Sign a short-lived certificate per account instead of using `key_file`",
    )
    user_mapping: dict[str, str] = Field(
        default_factory=dict,
        description="Gateway user name -> account on the login node; unmapped users are refused",
    )
    account_rules: list[AccountRule] = Field(
        default_factory=list,
        max_length=100,
        description="Rules from the caller's identity claims to its account, tried in order "
        "after `user_mapping` (the first that matches gives the account; none: refused). "
        "Each: `claim` (dotted), `match` (an RE2 pattern matched whole), `account` (with "
        "`{group}` for the pattern's named groups); never root",
    )
    max_sessions_per_connection: int = Field(
        default=8,
        ge=1,
        le=1000,
        description="Commands the gateway runs at once over one SSH connection (each is an "
        "SSH session). Keep it below the login node's sshd `MaxSessions` (OpenSSH's default "
        "is 10): sshd refuses sessions beyond it, which the gateway then retries on another "
        "connection. More concurrent commands open more connections, up to `max_connections`.",
    )
    max_connections: int = Field(
        default=4,
        ge=1,
        le=100,
        description="SSH connections the gateway keeps open at most per login account; "
        "opened as commands need them. Commands beyond max_connections x "
        "max_sessions_per_connection wait for a free session.",
    )

    @model_validator(mode="after")
    def _one_credential(self) -> SshConnection:
        if self.key_file is not None and self.certificates is not None:
            raise ValueError(
                "give key_file or certificates, not both: with certificates the gateway "
                "needs no long-lived key"
            )
        return self

    def gateway_files(self) -> list[str]:
        """The gateway's own files this connection names (known_hosts, its key, the
        certificate authority's key): no user may reach them through the file operations."""
        certificates = self.certificates
        named = [self.known_hosts, self.key_file, certificates.ca_key if certificates else None]
        return [path for path in named if path]

    def account_of(self, user: str, claims: Mapping[str, Any]) -> str | None:
        """The login account of gateway user `user`, whose identity says `claims`:
        `user_mapping` first (the simplest rule: a name), then `account_rules` in order;
        None when neither gives one."""
        found = self.mapping_of(user, claims)
        return found[0] if found is not None else None

    def mapping_of(self, user: str, claims: Mapping[str, Any]) -> tuple[str, str] | None:
        """`account_of`'s account and what gave it (`user_mapping[...]` or the rule), for
        people reading the profile (`profile check --identity`); None: no account."""
        mapped = self.user_mapping.get(user)
        if mapped is not None:
            return mapped, f"user_mapping[{user!r}]"
        found = first_match(self.account_rules, claims)
        if found is None:
            return None
        index, account = found
        return account, self.account_rules[index].described(index)


class Connection(_Strict):
    """Where the scheduler commands run."""

    mode: Literal["local", "ssh"] = Field(default="local", description="'local' or 'ssh'")
    ssh: SshConnection | None = Field(default=None, description="Settings for mode 'ssh'")
    work_root: str | None = Field(
        default=None,
        description="Folder where jobs that name no directory run, one sub-folder per job "
        "(default: the gateway's data directory locally, '~/iri-gateway-jobs' over SSH). "
        "'~' and relative paths are taken from the account's home over SSH (from the "
        "gateway's working directory locally); the gateway uses it as an absolute path. It "
        "is the gateway's own: never reachable through a granted root (`files.roots`).",
    )

    @model_validator(mode="after")
    def _ssh_needs_settings(self) -> Connection:
        if self.mode == "ssh" and self.ssh is None:
            raise ValueError("connection mode 'ssh' needs an 'ssh' block (host, known_hosts)")
        return self


ROOT_PLACEHOLDERS = ("{user}", "{account}", "{account_initial}")
"""What a root template may contain besides literal text (see `FileAccess.roots`)."""


class FileAccess(_Strict):
    """Which folders a user may name as a job's `directory` and read and change through the
    filesystem operations, besides the job folders the gateway makes for them."""

    roots: list[str] = Field(
        default_factory=list,
        description="Folders a user may use, as path templates: absolute (`/pscratch/sd/"
        "{account_initial}/{account}`) or starting at the account's home (`~`, `~/runs`). "
        "`{user}` is the gateway user, `{account}` the account that runs the user's jobs (the "
        "mapped login account over SSH, the gateway user on a local connection), "
        "`{account_initial}` its first character, and `~` that account's home (over SSH; the "
        "gateway's own home locally). Each value filled in must be one safe path component "
        "(no '/', not '.' or '..', no NUL or control characters); a root whose value is not "
        "is not granted to that user. A job's `directory` (and any output or input path "
        "outside it) must lie inside one of these roots, checked component-wise after "
        "lexical normalisation; files are read below a root without following symbolic links "
        "that leave it. The gateway's own folders (its job root and, locally, its data "
        "directory) are never reachable through a root. Empty (the default): users may use "
        "only the gateway's job folders.",
    )
    allow_special_modes: bool = Field(
        default=False,
        description="True to let `chmod` set the setuid, setgid and sticky bits. Off by "
        "default: where the gateway's file operations run as root (a local resource served "
        "by root), a setuid file would run as its owner for anyone; with it off such a mode "
        "is refused (422 naming `mode`) and users give permissions only (at most 3 octal "
        "digits' worth).",
    )

    @field_validator("roots")
    @classmethod
    def _templates(cls, roots: list[str]) -> list[str]:
        checked = []
        for root in roots:
            rest = root
            for placeholder in ROOT_PLACEHOLDERS:
                rest = rest.replace(placeholder, "x")
            if "{" in rest or "}" in rest:
                raise ValueError(
                    f"root {root!r}: only the placeholders {', '.join(ROOT_PLACEHOLDERS)} "
                    "may appear in braces"
                )
            if any(ord(c) < 32 or ord(c) == 127 for c in root):
                raise ValueError(f"root {root!r} contains a control character")
            if not (root.startswith("/") or root == "~" or root.startswith("~/")):
                raise ValueError(f"root {root!r} must be absolute or start with '~/'")
            if ".." in root.split("/"):
                raise ValueError(f"root {root!r} must not contain '..'")
            home = root.startswith("~")
            # normpath keeps a leading '//' (POSIX allows it a meaning): collapse it first.
            normal = posixpath.normpath("/" + root.removeprefix("~").lstrip("/"))
            checked.append(("~" + normal).rstrip("/") if home else normal)
        return checked


class Queue(_Strict):
    """A Slurm partition/QOS or PBS queue with its limits."""

    name: Identifier = Field(description="Queue or partition name as the scheduler knows it")
    default: bool = Field(default=False, description="Used when the job names no queue")
    max_walltime: int | None = Field(default=None, ge=1, description="Longest walltime, seconds")
    default_walltime: int | None = Field(
        default=None, ge=1, description="Walltime given to jobs that ask for none, seconds"
    )
    max_nodes: int | None = Field(default=None, ge=1, description="Most nodes one job may use")
    min_nodes: int = Field(default=1, ge=1, description="Fewest nodes one job may use")
    constraint: str | None = Field(
        default=None, description="Node constraint added to every job (Slurm --constraint)"
    )
    select_by: Literal["partition", "qos"] = Field(
        default="partition",
        description="Slurm: pass the queue name as --partition (default) or as --qos (NERSC style)",
    )

    @model_validator(mode="after")
    def _defaults_within_limits(self) -> Queue:
        if (
            self.default_walltime is not None
            and self.max_walltime is not None
            and self.default_walltime > self.max_walltime
        ):
            raise ValueError(
                f"default_walltime {self.default_walltime} exceeds max_walltime {self.max_walltime}"
            )
        if self.max_nodes is not None and self.min_nodes > self.max_nodes:
            raise ValueError(f"min_nodes {self.min_nodes} exceeds max_nodes {self.max_nodes}")
        return self


class Cpu(_Strict):
    """Per-node CPU facts."""

    arch: str = Field(
        description="CPU architecture, e.g. 'x86_64', 'aarch64'; other names of the same "
        "machine ('amd64', 'arm64') are accepted and kept in the kernel's spelling"
    )
    model: str | None = Field(default=None, description="CPU model name")
    cores: int = Field(ge=1, description="Physical cores per node")
    mhz: int | None = Field(default=None, ge=1, description="Base clock in MHz")

    @field_validator("arch")
    @classmethod
    def _one_spelling(cls, arch: str) -> str:
        """`arm64` and `aarch64` are one machine: facts carry one name, so requirements meet."""
        return normalise_arch(arch)


class Gpus(_Strict):
    """Per-node GPU facts."""

    count: int = Field(ge=1, description="GPUs (or schedulable GPU dies) per node")
    vendor: Literal["nvidia", "amd", "intel"] = Field(description="GPU vendor")
    model: str = Field(description="GPU model, e.g. 'a100', 'mi250x'")
    memory_gib: float | None = Field(default=None, gt=0, description="Memory per GPU, GiB")
    cuda: str | None = Field(default=None, description="CUDA version the driver supports")
    rocm: str | None = Field(default=None, description="ROCm version installed")

    @model_validator(mode="after")
    def _toolkit_matches_vendor(self) -> Gpus:
        if self.cuda is not None and self.vendor != "nvidia":
            raise ValueError(f"'cuda' is an NVIDIA version, but vendor is {self.vendor!r}")
        if self.rocm is not None and self.vendor != "amd":
            raise ValueError(f"'rocm' is an AMD version, but vendor is {self.vendor!r}")
        return self


class Nodes(_Strict):
    """The compute nodes of a resource (one homogeneous kind)."""

    count: int = Field(ge=1, description="Number of compute nodes")
    cpu: Cpu = Field(description="CPU facts per node")
    memory_gib: float = Field(gt=0, description="Memory per node, GiB")
    gpus: Gpus | None = Field(default=None, description="GPUs per node; absent when none")
    detect: bool = Field(
        default=False,
        description="Measure the gateway's own machine at start (architecture, cores, CPU MHz, "
        "memory, NVIDIA/AMD GPUs, CDI devices) and use that instead of what is written here; "
        "only for resources run by the local scheduler",
    )


class Mpi(_Strict):
    """How the site launches MPI programs."""

    flavour: str = Field(description="MPI implementation, e.g. 'cray-mpich', 'mpich', 'openmpi'")
    launcher: Literal["srun", "mpiexec", "mpirun"] = Field(description="The site's launcher")
    launcher_args: list[SiteWord] = Field(
        default_factory=list,
        description="Arguments after the launcher, e.g. '--mpi=pmi2'. Placeholders "
        "{nodes}, {processes}, {processes_per_node}, {cpus_per_process} are filled in.",
    )
    accepts: list[Literal["srun", "mpiexec", "mpirun"]] = Field(
        default=["srun", "mpiexec", "mpirun"],
        description="JobSpec launcher names this site maps to its own launcher",
    )
    modules: list[SiteWord] = Field(default_factory=list, description="Modules loaded for MPI")
    setup_commands: list[SetupLine] = Field(
        default_factory=list,
        description="Shell lines run first, verbatim (e.g. 'module use /soft/modulefiles')",
    )
    env: dict[EnvName, str] = Field(default_factory=dict, description="Host environment for MPI")


class GpuBinding(_Strict):
    """How a runtime gives the container the node's GPUs."""

    flags: list[SiteWord] = Field(
        default_factory=list, description="Vendor flags, e.g. ['--nv'], ['--rocm'], ['--gpu']"
    )
    cdi_devices: list[str] = Field(
        default_factory=list,
        description="CDI device names this runtime can inject, e.g. 'nvidia.com/gpu=all'; "
        "a trailing '*' matches any suffix",
    )
    default_devices: list[str] = Field(
        default_factory=list,
        description="CDI devices given when a job asks for GPUs and names none",
    )
    env: dict[EnvName, str] = Field(default_factory=dict, description="Host environment")
    modules: list[SiteWord] = Field(default_factory=list, description="Modules to load")

    @model_validator(mode="after")
    def _has_a_way(self) -> GpuBinding:
        if not self.flags and not self.cdi_devices and not self.env:
            raise ValueError("a GPU binding needs vendor 'flags', 'cdi_devices' or 'env'")
        for device in self.default_devices:
            if not device_offered(device, self.cdi_devices):
                raise ValueError(f"default device {device!r} is not in cdi_devices")
        return self


class MpiBinding(_Strict):
    """How a runtime binds the site's MPI into the container."""

    flags: list[SiteWord] = Field(default_factory=list, description="e.g. ['--mpi']")
    gpu_flags: list[SiteWord] | None = Field(
        default=None,
        description="Flags used instead of `flags` when the job also uses GPUs (e.g. "
        "['--cuda-mpi'])",
    )
    modules: list[SiteWord] = Field(default_factory=list, description="Modules to load")
    env: dict[EnvName, str] = Field(default_factory=dict, description="Host environment")
    binds: list[SiteWord] = Field(default_factory=list, description="Host paths bound in")


class MountPolicy(_Strict):
    """Which host paths a job may mount into its container."""

    allowed_sources: list[str] = Field(
        default_factory=list,
        description="Absolute path prefixes a mount source must lie under (component-wise)",
    )
    read_write: bool = Field(default=True, description="False: only read-only mounts")

    @field_validator("allowed_sources")
    @classmethod
    def _absolute(cls, prefixes: list[str]) -> list[str]:
        for prefix in prefixes:
            if not prefix.startswith("/"):
                raise ValueError(f"allowed source {prefix!r} must be an absolute path")
        return [posixpath.normpath(prefix) for prefix in prefixes]


class ImageStaging(_Strict):
    """Whether and how an image is prepared before it runs."""

    when: Literal["never", "job", "submit"] = Field(
        default="never",
        description="'job': in the batch script before launch; 'submit': on the login node "
        "before submission; 'never': the runtime fetches on demand",
    )
    command: list[SiteWord] = Field(
        default_factory=list, description="Command prefix; the image reference is appended"
    )

    @model_validator(mode="after")
    def _command_when_staged(self) -> ImageStaging:
        if self.when != "never" and not self.command:
            raise ValueError(f"staging when {self.when!r} needs a 'command'")
        return self


class RuntimeConfig(_Strict):
    """One container runtime as a resource offers it."""

    executable: SiteWord | None = Field(
        default=None, description="Program name or path; default: the runtime's own name"
    )
    modules: list[SiteWord] = Field(default_factory=list, description="Modules to load first")
    setup_commands: list[SetupLine] = Field(
        default_factory=list,
        description="Shell lines run first, verbatim (e.g. 'module use /soft/modulefiles')",
    )
    env: dict[EnvName, str] = Field(default_factory=dict, description="Host environment")
    flags: list[SiteWord] = Field(
        default_factory=list, description="Flags on every launch, e.g. ['--fakeroot']"
    )
    binds: list[SiteWord] = Field(default_factory=list, description="Site bind mounts")
    gpu: GpuBinding | None = Field(default=None, description="GPU binding; absent: no GPUs")
    mpi: MpiBinding | None = Field(default=None, description="MPI binding; absent: no MPI")
    mounts: MountPolicy = Field(default_factory=MountPolicy, description="Mount policy")
    networks: list[Literal["host", "none"]] = Field(
        default=["host"], description="Networks a job may ask for"
    )
    image_forms: list[ImageForm] = Field(
        description="Image reference forms accepted (translated to the runtime's own form)"
    )
    staging: ImageStaging = Field(default_factory=ImageStaging, description="Image staging")
    oci_mode: bool = Field(
        default=False,
        description="Apptainer only: the site's Apptainer runs containers in OCI mode "
        "(Apptainer >= 1.3 with its OCI runtime installed); every launch gets `--oci`, and "
        "only then can CDI devices (gpu.cdi_devices, container.devices) be given",
    )
    allowed_extra_options: list[str] = Field(
        default_factory=list,
        description="Regular expressions; a job's extra option must match one fully",
    )
    oci_conf: Literal["runc", "ch-run-oci"] | None = Field(
        default=None,
        description="slurm-oci only, and required there: the runtime the site's Slurm "
        "oci.conf drives for `srun --container` ('runc'; 'ch-run-oci' is refused: "
        "Charliecloud 0.31's ch-run-oci cannot run Slurm's bundles, see docs/runtimes-real.md)",
    )
    rootfs_cache: SiteWord | None = Field(
        default=None,
        description="slurm-oci only: the folder, per user (e.g. '$HOME/.cache/iri-gateway/oci'), "
        "where the batch script stages an image's root filesystem with `staging.command IMAGE "
        "FOLDER` (needed with staging when 'job')",
    )

    @field_validator("allowed_extra_options")
    @classmethod
    def _compiles(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as error:
                raise ValueError(
                    f"pattern {pattern!r} is not a regular expression: {error}"
                ) from None
        return patterns


def _runtime_blocks_in_schema(schema: dict[str, Any]) -> None:
    """List one optional block per registered container runtime, and no other key, as the
    profile's JSON Schema always did (validation checks the same against the registry)."""
    block = schema.pop("additionalProperties")
    properties = schema["properties"]
    for name in RUNTIMES.container_names():
        properties[name] = {**block, "default": None}
    schema["additionalProperties"] = False


class Runtimes(_Strict):
    """The container runtimes of a resource."""

    # `default`, then one block per runtime offered, keyed by the runtime's registered name
    # (`iri_gateway.runtimes.RUNTIMES`): a runtime added to the registry may be configured
    # here, and listed in the schema, without a change to this class.

    model_config = ConfigDict(
        extra="allow", strict=True, json_schema_extra=_runtime_blocks_in_schema
    )
    __pydantic_extra__: dict[RuntimeBlockName, RuntimeConfig | None] = Field(init=False)

    default: RuntimeName = Field(description="Runtime used when the job names none")

    def get(self, name: str) -> RuntimeConfig | None:
        """The configuration of runtime `name`, or None when the resource lacks it."""
        return (self.__pydantic_extra__ or {}).get(name)

    def available(self) -> list[str]:
        """Names of the container runtimes this resource offers (bare execution not counted),
        in the registry's listing order."""
        return [name for name in RUNTIMES.container_names() if self.get(name) is not None]

    def without(self, names: Collection[str]) -> Runtimes:
        """These runtimes with `names` no longer offered; a default among them becomes 'none'."""
        blocks = {
            name: config
            for name, config in (self.__pydantic_extra__ or {}).items()
            if name not in names
        }
        default = "none" if self.default in names else self.default
        return Runtimes.model_validate({"default": default, **blocks})

    @model_validator(mode="after")
    def _default_exists(self) -> Runtimes:
        if self.default != "none" and self.get(self.default) is None:
            raise ValueError(
                f"default runtime {self.default!r} is not configured; configured: "
                f"{', '.join(self.available()) or 'none'}"
            )
        for name, config in (self.__pydantic_extra__ or {}).items():
            if config is None:
                continue
            runtime = RUNTIMES[name]
            if config.oci_mode and runtime.oci_mode_flag is None:
                raise ValueError(f"{name}.oci_mode: {name} has no OCI mode (an Apptainer setting)")
            if (
                config.gpu is not None
                and config.gpu.cdi_devices
                and (not runtime.injects_cdi(config))
            ):
                if runtime.supports_cdi:
                    raise ValueError(
                        f"{name}.gpu.cdi_devices: {name} injects CDI devices "
                        f"only in OCI mode ({runtime.oci_mode_flag}); set "
                        "oci_mode: true, or give GPUs by vendor flags"
                    )
                raise ValueError(f"{name}.gpu.cdi_devices: {name} cannot inject CDI devices")
        return self


class ClusterJobs(_Strict):
    """Whether and how large cluster jobs (several roles in one scheduler job) may be."""

    enabled: bool = Field(default=True, description="Cluster jobs (JobSpec `roles`) are run")
    max_roles: int = Field(default=16, ge=1, description="Roles per job at most")
    max_members: int = Field(default=1024, ge=1, description="Members (all roles) per job")


class SchedulerConfig(_Strict):
    """The batch system of a resource."""

    kind: RegisteredKind = Field(description="'slurm', 'pbs' or 'local'")
    directives: list[str] = Field(
        default_factory=list,
        description="Directive options added to every job, e.g. ['-l filesystems=home:eagle']",
    )
    gpu_request: Literal["gpus-per-task", "gpus-per-node", "gres", "ngpus"] | None = Field(
        default=None,
        description="How GPUs are requested: Slurm --gpus-per-task (default), "
        "--gpus-per-node or --gres; PBS: ngpus in the select chunk (default)",
    )
    gpu_default_request: Literal["whole-node", "refuse"] = Field(
        default="whole-node",
        description="A job that gives its container GPUs (container.gpu, container.devices) "
        "without resources.gpu_cores_per_process: 'whole-node' reserves every GPU of each of "
        "its nodes (in the gpu_request form), 'refuse' rejects it naming what to add",
    )
    allowed_custom_attributes: list[str] = Field(
        default_factory=list,
        description="JobSpec custom_attributes keys passed on as scheduler options",
    )
    history: Literal["accounting", "jobcomp", "none"] = Field(
        default="accounting",
        description="Slurm: where finished jobs are looked up — 'accounting' (sacct with "
        "slurmdbd), 'jobcomp' (sacct -c, the job completion log) or 'none'",
    )
    cluster_jobs: ClusterJobs = Field(
        default_factory=ClusterJobs,
        description="Cluster jobs: several roles of members in one scheduler job",
    )
    max_array_size: int | None = Field(
        default=None,
        ge=1,
        le=job_arrays.MAX_INDEX + 1,
        description="Job arrays: Slurm's MaxArraySize (indices are below it; default 1001, "
        "Slurm's), PBS's max_array_size (elements per array; default 10000) or, for the local "
        "scheduler, elements per array (default 1000). Set it as the scheduler is configured",
    )
    history_window: int = Field(
        default=300,
        ge=1,
        description="Seconds a finished job stays visible in the live queue (Slurm "
        "MinJobAge); a submission attempt younger than this that the queue does not show "
        "surely never reached the scheduler",
    )

    _facts: SchedulerFacts | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _ask_the_plugin(self, info: ValidationInfo) -> SchedulerConfig:
        """Keeps the facts of the plug-in `kind` names (from the validation context) and asks
        it whether `gpu_request` is a form it reads."""
        self._facts = schedulers_of(info.context)[self.kind]
        if self.gpu_request is None:
            return self
        refusal = self._facts.gpu_request_refusal(self.gpu_request)
        if refusal is not None:
            raise ValueError(refusal)
        return self

    @property
    def facts(self) -> SchedulerFacts:
        """The facts and rules of the scheduler plug-in `kind` names."""
        if self._facts is None:
            raise RuntimeError(f"scheduler {self.kind!r} was not validated with its plug-ins")
        return self._facts

    @property
    def gpu_request_style(self) -> str:
        """The GPU request form in force: the configured one or the scheduler's usual one."""
        if self.gpu_request is not None:
            return self.gpu_request
        return self.facts.gpu_request_default


class ResourceLimits(_Strict):
    """Per-user quotas on one resource, overriding the gateway's settings of the same name
    there (absent: the setting holds). Request rates are the gateway's, per user, not a
    resource's: most requests name no resource."""

    active_jobs_per_user: int | None = Field(
        default=None,
        ge=1,
        le=10_000_000,
        description="Unfinished jobs (not completed, failed or canceled) one user may have "
        "on this resource; a launch beyond it is refused with 429 naming the limit and the "
        "user's count. Absent: the gateway's `active_jobs_per_user` (default 1000)",
    )
    tasks_per_user: int | None = Field(
        default=None,
        ge=1,
        le=100_000,
        description="Unfinished background filesystem tasks (cp, compress, extract) one user "
        "may have when starting another on this resource (counted over every resource); "
        "beyond it: 429 naming the limit. Absent: the gateway's `tasks_per_user` (default 32)",
    )


class Resource(_Strict):
    """One compute resource (a machine, or a partition of one) that runs jobs.

    Its `project_rules` sit on the resource itself, not beside `connection.ssh.account_rules`:
    which projects a caller may charge here does not depend on how the machine is reached,
    and a `local` resource, which has no `ssh` block, may grant projects as well."""

    id: Identifier = Field(description="Resource id used in the API, e.g. 'perlmutter-gpu'")
    name: str = Field(description="Human-readable name")
    description: str = Field(default="", description="What the resource is")
    scheduler: SchedulerConfig = Field(description="Batch system")
    connection: Connection = Field(default_factory=Connection, description="How it is reached")
    queues: list[Queue] = Field(min_length=1, description="Queues or partitions")
    nodes: Nodes = Field(description="Compute node hardware")
    labels: dict[str, str | int | float | bool] = Field(
        default_factory=dict, description="Extra hardware facts for flavour requirements"
    )
    mpi: Mpi | None = Field(default=None, description="MPI support; absent: none")
    runtimes: Runtimes = Field(description="Container runtimes")
    templates_dir: str | None = Field(
        default=None,
        description="Directory searched before the built-in templates (relative to the "
        "profile file)",
    )
    files: FileAccess = Field(
        default_factory=FileAccess,
        description="Folders users may name as a job's directory and read (the filesystem "
        "operations); default: only the job folders the gateway makes",
    )
    storage: Storage = Field(
        default_factory=Storage,
        description="Storage tiers and data access endpoints users of this resource have "
        "(the storage operations); default: none",
    )
    limits: ResourceLimits = Field(
        default_factory=ResourceLimits,
        description="Per-user quotas on this resource (active jobs, unfinished tasks), "
        "overriding the gateway's settings; default: the settings",
    )
    project_rules: list[ProjectRule] = Field(
        default_factory=list,
        max_length=100,
        description="Rules granting projects on this resource from the caller's identity "
        "claims, besides the token's own projects. Each: `claim` (dotted; a list claim is "
        "matched element by element), `match` (an RE2 pattern matched whole), `project` "
        "(with `{group}` for the pattern's named groups). Every rule that matches grants its "
        "project, one per matching element of a list claim; a project that does not come "
        "out a plain project name is not granted. Default: none (the token's projects only)",
    )

    @field_validator("labels")
    @classmethod
    def _labels_are_not_standard_facts(
        cls, labels: dict[str, str | int | float | bool]
    ) -> dict[str, str | int | float | bool]:
        clashes = sorted(set(labels) & set(STANDARD_FACTS))
        if clashes:
            raise ValueError(
                f"standard facts cannot be labels ({', '.join(clashes)}): they are derived "
                "from nodes, runtimes and mpi; describe the hardware there instead"
            )
        return labels

    @model_validator(mode="after")
    def _detect_only_here(self, info: ValidationInfo) -> Resource:
        if self.nodes.detect and not self.scheduler.facts.this_machine:
            here = " or ".join(
                repr(kind)
                for kind, facts in schedulers_of(info.context).items()
                if facts.this_machine
            )
            raise ValueError(
                "nodes.detect measures the gateway's own machine, so it needs scheduler kind "
                f"{here}, not {self.scheduler.kind!r}; describe the nodes of a "
                f"{self.scheduler.kind} resource by hand"
            )
        return self

    @model_validator(mode="after")
    def _runtimes_fit(self) -> Resource:
        """A runtime block may ask what its runtime cannot do here (see `config_errors`)."""
        for name in self.runtimes.available():
            config = self.runtimes.get(name)
            assert config is not None
            errors = RUNTIMES[name].config_errors(config, self.scheduler.facts)
            if errors:
                raise ValueError("; ".join(f"runtimes.{name}.{error}" for error in errors))
        return self

    @model_validator(mode="after")
    def _queues_consistent(self) -> Resource:
        names = [q.name for q in self.queues]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"queue names repeat: {', '.join(duplicates)}")
        defaults = [q.name for q in self.queues if q.default]
        if len(defaults) > 1:
            raise ValueError(f"only one queue may be the default; marked: {', '.join(defaults)}")
        for queue in self.queues:
            if queue.max_nodes is not None and queue.max_nodes > self.nodes.count:
                raise ValueError(
                    f"queue {queue.name!r} allows {queue.max_nodes} nodes but the resource "
                    f"has {self.nodes.count}"
                )
        if self.scheduler.facts.this_machine and self.nodes.count != 1:
            raise ValueError(
                f"a {self.scheduler.kind!r} resource is this one machine: nodes.count must be 1"
            )
        return self

    @property
    def default_queue(self) -> Queue | None:
        """The queue marked default, or the only queue."""
        for queue in self.queues:
            if queue.default:
                return queue
        return self.queues[0] if len(self.queues) == 1 else None

    def queue(self, name: str) -> Queue | None:
        """The queue called `name`, if any."""
        return next((q for q in self.queues if q.name == name), None)

    def projects_of(self, own: Sequence[str], claims: Mapping[str, Any]) -> ResourceProjects:
        """The projects a caller may charge here: `own` (its token's), then those
        `project_rules` grant from its identity's `claims`, each once."""
        granted = [project for project, _ in project_grants(self.project_rules, claims)]
        projects = tuple(dict.fromkeys([*own, *granted]))
        return ResourceProjects(self.id, projects, bool(self.project_rules))

    def project_grants_of(self, claims: Mapping[str, Any]) -> list[tuple[str, str]]:
        """Each project `project_rules` grant for `claims` and the rule that granted it,
        for people reading the profile (`profile check --identity`)."""
        found = project_grants(self.project_rules, claims)
        return [(project, self.project_rules[index].described(index)) for project, index in found]


class FacilityProfile(_Strict):
    """A facility profile file: the facility and its resources."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "iri-gateway facility profile",
        },
    )

    facility: FacilityInfo = Field(description="The facility")
    resources: list[Resource] = Field(min_length=1, description="Its compute resources")
    templates: dict[TemplateName, Template] = Field(
        default_factory=dict,
        description="Job templates the facility ships (extension): name -> task or cluster "
        "template; every user sees them and may name them in a job's `template`; read-only "
        "through the API. A cluster template's roles name task templates of this profile.",
    )

    @model_validator(mode="after")
    def _unique_resources(self) -> FacilityProfile:
        ids = [r.id for r in self.resources]
        duplicates = sorted({i for i in ids if ids.count(i) > 1})
        if duplicates:
            raise ValueError(f"resource ids repeat: {', '.join(duplicates)}")
        return self

    @field_validator("templates")
    @classmethod
    def _templates_complete(cls, templates: dict[str, Template]) -> dict[str, Template]:
        tasks = sorted(name for name, t in templates.items() if isinstance(t, TaskTemplate))
        for name, template in templates.items():
            if not isinstance(template, ClusterTemplate):
                continue
            for role in template.roles:
                if role.task not in tasks:
                    raise ValueError(
                        f"{name}: role {role.name!r} names task template {role.task!r}, "
                        "which this profile does not define (its task templates: "
                        f"{', '.join(tasks) or 'none'})"
                    )
        return templates


def device_offered(device: str, offered: list[str]) -> bool:
    """True when CDI `device` is one of `offered` (a trailing '*' matches any suffix)."""
    for pattern in offered:
        if pattern.endswith("*"):
            if device.startswith(pattern[:-1]):
                return True
        elif device == pattern:
            return True
    return False
