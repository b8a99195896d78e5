"""What a scientist runs against a gateway server: jobs (`client_commands`) and their own job
templates (`job_template_commands`), through the SDK, as the web console and PSI/J do.

Empty on purpose, like `iri_gateway.cli`: a command imports what it needs when it runs."""
