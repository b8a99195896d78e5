"""Shell safety: every user string of a JobSpec reaches its program exactly, never the shell."""
