"""topo: see a machine's hardware topology and plan where each process of a job runs.

The public names are imported on first use, so `import topo.errors` (and every `topo` command,
which imports the package first) does not pay for discovery and the model until it needs them.
"""

from topo.errors import ParseError, ProbeError, TopoError, UsageError

__all__ = ["CpuSet", "Topology", "discover", "load_topology", "set_affinity", "TopoError", "ParseError", "ProbeError",
           "UsageError"]
__version__ = "0.1.0"

_LAZY = {
    "CpuSet": "topo.cpuset",
    "Topology": "topo.model",
    "discover": "topo.discovery",
    "load_topology": "topo.loader",
    "set_affinity": "topo.affinity",
}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'topo' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
