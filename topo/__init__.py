"""topo: see a machine's hardware topology and plan where each process of a job runs.

The public names are imported on first use, so `import topo.errors` (and every `topo` command,
which imports the package first) does not pay for discovery and the model until it needs them.
"""

from topo.errors import ParseError, ProbeError, TopoError, UsageError
from topo.lazy import lazy_exports

__all__ = ["CpuSet", "Topology", "discover", "load_topology", "set_affinity", "AffinityError", "TopoError",
           "ParseError", "ProbeError", "UsageError"]
__version__ = "0.1.0"

_LAZY = {
    "CpuSet": "topo.cpuset",
    "Topology": "topo.model",
    "discover": "topo.discovery",
    "load_topology": "topo.loader",
    "set_affinity": "topo.launcher.affinity",
    "AffinityError": "topo.launcher.affinity",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
