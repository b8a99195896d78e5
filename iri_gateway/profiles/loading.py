"""Load facility profiles from YAML, refusing broken ones with file:line and the field path.

A profile is parsed with ruamel.yaml, which remembers where every key and item stands, and
validated with the pydantic models of `models.profile`. Each validation error is traced back
through the YAML tree to the line an admin has to fix. Nothing is defaulted silently: unknown
keys are errors (the models forbid them), and so is a resource id defined twice.

The command line passes a `ProfileTreeCache` for the shipped profiles, so that a call skips
parsing what an earlier call parsed; the tree is validated all the same (see `tree_cache`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from iri_gateway.errors import ProfileError, ProfileIssue, UnknownResourceError, json_path
from iri_gateway.models.constraints import STANDARD_FACTS
from iri_gateway.models.loaded_resource import LoadedResource
from iri_gateway.models.profile import FacilityProfile
from iri_gateway.models.scheduler_facts import scheduler_context
from iri_gateway.profiles.yaml_source import (
    locate_line,
    parse_yaml_mapping,
    parse_yaml_text,
    read_yaml_bytes,
    read_yaml_mapping,
)
from iri_gateway.schedulers import SCHEDULERS
from iri_gateway.shipped import shipped_dir

if TYPE_CHECKING:
    from iri_gateway.profiles.tree_cache import ProfileTreeCache


def builtin_profiles_dir() -> Path:
    """The shipped profiles (`facility_profiles/`, found as `iri_gateway.shipped` says)."""
    return shipped_dir("facility_profiles")


def builtin_profile(name: str) -> Path:
    """Path of a shipped profile, e.g. `builtin_profile('local')`."""
    path = builtin_profiles_dir() / f"{name}.yaml"
    if not path.is_file():
        shipped = sorted(p.stem for p in builtin_profiles_dir().glob("*.yaml"))
        raise ProfileError(
            [
                ProfileIssue(
                    str(path),
                    None,
                    "",
                    f"no shipped profile {name!r}; shipped: {', '.join(shipped)}",
                )
            ]
        )
    return path


_SHAPE = "a profile is a mapping with 'facility' and 'resources'"


def load_profile(path: Path, trees: ProfileTreeCache | None = None) -> FacilityProfile:
    """Read and validate one profile file; raise ProfileError naming file, line and field.

    With `trees`, a tree parsed earlier from the same bytes is validated instead of parsing
    the file again, and a freshly parsed tree is kept there.
    """
    if trees is None:
        return _validate(path, _read_yaml(path))
    data = read_yaml_bytes(path, ProfileError)
    cached = trees.get(path, data)
    if cached is not None:
        try:
            return validate_profile(cached)
        except ValidationError:
            pass  # stale for these models: parse, so that the errors carry their lines
    tree = parse_yaml_mapping(data, path, ProfileError, _SHAPE)
    profile = _validate(path, tree)
    trees.put(path, data, tree)
    return profile


def validate_profile(tree: Any) -> FacilityProfile:
    """The profile in `tree`, validated with the scheduler plug-ins, which answer what its
    scheduler kind means (`iri_gateway.models.scheduler_facts`); pydantic's errors unchanged."""
    return FacilityProfile.model_validate(tree, context=scheduler_context(SCHEDULERS))


def _validate(path: Path, tree: Any) -> FacilityProfile:
    try:
        return validate_profile(tree)
    except ValidationError as error:
        raise ProfileError([_issue(path, tree, detail) for detail in error.errors()]) from None


def _read_yaml(path: Path) -> Any:
    return read_yaml_mapping(path, ProfileError, _SHAPE)


def _issue(path: Path, tree: Any, detail: Any) -> ProfileIssue:
    """Turn one pydantic error into a located issue by walking the YAML tree along `loc`."""
    loc: tuple[Any, ...] = tuple(detail["loc"])
    reason = str(detail["msg"]).removeprefix("Value error, ")
    if detail["type"] == "extra_forbidden":
        reason = "unknown key (check the spelling against schema.json)"
    return ProfileIssue(str(path), locate_line(tree, loc), json_path(loc), reason)


