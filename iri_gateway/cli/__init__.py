"""The `iri-gateway` command line: the commands (`app`, entry point `app.main`), the client
commands that talk to a running server (`client_commands`), and shared tables (`views`).

Empty on purpose: importing `iri_gateway.cli.views` must not load every command."""
