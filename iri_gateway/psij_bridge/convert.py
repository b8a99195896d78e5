"""PSI/J job specifications <-> IRI JobSpec documents (pure functions, no I/O).

The IRI JobSpec uses PSI/J's field names, so most fields map one to one. Where they differ:

- `pre_launch`/`post_launch`: PSI/J takes the *path* of a script it sources; IRI takes shell
  commands. A path P becomes `source P` (P shell-quoted, a relative P written `./P` so bash
  does not search `$PATH` for it), and only a command of exactly that form comes back as a
  path; any other command is refused by `from_iri`, since dropping it would change the job.
- `attributes.duration`: a timedelta <-> whole seconds (a partial second rounds up, so the
  job never gets less time than asked for). PSI/J defaults it to 10 minutes, so a PSI/J job
  always carries a duration, and an IRI document without one comes back with 600 s.
- `attributes.project_name`: PSI/J's deprecated alias of `account` (the same storage), so it
  reaches IRI `attributes.account`.
- Custom attributes `iri.container.<field>` become the IRI `container` (value as that field
  takes it), `iri.roles` the IRI `roles`; any other `iri.` key is refused (a typo would
  otherwise vanish); every other key passes on as an IRI custom attribute, its value str()'d.
- Paths pass through pathlib (that is what PSI/J stores), so they come back normalised
  (`a//b/` -> `a/b`).

`to_iri` validates what it builds with the gateway's own JobSpec model; every refusal, in both
directions, is a ValueError naming the field. Metadata objects (`attributes` of an IRI
resources or job attributes object) have no PSI/J place and are dropped with a logged warning.
"""

from __future__ import annotations

import logging
import re
import shlex
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

from psij import JobAttributes, JobSpec, ResourceSpecV1
from psij.exceptions import InvalidJobException

from iri_gateway.errors import InvalidJobSpecError
from iri_gateway.models import jobspec as iri
from iri_gateway.planning.jobspec_io import parse_jobspec

logger = logging.getLogger(__name__)

