"""The environment rules `topo launch`, `topo run` and `topo bind` share (OMP_NUM_THREADS,
MSRUN_BIND_FILE). Each child's environment is built fresh: the launcher's minus MANAGED_VARS (the
variables it owns), plus its own values, so nothing leaks from an outer launcher or one child into
the next (msrun lets them)."""

from __future__ import annotations

from collections import Counter
from typing import Mapping, Sequence

from topo.binding import BINDING_VAR, Binding
from topo.launcher.files import JOB_ID_VAR

MANAGED_VARS = (
    "MS_ROLE", "MS_SCHED_HOST", "MS_SCHED_PORT", "MS_WORKER_NUM", "MS_TOPO_TIMEOUT", "MS_NODE_ID",
    "RANK_SIZE", "RANK_ID", "DEVICE_ID", "MSRUN_CPU_LIST", "MSRUN_BIND_FILE", "MSRUN_BIND_FILE_HASH",
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
    "MASTER_ADDR", "MASTER_PORT", JOB_ID_VAR, BINDING_VAR,
)


def base_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The launcher's environment without the variables it sets per process."""
    return {k: v for k, v in environ.items() if k not in MANAGED_VARS}


def bind_file_env(path: str | None, sha256: str | None) -> dict[str, str]:
    """MSRUN_BIND_FILE and its hash (mindspore.runtime.set_cpu_affinity() checks them), for a bind JSON file."""
    return {} if path is None else {"MSRUN_BIND_FILE": path, "MSRUN_BIND_FILE_HASH": sha256 or ""}


def thread_env(environ: Mapping[str, str], binding: Binding, processes_on_node: int,
               sharers: int = 1) -> dict[str, str]:
    """OMP_NUM_THREADS: a process bound to N CPUs that `sharers` bound processes share (itself included)
    gets N // sharers, at least 1; an unbound one gets 1 when it shares the node (torchrun's rule, and
    what `import mindspore` does inside msrun). A value already set wins."""
    if "OMP_NUM_THREADS" in environ:
        return {}
    if binding.cpus is not None:
        return {"OMP_NUM_THREADS": str(max(1, binding.cpus.weight() // max(1, sharers)))}
    return {"OMP_NUM_THREADS": "1"} if processes_on_node > 1 else {}


def sharers(bindings: Sequence[Binding]) -> list[int]:
    """For each binding, the most of `bindings` (itself included) bound to any one of its CPUs; 1 for
    an unbound one (the kernel moves it). Counted per CPU: linear in the CPU sets' sizes."""
    per_cpu: Counter[int] = Counter()
    for b in bindings:
        if b.cpus is not None:
            per_cpu.update(b.cpus)
    return [1 if b.cpus is None else max(per_cpu[cpu] for cpu in b.cpus) for b in bindings]


def describe_threads(names: Sequence[str], bindings: Sequence[Binding],
                     envs: Sequence[Mapping[str, str]]) -> str | None:
    """The report line for the OMP_NUM_THREADS chosen, when topo chose it for a bound process."""
    parts = []
    for name, binding, env, shared in zip(names, bindings, envs, sharers(bindings)):
        if binding.cpus is None or "OMP_NUM_THREADS" not in env:
            continue
        why = f"{binding.cpus.weight()} CPUs" + (f" shared by {shared} processes" if shared > 1 else "")
        parts.append(f"{name} {env['OMP_NUM_THREADS']} ({why})")
    return "OMP_NUM_THREADS " + ", ".join(parts) + "; set OMP_NUM_THREADS to choose another" if parts else None
