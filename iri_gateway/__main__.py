"""`python -m iri_gateway` runs the command line."""

from iri_gateway.cli import main

main()
