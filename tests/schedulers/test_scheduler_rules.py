"""Every scheduler rule lives in its scheduler plug-in (issue 24, item 1).

Two proofs. Nothing outside `iri_gateway/schedulers/` compares a scheduler's kind with a
name: the package's syntax trees are searched for such comparisons. And `Teletype`, a batch
system written in this module and registered the way a plug-in is found, gets the directive
safety checks that Slurm's values get, declared nowhere but in the plug-in contract: a value
that would end its directive line is refused with the very problem a Slurm user sees, and a
shell metacharacter, which Slurm's quoting carries, is refused by the base rules that every
plug-in inherits unless it declares what its directives can carry.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

import iri_gateway
from iri_gateway.errors import JobRejectedError, Problem
from iri_gateway.models.loaded_resource import LoadedResource
from iri_gateway.models.plan import Decision
from iri_gateway.models.profile import FacilityProfile, SchedulerConfig
from iri_gateway.models.scheduler_facts import scheduler_context
from iri_gateway.planning.jobspec_io import parse_jobspec
from iri_gateway.planning.negotiate import negotiate
from iri_gateway.plugins import discover
from iri_gateway.runtimes.base import Invocation
from iri_gateway.schedulers import SCHEDULERS, registry
from iri_gateway.schedulers.base import ClusterLayout, SchedulerPlugin, default_gpu_request_only
from iri_gateway.schedulers.batch import BatchSystem
from iri_gateway.schedulers.directive_rules import CONTROL_REASON, DirectiveRules

PACKAGE = Path(iri_gateway.__file__).parent
KINDS = frozenset(SCHEDULERS)


# ---- no kind compared outside schedulers/ ---------------------------------------------------


def _names_a_kind(node: ast.expr) -> bool:
    """`x.kind`, `kind`, `scheduler`, `scheduler_kind`: what holds a scheduler's kind."""
    if isinstance(node, ast.Attribute):
        return node.attr == "kind"
    return isinstance(node, ast.Name) and node.id in ("kind", "scheduler", "scheduler_kind")


def _kind_literals(node: ast.expr) -> set[str]:
    """The scheduler kinds written as literals in `node` (one, or a tuple, list or set)."""
    items = node.elts if isinstance(node, ast.Tuple | ast.List | ast.Set) else [node]
    return {
        item.value
        for item in items
        if isinstance(item, ast.Constant) and isinstance(item.value, str) and item.value in KINDS
    }


def kind_comparisons(source: str, filename: str = "<source>") -> list[str]:
    """`file:line: text` of every comparison (or `match` case) of a kind with a kind's name."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(map(_names_a_kind, operands)) and any(map(_kind_literals, operands)):
                found.append(f"{filename}:{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.Match) and _names_a_kind(node.subject):
            for case in node.cases:
                values = [p.value for p in ast.walk(case.pattern) if isinstance(p, ast.MatchValue)]
                if any(map(_kind_literals, values)):
                    found.append(f"{filename}:{case.pattern.lineno}: case {ast.unparse(case)}")
    return found


def package_kind_comparisons(package: Path) -> list[str]:
    """Kind comparisons in every module of `package` outside its `schedulers/`."""
    found: list[str] = []
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package.parent)
        if relative.parts[:2] == (package.name, "schedulers"):
            continue
        found += kind_comparisons(path.read_text(), str(relative))
    return found


@pytest.mark.parametrize(
    "source",
    [
        'if resource.scheduler.kind == "slurm": pass',
        'ok = "pbs" != config.kind',
        'ok = loaded.resource.scheduler.kind in ("slurm", "pbs")',
        'ok = kind not in {"local"}',
        'ok = scheduler_kind != "slurm"',
        'ok = a < scheduler == "local"',
        'match resource.scheduler.kind:\n    case "pbs" | "slurm":\n        pass',
    ],
)
def test_the_search_finds_a_kind_compared(source: str) -> None:
    assert len(kind_comparisons(source)) == 1


@pytest.mark.parametrize(
    "source",
    [
        'ok = error.kind == "not_found"',  # a refusal's kind, not a scheduler's
        'ok = connection.mode == "local"',
        'ok = resource.scheduler.facts.this_machine and name == "slurm"',
    ],
)
def test_the_search_leaves_other_comparisons(source: str) -> None:
    assert kind_comparisons(source) == []


def test_no_scheduler_kind_is_compared_outside_the_scheduler_plugins() -> None:
    assert package_kind_comparisons(PACKAGE) == []


# ---- a plug-in from a test module gets the same directive safety ----------------------------


def _directives(decision: Decision, invocation: Invocation) -> list[str]:
    """Teletype's directive lines: `#TTY --name=VALUE`, the value as written."""
    return [f"#TTY --name={decision.spec.name}"] if decision.spec.name else []


def _launcher(decision: Decision) -> list[str]:
    return []


def _no_cluster_layout(decision: Decision) -> ClusterLayout:
    raise NotImplementedError("teletype runs no cluster jobs: it is only negotiated here")


def _no_batch_system(**kwargs: Any) -> BatchSystem:
    raise NotImplementedError("teletype submits nothing: it is only negotiated here")


SCHEDULER = SchedulerPlugin(
    kind="teletype",
    template="local.sh.j2",
    directives=_directives,
    launcher=_launcher,
    cluster_layout=_no_cluster_layout,
    batch_factory=_no_batch_system,
    this_machine=False,
    one_process=False,
    parallel_needs_site_launcher=False,
    batch_queue=True,
    gpu_request_default="gpus-per-node",
    gpu_request_check=default_gpu_request_only("gpus-per-node"),
    # No directive_rules: Teletype's quoting is unknown, so the base rules hold.
)

