"""`python -m iri_gateway` runs the command line."""

from iri_gateway.cli.app import main

main()