IRI_PREFIX = "iri."
CONTAINER_PREFIX = "iri.container."
ROLES_KEY = "iri.roles"
RESOURCE_COUNTS = (
    "node_count",
    "process_count",
    "processes_per_node",
    "cpu_cores_per_process",
    "gpu_cores_per_process",
    "memory",
)
SECOND = timedelta(seconds=1)
PSIJ_DEFAULT_DURATION = int(JobAttributes().duration // SECOND)
"""What an IRI document without a duration gets back from a round trip through PSI/J."""


class ConversionError(ValueError):
    """A field cannot be converted; `problems` are (field path, reason) pairs, all of them."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = problems
        super().__init__("; ".join(f"{field}: {reason}" for field, reason in problems))


# ---- PSI/J -> IRI ---------------------------------------------------------------------------


def to_iri(spec: JobSpec) -> dict[str, Any]:
    """The IRI JobSpec document for a PSI/J job; ConversionError when there is none."""
    document: dict[str, Any] = {}
    # `spec.name` falls back to the executable; only a name the user set is sent.
    _put(document, "name", spec._name)
    _put(document, "executable", spec.executable)
    if spec.arguments is not None:
        document["arguments"] = list(spec.arguments)
    _put(document, "directory", _path_text(spec.directory))
    document["inherit_environment"] = spec.inherit_environment
    if spec.environment is not None:
        document["environment"] = dict(spec.environment)
    _put(document, "stdin_path", _path_text(spec.stdin_path))
    _put(document, "stdout_path", _path_text(spec.stdout_path))
    _put(document, "stderr_path", _path_text(spec.stderr_path))
    _put(document, "pre_launch", source_command(spec.pre_launch))
    _put(document, "post_launch", source_command(spec.post_launch))
    _put(document, "launcher", spec.launcher)
    problems: list[tuple[str, str]] = []
    if spec.resources is not None:
        if isinstance(spec.resources, ResourceSpecV1):
            document["resources"] = _resources_to_iri(spec.resources)
        else:
            problems.append(
                (
                    "resources",
                    f"only ResourceSpecV1 has an IRI equivalent, not "
                    f"version {spec.resources.version}",
                )
            )
    if spec.attributes is not None:
        _attributes_to_iri(spec.attributes, document, problems)
    if problems:
        raise ConversionError(problems)
    _check(document)
    return document


def source_command(path: Path | None) -> str | None:
    """The shell command that sources the script at `path`, as PSI/J's launchers do."""
    if path is None:
        return None
    text = path.as_posix()
    if not path.is_absolute():
        text = "./" + text
    return f"source {shlex.quote(text)}"


def _put(document: dict[str, Any], key: str, value: object) -> None:
    if value is not None:
        document[key] = value


def _path_text(path: Path | None) -> str | None:
    return None if path is None else path.as_posix()


def _resources_to_iri(resources: ResourceSpecV1) -> dict[str, Any]:
    # PSI/J's default is shared nodes, IRI's exclusive ones: always say which.
    document: dict[str, Any] = {"exclusive_node_use": resources.exclusive_node_use}
    for key in RESOURCE_COUNTS:
        _put(document, key, getattr(resources, key))
    return document


def _attributes_to_iri(
    attributes: JobAttributes, document: dict[str, Any], problems: list[tuple[str, str]]
) -> None:
    out: dict[str, Any] = {}
    if attributes.duration is not None:
        seconds = -(-attributes.duration // SECOND)  # round a partial second up
        if seconds <= 0:
            problems.append(("attributes.duration", f"must be positive, not {seconds} s"))
        out["duration"] = seconds
    _put(out, "queue_name", attributes.queue_name)
    _put(out, "account", attributes.account)
    _put(out, "reservation_id", attributes.reservation_id)
    given = attributes.custom_attributes
    if given is not None:
        custom: dict[str, str] = {}
        container: dict[str, Any] = {}
        for key, value in given.items():
            where = f"attributes.custom_attributes[{key!r}]"
            if key.startswith(CONTAINER_PREFIX) and len(key) > len(CONTAINER_PREFIX):
                container[key.removeprefix(CONTAINER_PREFIX)] = value
            elif key == ROLES_KEY:
                document["roles"] = value
            elif key.startswith(IRI_PREFIX):
                problems.append(
                    (where, "unknown 'iri.' key; known: iri.container.<field>, iri.roles")
                )
            else:
                custom[key] = str(value)
        if container:
            document["container"] = container
        if custom or not given:
            out["custom_attributes"] = custom
    if out:
        document["attributes"] = out


def _check(document: dict[str, Any]) -> None:
    """Refuse what the gateway would refuse as a document, naming the PSI/J field."""
    try:
        parse_jobspec(document)
    except InvalidJobSpecError as error:
        raise ConversionError([(_psij_name(p.field), p.reason) for p in error.problems]) from None


def _psij_name(path: str) -> str:
    """An IRI field path, with the custom attribute it came from when it came from one."""
    head = re.split(r"[.\[]", path, maxsplit=1)[0]
    if head == "container":
        rest = path.removeprefix("container").lstrip(".")
        source = CONTAINER_PREFIX + (re.split(r"[.\[]", rest, maxsplit=1)[0] or "*")
    elif head == "roles":
        source = ROLES_KEY
    else:
        return path
    return f"{path} (custom attribute {source!r})"


# ---- IRI -> PSI/J ---------------------------------------------------------------------------


def from_iri(document: Mapping[str, Any]) -> JobSpec:
    """The PSI/J job for an IRI JobSpec document; ConversionError when there is none."""
    try:
        model = parse_jobspec(dict(document))
    except InvalidJobSpecError as error:
        raise ConversionError([(p.field, p.reason) for p in error.problems]) from None
    given = model.model_fields_set
    problems: list[tuple[str, str]] = []
    spec = JobSpec(
        name=model.name,
        executable=model.executable,
        arguments=list(model.arguments) if "arguments" in given else None,
        directory=model.directory,
        inherit_environment=model.inherit_environment,
        environment=dict(model.environment) if "environment" in given else None,
        stdin_path=model.stdin_path,
        stdout_path=model.stdout_path,
        stderr_path=model.stderr_path,
        pre_launch=_sourced_path("pre_launch", model.pre_launch, problems),
        post_launch=_sourced_path("post_launch", model.post_launch, problems),
        launcher=model.launcher,
    )
    if model.resources is not None:
        spec.resources = _resources_from_iri(model.resources, problems)
    spec.attributes = _attributes_from_iri(model, problems)
    if problems:
        raise ConversionError(problems)
    return spec


def _sourced_path(field: str, command: str | None, problems: list[tuple[str, str]]) -> Path | None:
    """The script path of a `source P` command written as `source_command` writes it."""
    if command is None:
        return None
    try:
        words = shlex.split(command)
    except ValueError:
        words = []
    if len(words) == 2 and words[0] == "source":
        path = Path(words[1])
        if source_command(path) == command:
            return path
    problems.append(
        (
            field,
            "PSI/J takes the path of a script to source; only a command "
            "`source /abs/path` or `source ./rel/path` (shell-quoted) converts",
        )
    )
    return None


def _resources_from_iri(
    resources: iri.ResourceSpec, problems: list[tuple[str, str]]
) -> ResourceSpecV1 | None:
    _refuse_extra("resources", resources, problems)
    try:
        return ResourceSpecV1(
            exclusive_node_use=resources.exclusive_node_use,
            **{key: getattr(resources, key) for key in RESOURCE_COUNTS},
        )
    except InvalidJobException as error:
        problems.append(("resources", error.message))
        return None


def _attributes_from_iri(model: iri.JobSpec, problems: list[tuple[str, str]]) -> JobAttributes:
    result = JobAttributes()
    custom: dict[str, object] | None = None
    source = model.attributes
    if source is not None:
        _refuse_extra("attributes", source, problems)
        if source.duration is not None:
            try:
                result.duration = timedelta(seconds=source.duration)
            except OverflowError:
                problems.append(("attributes.duration", "too long for a timedelta"))
        result.queue_name = source.queue_name
        result.account = source.account
        result.reservation_id = source.reservation_id
        if "custom_attributes" in source.model_fields_set:
            custom = dict(source.custom_attributes)
        for key in source.custom_attributes:
            if key.startswith(IRI_PREFIX):
                problems.append(
                    (
                        f"attributes.custom_attributes[{key!r}]",
                        "'iri.' keys are reserved for IRI fields PSI/J lacks",
                    )
                )
    if model.container is not None:
        custom = custom or {}
        dumped = model.container.model_dump(mode="json", exclude_unset=True)
        custom.update({CONTAINER_PREFIX + key: value for key, value in dumped.items()})
    if model.roles is not None:
        custom = custom or {}
        custom[ROLES_KEY] = [
            role.model_dump(mode="json", exclude_unset=True) for role in model.roles
        ]
    result.custom_attributes = custom
    return result


def _refuse_extra(
    path: str, part: iri.ResourceSpec | iri.JobAttributes, problems: list[tuple[str, str]]
) -> None:
    """Fields beyond the official ones have no PSI/J place: refused; metadata is dropped."""
    for key in part.model_extra or {}:
        problems.append((f"{path}.{key}", "not an official IRI field; PSI/J has no place for it"))
    if part.attributes is not None:
        logger.warning("%s.attributes (metadata) has no PSI/J equivalent; dropped", path)
