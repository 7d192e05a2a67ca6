"""`topo launch`'s plan, made from msrun's flags without starting anything: which processes, their
argv, environment, log file and binding. Everything msrun decides before its first Popen is
decided and checked here, so `--dry-run` prints exactly what a real launch starts.
"""

from __future__ import annotations

import os
import shlex
import shutil
import socket
import stat
from typing import TYPE_CHECKING, Callable, Mapping

from topo.launcher import environ as envs
from topo.launcher import network
from topo.launcher.binding import UNBOUND, JobBindings, resolve_bindings
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

# Interpreters msrun does not put `python` in front of.
_NO_PREFIX = ("python", "python3", "pytest")
# Kernel pseudo-filesystems: a log written there does not go anywhere (tmpfs, as /dev/shm, is a
# real filesystem and welcome). Without a readable mountinfo, these directories stand for them.
PSEUDO_FS_TYPES = frozenset(("proc", "sysfs", "devtmpfs", "devpts", "cgroup", "cgroup2", "debugfs", "tracefs",
                             "securityfs", "configfs", "bpf", "pstore", "efivarfs", "mqueue", "fusectl",
                             "binfmt_misc", "autofs", "hugetlbfs", "rpc_pipefs", "nsfs"))
_PSEUDO_DIRS = ("/proc", "/sys", "/dev")
MOUNTINFO_LIMIT = 4 << 20  # bytes of /proc/self/mountinfo read at most


def plan_job(config: LaunchConfig, *, environ: Mapping[str, str] | None = None,
             topology: Topology | Callable[[], Topology] | None = None) -> Plan:
    """Decide every process of `config` on this node. Raises UsageError for anything that would
    make msrun fail half-way (bad counts, missing script or interpreter, a log directory that
    cannot be written, unavailable CPUs, ...). Reads the bind file; creates nothing.

    `topology` (or a function returning it) is needed only when binding; default: discover().
    """
    environ = dict(os.environ if environ is None else environ)
    warnings: list[str] = []
    _check_script(config)
    command = _command(config)
    log_dir = os.path.abspath(config.log_dir) if config.log_dir else os.getcwd()
    check_log_dir(log_dir, "--log_dir" if config.log_dir else "the current directory")
    master_ip = network.resolve_master(config.master_addr)
    simulation = config.simulation or "MS_SIMULATION_LEVEL" in environ
    local_worker_num = config.local_worker_num
    sim_rank_id = config.sim_rank_id
    if simulation and sim_rank_id == -1 and (rank_id := ascii_number(environ.get("RANK_ID", ""))) is not None:
        sim_rank_id = rank_id
    if simulation and sim_rank_id != -1:
        local_worker_num = 1  # msrun simulates that one rank only

    start_scheduler = config.scheduler
    if start_scheduler is None:
        start_scheduler = (not simulation and network.is_local(master_ip)
                           and (config.node_rank in (0, -1) or not config.multi_node))

    bindings = _bindings(config, local_worker_num, environ, topology)
    warnings.extend(bindings.warnings)

    base_name = _worker_log_base(config.worker_log_name, master_ip)
    sim_level = None
    if simulation:
        sim_level = str(config.sim_level) if config.sim_level != -1 else environ["MS_SIMULATION_LEVEL"]
    common = {**envs.cluster_env(
        worker_num=config.worker_num,
        rank_size=environ.get("RANK_SIZE", str(config.worker_num)) if simulation else str(config.worker_num),
        master_ip=None if simulation else master_ip, master_port=config.master_port,
        cluster_time_out=config.cluster_time_out, simulation_level=sim_level,
        rank_table_file=config.rank_table_file), **bindings.env}
    if config.rank_table_file:
        warnings.append(f"launching with the user's rank table file {config.rank_table_file}")

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
        if tail:
            env.update(envs.unbuffered_env(environ))
        return ProcessSpec(name, (*binding.prefix, *command), env, os.path.join(log_dir, log_name), binding,
                           role, rank, local_rank, tail)

    if start_scheduler:
        processes.append(spec("scheduler", SCHEDULER, None, None, envs.scheduler_env(common),
                              bindings.scheduler, "scheduler.log", False))
    group_rank = config.node_rank if config.multi_node and config.node_rank >= 0 else 0
    group_world_size = (config.worker_num // config.local_worker_num
                        if config.worker_num % config.local_worker_num == 0 else None)
    for i in range(local_worker_num):
        rank = None if simulation and sim_rank_id != -1 else _rank(config, i)
        env = envs.worker_env(common, local_rank=i, rank=rank, role=not simulation, world_size=config.worker_num,
                              local_world_size=local_worker_num, group_rank=group_rank,
                              group_world_size=group_world_size, master_ip=master_ip,
                              master_port=config.master_port)
        if simulation and sim_rank_id != -1:
            env["RANK_ID"] = env["RANK"] = str(sim_rank_id)
        binding = bindings.workers[i]
        if bindings.cpu_lists[i]:
            env["MSRUN_CPU_LIST"] = bindings.cpu_lists[i]
        log_rank = rank if rank is not None else i
        name = f"rank {rank}" if rank is not None else f"local worker {i}"
        tail = config.join and (tailed is None or log_rank in tailed)
        processes.append(spec(name, WORKER, rank, i, env, binding, f"{base_name}_{log_rank}.log", tail))
    if config.join and tailed is not None:
        shown = {p.rank if p.rank is not None else p.local_rank for p in processes if p.role == WORKER}
        missing = sorted(set(tailed) - shown)
        if missing:
            warnings.append(f"--tail_worker_log: rank(s) {', '.join(map(str, missing))} do not run on this node; "
                            "their logs are not shown")
    logs = previous_logs(log_dir)
    for path in [*(p.log_path for p in processes), os.path.join(log_dir, LAUNCH_JSON)]:
        check_log_file(path, log_dir, logs)
    return Plan(tuple(processes), envs.base_env(environ), log_dir, tuple(warnings))


