"""The service behind the API, by concern: `jobs/` (the engine, a façade over submission,
tracking and recovery), `files/` (the gateway's side and what runs where the files are),
`tasks/`, `accounts/` (who calls and what each may use) and `operations/` (settings, the
store, replicas), with `assembly.py` and `health.py` above them all. Nothing here knows
about HTTP."""
