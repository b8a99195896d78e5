"""App manifests of image flavours, converted to a JobSpec's `container.flavours` and `app`.

Labs publish one app version with several hardware-specific images in a deployment file. The
Arkitekt flavours proposal writes it as a list of apps, each with `app`, `version` and
`flavours`, where `flavours` is a list of one-key mappings (flavour name -> its properties)
and the properties are themselves a list of one-key mappings:

    - app: segmentor
      version: 0.4.3
      flavours:
        - cuda:
            - priority: 100
            - image: jhnnsrs/segmentor:0.4.3-cuda
            - requirements:
                - gpu_count: ">= 2"

The mapping form is read too: one app as a mapping (`app` or `name`, `version`, `flavours`
as a mapping of flavour names), or a bare mapping of flavour names. Every list of one-key
mappings may be a mapping and the other way round.

Every fault is collected, each at the line of the node at fault (a bad constraint at the
constraint's own line), so one run shows all of them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from iri_gateway.errors import ManifestError, ProfileIssue
from iri_gateway.models.constraints import ConstraintError, parse_constraint
from iri_gateway.models.jobspec import AppRef, Flavour
from iri_gateway.profiles.yaml_source import locate_line, read_yaml_document

_SHAPE = (
    "an app manifest is a list of apps {app, version, flavours}, or one such app as a "
    "mapping, or a mapping of flavour names to {priority, image, requirements}"
)
_FLAVOUR_KEYS = "image, priority, requirements, runtime, extra_options, resources, launcher"

Loc = tuple[Any, ...]


@dataclass(frozen=True)
class ImportedApp:
    """One app of a manifest: its name and version (when given) and its flavours in order."""

    app: AppRef | None
    flavours: list[Flavour]


class _Issues:
    """The faults found so far, each located in the YAML tree."""

    def __init__(self, path: Path, tree: Any) -> None:
        self.path, self.tree = path, tree
        self.found: list[ProfileIssue] = []

    def add(self, loc: Loc, field: str, reason: str) -> None:
        self.found.append(ProfileIssue(str(self.path), locate_line(self.tree, loc), field, reason))


def import_manifest(path: Path, app: str | None = None) -> ImportedApp:
    """The app `app` of the manifest at `path` (the only one when None); ManifestError lists
    every fault, or the apps to choose from when `app` is ambiguous or unknown."""
    tree = read_yaml_document(path, ManifestError)
    issues = _Issues(path, tree)
    apps = _apps(tree, issues)
    if issues.found:
        raise ManifestError(issues.found)
    loc, node, label = _choose(apps, app, path)
    flavours = _flavours(node, loc, label, issues)
    if issues.found:
        raise ManifestError(issues.found)
    return ImportedApp(_app_ref(node, loc, issues), flavours)


def _apps(tree: Any, issues: _Issues) -> list[tuple[Loc, Any, str]]:
    """Every app of the manifest: (where it is, its node, how errors name it)."""
    if isinstance(tree, list):
        apps = []
        for index, node in enumerate(tree):
            if not isinstance(node, dict) or "flavours" not in node:
                issues.add(
                    (index,), f"[{index}]", "an app is a mapping with app, version and flavours"
                )
                continue
            name = node.get("app", node.get("name"))
            apps.append(((index,), node, f"{name if name is not None else f'[{index}]'}"))
        if not tree:
            issues.add((), "", _SHAPE)
        return apps
    if isinstance(tree, dict) and tree:
        return [((), tree, "")]
    issues.add((), "", _SHAPE)
    return []


def _name_of(node: Any) -> str | None:
    name = node.get("app", node.get("name")) if "flavours" in node else None
    return None if name is None else str(name)


def _choose(
    apps: list[tuple[Loc, Any, str]], wanted: str | None, path: Path
) -> tuple[Loc, Any, str]:
    """The app named `wanted`, or the only one; else ManifestError naming the apps there are."""
    names = [_name_of(node) or label or "(unnamed)" for _, node, label in apps]
    if wanted is None and len(apps) == 1:
        return apps[0]
    listed = ", ".join(names)
    if wanted is None:
        reason = f"the manifest has {len(apps)} apps; choose one with --app: {listed}"
        raise ManifestError([ProfileIssue(str(path), 1, "", reason)])
    matches = [entry for entry, name in zip(apps, names, strict=True) if name == wanted]
    if len(matches) != 1:
        reason = (
            f"no app {wanted!r} in the manifest; its apps: {listed}"
            if not matches
            else f"{len(matches)} apps are named {wanted!r}"
        )
        raise ManifestError([ProfileIssue(str(path), 1, "", reason)])
    return matches[0]


def _app_ref(node: Any, loc: Loc, issues: _Issues) -> AppRef | None:
    name = _name_of(node)
    if name is None:
        return None
    version = node.get("version")
    try:
        return AppRef(name=name, version=None if version is None else str(version))
    except ValidationError as error:
        raise ManifestError(
            [
                ProfileIssue(
                    str(issues.path),
                    locate_line(issues.tree, loc),
                    "app",
                    str(error.errors()[0]["msg"]),
                )
            ]
        ) from None


def _entries(node: Any, loc: Loc) -> Iterator[tuple[str | None, Any, Loc]]:
    """A mapping's items, or a list of one-key mappings' items, each with its own location;
    (None, item, loc) for a list item that is not a one-key mapping."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield str(key), value, (*loc, key)
    elif isinstance(node, list):
        for index, item in enumerate(node):
            if isinstance(item, dict) and len(item) == 1:
                ((key, value),) = item.items()
                yield str(key), value, (*loc, index, key)
            else:
                yield None, item, (*loc, index)


