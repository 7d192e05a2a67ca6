"""The environment a launched process gets: msrun's variables per role, torchrun's per rank, and
the rules `topo launch` and `topo bind` share (OMP_NUM_THREADS, MSRUN_BIND_FILE). Each child's
environment is built fresh: the launcher's minus MANAGED_VARS, plus its own values (msrun lets
them leak from one child into the next).
"""

from __future__ import annotations

from collections import Counter
from typing import Mapping, Sequence

from topo.binding import BINDING_VAR, Binding
from topo.launcher.files import JOB_ID_VAR

# Variables the launcher owns: dropped from the inherited environment before each child's own
# values are added, so nothing leaks from an outer launcher or from one child into the next.
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
    """MSRUN_BIND_FILE and its hash, which mindspore.runtime.set_cpu_affinity() checks against
    its own bind_file; only a bind JSON read from a file has them."""
    if path is None:
        return {}
    return {"MSRUN_BIND_FILE": path, "MSRUN_BIND_FILE_HASH": sha256 or ""}


def thread_env(environ: Mapping[str, str], binding: Binding, processes_on_node: int,
               sharers: int = 1) -> dict[str, str]:
    """OMP_NUM_THREADS, so that no CPU runs more threads than it has room for: a process bound to
    N CPUs that `sharers` of the job's bound processes share (itself included; `sharers()`) gets N // sharers,
    at least 1; an unbound one gets 1 when it shares the node (torchrun's rule, and what `import
    mindspore` does inside msrun). A value already set wins."""
    if "OMP_NUM_THREADS" in environ:
        return {}
    if binding.cpus is not None:
        return {"OMP_NUM_THREADS": str(max(1, binding.cpus.weight() // max(1, sharers)))}
    if processes_on_node > 1:
        return {"OMP_NUM_THREADS": "1"}
    return {}


def sharers(bindings: Sequence[Binding]) -> list[int]:
    """For each binding, the most of `bindings` (itself included) bound to any one of its CPUs: how
    many processes share its CPUs at worst; 1 for an unbound one (unbound processes are left out:
    the kernel moves them). Counted per CPU, so a job of many processes costs time linear in its
    CPU sets' sizes."""
    per_cpu: Counter[int] = Counter()
    for b in bindings:
        if b.cpus is not None:
            per_cpu.update(b.cpus)
    return [1 if b.cpus is None else max(per_cpu[cpu] for cpu in b.cpus) for b in bindings]


def describe_threads(names: Sequence[str], bindings: Sequence[Binding], envs: Sequence[Mapping[str, str]]) -> str | None:
    """The report line for the OMP_NUM_THREADS chosen, when topo chose it for a bound process."""
    parts = []
    for name, binding, env, shared in zip(names, bindings, envs, sharers(bindings)):
        if binding.cpus is None or "OMP_NUM_THREADS" not in env:
            continue
        why = f"{binding.cpus.weight()} CPUs" + (f" shared by {shared} processes" if shared > 1 else "")
        parts.append(f"{name} {env['OMP_NUM_THREADS']} ({why})")
    if not parts:
        return None
    return "OMP_NUM_THREADS " + ", ".join(parts) + "; set OMP_NUM_THREADS to choose another"


def unbuffered_env(environ: Mapping[str, str]) -> dict[str, str]:
    """A tailed log is only useful if Python writes it as it goes (torchrun runs `python -u`)."""
    return {} if "PYTHONUNBUFFERED" in environ else {"PYTHONUNBUFFERED": "1"}


def cluster_env(*, worker_num: int, rank_size: str, master_ip: str | None, master_port: int,
                cluster_time_out: int, simulation_level: str | None, rank_table_file: str) -> dict[str, str]:
    """What msrun gives every process of a MindSpore job, scheduler included. `master_ip` None
    (simulation): no cluster to join."""
    env = {"MS_WORKER_NUM": str(worker_num), "RANK_SIZE": rank_size}
    if master_ip is not None:
        env.update(MS_SCHED_HOST=master_ip, MS_SCHED_PORT=str(master_port), MS_TOPO_TIMEOUT=str(cluster_time_out))
    if simulation_level is not None:
        env["MS_SIMULATION_LEVEL"] = simulation_level
    if rank_table_file:
        env["RANK_TABLE_FILE"] = rank_table_file
    return env


def scheduler_env(common: Mapping[str, str]) -> dict[str, str]:
    """msrun's scheduler: MS_ROLE=MS_SCHED and always RANK_ID=0, no DEVICE_ID or MS_NODE_ID."""
    return {**common, "MS_ROLE": "MS_SCHED", "RANK_ID": "0"}


def worker_env(common: Mapping[str, str], *, local_rank: int, rank: int | None, role: bool,
               world_size: int, local_world_size: int, group_rank: int, group_world_size: int | None,
               master_ip: str, master_port: int) -> dict[str, str]:
    """One worker: msrun's variables (DEVICE_ID = local rank, RANK_ID = MS_NODE_ID = rank) and
    torchrun's (RANK, LOCAL_RANK, WORLD_SIZE, ...), so one launcher serves both frameworks.
    `rank` None: the cluster assigns it (MindSpore), and no RANK is set. `role` False: a simulation
    (no MS_ROLE)."""
    env = {**common, "DEVICE_ID": str(local_rank), "WORLD_SIZE": str(world_size),
           "LOCAL_WORLD_SIZE": str(local_world_size), "MASTER_ADDR": master_ip, "MASTER_PORT": str(master_port),
           "LOCAL_RANK": str(local_rank), "GROUP_RANK": str(group_rank)}
    if group_world_size is not None:
        env["GROUP_WORLD_SIZE"] = str(group_world_size)
    if role:
        env["MS_ROLE"] = "MS_WORKER"
    if rank is not None:
        env.update(RANK_ID=str(rank), MS_NODE_ID=str(rank), RANK=str(rank))
    return env
