"""PBS Pro / OpenPBS: batch-script directives (rendering) and one module per command."""

from iri_gateway.schedulers.pbs.directives import cluster_layout, directives, launcher

name = "pbs"
template = "pbs.sh.j2"

__all__ = ["cluster_layout", "directives", "launcher", "name", "template"]
