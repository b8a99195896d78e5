"""The IRI Facility API v2 JobSpec, exactly as the official spec defines it, plus our extensions.

Any JobSpec that validates against the official schema validates here unchanged: the official
objects that allow extra properties (`Container`, `ResourceSpec`, `JobAttributes`,
`VolumeMount`) allow them here too, and `JobSpec` itself forbids them, as the spec does.
Validation is strict, like the JSON Schema: "2" is not a node count.
Our extensions live inside `container` (where the official schema allows extra fields), plus
the top-level `roles`, `template`, `cluster_lifecycle`, `ports` and `notify`; all are
optional; see docs/design.md, Contract 1.
Every string, list and mapping has a size limit, and every string must be valid Unicode
(`iri_gateway.models.limits`): a document over a limit is refused with the field named.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from iri_gateway.models import job_arrays
from iri_gateway.models.constraints import (
    ConstraintError,
    RequirementValue,
    parse_requirements,
    requirements_mapping,
)
from iri_gateway.models.job_template_names import TemplateName
from iri_gateway.models.limits import (
    MAX_ARGUMENT_LENGTH,
    MAX_ARGUMENTS,
    MAX_ENV_VALUE_LENGTH,
    MAX_ENVIRONMENT,
    MAX_ITEMS,
    MAX_NAME_LENGTH,
    MAX_SCRIPT_LENGTH,
    MAX_TEXT_LENGTH,
    Arguments,
    CustomAttributes,
    Environment,
    ExtraOptions,
    NonEmptyText,
    NonEmptyTextList,
    ShellText,
    checked_keys,
    first_surrogate,
    shown,
    surrogate_reason,
    unicode_text,
)
from iri_gateway.models.platforms import PlatformError, parse_platform, platform_pattern
from iri_gateway.models.runtime_names import RuntimeName
from iri_gateway.models.webhooks import Notify

NonEmptyStr = NonEmptyText
"""A non-empty string of at most MAX_TEXT_LENGTH characters, valid Unicode."""
_ARGUMENTS = f"at most {MAX_ARGUMENTS} arguments of at most {MAX_ARGUMENT_LENGTH} characters each"
_ENVIRONMENT = (
    f"at most {MAX_ENVIRONMENT} variables, names of at most {MAX_NAME_LENGTH} "
    f"and values of at most {MAX_ENV_VALUE_LENGTH} characters"
)


def whole_number(value: Any) -> Any:
    """JSON Schema counts 2.0 and 1.6e10 as integers; so do we (strings and bools stay errors)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


JsonInt = Annotated[int, BeforeValidator(whole_number)]
"""An integer as JSON Schema defines it: 2 and 2.0 both are; "2" and true are not."""
PositiveInt = Annotated[int, Field(ge=1), BeforeValidator(whole_number)]
"""A JsonInt of at least 1. Bounds sit on the `int`, inside the conversion: bounds put on
JsonInt itself (`Annotated[JsonInt, Field(ge=1)]`) reach the JSON Schema as pydantic's own
`ge`, which no JSON Schema validator reads, instead of `minimum` (the console checks JobSpecs
against that schema)."""

MPI_LAUNCHERS = frozenset({"srun", "mpirun", "mpiexec"})

CONTAINER_ALIASES = {"network_mode": "network"}
"""Names from the IRI container discussion accepted for `Container` fields: alias -> field."""
JOB_ALIASES = {"container_runtime": "container"}
"""Names from the IRI container discussion accepted for `JobSpec` fields: alias -> field."""


def one_name_each(data: Any, aliases: dict[str, str]) -> Any:
    """A field given under its name and its alias at once is ambiguous: refuse it, naming both,
    rather than let one silently win."""
    if isinstance(data, dict):
        for alias, name in aliases.items():
            if alias in data and name in data:
                raise ValueError(
                    f"{name!r} and {alias!r} are the same field ({alias!r} is an alias); "
                    "give one of them"
                )
    return data


_ATTRIBUTES_DESCRIPTION = (
    "Optional, type-specific metadata for this object (official IRI `attributes` field)."
)


