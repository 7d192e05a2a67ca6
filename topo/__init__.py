"""topo: see a machine's hardware topology and plan where each process of a job runs.

Public names are imported on first use, so `import topo.errors` (and every `topo` command) does not
pay for discovery and the model until it needs them. Stable API (typed: the package ships py.typed):
- `__all__`: discovery, the model, `set_affinity` and NVIDIA gpu_affinity's names (`Mode`, `Scope`,
  `Multithreading`, `GPUAffinityError`), so `import topo as gpu_affinity` runs its code unchanged;
- topo.launcher.spawn: `bound_argv`, `start_bound`, `plan_child` (binding at birth);
- topo.launcher.ps: `inspect`, `as_json`, `as_text`, `ProcessView` (where processes really run);
- topo.launcher: `launch`, `LaunchConfig`, `LaunchResult`, `LaunchError`.
"""

from topo.errors import ParseError, ProbeError, TopoError, UsageError
from topo.lazy import lazy_exports

TYPE_CHECKING = False  # type checkers take it as True; `import topo` need not import typing
if TYPE_CHECKING:  # what the lazy names are, for type checkers
    from topo.cpuset import CpuSet
    from topo.discovery import discover
    from topo.launcher.affinity import (AffinityError, GPUAffinityError, Mode, Multithreading, Scope,
                                        bind_process, plan_affinity, set_affinity)
    from topo.loader import load_topology
    from topo.model import Topology

__all__ = ["CpuSet", "Topology", "discover", "load_topology", "set_affinity", "bind_process", "plan_affinity",
           "Mode", "Scope", "Multithreading", "AffinityError", "GPUAffinityError", "TopoError", "ParseError",
           "ProbeError", "UsageError"]
__version__ = "0.1.0"

_LAZY = {"CpuSet": "topo.cpuset", "Topology": "topo.model", "discover": "topo.discovery",
         "load_topology": "topo.loader",
         **dict.fromkeys(["set_affinity", "bind_process", "plan_affinity", "Mode", "Scope", "Multithreading",
                          "AffinityError", "GPUAffinityError"], "topo.launcher.affinity")}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
