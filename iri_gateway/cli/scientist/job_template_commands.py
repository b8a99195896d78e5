"""`iri-gateway template ...`: your job templates on a running server (list, show, put,
delete), through the SDK like the other client commands (`client_commands.py`: server,
token, exit codes: 0 success, 2 refused as invalid, 1 any other error).

A template file is JSON or YAML (`kind: task` or `kind: cluster`; docs/jobspec.md).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from iri_gateway.cli import consoles
from iri_gateway.cli.scientist.client_commands import (
    EXIT_INVALID,
    JsonOption,
    ServerOption,
    TokenOption,
    _fail,
    _gateway,
)
from iri_gateway.client.models import DEFAULT_URL

template_app = typer.Typer(help="Work with your job templates on a server.", no_args_is_help=True)
NameArgument = Annotated[str, typer.Argument(help="The template's name.")]
FileArgument = Annotated[str, typer.Argument(help="Template file (JSON or YAML), '-': stdin.")]


def _read_template(path: str) -> dict[str, Any]:
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as error:
        _fail(f"cannot read {path}: {error.strerror}")
    try:
        document = YAML(typ="safe", pure=True).load(text)
    except YAMLError as error:
        _fail(f"{path}: not JSON or YAML: {error}", EXIT_INVALID)
    if not isinstance(document, dict):
        _fail(f"{path}: a template is a mapping with `kind: task` or `kind: cluster`", EXIT_INVALID)
    return document


@template_app.command("list")
def list_templates(
    as_json: JsonOption = False, server: ServerOption = DEFAULT_URL, token: TokenOption = None
) -> None:
    """The templates you may name in a job: the facility's, then yours."""
    with _gateway(server, token) as client:
        found = client.templates()
    if as_json:
        sys.stdout.write(json.dumps([t.model_dump(mode="json") for t in found], indent=2) + "\n")
        return
    from rich.table import Table

    table = Table("name", "kind", "source", "roles (min..max)", "description")
    for entry in found:
        body = entry.template
        roles = (
            ", ".join(f"{r.name} {r.min}..{r.maximum} ({r.task})" for r in body.roles)
            if body.kind == "cluster"
            else "-"
        )
        source = entry.source if entry.facility is None else f"facility {entry.facility}"
        if entry.shadowed:
            source += " (shadowed by the facility's)"
        table.add_row(entry.name, body.kind, source, roles, body.description or "")
    consoles.out().print(table)


@template_app.command("show")
def show_template(
    name: NameArgument, server: ServerOption = DEFAULT_URL, token: TokenOption = None
) -> None:
    """One template, as JSON."""
    with _gateway(server, token) as client:
        found = client.template(name)
    sys.stdout.write(found.model_dump_json(indent=2, exclude_none=True) + "\n")


@template_app.command("put")
def put_template(
    name: NameArgument,
    file: FileArgument,
    server: ServerOption = DEFAULT_URL,
    token: TokenOption = None,
) -> None:
    """Keep the template of FILE under NAME (created, or replaced when you have one)."""
    document = _read_template(file)
    with _gateway(server, token) as client:
        stored = client.put_template(name, document)
    sys.stdout.write(f"template {stored.name} ({stored.template.kind}) saved\n")


@template_app.command("delete")
def delete_template(
    name: NameArgument, server: ServerOption = DEFAULT_URL, token: TokenOption = None
) -> None:
    """Delete one of your templates."""
    with _gateway(server, token) as client:
        client.delete_template(name)
    sys.stdout.write(f"template {name} deleted\n")