RESOURCE = """\
  - id: {id}
    name: A cluster run by {kind}
    scheduler: {{kind: {kind}, allowed_custom_attributes: [comment]}}
    queues: [{{name: batch, default: true}}]
    nodes: {{count: 2, cpu: {{arch: x86_64, cores: 4}}, memory_gib: 8}}
    runtimes: {{default: none}}
"""
SITE = (
    "facility: {id: ttysite, name: A site with a teletype and a Slurm cluster}\nresources:\n"
    + RESOURCE.format(id="tty", kind="teletype")
    + RESOURCE.format(id="slurmy", kind="slurm")
)
DIRECTIVE_FIELDS = ("name", "directory", "stdout_path", "stderr_path", "stdin_path")
ATTRIBUTE_FIELDS = ("account", "reservation_id", "custom_attributes.comment")
ENDS_THE_LINE = [
    "job\n#TTY --uid=0",
    "job\nrm -rf ~",
    "job\r#TTY --uid=0",
    "job\x0b",
    "job\x1b[2J",
]
SHELL_WORDS = [
    "$(reboot)",
    "`reboot`",
    "a;reboot",
    "a b",
    "it's",
    '"x"',
    "a#b",
    "a\\b",
    "a|b",
    "a\x85b",  # NEL, LINE SEPARATOR: a line's end to some readers, not bash
    "a\u2028b",
]


def teletype_registry() -> Any:
    """The shipped plug-ins and Teletype, registered as `discover` would report it."""
    return registry(
        [*discover(sys.modules["iri_gateway.schedulers"], "SCHEDULER"), (__name__, SCHEDULER)]
    )


def site(text: str = SITE) -> dict[str, LoadedResource]:
    profile = FacilityProfile.model_validate(
        yaml.safe_load(text), context=scheduler_context(teletype_registry())
    )
    return {r.id: LoadedResource(profile, r, Path("ttysite.yaml"), None) for r in profile.resources}


def problems(loaded: LoadedResource, path: str, value: str) -> list[Problem]:
    """The problems negotiation reports for a job whose field `path` holds `value`."""
    document: dict[str, Any] = {"executable": "/bin/true"}
    if path.startswith("attributes.custom_attributes."):
        document["attributes"] = {"custom_attributes": {path.rpartition(".")[2]: value}}
    elif path.startswith("attributes."):
        document["attributes"] = {path.removeprefix("attributes."): value}
    else:
        document[path] = value
    with pytest.raises(JobRejectedError) as caught:
        negotiate(parse_jobspec(document), loaded)
    return [p for p in caught.value.problems if p.field == path]


def test_teletype_is_a_plugin_with_the_base_directive_rules() -> None:
    plugins = teletype_registry()
    assert plugins["teletype"] is SCHEDULER
    assert type(SCHEDULER.directive_rules) is DirectiveRules
    assert set(plugins) == {*SCHEDULERS, "teletype"}


@pytest.mark.parametrize("value", ENDS_THE_LINE)
@pytest.mark.parametrize(
    "path", [*DIRECTIVE_FIELDS, *(f"attributes.{a}" for a in ATTRIBUTE_FIELDS)]
)
def test_a_value_that_ends_the_directive_is_refused_as_for_slurm(path: str, value: str) -> None:
    resources = site()
    expected = [Problem(path, CONTROL_REASON)]
    assert problems(resources["slurmy"], path, value) == expected
    assert problems(resources["tty"], path, value) == expected


@pytest.mark.parametrize("value", SHELL_WORDS)
@pytest.mark.parametrize(
    "path", [*DIRECTIVE_FIELDS, *(f"attributes.{a}" for a in ATTRIBUTE_FIELDS)]
)
def test_a_shell_word_is_refused_where_the_quoting_is_unknown(path: str, value: str) -> None:
    [problem] = problems(site()["tty"], path, value)
    assert problem.reason.startswith(
        "this batch system's directives are only known to carry letters, digits and '._/@+-'"
    )


def test_slurm_quotes_what_the_base_rules_refuse() -> None:
    """The base rules are stricter than Slurm's, never looser: Slurm's quoting carries these."""
    slurmy = site()["slurmy"]
    for value in SHELL_WORDS:
        decision = negotiate(parse_jobspec({"executable": "/bin/true", "name": value}), slurmy)
        assert decision.spec.name == value


def test_a_long_hostile_value_is_refused_quickly() -> None:
    value = "a" * 4000 + "$(reboot)"  # the JobSpec's longest name
    [problem] = problems(site()["tty"], "name", value)
    assert "only known to carry" in problem.reason


def test_plain_values_pass_the_base_rules() -> None:
    decision = negotiate(
        parse_jobspec(
            {"executable": "/bin/true", "name": "run-1.a_b+c@d", "stdout_path": "/o/run.out"}
        ),
        site()["tty"],
    )
    assert decision.spec.name == "run-1.a_b+c@d"


def test_the_profile_asks_the_plugin_about_gpu_requests() -> None:
    text = SITE.replace("kind: teletype,", "kind: teletype, gpu_request: gres,")
    with pytest.raises(ValidationError) as caught:
        site(text)
    assert "gpu_request 'gres' is not a form this scheduler reads; it uses 'gpus-per-node'" in str(
        caught.value
    )


def test_an_unknown_kind_names_every_registered_plugin() -> None:
    with pytest.raises(ValidationError) as caught:
        site(SITE.replace("kind: teletype", "kind: telex"))
    assert "Input should be 'slurm', 'pbs', 'local' or 'teletype'" in str(caught.value)


def test_a_profile_validated_without_the_plugins_is_a_programming_error() -> None:
    with pytest.raises(RuntimeError, match="validated with the scheduler plug-ins"):
        SchedulerConfig.model_validate({"kind": "slurm"})
