"""Plan a job without starting it: which processes, their argv, environment, log file and binding.

Everything msrun decides before its first Popen is decided here, from the config and the
launcher's environment, so `--dry-run` prints exactly what a real launch starts and every check
happens before any process exists.
"""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Mapping

from launcher import network
from launcher.binding import UNBOUND, Binding, JobBindings, resolve_bindings
from launcher.config import LaunchConfig
from topo.errors import UsageError

if TYPE_CHECKING:
    from topo.model import Topology

SCHEDULER = "scheduler"
WORKER = "worker"

# Variables the launcher owns: dropped from the inherited environment before each child's own
# values are added, so nothing leaks from an outer launcher or from one child into the next
# (msrun sets them in its own os.environ, so a worker without a rank inherits RANK_ID=0 from the
# scheduler's launch, anchors §1.18.4).
MANAGED_VARS = (
    "MS_ROLE", "MS_SCHED_HOST", "MS_SCHED_PORT", "MS_WORKER_NUM", "MS_TOPO_TIMEOUT", "MS_NODE_ID",
    "RANK_SIZE", "RANK_ID", "DEVICE_ID", "MSRUN_CPU_LIST", "MSRUN_BIND_FILE", "MSRUN_BIND_FILE_HASH",
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
    "MASTER_ADDR", "MASTER_PORT",
)

# Interpreters msrun does not put `python` in front of.
_NO_PREFIX = ("python", "python3", "pytest")


@dataclass(frozen=True)
class ProcessSpec:
    """One process to start."""

    role: str  # SCHEDULER | WORKER
    rank: int | None  # global rank (MindSpore's node id); None: scheduler, or assigned by the cluster
    local_rank: int | None  # index on this node (DEVICE_ID); None for the scheduler
    argv: tuple[str, ...]  # binding prefix + interpreter + script + args
    env: Mapping[str, str]  # what the launcher adds to / changes in its own environment
    log_path: str
    binding: Binding
    tail: bool  # its log goes to the console under --join

    @property
    def name(self) -> str:
        if self.role == SCHEDULER:
            return "scheduler"
        return f"rank {self.rank}" if self.rank is not None else f"local worker {self.local_rank}"

    def full_env(self, base: Mapping[str, str]) -> dict[str, str]:
        """The child's complete environment, built fresh from the cleaned base each time."""
        env = dict(base)
        env.update(self.env)
        return env


@dataclass(frozen=True)
class JobPlan:
    config: LaunchConfig
    processes: tuple[ProcessSpec, ...]  # start order: scheduler first
    base_env: Mapping[str, str]  # the launcher's environment minus MANAGED_VARS
    log_dir: str
    warnings: tuple[str, ...]

    @property
    def workers(self) -> tuple[ProcessSpec, ...]:
        return tuple(p for p in self.processes if p.role == WORKER)


