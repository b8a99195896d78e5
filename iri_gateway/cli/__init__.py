"""The `iri-gateway` command line, by audience: `app` assembles the commands (entry point
`app.main`) of the facility admin (`admin`, offline, from profile files: `offline`), of the
server's operator (`server`) and of the scientist against a server (`scientist`); `common`,
`consoles` and `views` (tables) are shared.

Empty on purpose: importing `iri_gateway.cli.views` must not load every command."""
