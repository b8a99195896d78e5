"""YAML files read with their line numbers, so every error can point at file:line.

ruamel.yaml's round-trip loader remembers where each key and item stands; profiles and app
manifests are read through here and their validation errors located with `locate_line`.
ruamel.yaml is imported on first use: a command line that finds a profile's tree in its cache
(`tree_cache`) does not need it.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from iri_gateway.errors import GatewayError, ProfileIssue


def read_yaml_mapping(
    path: Path, error: Callable[[list[ProfileIssue]], GatewayError], shape: str
) -> Any:
    """The YAML mapping in `path`; `error([issue])` is raised when unreadable or not a mapping.

    `shape` says what the file should look like, for the message when it is not a mapping.
    """
    return parse_yaml_mapping(read_yaml_bytes(path, error), path, error, shape)


def read_yaml_bytes(path: Path, error: Callable[[list[ProfileIssue]], GatewayError]) -> bytes:
    """The bytes of `path`; `error([issue])` is raised when it cannot be read."""
    try:
        return path.read_bytes()
    except OSError as failure:
        raise error([ProfileIssue(str(path), None, "", f"cannot read: {failure}")]) from None


def parse_yaml_mapping(
    data: bytes, path: Path, error: Callable[[list[ProfileIssue]], GatewayError], shape: str
) -> Any:
    """The YAML mapping in `data`, read from `path`, as `read_yaml_mapping` says.

    The bytes are decoded as `Path.read_text` would (UTF-8, universal newlines).
    """
    from ruamel.yaml import YAML
    from ruamel.yaml.error import MarkedYAMLError

    text = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8").read()
    try:
        tree = YAML(typ="rt").load(text)
    except MarkedYAMLError as failure:
        mark = failure.problem_mark or failure.context_mark
        line = mark.line + 1 if mark is not None else None
        reason = f"not valid YAML: {failure.problem or failure.context}"
        raise error([ProfileIssue(str(path), line, "", reason)]) from None
    if not isinstance(tree, dict):
        raise error([ProfileIssue(str(path), 1, "", shape)])
    return tree


def parse_yaml_text(
    text: str, label: str, error: Callable[[list[ProfileIssue]], GatewayError], shape: str
) -> Any:
    """The YAML mapping in `text` (sent by a client, not read from a file), as
    `parse_yaml_mapping` says; `label` names it in the issues.

    Text from a client can hold what no file read as UTF-8 does (a lone surrogate from a JSON
    string) or what the parser itself cannot digest (nesting deeper than Python's stack), so
    every failure of the parser is an issue here, never an exception of another kind.
    """
    from ruamel.yaml import YAML
    from ruamel.yaml.error import MarkedYAMLError, YAMLError

    for number, line in enumerate(text.split("\n"), start=1):
        try:
            line.encode("utf-8")
        except UnicodeEncodeError as failure:
            raise error(
                [
                    ProfileIssue(
                        label,
                        number,
                        "",
                        "not valid text: character "
                        f"{failure.start + 1} is a lone surrogate "
                        f"(U+{ord(line[failure.start]):04X}), which no "
                        "UTF-8 file can hold",
                    )
                ]
            ) from None
    normalised = text.replace("\r\n", "\n").replace("\r", "\n")
    try:
        tree = YAML(typ="rt").load(normalised)
    except MarkedYAMLError as failure:
        mark = failure.problem_mark or failure.context_mark
        line_number = mark.line + 1 if mark is not None else None
        reason = f"not valid YAML: {failure.problem or failure.context}"
        raise error([ProfileIssue(label, line_number, "", reason)]) from None
    except YAMLError as failure:
        raise error([ProfileIssue(label, None, "", f"not valid YAML: {failure}")]) from None
    except RecursionError:
        raise error(
            [
                ProfileIssue(
                    label, None, "", "not valid YAML here: nested deeper than the parser follows"
                )
            ]
        ) from None
    if not isinstance(tree, dict):
        raise error([ProfileIssue(label, 1, "", shape)])
    return tree


def read_yaml_document(path: Path, error: Callable[[list[ProfileIssue]], GatewayError]) -> Any:
    """The YAML document in `path` whatever its top-level shape (a mapping, a list, ...),
    with line numbers; `error([issue])` is raised when unreadable or not YAML."""
    from ruamel.yaml import YAML
    from ruamel.yaml.error import MarkedYAMLError

    data = read_yaml_bytes(path, error)
    text = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8").read()
    try:
        return YAML(typ="rt").load(text)
    except MarkedYAMLError as failure:
        mark = failure.problem_mark or failure.context_mark
        line = mark.line + 1 if mark is not None else None
        reason = f"not valid YAML: {failure.problem or failure.context}"
        raise error([ProfileIssue(str(path), line, "", reason)]) from None


def locate_line(tree: Any, loc: Sequence[Any]) -> int:
    """Line (1-based) of the deepest node along `loc` that exists in the YAML tree."""
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    node: Any = tree
    line = 1
    for key in loc:
        if isinstance(node, CommentedMap) and key in node:
            position = node.lc.key(key)
        elif isinstance(node, CommentedSeq) and isinstance(key, int) and 0 <= key < len(node):
            position = node.lc.item(key)
        else:
            break
        node = node[key]
        line = position[0] + 1
    return line
