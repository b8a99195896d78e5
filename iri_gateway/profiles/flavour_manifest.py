"""App manifests of image flavours, converted to a JobSpec's `container.flavours` list.

Labs publish one app version with several hardware-specific images in a deployment file, in
the shape of the original flavours proposal: a mapping from flavour name to `priority`,
`image` and `requirements` (a list of one-key mappings), optionally under a top-level
`flavours:` key beside other manifest keys:

    flavours:
      cuda:
        priority: 100
        image: docker.io/lab/app:1.0-cuda
        requirements:
          - gpu_count: ">= 2"
          - nvidia_cuda: "> 11"

Each entry is validated as a JobSpec `Flavour`, so a malformed constraint is reported here,
with the file and line, rather than at submission.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from iri_gateway.errors import ManifestError, ProfileIssue, json_path
from iri_gateway.models.jobspec import Flavour
from iri_gateway.profiles.yaml_source import locate_line, read_yaml_mapping

_SHAPE = ("an app manifest is a mapping of flavour names to {priority, image, requirements}, "
          "optionally under a top-level 'flavours' key")


def flavours_from_manifest(path: Path) -> list[Flavour]:
    """Every flavour of the manifest at `path`, in file order; ManifestError lists all faults."""
    tree = read_yaml_mapping(path, ManifestError, _SHAPE)
    prefix: tuple[str, ...] = ()
    entries: Any = tree
    if "flavours" in tree:
        entries, prefix = tree["flavours"], ("flavours",)
    if not isinstance(entries, dict) or not entries:
        raise ManifestError([ProfileIssue(str(path), locate_line(tree, prefix),
                                          ".".join(prefix), _SHAPE)])
    flavours: list[Flavour] = []
    issues: list[ProfileIssue] = []
    for name, entry in entries.items():
        where = (*prefix, name)
        if not isinstance(entry, dict):
            issues.append(ProfileIssue(str(path), locate_line(tree, where), json_path(where),
                                       "a flavour is a mapping with image, priority and "
                                       "requirements"))
            continue
        if "name" in entry and entry["name"] != name:
            issues.append(ProfileIssue(str(path), locate_line(tree, (*where, "name")),
                                       json_path((*where, "name")),
                                       f"differs from the flavour's key {name!r}"))
            continue
        try:
            flavours.append(Flavour.model_validate({**_plain(entry), "name": str(name)}))
        except ValidationError as error:
            for detail in error.errors():
                loc = (*where, *detail["loc"])
                reason = str(detail["msg"]).removeprefix("Value error, ")
                if detail["type"] == "extra_forbidden":
                    reason = ("unknown key; a flavour has image, priority, requirements, "
                              "runtime, extra_options")
                issues.append(ProfileIssue(str(path), locate_line(tree, loc), json_path(loc),
                                           reason))
    if issues:
        raise ManifestError(issues)
    return flavours


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