class _Unicode(BaseModel):
    """Checks the parts of an object no field type checks: the keys of extra fields, and in
    objects that allow them, the extra fields and `attributes` (free-form JSON), which must
    be valid Unicode like every other string."""

    @model_validator(mode="before")
    @classmethod
    def _free_form_is_unicode(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        open_object = cls.model_config.get("extra") == "allow"
        for key, value in data.items():
            if not isinstance(key, str):
                continue
            if (reason := surrogate_reason(key)) is not None:
                raise ValueError(f"key {shown(key)}: {reason}")
            if open_object and (key == "attributes" or key not in cls.model_fields):
                found = first_surrogate(value, key)
                if found is not None:
                    raise ValueError(f"{found[0]}: {found[1]}")
        return data


class _Open(_Unicode):
    """Official objects that allow additional properties."""

    model_config = ConfigDict(extra="allow", strict=True)

    attributes: dict[str, Any] | None = Field(default=None, description=_ATTRIBUTES_DESCRIPTION)


class VolumeMount(_Open):
    """A host path made visible inside the container (official `VolumeMount`)."""

    source: NonEmptyStr = Field(description="The source path on the host system to mount")
    target: NonEmptyStr = Field(
        description="The target path inside the container where the volume will be mounted"
    )
    read_only: bool = Field(default=True, description="Whether the mount should be read-only")


def _valid_requirements(
    requirements: dict[str, RequirementValue],
) -> dict[str, RequirementValue]:
    for fact, value in requirements.items():
        if isinstance(value, str):
            if (reason := surrogate_reason(value)) is not None:
                raise ValueError(f"{fact}: {reason}")
            if len(value) > MAX_TEXT_LENGTH:
                raise ValueError(f"{fact}: {len(value)} characters; at most {MAX_TEXT_LENGTH}")
    reasons = []
    for fact, value in requirements.items():  # every malformed constraint, not the first
        try:
            parse_requirements({fact: value})
        except ConstraintError as error:
            reasons.append(str(error))
    if reasons:
        raise ValueError("; ".join(reasons))
    return requirements


_CONSTRAINT_SCHEMA: dict[str, Any] = {
    "anyOf": [
        {"type": "string", "maxLength": MAX_TEXT_LENGTH},
        {"type": "number"},
        {"type": "boolean"},
    ],
}
_FACTS_SCHEMA: dict[str, Any] = {
    "type": "object",
    # A fact name: not empty, no surrounding spaces (`constraints._parse_cached`).
    "propertyNames": {"maxLength": MAX_NAME_LENGTH, "pattern": r"^\S(.*\S)?$"},
    "additionalProperties": _CONSTRAINT_SCHEMA,
}
REQUIREMENTS_SCHEMA: dict[str, Any] = {
    "anyOf": [
        {**_FACTS_SCHEMA, "maxProperties": MAX_ITEMS},
        {
            "type": "array",
            "maxItems": MAX_ITEMS,
            "items": {**_FACTS_SCHEMA, "minProperties": 1, "maxProperties": 1},
        },
    ]
}
"""Both shapes `requirements_mapping` accepts, as JSON Schema: pydantic would describe only
the mapping it stores, and the console's schema check would refuse the list form the
gateway takes."""

Requirements = Annotated[
    dict[str, RequirementValue],
    Field(max_length=MAX_ITEMS),
    WithJsonSchema(REQUIREMENTS_SCHEMA),
    BeforeValidator(checked_keys(MAX_ITEMS, MAX_NAME_LENGTH, "fact")),
    BeforeValidator(requirements_mapping),  # runs first: before-validators run right to left
    AfterValidator(_valid_requirements),
]
"""Fact -> constraint; a list of one-key mappings is accepted too and stored as a mapping."""

FLAVOUR_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"


def _valid_platform(platform: str) -> str:
    try:
        parse_platform(platform)
    except PlatformError as error:
        raise ValueError(str(error)) from None
    return platform


ImagePlatform = Annotated[
    # The pattern is published for clients (JSON Schema) but checked by `_valid_platform`,
    # whose refusal names the unknown OS or arch and the known ones; the pattern's own
    # message would only repeat the regular expression.
    str,
    Field(
        max_length=64,
        json_schema_extra={"pattern": platform_pattern()},
        examples=["linux/arm64", "linux/amd64"],
    ),
    BeforeValidator(unicode_text),
    AfterValidator(_valid_platform),
]
"""An OCI platform, `os/arch[/variant]`; kept as written, parsed by `models.platforms`."""


class Flavour(_Unicode):
    """Extension: one hardware-specific image of the job; the best one the resource runs wins."""

    model_config = ConfigDict(extra="forbid", strict=True)

    name: Annotated[
        str, Field(pattern=FLAVOUR_NAME, max_length=64), BeforeValidator(unicode_text)
    ] = Field(description="Flavour name, unique in the job (letters, digits, '.', '_', '-')")
    image: NonEmptyStr = Field(description="The image of this flavour")
    priority: JsonInt = Field(
        default=0, description="Higher wins among the flavours a resource can run"
    )
    requirements: Requirements = Field(
        default_factory=dict,
        description="Hardware fact -> constraint, e.g. {gpu_count: '>= 2', nvidia_cuda: '> 11'} "
        "(or a list of one-key mappings); every one must hold on the resource.",
    )
    runtime: RuntimeName | None = Field(
        default=None, description="Runtime for this flavour; default: container.runtime"
    )
    extra_options: ExtraOptions = Field(
        default_factory=dict,
        description="Options added to container.extra_options when this flavour is chosen",
    )
    platform: ImagePlatform | None = Field(
        default=None,
        description="The OCI platform of this flavour's image, e.g. 'linux/arm64': the "
        "flavour is chosen only on nodes of that architecture ('arm64' and 'aarch64', "
        "'amd64' and 'x86_64' are the same)",
    )
    resources: ResourceSpec | None = Field(
        default=None,
        description="Resource fields that replace the job's when this flavour is chosen, e.g. "
        "{gpu_cores_per_process: 1} for a GPU image; fields left out are the job's.",
    )
    launcher: NonEmptyStr | None = Field(
        default=None, description="Launcher that replaces the job's when this flavour is chosen"
    )


class AppRef(_Unicode):
    """Extension: the app and version a job's flavours come from (an imported app manifest)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    name: NonEmptyStr = Field(description="App name, e.g. 'segmentor'")
    version: NonEmptyStr | None = Field(default=None, description="App version, e.g. '0.4.3'")


class Container(_Open):
    """Official `Container` plus the gateway's optional extensions (docs/design.md Contract 1)."""

    image: NonEmptyStr | None = Field(
        default=None,
        description="The container image to use (e.g., 'docker.io/library/ubuntu:latest'); "
        "required unless `flavours` are given, and then the image used when no flavour fits.",
    )
    volume_mounts: Annotated[list[VolumeMount], Field(max_length=MAX_ITEMS)] = Field(
        default_factory=list, description="List of volume mounts for the container"
    )
    runtime: RuntimeName | None = Field(
        default=None,
        description="Extension: preferred container runtime; default: the resource's default.",
    )
    gpu: bool | None = Field(
        default=None,
        description="Extension: give the container the node's GPUs; default: true when "
        "resources.gpu_cores_per_process > 0.",
    )
    mpi: bool | None = Field(
        default=None,
        description="Extension: bind the site's MPI into the container; default: true when the "
        "launcher is an MPI launcher (srun, mpirun, mpiexec) with more than one process.",
    )
    devices: NonEmptyTextList = Field(
        default_factory=list,
        description="Extension: CDI device names, e.g. 'nvidia.com/gpu=all'.",
    )
    network: Literal["host", "none"] = Field(
        default="host",
        validation_alias=AliasChoices("network", "network_mode"),
        description="Extension: container network; 'host' (default) or 'none'. Also accepted "
        "as `network_mode` (the IRI container discussion's name); not both.",
    )
    workdir: NonEmptyStr | None = Field(
        default=None,
        description="Extension: working directory inside the container; default: `directory`.",
    )
    extra_options: ExtraOptions = Field(
        default_factory=dict,
        description="Extension: site-specific escape hatch, {runtime name: [option, ...]}; "
        "each option must match the resource's allow-list for that runtime.",
    )
    flavours: Annotated[list[Flavour], Field(max_length=MAX_ITEMS)] = Field(
        default_factory=list,
        description="Extension: alternative hardware-specific images; the gateway picks the "
        "highest-priority flavour whose requirements hold and whose job negotiates there.",
    )
    app: AppRef | None = Field(
        default=None,
        description="Extension: the app and version the image or flavours are of (set by "
        "`iri-gateway flavours import`); shown in the plan, placement and the job.",
    )

    @model_validator(mode="before")
    @classmethod
    def _aliases_once(cls, data: Any) -> Any:
        return one_name_each(data, CONTAINER_ALIASES)

    @model_validator(mode="after")
    def _image_or_flavours(self) -> Container:
        if self.image is None and not self.flavours:
            raise ValueError("image is required unless flavours are given")
        names = [flavour.name for flavour in self.flavours]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"flavour names must be unique; given twice: {', '.join(twice)}")
        return self


