"""Podman-HPC (NERSC): podman's command line plus site module flags (`--gpu`, `--mpi`, ...).

The module flags come from the profile's GPU and MPI bindings; everything else passes through
to podman unchanged, so the command line is podman's.
"""

from __future__ import annotations

from iri_gateway.runtimes.podman import Podman


class PodmanHpc(Podman):
    name = "podman-hpc"
    program = "podman-hpc"
    rank = 20
    supports_cdi = False


RUNTIME = PodmanHpc()
