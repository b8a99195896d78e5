"""Decision -> batch script, through Jinja templates that only lay out what Python decided.

The environment uses StrictUndefined (a missing value is an error, not an empty string), no
HTML escaping (this is bash, not HTML), and quoting filters: `sh` quotes a word by its kind
(user words single-quoted, site words double-quoted), `shjoin` quotes a command line, `site`
double-quotes an admin value, and `shlines` writes a long command as continued lines.

A resource's own template directory, when its profile sets one, is searched first, so a site
can override any template or runtime fragment.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2

from iri_gateway import __version__
from iri_gateway.errors import TemplateError
from iri_gateway.models import cluster_ports
from iri_gateway.models.job_arrays import INDEX_PATTERN
from iri_gateway.models.plan import Decision
from iri_gateway.runtimes import RUNTIMES
from iri_gateway.schedulers import SCHEDULERS, SchedulerPlugin
from iri_gateway.shell import SiteWord, join, quote, quote_site
from iri_gateway.shipped import shipped_dir

_CONTINUATION = " \\\n    "


def builtin_templates_dir() -> Path:
    """The shipped templates (`templates/`, found as `iri_gateway.shipped` says)."""
    return shipped_dir("templates")


def _shlines(groups: Iterable[Iterable[str]]) -> str:
    """Quote each group of words and join the non-empty groups as continued lines."""
    parts = [join(group) for group in groups]
    return _CONTINUATION.join(part for part in parts if part)


@lru_cache(maxsize=32)
def template_environment(site_dir: Path | None) -> jinja2.Environment:
    """One compiled environment per template search path (site folder first)."""
    loaders: list[jinja2.BaseLoader] = []
    if site_dir is not None:
        loaders.append(jinja2.FileSystemLoader(str(site_dir)))
    loaders.append(jinja2.FileSystemLoader(str(builtin_templates_dir())))
    environment = jinja2.Environment(
        loader=jinja2.ChoiceLoader(loaders),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        auto_reload=False,
    )
    environment.filters["sh"] = quote
    environment.filters["shjoin"] = join
    environment.filters["site"] = quote_site
    environment.filters["shlines"] = _shlines
    environment.filters["indexed_sh"] = indexed_path
    return environment


def indexed_path(path: str, index_variable: str | None) -> str:
    """`path` quoted for bash, an array element's `%a` (INDEX_PATTERN) as the expansion of
    `index_variable`, the scheduler's variable holding the element's index (None: not an
    array, `%a` stays as written)."""
    if index_variable is None or INDEX_PATTERN not in path:
        return quote(path)
    expansion = quote_site(SiteWord(f"${{{index_variable}}}"))
    return expansion.join(quote(piece) if piece else "" for piece in path.split(INDEX_PATTERN))


@dataclass(frozen=True)
class SiteSetup:
    """What the profile runs before the launch: raw setup lines, modules, host variables."""

    commands: list[str]
    modules: list[SiteWord]
    env: dict[str, SiteWord]


def _site_setup(decision: Decision) -> SiteSetup:
    resource = decision.resource.resource
    config = decision.runtime_config
    commands: list[str] = []
    modules: list[str] = []
    env: dict[str, str] = {}
    mpi_used = decision.launcher == "mpi" or decision.use_mpi
    if mpi_used and resource.mpi is not None:
        commands += resource.mpi.setup_commands
        modules += resource.mpi.modules
        env.update(resource.mpi.env)
    if config is not None:
        commands += config.setup_commands
        modules += config.modules
        env.update(config.env)
        if decision.use_gpu and config.gpu is not None:
            modules += config.gpu.modules
            env.update(config.gpu.env)
        if decision.use_mpi and config.mpi is not None:
            modules += config.mpi.modules
            env.update(config.mpi.env)
    return SiteSetup(
        commands=list(dict.fromkeys(commands)),
        modules=[SiteWord(m) for m in dict.fromkeys(modules)],
        env={k: SiteWord(v) for k, v in env.items()},
    )


def _one_staging(decision: Decision, when: str) -> list[list[str]]:
    config = decision.runtime_config
    if config is None or decision.image is None or config.staging.when != when:
        return []
    if RUNTIMES[decision.runtime].stages_in_launch:
        return []
    return RUNTIMES[decision.runtime].staging_commands(decision)


def _members_decisions(decision: Decision) -> list[Decision]:
    """The decision of each role of a cluster job, or just the job's own."""
    if decision.cluster is None:
        return [decision]
    return [role.decision for role in decision.cluster.roles]


