"""Expanding a job that names a template into the plain JobSpec that is planned (pure, no I/O).

The engine expands before anything else sees the job, so the dry run, the rendered script
and the submission all see the same expanded job; the plan names the template.

Precedence, field by field, as the Backend.AI proposal has it: **image < template < job**.
A field the job sets wins over the template's; a field neither sets is the image's own
(entrypoint, environment, working directory). In detail:

- `image`, `executable`, each field of `resources`: the job's when set, else the template's;
- `arguments` belong to their program: a job that sets `executable` runs it with its own
  `arguments` (none when it gives none); a job that sets only `arguments` runs the template's
  executable with them;
- `environment`: the template's variables, then the job's (a job's variable of the same name
  wins); `volume_mounts`: the template's, then the job's (a job's mount of the same target
  wins); `ports` (a task template used by a job without roles): the template's, then the
  job's (a job's port of the same name wins);
- in a cluster template each role's values are its task template's; the job's top-level
  fields win over them and the job's role entry (`roles: [{name, count, ...}]`) over both;
- `bootstrap`: the member runs `/bin/sh -c BOOTSTRAP` with its program as the shell's
  arguments, and the shell then `exec`s the program: the script is one argv element and the
  program's name and arguments stay argv elements, never pasted into shell text.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from iri_gateway.errors import GatewayError, InvalidJobSpecError, Problem, json_path
from iri_gateway.models.job_templates import ClusterTemplate, TaskTemplate, Template
from iri_gateway.models.jobspec import JobSpec, Role
from iri_gateway.models.loaded_resource import LoadedResource
from iri_gateway.models.plan import Plan

BOOTSTRAP_SHELL = "/bin/sh"
BOOTSTRAP_EXEC = '\nexec "$0" "$@"'
"""Appended to a bootstrap script: the shell becomes the program ($0 and its arguments)."""


@dataclass(frozen=True)
class Expanded:
    """A job as it is planned, and the template it was built from (None: it named none)."""

    spec: JobSpec
    template: str | None


def closest(name: str, known: Sequence[str]) -> str:
    """What to offer instead of an unknown `name`: the closest known names, else all of them."""
    if not known:
        return "none defined"
    near = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
    if near:
        return "closest: " + ", ".join(near)
    shown = sorted(known)
    more = f", ... ({len(shown)} in all)" if len(shown) > 10 else ""
    return "known: " + ", ".join(shown[:10]) + more


def expand(spec: JobSpec, templates: Mapping[str, Template]) -> Expanded:
    """`spec` with its template applied; `spec` itself when it names none.

    `templates`: every template the job's owner may use, by name. InvalidJobSpecError (422)
    with every problem: an unknown template (the closest names offered), a role the template
    does not have, a count outside the role's min..max, a bootstrap with no program to run.
    """
    if spec.template is None:
        return Expanded(spec, None)
    template = templates.get(spec.template)
    if template is None:
        raise InvalidJobSpecError(
            [
                Problem(
                    "template",
                    f"no template named {spec.template!r}",
                    closest(spec.template, list(templates)),
                )
            ]
        )
    document = spec.model_dump(mode="json", exclude_unset=True)
    document.pop("template")
    if isinstance(template, TaskTemplate):
        if spec.roles:
            raise InvalidJobSpecError(
                [
                    Problem(
                        "roles",
                        f"template {spec.template!r} is a task template (one kind of "
                        "process); a job of several roles uses a cluster template",
                    )
                ]
            )
        _apply_task(document, template, spec, where="")
    else:
        document["roles"] = _cluster_roles(spec, spec.template, template, templates)
    try:
        expanded = JobSpec.model_validate(document)
    except ValidationError as error:
        raise InvalidJobSpecError(
            [
                Problem(
                    json_path(item["loc"]) or "(job)",
                    f"{item['msg']} (in the job built from template {spec.template!r})",
                )
                for item in error.errors()
            ]
        ) from None
    return Expanded(expanded, spec.template)


def with_template(plan: Plan, template: str | None) -> Plan:
    """The plan of an expanded job, saying which template it was built from."""
    return plan if template is None else plan.model_copy(update={"template": template})


@dataclass(frozen=True)
class FacilityTemplate:
    """A template shipped in a profile, and the facility whose profile it is."""

    facility: str
    template: Template


def facility_templates(resources: Iterable[LoadedResource]) -> dict[str, FacilityTemplate]:
    """The templates the loaded profiles ship, by name. Two facilities shipping one name is
    a GatewayError at start-up (a job's `template` must mean one thing)."""
    found: dict[str, FacilityTemplate] = {}
    seen: set[str] = set()
    for loaded in resources:
        facility = loaded.profile.facility.id
        if facility in seen:
            continue
        seen.add(facility)
        for name, template in loaded.profile.templates.items():
            earlier = found.get(name)
            if earlier is not None and earlier.facility != facility:
                raise GatewayError(
                    f"job template {name!r} is shipped by the profiles of both "
                    f"{earlier.facility!r} and {facility!r}; rename one of them"
                )
            found[name] = FacilityTemplate(facility, template)
    return found


def shipped_templates(resources: Iterable[LoadedResource]) -> dict[str, Template]:
    """The profiles' templates by name, for expanding without a store (the offline CLI)."""
    return {name: entry.template for name, entry in facility_templates(resources).items()}


# ---- task templates ---------------------------------------------------------------------


def _set_program(
    target: dict[str, Any],
    task: TaskTemplate,
    layers: list[tuple[str | None, list[str] | None]],
    *,
    where: str,
) -> None:
    """The program of `layers` (later wins), run behind the task's bootstrap if it has one,
    written into `target` (a job's or a role's JSON) unless no layer names one."""
    executable, arguments = _program(layers)
    if task.bootstrap is not None:
        executable, arguments = _bootstrapped(
            task.bootstrap, executable, arguments, field=f"{where}executable"
        )
    if executable is not None:
        target["executable"] = executable
        target["arguments"] = arguments


def _apply_task(document: dict[str, Any], task: TaskTemplate, spec: JobSpec, *, where: str) -> None:
    """Fill `document` (a job's JSON) with `task`'s fields where the job leaves them out."""
    _set_program(
        document,
        task,
        [
            (task.executable, task.arguments),
            (spec.executable, spec.arguments if "arguments" in spec.model_fields_set else None),
        ],
        where=where,
    )
    if task.environment:
        document["environment"] = {**task.environment, **spec.environment}
    if task.ports and not spec.roles:
        document["ports"] = {**task.ports, **(spec.ports or {})}
    resources = _resources([_set_fields(task.resources), _set_fields(spec.resources)])
    if resources:
        document["resources"] = resources
    if task.image is not None or task.volume_mounts:
        container = dict(document.get("container") or {})
        if container.get("image") is None and task.image is not None:
            container["image"] = task.image
        given = spec.container.volume_mounts if spec.container else []
        container["volume_mounts"] = _mounts(task.volume_mounts, given)
        document["container"] = container


# ---- cluster templates ------------------------------------------------------------------


def _cluster_roles(
    spec: JobSpec, name: str, template: ClusterTemplate, templates: Mapping[str, Template]
) -> list[dict[str, Any]]:
    """The job's roles: the template's, each with its count and its task's fields, with the
    job's top-level fields and role entries winning."""
    problems: list[Problem] = []
    chosen: dict[str, tuple[int, Role | None]] = {}
    by_name = {role.name: role for role in template.roles}
    for index, wanted in enumerate(spec.roles or []):
        allowed = by_name.get(wanted.name)
        if allowed is None:
            problems.append(
                Problem(
                    f"roles[{index}].name",
                    f"template {name!r} has no role {wanted.name!r}",
                    closest(wanted.name, list(by_name)),
                )
            )
            continue
        if not allowed.min <= wanted.count <= allowed.maximum:
            problems.append(
                Problem(
                    f"roles[{index}].count",
                    f"role {wanted.name!r} of template {name!r} takes {allowed.min} to "
                    f"{allowed.maximum} members; {wanted.count} asked for",
                    f"{allowed.min}..{allowed.maximum}",
                )
            )
            continue
        chosen[wanted.name] = (index, wanted)
    roles: list[dict[str, Any]] = []
    for limits in template.roles:
        task = templates.get(limits.task)
        if not isinstance(task, TaskTemplate):
            reason = (
                f"is a {task.kind} template, not a task template"
                if task is not None
                else "does not exist (any more)"
            )
            problems.append(
                Problem(
                    "template",
                    f"role {limits.name!r} of template {name!r} names task template "
                    f"{limits.task!r}, which {reason}",
                    closest(
                        limits.task,
                        [n for n, t in templates.items() if isinstance(t, TaskTemplate)],
                    ),
                )
            )
            continue
        index, entry = chosen.get(limits.name, (-1, None))
        where = f"roles[{index}]." if index >= 0 else "template."
        try:
            roles.append(
                _role(
                    spec,
                    task,
                    limits.name,
                    entry.count if entry is not None else limits.default_count,
                    entry,
                    where=where,
                )
            )
        except InvalidJobSpecError as error:
            problems.extend(error.problems)
    if problems:
        raise InvalidJobSpecError(problems)
    return roles


def _role(
    spec: JobSpec, task: TaskTemplate, name: str, count: int, role: Role | None, *, where: str
) -> dict[str, Any]:
    """One role of the job: task < job top level < job's role entry."""
    entry: dict[str, Any] = (
        role.model_dump(mode="json", exclude_unset=True) if role is not None else {"name": name}
    )
    entry["count"] = count
    layers: list[tuple[str | None, list[str] | None]] = [
        (task.executable, task.arguments),
        (spec.executable, spec.arguments if "arguments" in spec.model_fields_set else None),
    ]
    if role is not None:
        layers.append((role.executable, role.arguments))
    _set_program(entry, task, layers, where=where)
    # The role's values win over the job's top level, so the task's values that the job
    # sets at its top level are left out: the job's then apply.
    environment = {
        key: value for key, value in task.environment.items() if key not in spec.environment
    }
    environment.update(role.environment if role is not None else {})
    if environment:
        entry["environment"] = environment
    top = _set_fields(spec.resources)
    resources = _resources(
        [
            {key: value for key, value in _set_fields(task.resources).items() if key not in top},
            _set_fields(role.resources if role is not None else None),
        ]
    )
    if resources:
        entry["resources"] = resources
    container: dict[str, Any] = dict(entry.get("container") or {})
    top_image = spec.container.image if spec.container else None
    if container.get("image") is None and top_image is None and task.image is not None:
        container["image"] = task.image
    top_targets = {
        mount.target for mount in (spec.container.volume_mounts if spec.container else [])
    }
    own = role.container.volume_mounts if role is not None and role.container else []
    mounts = _mounts([m for m in task.volume_mounts if m.target not in top_targets], own)
    if mounts:
        container["volume_mounts"] = mounts
    if container:
        entry["container"] = container
    return entry


# ---- one field at a time ----------------------------------------------------------------


def _program(layers: Sequence[tuple[str | None, list[str] | None]]) -> tuple[str | None, list[str]]:
    """The executable and its arguments, later layers winning: a layer that sets the
    executable brings its own arguments (none when it gives none); a layer that sets only
    arguments keeps the executable before it."""
    executable: str | None = None
    arguments: list[str] = []
    for layer_executable, layer_arguments in layers:
        if layer_executable is not None:
            executable, arguments = layer_executable, list(layer_arguments or [])
        elif layer_arguments is not None:
            arguments = list(layer_arguments)
    return executable, arguments


def _bootstrapped(
    bootstrap: str, executable: str | None, arguments: list[str], *, field: str
) -> tuple[str, list[str]]:
    """`/bin/sh -c 'BOOTSTRAP; exec "$0" "$@"' EXECUTABLE ARGUMENTS...`: argv, never text."""
    if executable is None:
        raise InvalidJobSpecError(
            [
                Problem(
                    field,
                    "the template has a bootstrap script, which runs before the program, but "
                    "neither the template nor the job names the program (executable); the image's "
                    "entrypoint cannot be known here",
                    "set executable in the job or the template",
                )
            ]
        )
    return BOOTSTRAP_SHELL, ["-c", bootstrap.rstrip("\n") + BOOTSTRAP_EXEC, executable, *arguments]


def _set_fields(model: Any) -> dict[str, Any]:
    if model is None:
        return {}
    dumped: dict[str, Any] = model.model_dump(mode="json", exclude_unset=True)
    return dumped


def _resources(layers: Sequence[dict[str, Any]]) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for layer in layers:
        merged.update(layer)
    return merged


def _mounts(first: Sequence[Any], then: Sequence[Any]) -> list[dict[str, Any]]:
    """Mounts of `first`, then `then`'s; a later mount of the same target replaces one."""
    by_target: dict[str, dict[str, Any]] = {}
    for mount in [*first, *then]:
        by_target[mount.target] = mount.model_dump(
            mode="json", exclude_unset=False, exclude_none=True
        )
    return list(by_target.values())