class ResourceSpec(_Open):
    """Official `ResourceSpec`: what the job asks of the machine."""

    node_count: PositiveInt | None = Field(default=None, description="Number of compute nodes")
    process_count: PositiveInt | None = Field(
        default=None, description="Total number of processes to launch"
    )
    processes_per_node: PositiveInt | None = Field(
        default=None, description="Number of processes to launch per node"
    )
    cpu_cores_per_process: PositiveInt | None = Field(
        default=None, description="Number of CPU cores to allocate per process"
    )
    gpu_cores_per_process: PositiveInt | None = Field(
        default=None, description="Number of GPU cores to allocate per process"
    )
    exclusive_node_use: bool = Field(
        default=True, description="Whether to request exclusive use of allocated nodes"
    )
    memory: PositiveInt | None = Field(
        default=None, description="Amount of memory to allocate per node, in bytes"
    )


class JobAttributes(_Open):
    """Official `JobAttributes`: scheduling parameters."""

    duration: PositiveInt | None = Field(default=None, description="Duration in seconds")
    queue_name: NonEmptyStr | None = Field(
        default=None, description="Name of the queue or partition to submit the job to"
    )
    account: NonEmptyStr | None = Field(
        default=None, description="Account or project to charge for resource usage"
    )
    reservation_id: NonEmptyStr | None = Field(
        default=None, description="ID of a reservation to use for the job"
    )
    custom_attributes: CustomAttributes = Field(
        default_factory=dict,
        description="Custom scheduler-specific attributes as key-value pairs; each key must be "
        f"on the resource's allow-list; at most {MAX_ITEMS} attributes, names of at most "
        f"{MAX_NAME_LENGTH} and values of at most {MAX_TEXT_LENGTH} characters.",
    )