def _rank(config: LaunchConfig, local_rank: int) -> int | None:
    if not config.multi_node:
        return local_rank
    if config.node_rank >= 0:
        return config.node_rank * config.local_worker_num + local_rank
    return None


def _command(config: LaunchConfig) -> tuple[str, ...]:
    """The interpreter and script, as msrun runs them: `python` (found on PATH) in front of the
    script, unless the script is itself python, python3 or pytest."""
    if config.script in _NO_PREFIX:
        return (config.script, *config.script_args)
    return (config.python, config.script, *config.script_args)


def check_program(plan: Plan, config: LaunchConfig) -> None:
    """UsageError unless the program every process runs can be found the way exec will look for
    it: on the PATH of the children's environment, or at the path given."""
    command = plan.processes[0].command if plan.processes else ()
    if not command:
        return
    program = command[0]
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


def _check_script(config: LaunchConfig) -> None:
    if config.script in _NO_PREFIX:
        return
    if os.path.isdir(config.script):
        raise UsageError(f"script is a directory, {config.script!r} (relative to {os.getcwd()}): "
                         "give the Python file to run")
    if not os.path.isfile(config.script):
        raise UsageError(f"script does not exist, {config.script!r} (relative to {os.getcwd()}): check the path")


def check_log_dir(log_dir: str, what: str) -> None:
    """UsageError unless `log_dir` exists as a writable directory or can be created as one, reached
    through no link of another user and no directory others may write without the sticky bit (as
    ssh refuses loose permissions). Creates nothing."""
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
    """Walk `log_dir` as the kernel resolves it (links followed, at most 40): UsageError at a
    link owned by another user (not root) or a directory writable by others without the sticky
    bit, where another user could put their own file, link or directory in topo's place."""
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
    """Whether the resolved path `real` lies on a kernel pseudo-filesystem: the type of its
    mount (the longest mount point above it in /proc/self/mountinfo)."""
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
    """UsageError when topo cannot create the log file or record `path`: something it did not
    create in its place (a file not in `logs`, the previous record's, another user's, a directory,
    FIFO or link), or a subdirectory of --log_dir that cannot be made."""
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


def _worker_log_base(template: str, master_ip: str) -> str:
    if not template:
        return "worker"
    # as msrun substitutes, but literally (its re.sub reads a backslash in the host name as a
    # group reference): {ip} = this node's address towards the master
    name = template.replace("{hostname}", socket.gethostname())
    if "{ip}" in name:
        name = name.replace("{ip}", network.local_ip(master_ip))
    return name


def _bindings(config: LaunchConfig, n: int, environ: Mapping[str, str], topology) -> JobBindings:
    if not config.bind_core and not config.bind_numa:
        return JobBindings(UNBOUND, (UNBOUND,) * n, (), {}, (None,) * n)
    bind_numa = config.bind_numa
    if isinstance(bind_numa, str):  # a bind JSON file, read now
        bind_numa = parse_bind_numa(bind_numa)
    if topology is None:
        from topo.discovery import discover

        topology = discover()
    elif callable(topology):
        topology = topology()
    return resolve_bindings(config.bind_core, bind_numa, local_worker_num=n,
                            topology=topology, environ=environ, priority_cores=config.priority_cores)


def describe_plan(plan: Plan) -> str:
    """The dry-run text: per process its argv, log, binding and environment additions."""
    lines = [f"warning: {w}" for w in plan.warnings]
    for p in plan.processes:
        extra = f", DEVICE_ID={p.local_rank}" if p.local_rank is not None else ""
        lines.append(f"{p.name}{extra}: {shlex.join(p.argv)}")
        lines.append(f"  log: {p.log_path}")
        binding = p.binding.describe()
        if p.binding.direct:
            binding += f" (applied directly: {p.binding.note}; runs {shlex.join(p.command)})"
        lines.append(f"  binding: {binding}")
        lines.append("  env: " + " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(p.env.items())))
    return "\n".join(lines)


__all__ = ["ProcessSpec", "Plan", "plan_job", "describe_plan", "MANAGED_VARS", "check_log_dir"]
