"""The plan of a job on this node, as every front end makes it (launcher.job from msrun's flags,
launcher.torchrun from torchrun's) and launcher.run.execute runs it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

from topo.launcher.procgroup import ProcessSpec


@dataclass(frozen=True)
class Plan:
    """Every process of a job on this node, decided before any starts: run once, recorded (launch.json)
    in `log_dir`; with `attempt`, attempt n (0, then one per restart up to max_restarts) runs the processes
    and record directory `attempt(n, log_dir)` makes, `processes` being attempt 0's as a dry run shows."""

    processes: tuple[ProcessSpec, ...]  # start order: a scheduler first
    base_env: Mapping[str, str]  # the launcher's environment minus MANAGED_VARS
    log_dir: str | None
    warnings: tuple[str, ...] = ()
    max_restarts: int = 0
    attempt: Callable[[int, str], tuple[tuple[ProcessSpec, ...], str]] | None = None

    @property
    def workers(self) -> tuple[ProcessSpec, ...]:
        return tuple(p for p in self.processes if p.role != "scheduler")