ROLE_NAME = r"^[a-z](?:[a-z0-9-]*[a-z-])?$"
"""Role names become host names (`worker` + index: `worker3`), so: lower case, not ending in
a digit (`w1` + `1` would read like `w` + `11`)."""
MAX_ROLE_MEMBERS = 100_000
MemberCount = Annotated[int, Field(ge=1, le=MAX_ROLE_MEMBERS), BeforeValidator(whole_number)]
"""How many members a role has (bounds inside the conversion, as for PositiveInt)."""


def _role_name(name: str) -> str:
    if not re.fullmatch(ROLE_NAME, name):
        raise ValueError(
            f"{name!r}: role names are lower case letters, digits and '-', start with a letter "
            "and do not end in a digit (members are named worker1, worker2, ...)"
        )
    return name


PORT_NAME = r"^[a-z][a-z0-9_]{0,19}$"
"""Port names become variable names (`http` -> IRI_CLUSTER_PORT_HTTP): lower case letters,
digits and '_', starting with a letter."""
MAX_PORT = 65535
MAX_ROLE_PORTS = 16


def _port_name(name: str) -> str:
    if not re.fullmatch(PORT_NAME, name):
        raise ValueError(
            f"port name {name!r}: lower case letters, digits and '_', starting with a letter, "
            "at most 20 characters (it becomes IRI_CLUSTER_PORT_<NAME>)"
        )
    return name


PortName = Annotated[str, BeforeValidator(unicode_text), AfterValidator(_port_name)]
PortNumber = Annotated[int, Field(ge=1, le=MAX_PORT), BeforeValidator(whole_number)]
ServicePorts = Annotated[
    dict[PortName, PortNumber],
    Field(max_length=MAX_ROLE_PORTS, json_schema_extra={"propertyNames": {"pattern": PORT_NAME}}),
]
"""Named service ports, name -> port: a role's, a job's without roles, a task template's."""

ClusterLifecycle = Literal["primary_ends_all", "all_must_end", "first_failure_ends_all"]
"""When a cluster job ends (docs/jobspec.md, One life cycle)."""


