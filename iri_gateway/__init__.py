"""iri-gateway: portable container JobSpecs rendered into correct Slurm and PBS batch scripts."""

__version__ = "0.1.0"
