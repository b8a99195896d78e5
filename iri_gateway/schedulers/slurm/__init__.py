"""Slurm: batch-script directives (rendering) and one module per command (execution)."""

from iri_gateway.schedulers.slurm.directives import cluster_layout, directives, launcher

name = "slurm"
template = "slurm.sh.j2"

__all__ = ["cluster_layout", "directives", "launcher", "name", "template"]
