"""The PSI/J integration: the `iri` executor (`executor`, loaded by PSI/J through
`iri_gateway.psij_executor`) and the conversion between PSI/J jobs and IRI JobSpecs (`convert`).

Not named `psij`, which is the PSI/J library's own package."""
