"""The web console: page shells and static assets served under `/console/`, `/` leading there.

The console is one more client of the REST API: its pages are shells that JavaScript modules
fill by calling `/api/v2` with the bearer token the user pasted (kept in the browser's
sessionStorage for the session only). Nothing here reads the engine or the store. See
docs/console.md for why it is built this way.
"""

from iri_gateway.console.routes import router

__all__ = ["router"]
