"""The PSI/J executor `iri`: `JobExecutor.get_instance("iri", url=..., config=...)`.

PSI/J loads this file by path (`psij-descriptors/iri_descriptor.py` names
`iri_gateway.psij_executor.IriJobExecutor`) as a module object of its own, outside
`sys.modules`. Classes defined here would then exist twice — PSI/J's copy and the one a program
imports — and `isinstance(config, IriExecutorConfig)` would fail across the two. So this file
only re-exports them from `iri_gateway.psij_bridge.executor`, which Python imports once, normally.
"""

from iri_gateway.psij_bridge.executor import IriExecutorConfig, IriJobExecutor

__all__ = ["IriExecutorConfig", "IriJobExecutor"]
