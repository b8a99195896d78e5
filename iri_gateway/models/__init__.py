"""What the gateway talks about: the JobSpec, facility profiles, plans, jobs, limits, and the
hardware facts and requirement constraints that relate a JobSpec to a profile."""