class RoleContainer(_Open):
    """A role's own container settings; every field left out is the job's `container`'s."""

    image: NonEmptyStr | None = Field(default=None, description="The role's image")
    volume_mounts: Annotated[list[VolumeMount], Field(max_length=MAX_ITEMS)] = Field(
        default_factory=list, description="Mounts added to the job's (same target: the role's)"
    )
    runtime: RuntimeName | None = Field(default=None, description="The role's runtime")
    gpu: bool | None = Field(default=None, description="Give the members the node's GPUs")
    devices: NonEmptyTextList | None = Field(default=None, description="CDI device names")
    network: Literal["host", "none"] | None = Field(
        default=None,
        validation_alias=AliasChoices("network", "network_mode"),
        description="'host' or 'none'; members reach each other only with 'host'. Also "
        "accepted as `network_mode`; not both.",
    )

    @model_validator(mode="before")
    @classmethod
    def _aliases_once(cls, data: Any) -> Any:
        return one_name_each(data, CONTAINER_ALIASES)

    workdir: NonEmptyStr | None = Field(default=None, description="Working directory inside")
    extra_options: ExtraOptions = Field(
        default_factory=dict, description="Options added after the job's, per runtime"
    )
    flavours: Annotated[list[Flavour], Field(max_length=MAX_ITEMS)] | None = Field(
        default=None,
        description="The role's own image flavours, chosen per role; default: the job's "
        "container.flavours unless the role names an image",
    )

    @model_validator(mode="after")
    def _flavour_names_unique(self) -> RoleContainer:
        names = [flavour.name for flavour in self.flavours or []]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"flavour names must be unique; given twice: {', '.join(twice)}")
        return self


class Role(_Unicode):
    """Extension: one kind of member of a cluster job, e.g. 1 `master` and 12 `worker`.

    Top-level JobSpec fields are the defaults of every role; a role's own fields win
    (environment, mounts and extra options are merged, the role's entries last).
    """

    model_config = ConfigDict(extra="forbid", strict=True)

    name: Annotated[
        str, Field(max_length=40), BeforeValidator(unicode_text), AfterValidator(_role_name)
    ] = Field(
        description="Role name (lower case letters, digits, '-'; starts with a letter, does not "
        "end in a digit); members are named name1, name2, ... (no zero padding)",
        json_schema_extra={"pattern": ROLE_NAME},
    )
    count: MemberCount = Field(description="How many members this role has")
    executable: NonEmptyStr | None = Field(default=None, description="The members' program")
    arguments: Arguments | None = Field(
        default=None,
        description=f"Arguments; default: the job's when the executable is too; {_ARGUMENTS}",
    )
    container: RoleContainer | None = Field(default=None, description="Container overrides")
    environment: Environment = Field(
        default_factory=dict,
        description=f"Variables added to (and overriding) the job's; {_ENVIRONMENT}",
    )
    resources: ResourceSpec | None = Field(
        default=None,
        description="Per member: cpu_cores_per_process, gpu_cores_per_process; "
        "processes_per_node = members per node (default 1); memory per node. Fields left out "
        "are the job's.",
    )
    ports: ServicePorts = Field(
        default_factory=dict,
        description="Named service ports, name -> base port: member k of the role listens on "
        "base + k - 1, given to it as IRI_CLUSTER_PORT_<NAME>; every member sees all of them "
        "in IRI_CLUSTER_ENDPOINTS (name:member:port, comma-separated)",
    )

    @model_validator(mode="after")
    def _ports_in_range(self) -> Role:
        for name, base in self.ports.items():
            last = base + self.count - 1
            if last > MAX_PORT:
                raise ValueError(
                    f"role {self.name!r}: port {name!r} {base} with {self.count} members "
                    f"reaches {last} (member k listens on {base} + k - 1); ports end at "
                    f"{MAX_PORT}, so the base may be at most {MAX_PORT - self.count + 1}"
                )
        return self


def _alias_properties(schema: dict[str, Any]) -> None:
    """Each accepted alias is a property of the JSON Schema too (`container_runtime`): the
    JobSpec forbids unknown fields, so without it a JobSpec the gateway takes would fail its
    own schema (pydantic names only the first of a field's AliasChoices). Not both at once,
    as the gateway refuses that."""
    properties = schema["properties"]
    for alias, name in JOB_ALIASES.items():
        properties[alias] = {
            **properties[name],
            "title": alias.replace("_", " ").title(),
            "description": f"The same field as `{name}` (the IRI container discussion's "
            "name); give one of them, not both.",
        }
        schema.setdefault("allOf", []).append({"not": {"required": [name, alias]}})


