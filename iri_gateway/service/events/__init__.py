"""The event log of job, member and task state changes, and its readers (issue 28)."""