def _staging(decision: Decision, when: str) -> list[list[str]]:
    """Image staging commands, once per distinct image (every role's, for a cluster job)."""
    if decision.cluster is None:
        return _one_staging(decision, when)
    commands: list[list[str]] = []
    for each in _members_decisions(decision):
        commands += [c for c in _one_staging(each, when) if c not in commands]
    return commands


def pre_submit_commands(decision: Decision) -> list[list[str]]:
    """Commands to run on the login node before submitting (image staging 'submit')."""
    return _staging(decision, "submit")


def _merged_setup(decision: Decision) -> SiteSetup:
    """The site setup every role needs, each line once (a plain job: its own)."""
    if decision.cluster is None:
        return _site_setup(decision)
    setups = [_site_setup(each) for each in _members_decisions(decision)]
    return SiteSetup(
        commands=list(dict.fromkeys(c for s in setups for c in s.commands)),
        modules=list(dict.fromkeys(m for s in setups for m in s.modules)),
        env={k: v for s in setups for k, v in s.env.items()},
    )


def _cluster_context(decision: Decision, scheduler: SchedulerPlugin) -> dict[str, Any] | None:
    """Per member of a cluster job: its host, launcher, runtime command line and stdin."""
    cluster = decision.cluster
    if cluster is None:
        return None
    layout = scheduler.cluster_layout(decision)
    hosts_bind = SiteWord("$iri_cluster_dir/hosts:/etc/hosts:ro")
    members = []
    for number, member in enumerate(cluster.members):
        role = cluster.roles[member.role_number].decision
        ports = cluster_ports.port_variables(cluster.ports.get(member.name, {}))
        own = replace(
            role,
            environment={**role.environment, "IRI_CLUSTER_ROLE_INDEX": str(member.index), **ports},
            binds=[*role.binds, hosts_bind] if role.runtime_config is not None else role.binds,
        )
        members.append(
            {
                "name": member.name,
                "role": member.role,
                "index": member.index,
                "host": layout.hosts[number],
                "launcher": layout.launchers[number],
                "runtime": own.runtime,
                "runtime_template": RUNTIMES[own.runtime].template,
                "rt": RUNTIMES[own.runtime].invocation(own),
                "stdin": decision.spec.stdin_path if number == 0 else None,
            }
        )
    return {
        "job_id": layout.job_id,
        "discovery": layout.discovery,
        "address": layout.address,
        "stop": layout.stop,
        "members": members,
        "lifecycle": cluster.lifecycle,
    }


def render_script(decision: Decision) -> str:
    """The batch script for a decision: exactly what submission sends to the scheduler."""
    scheduler = SCHEDULERS[decision.resource.resource.scheduler.kind]
    runtime = RUNTIMES[decision.runtime]
    invocation = runtime.invocation(decision)
    setup = _merged_setup(decision)
    spec = decision.spec
    context: dict[str, Any] = {
        "version": __version__,
        "facility": decision.resource.profile.facility.id,
        "resource": decision.resource.id,
        "runtime": decision.runtime,
        "runtime_template": runtime.template,
        "directives": scheduler.directives(decision, invocation),
        "directory": spec.directory,
        "inherit_environment": spec.inherit_environment,
        "stdin": spec.stdin_path,
        "stdout": spec.stdout_path,
        "stderr": spec.stderr_path,
        "setup_commands": setup.commands,
        "modules": setup.modules,
        "site_env": setup.env,
        "pre_launch": spec.pre_launch,
        "post_launch": spec.post_launch,
        "stage": _staging(decision, "job"),
        "launcher": scheduler.launcher(decision),
        "rt": invocation,
        "cluster": _cluster_context(decision, scheduler),
        "array_index": (
            scheduler.arrays.index_variable
            if spec.array is not None and scheduler.arrays is not None
            else None
        ),
    }
    environment = template_environment(decision.resource.templates_dir)
    try:
        return environment.get_template(scheduler.template).render(context)
    except jinja2.TemplateError as error:
        raise TemplateError(
            f"template {_template_location(error, scheduler.template)} failed: {error}"
        ) from error


def _template_location(error: jinja2.TemplateError, fallback: str) -> str:
    """`file:line` of a template error: from a syntax error, or from the rewritten traceback.

    Jinja rewrites render-time tracebacks so that template frames carry the template's own
    file name and line; the innermost such frame is where the template failed.
    """
    if isinstance(error, jinja2.TemplateSyntaxError) and error.filename:
        return f"{error.filename}:{error.lineno}"
    location = fallback
    traceback = error.__traceback__
    while traceback is not None:
        filename = traceback.tb_frame.f_code.co_filename
        if filename.endswith(".j2"):
            location = f"{filename}:{traceback.tb_lineno}"
        traceback = traceback.tb_next
    return location
