"""The port proxy's HTTP side: its own origin, sessions, and forwarding to a job's ports."""
