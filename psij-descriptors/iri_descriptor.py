"""PSI/J descriptor: registers the `iri` executor (jobs submitted through an iri-gateway).

PSI/J scans every `psij-descriptors` folder on sys.path for modules with
`__PSI_J_EXECUTORS__` and loads the class from the package beside that folder. An editable
install also copies this file into site-packages, without the package beside it: that copy
registers nothing, and the one in the checkout (also on sys.path) does.
"""

from pathlib import Path

from packaging.version import Version
from psij.descriptor import Descriptor

_BESIDE = (Path(__file__).resolve().parent.parent / "iri_gateway" / "psij_executor.py").is_file()

__PSI_J_EXECUTORS__ = (
    [
        Descriptor(
            name="iri",
            nice_name="IRI gateway",
            version=Version("0.1.0"),
            cls="iri_gateway.psij_executor.IriJobExecutor",
        ),
    ]
    if _BESIDE
    else []
)
