"""Start a distributed job's processes next to their CPUs: `topo launch` (msrun's flags,
launcher.job), `topo run` (torchrun's, launcher.torchrun), `topo stop`, `topo bind`; each front end
makes a launcher.plan.Plan, and launcher.run.execute runs any plan. Public names load on first use.

    from topo.launcher import LaunchConfig, launch
    result = launch(LaunchConfig("train.py", worker_num=2, local_worker_num=2, join=True, scheduler=False))
"""

from topo.lazy import lazy_exports

__all__ = ["LaunchConfig", "LaunchError", "LaunchResult", "launch"]

_LAZY = {
    "LaunchConfig": "topo.launcher.config",
    "LaunchError": "topo.launcher.procgroup",
    "LaunchResult": "topo.launcher.run",
    "launch": "topo.launcher.run",
}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
