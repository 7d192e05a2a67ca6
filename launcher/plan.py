"""The plan of a job on this node, as every front end makes it (`topo launch`'s msrun flags and
launcher.launch: launcher.job; `topo run`'s torchrun flags: launcher.torchrun) and the one executor
(launcher.run.execute_plan) runs it: each process's argv, environment, binding and log files, and
the restart policy."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from topo.launcher.procgroup import ProcessSpec


@dataclass(frozen=True)
class Plan:
    """Every process of a job on this node, decided before any starts.

    Without restarts (max_restarts 0 and no `attempt`), `processes` run once and their record
    (launch.json) is written in `log_dir`. With `attempt`, each attempt n (0, then one per restart,
    up to max_restarts) runs `attempt(n, log_dir)`: its processes and its record directory, made on
    disk; `processes` are then attempt 0's as the dry run shows them."""

    config: Any  # the front end's: LaunchConfig (msrun's flags) or RunConfig (torchrun's)
    processes: tuple[ProcessSpec, ...]  # start order: a scheduler first
    base_env: Mapping[str, str]  # the launcher's environment minus MANAGED_VARS
    log_dir: str | None
    warnings: tuple[str, ...] = ()
    max_restarts: int = 0
    attempt: Callable[[int, str], tuple[tuple[ProcessSpec, ...], str]] | None = None

    @property
    def workers(self) -> tuple[ProcessSpec, ...]:
        return tuple(p for p in self.processes if p.role != "scheduler")