def plan_job(config: LaunchConfig, *, environ: Mapping[str, str] | None = None,
             topology: Topology | Callable[[], Topology] | None = None) -> JobPlan:
    """Decide every process of `config` on this node. Raises UsageError for anything that would
    make msrun fail half-way (bad counts, missing script, unavailable CPUs, missing numactl, ...).

    `topology` (or a function returning it) is needed only when binding; default: discover().
    """
    environ = dict(os.environ if environ is None else environ)
    warnings: list[str] = []
    _check_script(config)
    master_ip = network.resolve_master(config.master_addr)
    simulation = config.simulation or "MS_SIMULATION_LEVEL" in environ
    local_worker_num = config.local_worker_num
    sim_rank_id = config.sim_rank_id
    if simulation and sim_rank_id == -1 and environ.get("RANK_ID", "").isdigit():
        sim_rank_id = int(environ["RANK_ID"])
    if simulation and sim_rank_id != -1:
        local_worker_num = 1  # msrun simulates that one rank only

    start_scheduler = config.scheduler
    if start_scheduler is None:
        start_scheduler = (not simulation and network.is_local(master_ip)
                           and (config.node_rank in (0, -1) or not config.multi_node))

    bindings = _bindings(config, local_worker_num, environ, topology)
    warnings.extend(bindings.warnings)

    log_dir = os.path.abspath(config.log_dir) if config.log_dir else os.getcwd()
    base_name = _worker_log_base(config.worker_log_name, master_ip)
    command = _command(config)
    rank_size = environ.get("RANK_SIZE", str(config.worker_num)) if simulation else str(config.worker_num)
    cluster = {} if simulation else {
        "MS_SCHED_HOST": master_ip,
        "MS_SCHED_PORT": str(config.master_port),
        "MS_TOPO_TIMEOUT": str(config.cluster_time_out),
    }
    common = {"MS_WORKER_NUM": str(config.worker_num), "RANK_SIZE": rank_size, **cluster, **bindings.env}
    if simulation:
        common["MS_SIMULATION_LEVEL"] = str(config.sim_level) if config.sim_level != -1 \
            else environ["MS_SIMULATION_LEVEL"]
    if config.rank_table_file:
        common["RANK_TABLE_FILE"] = config.rank_table_file
        warnings.append(f"launching with the user's rank table file {config.rank_table_file}")

    if config.multi_node and config.node_rank == -1:
        warnings.append("--node_rank is not set on a multi-node job: MindSpore assigns ranks when workers "
                        "register (grep 'rank id' in the logs); PyTorch jobs get no RANK and need --node_rank")
    elif not config.multi_node and config.node_rank not in (-1, 0):
        warnings.append(f"all workers run on this node, so --node_rank={config.node_rank} is ignored")

    processes_on_node = local_worker_num + (1 if start_scheduler else 0)
    tailed = config.tail_worker_log  # None = every worker
    processes = []
    if start_scheduler:
        env = {**common, "MS_ROLE": "MS_SCHED", "RANK_ID": "0"}
        _thread_env(env, environ, bindings.scheduler, processes_on_node, tail=False)
        processes.append(ProcessSpec(SCHEDULER, None, None,
                                     (*bindings.scheduler.prefix, *command), env,
                                     os.path.join(log_dir, "scheduler.log"), bindings.scheduler, tail=False))
    torch_common = {
        "WORLD_SIZE": str(config.worker_num),
        "LOCAL_WORLD_SIZE": str(local_worker_num),
        "MASTER_ADDR": master_ip,
        "MASTER_PORT": str(config.master_port),
    }
    group_rank = config.node_rank if config.multi_node and config.node_rank >= 0 else 0
    if config.worker_num % config.local_worker_num == 0:
        torch_common["GROUP_WORLD_SIZE"] = str(config.worker_num // config.local_worker_num)
    for i in range(local_worker_num):
        rank = _rank(config, i)
        if simulation and sim_rank_id != -1:
            rank = None
        env = {**common, "DEVICE_ID": str(i), **torch_common, "LOCAL_RANK": str(i), "GROUP_RANK": str(group_rank)}
        if not simulation:
            env["MS_ROLE"] = "MS_WORKER"
        if rank is not None:
            env.update(RANK_ID=str(rank), MS_NODE_ID=str(rank), RANK=str(rank))
        if simulation and sim_rank_id != -1:
            env["RANK_ID"] = env["RANK"] = str(sim_rank_id)
        binding = bindings.workers[i]
        if binding.cpu_list_env:
            env["MSRUN_CPU_LIST"] = binding.cpu_list_env
        log_rank = rank if rank is not None else i
        tail = config.join and (tailed is None or log_rank in tailed)
        _thread_env(env, environ, binding, processes_on_node, tail=tail)
        processes.append(ProcessSpec(WORKER, rank, i, (*binding.prefix, *command), env,
                                     os.path.join(log_dir, f"{base_name}_{log_rank}.log"), binding, tail))
    if config.join and tailed is not None:
        shown = {p.rank if p.rank is not None else p.local_rank for p in processes if p.role == WORKER}
        missing = sorted(set(tailed) - shown)
        if missing:
            warnings.append(f"--tail_worker_log: rank(s) {', '.join(map(str, missing))} do not run on this node; "
                            "their logs are not shown")
    base_env = {k: v for k, v in environ.items() if k not in MANAGED_VARS}
    return JobPlan(config, tuple(processes), base_env, log_dir, tuple(warnings))


def _rank(config: LaunchConfig, local_rank: int) -> int | None:
    if not config.multi_node:
        return local_rank
    if config.node_rank >= 0:
        return config.node_rank * config.local_worker_num + local_rank
    return None


def _thread_env(env: dict, environ: Mapping[str, str], binding: Binding, processes_on_node: int,
                *, tail: bool) -> None:
    # torchrun's rule (and what `import mindspore` does inside msrun): several processes on one node
    # must not each start a thread per CPU. A process bound to N CPUs gets N; a preset value wins.
    if "OMP_NUM_THREADS" not in environ:
        if binding.cpus is not None:
            env["OMP_NUM_THREADS"] = str(max(1, binding.cpus.weight()))
        elif processes_on_node > 1:
            env["OMP_NUM_THREADS"] = "1"
    # A tailed log is only useful if Python writes it as it goes (torchrun runs `python -u`).
    if tail and "PYTHONUNBUFFERED" not in environ:
        env["PYTHONUNBUFFERED"] = "1"


def _command(config: LaunchConfig) -> tuple[str, ...]:
    if config.script in _NO_PREFIX:
        return (config.script, *config.script_args)
    return (config.python, config.script, *config.script_args)


def _check_script(config: LaunchConfig) -> None:
    if config.script in _NO_PREFIX:
        return
    if not os.path.isfile(config.script):
        raise UsageError(f"script {config.script!r} does not exist (relative to {os.getcwd()})")


def _worker_log_base(template: str, master_ip: str) -> str:
    if not template:
        return "worker"
    # msrun substitutes with re.sub: {ip} = this node's address towards the master
    name = re.sub(r"\{hostname\}", socket.gethostname(), template)
    if "{ip}" in name:
        name = re.sub(r"\{ip\}", network.local_ip(master_ip), name)
    return name


def _bindings(config: LaunchConfig, n: int, environ: Mapping[str, str], topology) -> JobBindings:
    if not config.bind_core and not config.bind_numa:
        return JobBindings(UNBOUND, (UNBOUND,) * n, (), {})
    if topology is None:
        from topo.discovery import discover

        topology = discover()
    elif callable(topology):
        topology = topology()
    return resolve_bindings(config.bind_core, config.bind_numa, local_worker_num=n,
                            topology=topology, environ=environ)


def describe_plan(plan: JobPlan) -> str:
    """The dry-run text: per process its argv, log, binding and environment additions."""
    import shlex

    lines = []
    for w in plan.warnings:
        lines.append(f"warning: {w}")
    for p in plan.processes:
        extra = f", DEVICE_ID={p.local_rank}" if p.local_rank is not None else ""
        lines.append(f"{p.name}{extra}: {shlex.join(p.argv)}")
        lines.append(f"  log: {p.log_path}")
        lines.append(f"  binding: {p.binding.describe()}")
        lines.append("  env: " + " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(p.env.items())))
    return "\n".join(lines)


__all__ = ["ProcessSpec", "JobPlan", "plan_job", "describe_plan", "MANAGED_VARS"]