def profile_json_schema() -> str:
    """The JSON Schema of a profile file, as shipped in `facility_profiles/schema.json`."""
    schema = FacilityProfile.model_json_schema(by_alias=True)
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


class ProfileRegistry:
    """The resources of every loaded profile, by id."""

    def __init__(self, loaded: Iterable[LoadedResource]) -> None:
        self._resources: dict[str, LoadedResource] = {}
        for item in loaded:
            if item.id in self._resources:
                first = self._resources[item.id].source
                raise ProfileError(
                    [
                        ProfileIssue(
                            str(item.source),
                            None,
                            "resources",
                            f"resource id {item.id!r} is already defined in {first}",
                        )
                    ]
                )
            self._resources[item.id] = item

    @classmethod
    def from_files(
        cls, paths: Iterable[Path], trees: ProfileTreeCache | None = None
    ) -> ProfileRegistry:
        """Load every file (through `trees` when given); all broken files are reported together."""
        issues: list[ProfileIssue] = []
        loaded: list[LoadedResource] = []
        for path in paths:
            try:
                profile = load_profile(path, trees)
            except ProfileError as error:
                issues.extend(error.issues)
                continue
            for resource in profile.resources:
                templates = None
                if resource.templates_dir is not None:
                    templates = (path.parent / resource.templates_dir).resolve()
                    if not templates.is_dir():
                        issues.append(
                            ProfileIssue(
                                str(path),
                                None,
                                f"resources.{resource.id}.templates_dir",
                                f"{templates} is not a directory",
                            )
                        )
                loaded.append(LoadedResource(profile, resource, path, templates))
        if issues:
            raise ProfileError(issues)
        return cls(loaded)

    @classmethod
    def from_text(cls, text: str, label: str) -> ProfileRegistry:
        """The resources of one profile given as text (pasted in the console), named `label`
        in its issues; nothing is written anywhere and no path is read.

        A `templates_dir` is refused: it names a folder beside the profile file, and a pasted
        profile has no folder (its templates are not sent with it).
        """
        tree = parse_yaml_text(text, label, ProfileError, _SHAPE)
        profile = _validate(Path(label), tree)
        issues = [
            ProfileIssue(
                label,
                locate_line(tree, ("resources", index, "templates_dir")),
                f"resources.{index}.templates_dir",
                "a checked text has no folder beside it: check a profile with its "
                "own templates with `iri-gateway profile check FILE`",
            )
            for index, resource in enumerate(profile.resources)
            if resource.templates_dir is not None
        ]
        if issues:
            raise ProfileError(issues)
        return cls(
            LoadedResource(profile, resource, Path(label), None) for resource in profile.resources
        )

    @classmethod
    def from_paths(cls, paths: Iterable[Path]) -> ProfileRegistry:
        """Files as given; folders contribute their `*.yaml` files in name order."""
        files: list[Path] = []
        for path in paths:
            files.extend(sorted(path.glob("*.yaml")) if path.is_dir() else [path])
        return cls.from_files(files)

    @staticmethod
    def builtin_files() -> list[Path]:
        """The profile files shipped with the package."""
        return sorted(builtin_profiles_dir().glob("*.yaml"))

    @classmethod
    def builtin(cls, trees: ProfileTreeCache | None = None) -> ProfileRegistry:
        """Every profile shipped with the package (parsed trees kept in `trees` when given)."""
        return cls.from_files(cls.builtin_files(), trees)

    @cached_property
    def known_facts(self) -> frozenset[str]:
        """Every fact a flavour requirement may name: the standard ones and every resource's."""
        return frozenset(STANDARD_FACTS).union(*(r.facts for r in self._resources.values()))

    def get(self, resource_id: str) -> LoadedResource:
        """The resource `resource_id`; UnknownResourceError lists the known ones."""
        try:
            return self._resources[resource_id]
        except KeyError:
            raise UnknownResourceError(resource_id, list(self._resources)) from None

    def __iter__(self) -> Iterator[LoadedResource]:
        return iter(self._resources.values())

    def __len__(self) -> int:
        return len(self._resources)

    def ids(self) -> list[str]:
        return list(self._resources)