class JobArray(_Unicode):
    """Extension: the job is an array of elements, one per index (`models.job_arrays`)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    indices: (
        Annotated[
            str,
            # The pattern is said in the schema and checked by `_indices_are_a_set`, which
            # names what is wrong (a `%` throttle, a range that ends before it begins).
            Field(
                min_length=1,
                max_length=job_arrays.MAX_TEXT,
                json_schema_extra={"pattern": job_arrays.TEXT_PATTERN},
            ),
        ]
        | Annotated[
            list[Annotated[int, Field(ge=0, le=job_arrays.MAX_INDEX)]],
            Field(
                min_length=1,
                max_length=job_arrays.MAX_LISTED,
                json_schema_extra={"uniqueItems": True},
            ),
        ]
    ) = Field(
        description="The elements' indices: Slurm's --array grammar without its throttle "
        '("0-999", "0-999:2", "1,5,10-20": ascending, apart) or a list of whole numbers; '
        f"each from 0 to {job_arrays.MAX_INDEX} (a site may allow less)",
    )
    max_concurrent: PositiveInt | None = Field(
        default=None,
        description="At most this many elements run at once (Slurm's %N, PBS's "
        "max_run_subjobs); default: as many as the scheduler starts",
    )

    @field_validator("indices")
    @classmethod
    def _indices_are_a_set(cls, indices: str | list[int]) -> str | list[int]:
        try:
            job_arrays.ArrayIndices.parse(indices)
        except job_arrays.ArrayIndicesError as error:
            raise ValueError(str(error)) from None
        return indices

    def elements(self) -> job_arrays.ArrayIndices:
        """The indices as a set (read again: a JobArray is small and read rarely)."""
        return job_arrays.ArrayIndices.parse(self.indices)


class JobSpec(_Unicode):
    """Official IRI v2 `JobSpec` (PSI/J field names) plus `roles`; other extra fields are
    refused. Strings, lists and mappings have size limits (`iri_gateway.models.limits`):
    MAX_TEXT_LENGTH characters and MAX_ITEMS entries unless a field says otherwise."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra=_alias_properties)

    attributes: JobAttributes | None = Field(
        default=None, description="Additional job attributes such as duration, queue, account"
    )
    executable: NonEmptyStr | None = Field(
        default=None,
        description="Path to the executable to run; with a container, the container's "
        "entrypoint is replaced by it.",
    )
    container: Container | None = Field(
        default=None,
        validation_alias=AliasChoices("container", "container_runtime"),
        description="Container specification for containerized execution. Also accepted as "
        "`container_runtime` (the IRI container discussion's name); not both.",
    )
    arguments: Arguments = Field(
        default_factory=list,
        description=f"Command-line arguments to pass to the executable; {_ARGUMENTS}",
    )
    directory: NonEmptyStr | None = Field(default=None, description="Working directory")
    name: NonEmptyStr | None = Field(default=None, description="Name of the job")
    inherit_environment: bool = Field(
        default=True,
        description="Whether to inherit the environment variables of the submission environment",
    )
    environment: Environment = Field(
        default_factory=dict,
        description="Environment variables for the job; set inside the container if any; "
        + _ENVIRONMENT,
    )
    stdin_path: NonEmptyStr | None = Field(default=None, description="Standard input file")
    stdout_path: NonEmptyStr | None = Field(default=None, description="Standard output file")
    stderr_path: NonEmptyStr | None = Field(default=None, description="Standard error file")
    resources: ResourceSpec | None = Field(default=None, description="Resource requirements")
    pre_launch: ShellText | None = Field(
        default=None,
        description="Shell commands run (evaluated as written) before the job is launched; "
        f"at most {MAX_SCRIPT_LENGTH} characters",
    )
    post_launch: ShellText | None = Field(
        default=None,
        description="Shell commands run (evaluated as written) after the job completes; "
        f"at most {MAX_SCRIPT_LENGTH} characters",
    )
    launcher: NonEmptyStr | None = Field(
        default=None, description="Job launcher to use (e.g., 'mpirun', 'srun')"
    )
    roles: Annotated[list[Role], Field(max_length=MAX_ITEMS)] | None = Field(
        default=None,
        min_length=1,
        description="Extension: a cluster job of several roles run as one scheduler job; "
        "members find each other by name (master1, worker1, ...). Top-level fields are the "
        "defaults of every role.",
    )
    template: TemplateName | None = Field(
        default=None,
        description="Extension: the name of a job template (yours or your facility's) the "
        "job is built on: its fields are the defaults of the job's (image < template < job); "
        "with a cluster template, `roles` choose each role's count (and may override its "
        "fields). See GET /api/v2/compute/templates.",
    )
    cluster_lifecycle: ClusterLifecycle | None = Field(
        default=None,
        description="Extension, jobs with roles only: when the cluster ends. "
        "'primary_ends_all' (default): when the primary member (first of the first role) ends, "
        "or any member fails, the others are stopped; 'first_failure_ends_all': every member "
        "runs to its own end unless one fails; 'all_must_end': every member runs to its own "
        "end, failures included",
    )
    ports: ServicePorts | None = Field(
        default=None,
        description="Extension, jobs without roles: named service ports, name -> port, that "
        "the job's program listens on (on the first node), given to it as IRI_PORT_<NAME>; "
        "the gateway's port proxy reaches them for you (getJob's meta_data `ports`, "
        "docs/rest-api.md, Service ports). A cluster job declares its ports per role.",
    )
    notify: Notify | None = Field(
        default=None,
        description="Extension: a webhook the gateway POSTs this job's state changes to "
        "(`url`, `events`: the states, default the final ones), signed with your notify "
        "secret (POST /api/v2/compute/notify-secret); see docs/rest-api.md, Webhooks",
    )
    array: JobArray | None = Field(
        default=None,
        description="Extension, jobs without roles: run the job once per index, as one "
        "scheduler array (Slurm --array, PBS -J); each element sees its index as "
        "IRI_ARRAY_INDEX, and %a in stdout_path/stderr_path becomes it. getJob shows the "
        "array's state and counts by state; GET .../elements lists the elements. See "
        "docs/jobspec.md, Arrays",
    )

    @model_validator(mode="before")
    @classmethod
    def _aliases_once(cls, data: Any) -> Any:
        return one_name_each(data, JOB_ALIASES)

    @model_validator(mode="after")
    def _role_names_unique(self) -> JobSpec:
        names = [role.name for role in self.roles or []]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"role names must be unique; given twice: {', '.join(twice)}")
        return self

    @model_validator(mode="after")
    def _arrays_of_plain_jobs(self) -> JobSpec:
        if self.array is not None and self.roles:
            raise ValueError(
                "array: a job with roles cannot be an array (its members already share one "
                "scheduler job); launch one cluster job per index instead, or leave out `array`"
            )
        return self

    @model_validator(mode="after")
    def _ports_of_plain_jobs(self) -> JobSpec:
        if self.ports and self.roles:
            raise ValueError(
                "ports: a job with roles declares its service ports per role (roles[].ports, "
                "member k of a role listens on base + k - 1); move them into its roles"
            )
        return self

    @field_validator("roles")
    @classmethod
    def _ports_apart(cls, roles: list[Role] | None) -> list[Role] | None:
        """No two members' ports may be equal: members of different roles may share a node."""
        ranges = sorted(
            (base, base + role.count - 1, role.name, name)
            for role in roles or []
            for name, base in role.ports.items()
        )
        widest: tuple[int, int, str, str] | None = None  # the range reaching highest so far
        for low, high, role, name in ranges:
            if widest is not None and low <= widest[1]:
                first, last, owner, owner_name = widest
                raise ValueError(
                    f"port {owner_name!r} of role {owner!r} takes {first}-{last} and port "
                    f"{name!r} of role {role!r} takes {low}-{high} (member k listens on base "
                    "+ k - 1); members may share a node, so no two ports may overlap"
                )
            if widest is None or high > widest[1]:
                widest = (low, high, role, name)
        return roles

    @field_validator("cluster_lifecycle")
    @classmethod
    def _lifecycle_needs_roles(
        cls, lifecycle: ClusterLifecycle | None, info: ValidationInfo
    ) -> ClusterLifecycle | None:
        """A cluster template brings its roles with it, so a job naming one may set the
        life cycle without listing roles (`template` is declared before this field)."""
        if (
            lifecycle is not None
            and not info.data.get("roles")
            and info.data.get("template") is None
        ):
            raise ValueError(
                "cluster_lifecycle applies to jobs with roles only; this job has "
                "none (leave it out, or add roles)"
            )
        return lifecycle


Flavour.model_rebuild()  # its `resources` is a ResourceSpec, defined after it
Container.model_rebuild()
RoleContainer.model_rebuild()
