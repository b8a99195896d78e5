"""Slurm batch scripts: `#SBATCH` directives and `srun` as the launcher."""

from __future__ import annotations

from iri_gateway.models.plan import Decision
from iri_gateway.runtimes.base import Invocation
from iri_gateway.schedulers.base import hms, site_launcher
from iri_gateway.shell import slurm_directive_value, slurm_filename


def _line(option: str, value: str | int | None = None) -> str:
    if value is None:
        return f"#SBATCH --{option}"
    if isinstance(value, int):
        return f"#SBATCH --{option}={value}"
    return f"#SBATCH --{option}={slurm_directive_value(value)}"


def directives(decision: Decision, invocation: Invocation) -> list[str]:
    spec, shape = decision.spec, decision.shape
    resource = decision.resource.resource
    attributes = spec.attributes
    lines: list[str] = []
    if spec.name:
        lines.append(_line("job-name", spec.name))
    if spec.directory:
        lines.append(_line("chdir", spec.directory))
    if spec.stdout_path:
        lines.append(_line("output", slurm_filename(spec.stdout_path)))
    if spec.stderr_path:
        lines.append(_line("error", slurm_filename(spec.stderr_path)))
    queue = decision.queue
    if queue is not None:
        lines.append(_line(queue.select_by, queue.name))
        if queue.constraint:
            lines.append(_line("constraint", queue.constraint))
    if attributes and attributes.account:
        lines.append(_line("account", attributes.account))
    if attributes and attributes.reservation_id:
        lines.append(_line("reservation", attributes.reservation_id))
    lines.append(_line("nodes", shape.node_count))
    lines.append(_line("ntasks", shape.process_count))
    if shape.processes_per_node is not None:
        lines.append(_line("ntasks-per-node", shape.processes_per_node))
    if shape.cpus_per_process is not None:
        lines.append(_line("cpus-per-task", shape.cpus_per_process))
    if shape.gpus_per_process:
        style = resource.scheduler.gpu_request_style
        if style == "gpus-per-task":
            lines.append(_line("gpus-per-task", shape.gpus_per_process))
        elif style == "gpus-per-node":
            lines.append(_line("gpus-per-node", shape.gpus_per_node))
        else:
            lines.append(_line("gres", f"gpu:{shape.gpus_per_node}"))
    if shape.memory_mib is not None:
        lines.append(_line("mem", f"{shape.memory_mib}M"))
    if shape.walltime_seconds is not None:
        days, rest = divmod(shape.walltime_seconds, 86400)
        lines.append(_line("time", f"{days}-{hms(rest):0>8}" if days else hms(rest)))
    if shape.exclusive:
        lines.append(_line("exclusive"))
    if not spec.inherit_environment:
        lines.append(_line("export", "NONE"))
    if attributes:
        for key, value in attributes.custom_attributes.items():
            lines.append(_line(key, value))
    for option, value in invocation.scheduler_options:
        lines.append(_line(option, value))
    lines += [f"#SBATCH {directive}" for directive in resource.scheduler.directives]
    return lines


def launcher(decision: Decision) -> list[str]:
    if decision.launcher == "none":
        return []
    if decision.launcher == "parallel":
        return site_launcher(decision, "srun")[:1]
    return site_launcher(decision, "srun")