def _flavours(app: Any, loc: Loc, label: str, issues: _Issues) -> list[Flavour]:
    """The app's flavours, validated one by one; faults go to `issues`."""
    where = (*loc, "flavours") if "flavours" in app else loc
    node = app.get("flavours", app)
    base = f"{label}.flavours" if label else "flavours"
    if not isinstance(node, dict | list) or not node:
        issues.add(
            where,
            base,
            "flavours are a mapping (or a list of one-key mappings) of "
            "flavour names to their properties",
        )
        return []
    flavours: list[Flavour] = []
    seen: set[str] = set()
    for name, entry, at in _entries(node, where):
        if name is None:
            issues.add(at, base, "each flavour is a one-key mapping: its name -> properties")
            continue
        field = f"{base}.{name}"
        if name in seen:
            issues.add(at, field, "flavour named twice")
            continue
        seen.add(name)
        flavour = _flavour(name, entry, at, field, issues)
        if flavour is not None:
            flavours.append(flavour)
    return flavours


def _flavour(name: str, entry: Any, loc: Loc, field: str, issues: _Issues) -> Flavour | None:
    if not isinstance(entry, dict | list):
        issues.add(
            loc, field, f"a flavour is a mapping (or a list of one-key mappings) of {_FLAVOUR_KEYS}"
        )
        return None
    before = len(issues.found)
    properties: dict[str, Any] = {}
    places: dict[str, Loc] = {}
    for key, value, at in _entries(entry, loc):
        if key is None:
            issues.add(at, field, "each property is a one-key mapping, e.g. - image: ...")
        elif key in properties:
            issues.add(at, f"{field}.{key}", "given twice")
        else:
            properties[key], places[key] = value, at
    if "name" in properties and str(properties.pop("name")) != name:
        issues.add(places["name"], f"{field}.name", f"differs from the flavour's key {name!r}")
    if "requirements" in properties:
        properties["requirements"] = _requirements(
            properties["requirements"], places["requirements"], f"{field}.requirements", issues
        )
    if len(issues.found) > before:
        return None
    try:
        return Flavour.model_validate({**_plain(properties), "name": name})
    except ValidationError as error:
        for detail in error.errors():
            first = detail["loc"][0] if detail["loc"] else None
            at = places.get(str(first), loc)
            path = ".".join(str(part) for part in (field, *detail["loc"]))
            reason = str(detail["msg"]).removeprefix("Value error, ")
            if detail["type"] == "extra_forbidden":
                reason = f"unknown key; a flavour has {_FLAVOUR_KEYS}"
            issues.add(at, path, reason)
    return None


def _requirements(node: Any, loc: Loc, field: str, issues: _Issues) -> dict[str, Any]:
    """The requirements as one mapping; each malformed constraint reported at its own line."""
    if not isinstance(node, dict | list):
        issues.add(
            loc,
            field,
            "requirements are a list of one-key mappings (fact: constraint) or a mapping",
        )
        return {}
    merged: dict[str, Any] = {}
    for fact, raw, at in _entries(node, loc):
        if fact is None:
            issues.add(at, field, "each requirement is a one-key mapping, e.g. - gpu_count: '>= 2'")
            continue
        if fact in merged:
            issues.add(at, f"{field}.{fact}", "given twice")
            continue
        value = _plain(raw)
        merged[fact] = value
        try:
            parse_constraint(fact, value)
        except ConstraintError as error:
            issues.add(at, f"{field}.{fact}", str(error))
    return merged


def _plain(node: Any) -> Any:
    """ruamel's commented containers as plain dicts and lists (strict models want them)."""
    if isinstance(node, dict):
        return {str(key): _plain(value) for key, value in node.items()}
    if isinstance(node, list):
        return [_plain(item) for item in node]
    for kind in (bool, int, float, str):  # ruamel's ScalarInt, ScalarFloat, ... as plain ones
        if isinstance(node, kind):
            return kind(node)
    return node
