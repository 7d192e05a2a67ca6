"""Start a distributed job's processes next to their CPUs: `topo launch` (msrun's interface, also
for PyTorch jobs), `topo stop` (stop a detached job from its launch.json) and `topo bind` (apply
one process's binding under any other launcher).

The layers: launcher.job (msrun's flags) and launcher.torchrun (torchrun's, parsed in
launcher.torchrun_flags) make one launcher.plan.Plan of a job (process specs: argv, environment,
binding, logs, and the restart policy; every check before anything exists); launcher.run.execute
runs any plan, restarts included: launcher.procgroup starts and stops
the group of processes, launcher.supervisor verifies, follows and records them (launcher.files
writes the logs and the record). launcher.environ holds the environment rules `topo launch`,
`topo run` and `topo bind` share.

    from topo.launcher import LaunchConfig, launch
    result = launch(LaunchConfig("train.py", worker_num=2, local_worker_num=2, join=True, scheduler=False))
    result.exit_code

The public names are imported on first use, so importing one submodule (`topo bind` needs
launcher.bindcmd, `topo run` launcher.torchrun) does not import the planner, the process group and
the supervisor of `topo launch` as well.
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
