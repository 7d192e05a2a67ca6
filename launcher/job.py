"""`topo launch`'s plan from msrun's flags: each process's argv, environment, log file and binding.
Everything msrun decides before its first Popen is decided and checked here, so `--dry-run` prints
exactly what a real launch starts."""

from __future__ import annotations

import os
import shlex
import shutil
import socket
import stat
from typing import TYPE_CHECKING, Callable, Mapping

from topo.launcher import environ as envs, network
from topo.launcher.binding import resolve_bindings
from topo.launcher.environ import MANAGED_VARS
from topo.launcher.files import LAUNCH_JSON, previous_logs, replaceable
from topo.launcher.config import parse_bind_numa
from topo.launcher.plan import Plan
from topo.launcher.procgroup import ProcessSpec
from topo.numbers import ascii_number
from topo.errors import UsageError

if TYPE_CHECKING:
    from topo.launcher.config import LaunchConfig
    from topo.model import Topology

SCHEDULER = "scheduler"
WORKER = "worker"

_NO_PREFIX = ("python", "python3", "pytest")  # interpreters msrun puts no `python` in front of
# Kernel pseudo-filesystems: a log written there does not go anywhere (tmpfs, as /dev/shm, is a
# real filesystem and welcome). Without a readable mountinfo, these directories stand for them.
PSEUDO_FS_TYPES = frozenset(("proc", "sysfs", "devtmpfs", "devpts", "cgroup", "cgroup2", "debugfs", "tracefs",
                             "securityfs", "configfs", "bpf", "pstore", "efivarfs", "mqueue", "fusectl",
                             "binfmt_misc", "autofs", "hugetlbfs", "rpc_pipefs", "nsfs"))
_PSEUDO_DIRS = ("/proc", "/sys", "/dev")
MOUNTINFO_LIMIT = 4 << 20  # bytes of /proc/self/mountinfo read at most


