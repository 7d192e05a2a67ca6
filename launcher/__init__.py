"""Start a distributed job's processes next to their CPUs: `topo launch` (msrun's interface, also
for PyTorch jobs), `topo stop` (stop a detached job from its launch.json) and `topo bind` (apply
one process's binding under any other launcher).

The layers: launcher.job plans (config -> process specs, every check before anything exists),
launcher.procgroup starts and stops a group of processes, launcher.supervisor verifies, follows
and records them; launcher.environ holds the environment rules `topo launch` and `topo bind` share.

    from launcher import LaunchConfig, launch
    result = launch(LaunchConfig("train.py", worker_num=2, local_worker_num=2, join=True, scheduler=False))
    result.exit_code
"""

from launcher.config import LaunchConfig
from launcher.run import LaunchError, LaunchResult, launch

__all__ = ["LaunchConfig", "LaunchError", "LaunchResult", "launch"]
