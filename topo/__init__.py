"""topo: see a machine's hardware topology and plan where each process of a job runs."""

from topo.cpuset import CpuSet
from topo.discover import discover
from topo.errors import ParseError, ProbeError, TopoError, UsageError
from topo.loader import load_topology
from topo.model import Topology

__all__ = ["CpuSet", "Topology", "discover", "load_topology", "TopoError", "ParseError", "ProbeError", "UsageError"]
__version__ = "0.1.0"
