"""PSI/J descriptor: registers the `iri` executor (jobs submitted through an iri-gateway).

PSI/J scans every `psij-descriptors` folder on sys.path for modules with
`__PSI_J_EXECUTORS__`; this one sits beside the `iri_gateway` package (in the wheel and in an
editable checkout), where PSI/J loads the class from.
"""

from packaging.version import Version
from psij.descriptor import Descriptor

__PSI_J_EXECUTORS__ = [
    Descriptor(name="iri", nice_name="IRI gateway", version=Version("0.1.0"),
               cls="iri_gateway.psij_executor.IriJobExecutor"),
]