def plan_job(config: LaunchConfig, *, environ: Mapping[str, str] | None = None,
             topology: Topology | Callable[[], Topology] | None = None) -> Plan:
    """Decide every process of `config` on this node; reads the bind file, creates nothing. UsageError
    for anything that would make msrun fail half-way; `topology` (or a function returning it) is
    needed only when binding (default: discover())."""
    environ = dict(os.environ if environ is None else environ)
    if config.script not in _NO_PREFIX and not os.path.isfile(config.script):
        why, fix = (("is a directory", "give the Python file to run") if os.path.isdir(config.script)
                    else ("does not exist", "check the path"))
        raise UsageError(f"script {why}, {config.script!r} (relative to {os.getcwd()}): {fix}")
    # as msrun runs the script: `python` (found on PATH) in front, unless it is python, python3 or pytest
    command = (*(() if config.script in _NO_PREFIX else (config.python,)), config.script, *config.script_args)
    log_dir = os.path.abspath(config.log_dir) if config.log_dir else os.getcwd()
    check_log_dir(log_dir, "--log_dir" if config.log_dir else "the current directory")
    master_ip = network.resolve_master(config.master_addr)
    simulation = config.simulation or "MS_SIMULATION_LEVEL" in environ
    sim_rank_id = config.sim_rank_id
    if simulation and sim_rank_id == -1 and (rank_id := ascii_number(environ.get("RANK_ID", ""))) is not None:
        sim_rank_id = rank_id
    one_simulated = simulation and sim_rank_id != -1
    local_worker_num = 1 if one_simulated else config.local_worker_num  # msrun simulates that one rank only
    start_scheduler = config.scheduler if config.scheduler is not None else (
        not simulation and network.is_local(master_ip) and (config.node_rank in (0, -1) or not config.multi_node))
    bind_numa = parse_bind_numa(config.bind_numa) if isinstance(config.bind_numa, str) else config.bind_numa
    bindings = resolve_bindings(config.bind_core, bind_numa, local_worker_num=local_worker_num, topology=topology,
                                environ=environ, priority_cores=config.priority_cores)
    warnings = list(bindings.warnings)
    # as msrun substitutes, but literally (its re.sub reads a backslash in the host name as a group
    # reference): {ip} = this node's address towards the master
    base_name = config.worker_log_name.replace("{hostname}", socket.gethostname()) or "worker"
    if "{ip}" in base_name:
        base_name = base_name.replace("{ip}", network.local_ip(master_ip))

    # what msrun gives every process of a MindSpore job, scheduler included; a simulation joins no cluster
    common = {"MS_WORKER_NUM": str(config.worker_num),
              "RANK_SIZE": environ.get("RANK_SIZE", str(config.worker_num)) if simulation else str(config.worker_num)}
    if simulation:
        common["MS_SIMULATION_LEVEL"] = (str(config.sim_level) if config.sim_level != -1
                                         else environ["MS_SIMULATION_LEVEL"])
    else:
        common.update(MS_SCHED_HOST=master_ip, MS_SCHED_PORT=str(config.master_port),
                      MS_TOPO_TIMEOUT=str(config.cluster_time_out))
    if config.rank_table_file:
        common["RANK_TABLE_FILE"] = config.rank_table_file
        warnings.append(f"launching with the user's rank table file {config.rank_table_file}")
    common.update(bindings.env)
    if config.multi_node and config.node_rank == -1:
        warnings.append("--node_rank is not set on a multi-node job: MindSpore assigns ranks when workers "
                        "register (grep 'rank id' in the logs); PyTorch jobs get no RANK and need --node_rank")
    elif not config.multi_node and config.node_rank not in (-1, 0):
        warnings.append(f"all workers run on this node, so --node_rank={config.node_rank} is ignored")

    processes_on_node = local_worker_num + (1 if start_scheduler else 0)
    tailed = config.tail_worker_log  # None = every worker
    processes = []
    started = ([bindings.scheduler] if start_scheduler else []) + list(bindings.workers[:local_worker_num])
    shared = iter(envs.sharers(started))  # in start order, as spec() is called

    def spec(name, role, rank, local_rank, env, binding, log_name, tail):
        env.update(envs.thread_env(environ, binding, processes_on_node, next(shared)))
        if tail and "PYTHONUNBUFFERED" not in environ:  # a tailed log shows output as it comes (torchrun: python -u)
            env["PYTHONUNBUFFERED"] = "1"
        return ProcessSpec(name, (*binding.prefix, *command), env, os.path.join(log_dir, log_name), binding,
                           role, rank, local_rank, tail)

    if start_scheduler:  # msrun's scheduler: always RANK_ID=0, no DEVICE_ID or MS_NODE_ID
        processes.append(spec("scheduler", SCHEDULER, None, None, {**common, "MS_ROLE": "MS_SCHED", "RANK_ID": "0"},
                              bindings.scheduler, "scheduler.log", False))
    group_rank = config.node_rank if config.multi_node and config.node_rank >= 0 else 0
    unranked = one_simulated or config.multi_node and config.node_rank < 0  # the cluster ranks them (MindSpore)
    log_ranks = [i if unranked else group_rank * config.local_worker_num + i for i in range(local_worker_num)]
    for i, log_rank in enumerate(log_ranks):
        # msrun's variables (DEVICE_ID = local rank, RANK_ID = MS_NODE_ID = rank) and torchrun's, so
        # one launcher serves both; no rank, no RANK
        rank = None if unranked else log_rank
        env = {**common, "DEVICE_ID": str(i), "WORLD_SIZE": str(config.worker_num),
               "LOCAL_WORLD_SIZE": str(local_worker_num), "MASTER_ADDR": master_ip,
               "MASTER_PORT": str(config.master_port), "LOCAL_RANK": str(i), "GROUP_RANK": str(group_rank)}
        if config.worker_num % config.local_worker_num == 0:
            env["GROUP_WORLD_SIZE"] = str(config.worker_num // config.local_worker_num)
        if not simulation:
            env["MS_ROLE"] = "MS_WORKER"
        if rank is not None:
            env.update(RANK_ID=str(rank), MS_NODE_ID=str(rank), RANK=str(rank))
        elif one_simulated:
            env["RANK_ID"] = env["RANK"] = str(sim_rank_id)
        if bindings.cpu_lists[i]:
            env["MSRUN_CPU_LIST"] = bindings.cpu_lists[i]
        name = f"rank {rank}" if rank is not None else f"local worker {i}"
        tail = config.join and (tailed is None or log_rank in tailed)
        processes.append(spec(name, WORKER, rank, i, env, bindings.workers[i], f"{base_name}_{log_rank}.log", tail))
    missing = sorted(set(tailed or ()) - set(log_ranks))
    if config.join and missing:
        warnings.append(f"--tail_worker_log: rank(s) {', '.join(map(str, missing))} do not run on this node; "
                        "their logs are not shown")
    logs = previous_logs(log_dir)
    for path in [*(p.log_path for p in processes), os.path.join(log_dir, LAUNCH_JSON)]:
        check_log_file(path, log_dir, logs)
    return Plan(tuple(processes), envs.base_env(environ), log_dir, tuple(warnings))


def check_program(plan: Plan, config: LaunchConfig) -> None:
    """UsageError unless exec will find the program every process runs: on the children's PATH, or at the path given."""
    if not plan.processes or not plan.processes[0].command:
        return
    program = plan.processes[0].command[0]
    what = "--python" if config.script not in _NO_PREFIX else "the command"
    if "/" in program:
        if os.path.isdir(program):
            raise UsageError(f"interpreter is a directory, {what}={program}: give the interpreter's file")
        if not os.access(program, os.X_OK):
            why = "does not exist" if not os.path.exists(program) else "is not executable"
            raise UsageError(f"interpreter {why}, {what}={program}: give an interpreter that runs, "
                             "e.g. --python python3")
        return
    if shutil.which(program, path=plan.base_env.get("PATH", os.defpath)) is None:
        raise UsageError(f"{program!r} is not on PATH, {what}: install it, put its directory on PATH, "
                         "or pass --python /path/to/python")


def check_log_dir(log_dir: str, what: str) -> None:
    """UsageError unless `log_dir` is, or can be created as, a writable directory reached through no
    link of another user and no directory others may write without the sticky bit (as ssh refuses
    loose permissions). Creates nothing."""
    _check_trusted(log_dir, what)
    real = os.path.realpath(log_dir)
    if _on_pseudo_fs(real):
        raise UsageError(f"log directory on a kernel pseudo-filesystem, {what}={log_dir}: "
                         "give a directory on a real filesystem")
    existing = real
    while not os.path.lexists(existing):
        existing = os.path.dirname(existing)
    where = f"{what}={log_dir}" if existing == real else f"{existing} in {what}={log_dir}"
    if not os.path.isdir(existing):
        raise UsageError(f"log directory is not a directory, {where}: give a directory path")
    if not os.access(existing, os.W_OK | os.X_OK):
        read_only = os.statvfs(existing).f_flag & os.ST_RDONLY
        why = "on a read-only filesystem" if read_only else "not writable (permissions or an immutable directory)"
        raise UsageError(f"log directory {why}, {where}: give a writable directory")


def _check_trusted(log_dir: str, what: str) -> None:
    """Walk `log_dir` as the kernel resolves it (at most 40 links): UsageError at a link owned by
    another user (not root) or a directory others may write without the sticky bit."""
    pending = [part for part in os.path.abspath(log_dir).split("/") if part]
    current, links = "/", 0
    while pending:
        name = pending.pop(0)
        if name in (".", ".."):
            current = current if name == "." else os.path.dirname(current)
            continue
        path = os.path.join(current, name)
        try:
            info = os.lstat(path)
        except OSError:
            return  # the rest is created by topo, as the user
        if stat.S_ISLNK(info.st_mode):
            links += 1
            if info.st_uid not in (0, os.geteuid()) or links > 40:
                why = "owned by another user" if links <= 40 else "one of more than 40 links"
                raise UsageError(f"log directory reached through a symbolic link {why}, {path} in {what}={log_dir}: "
                                 "give the directory it names, or another directory")
            target = os.readlink(path)
            pending[:0] = [part for part in target.split("/") if part]
            current = "/" if target.startswith("/") else current
            continue
        if stat.S_ISDIR(info.st_mode) and info.st_mode & stat.S_IWOTH and not info.st_mode & stat.S_ISVTX:
            raise UsageError(f"log directory in a directory others may write (mode {stat.S_IMODE(info.st_mode):o}, "
                             f"no sticky bit), {path} in {what}={log_dir}: chmod o-w it or give another directory")
        current = path


def _on_pseudo_fs(real: str) -> bool:
    """Whether `real` (resolved) lies on a kernel pseudo-filesystem: its longest mount point's type."""
    try:
        with open("/proc/self/mountinfo", "rb") as fh:
            text = fh.read(MOUNTINFO_LIMIT).decode("utf-8", "replace")
    except OSError:
        return any(real == d or real.startswith(d + "/") for d in _PSEUDO_DIRS)
    best, best_type = "", ""
    for line in text.splitlines():
        fields, _, rest = line.partition(" - ")
        parts = fields.split()
        if len(parts) < 5 or not rest:
            continue
        point = parts[4].replace("\\040", " ")
        inside = point == "/" or real == point or real.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, best_type = point, rest.split()[0]
    return best_type in PSEUDO_FS_TYPES


def check_log_file(path: str, log_dir: str, logs: frozenset[str]) -> None:
    """UsageError when topo cannot create the log or record `path`: something not in `logs` in its
    place (another user's file, a directory, FIFO or link), or a subdirectory that cannot be made."""
    if not os.path.abspath(path).startswith(log_dir.rstrip("/") + "/"):
        raise UsageError(f"log file leaves the log directory, {path}: give --worker_log_name relative to --log_dir")
    if not replaceable(path, logs):
        kind = ("a directory" if os.path.isdir(path) and not os.path.islink(path) else "a symbolic link"
                if os.path.islink(path) else "not a file topo created")
        raise UsageError(f"log file is {kind}, {path}: topo writes only files it creates (or its previous "
                         "launch.json lists); remove it or choose another --log_dir")
    if os.path.lexists(path):
        return
    parent = os.path.dirname(path)
    if parent != log_dir:
        check_log_dir(parent, "log subdirectory")


def describe_plan(plan: Plan) -> str:
    """The dry-run text: per process its argv, log, binding and environment additions."""
    lines = [f"warning: {w}" for w in plan.warnings]
    for p in plan.processes:
        extra = f", DEVICE_ID={p.local_rank}" if p.local_rank is not None else ""
        direct = f" (applied directly: {p.binding.note}; runs {shlex.join(p.command)})" if p.binding.direct else ""
        lines += [f"{p.name}{extra}: {shlex.join(p.argv)}", f"  log: {p.log_path}",
                  f"  binding: {p.binding.describe()}{direct}",
                  "  env: " + " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(p.env.items()))]
    return "\n".join(lines)


__all__ = ["ProcessSpec", "Plan", "plan_job", "describe_plan", "MANAGED_VARS", "check_log_dir"]
