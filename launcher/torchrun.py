"""`topo run`: torchrun's command line, per-worker environment, restarts and failure report, over
the same process group, supervisor and binding code as `topo launch`.

What torchrun 2.13 does and topo run does alike:
- flags, their `-`/`_` spellings and defaults; a missing `--master-port` on a single node means
  "localhost and a free port, run id a fresh UUID" (torchrun's local rendezvous), else 29500;
- workers run `${PYTHON_EXEC:-sys.executable} -u SCRIPT ARGS` (or `-m MODULE`, or the program
  itself with --no-python), each in its own session, with torchrun's variables (RANK, LOCAL_RANK,
  WORLD_SIZE, ..., TORCHELASTIC_ERROR_FILE under `<log dir>/<run id>_<random>/attempt_<n>/<local rank>/`);
- --max-restarts N restarts the whole local worker group after a failure, up to N times;
- a worker that fails after writing an error file (`@record`) has its exception and traceback
  reported as the root cause.

Where it differs, on purpose:
- rendezvous is static: every node is told its --node-rank (or Slurm tells it); no store runs
  inside topo, so TORCHELASTIC_USE_AGENT_STORE is "False" and rank 0's init_process_group hosts the
  TCPStore on MASTER_PORT (with "True" and no agent store, gloo waits forever);
- --numa-binding takes every topo mode (`topo plan --list-modes`), binds through numactl (or
  sched_setaffinity / set_mempolicy when numactl is missing), and verifies each worker in /proc;
- a failed job exits with the failing worker's code (torchrun always exits 1);
- a worker bound to N CPUs that K workers share gets OMP_NUM_THREADS=N // K, at least 1 (torchrun:
  1 for every worker when several share a node; unbound workers here get that too).
"""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from dataclasses import field
from typing import Callable, Mapping, Sequence, TextIO

from launcher.binding import UNBOUND, Binding
from launcher.environ import describe_threads
from topo.cpuset import MAX_SECONDS, SECONDS_FORM, ascii_number, ascii_seconds, excerpt
from topo.errors import UsageError
from topo.records import record

DEFAULT_MASTER_PORT = 29500
DEFAULT_SIGNALS = "SIGTERM,SIGINT,SIGHUP,SIGQUIT"
NO_ERROR_FILE = "<N/A>"
RDZV_BACKENDS = ("static", "c10d", "etcd", "etcd-v2")
MEMORY_POLICIES = ("none", "numa", "preferred")  # --memory with --numa-binding; none is torch's
STD_NONE, STD_OUT, STD_ERR = 0, 1, 2  # torchrun's Std flags: -r/-t values 0..3, per rank as "0:1,1:2"

# torchrun's defaults for the flags `topo run` shares with it (nnodes and nproc_per_node as text,
# because torchrun parses "1:1" and "gpu" later).
TORCHRUN_DEFAULTS: Mapping[str, object] = {
    "nnodes": "1:1", "nproc_per_node": "1", "node_rank": 0, "master_addr": "127.0.0.1", "master_port": None,
    "rdzv_backend": "static", "rdzv_endpoint": "", "rdzv_id": "none", "rdzv_conf": "", "standalone": False,
    "max_restarts": 0, "monitor_interval": 0.1, "start_method": "spawn", "role": "default",
    "module": False, "no_python": False, "run_path": False, "log_dir": None, "redirects": "0", "tee": "0",
    "local_ranks_filter": "", "signals_to_handle": DEFAULT_SIGNALS, "numa_binding": None,
    "local_addr": None, "event_log_handler": "null", "logs_specs": None, "duplicate_stdout_filters": "",
    "duplicate_stderr_filters": "", "virtual_local_rank": False,
}
DEFAULT_SHUTDOWN_TIMEOUT = 30.0  # torchrun's, when neither the flag nor TORCH_ELASTIC_SHUTDOWN_TIMEOUT is set


# ------------------------------------------------------------------ parsing torchrun's values
def parse_nnodes(text: str) -> int:
    """`N` or `N:N`. An elastic range (MIN < MAX) needs dynamic membership, which topo does not run."""
    numbers = [ascii_number(p.strip()) for p in str(text).strip().split(":")]
    if None in numbers:
        raise UsageError(f"--nnodes={text!r} is not a node count: give --nnodes=N")
    if len(numbers) > 2:
        raise UsageError(f"--nnodes={text!r} is not N or MIN:MAX: give --nnodes=N")
    low, high = numbers[0], numbers[-1]
    if low < 1:
        raise UsageError(f"--nnodes={text}: the node count must be at least 1")
    if low != high:
        raise UsageError(f"--nnodes={text}: topo run starts a fixed set of nodes (static rendezvous, no elastic "
                         f"membership); give --nnodes=N and each node its --node-rank")
    return low


def parse_std(text: str, flag: str) -> Callable[[int], int]:
    """torchrun's -r/-t value: one Std for every rank ("3"), or per local rank ("0:1,1:2", others 0)."""
    value = str(text).strip()

    def std(item: str) -> int:
        if item not in ("0", "1", "2", "3"):
            raise UsageError(f"{flag}={text!r}: {item!r} is not 0 (none), 1 (stdout), 2 (stderr) or 3 (both)")
        return int(item)

    if ":" not in value:
        every = std(value)
        return lambda rank: every
    per_rank: dict[int, int] = {}
    for part in value.split(","):
        rank_text, _, item = part.partition(":")
        rank = ascii_number(rank_text.strip())
        if rank is None:
            raise UsageError(f"{flag}={text!r}: {part!r} is not LOCAL_RANK:STD, as in 0:1,1:2")
        per_rank[rank] = std(item.strip())
    return lambda rank: per_rank.get(rank, STD_NONE)


def parse_ranks_filter(text: str) -> frozenset[int] | None:
    if not str(text).strip():
        return None
    ranks = frozenset(ascii_number(p.strip()) for p in str(text).split(","))
    if None in ranks:
        raise UsageError(f"--local-ranks-filter={text!r}: give a comma-separated list of local ranks, "
                         "e.g. --local-ranks-filter=0,1")
    return ranks


def parse_endpoint(text: str) -> tuple[str, int]:
    """`HOST:PORT` (`[::1]:29500` for IPv6); the port is required, as torchrun's static backend wants."""
    value = str(text).strip()
    m = re.fullmatch(r"\[([^\]]+)\]:([0-9]+)|([^:\[\]]+):([0-9]+)", value)
    if not m:
        raise UsageError(f"--rdzv-endpoint={text!r} is not HOST:PORT (IPv6: [ADDR]:PORT)")
    port = ascii_number(m.group(2) or m.group(4), 65535)
    if not port:
        raise UsageError(f"--rdzv-endpoint={text!r}: the port is outside 1-65535")
    return m.group(1) or m.group(3), port


def parse_signals(text: str) -> tuple[str, ...]:
    names = tuple(s.strip() for s in str(text).split(",") if s.strip())
    for name in names:
        if name not in signal.Signals.__members__:
            raise UsageError(f"--signals-to-handle: {name!r} is not a signal name (SIGTERM, SIGUSR1, ...)")
        if name in ("SIGKILL", "SIGSTOP"):
            raise UsageError(f"--signals-to-handle: {name} cannot be caught, so it cannot be forwarded; drop it")
    return names


def _check_port(port: int, flag: str) -> None:
    if not 1 <= port <= 65535:
        raise UsageError(f"{flag}: port {port} is outside 1-65535")


def nproc_from_text(text: str, environ: Mapping[str, str], topology: Callable) -> int:
    """--nproc-per-node: a number, or torchrun's words: `gpu` (the visible GPUs), `cpu` (the CPUs this
    process may use), `auto` (the visible accelerators, else the CPUs)."""
    value = str(text).strip()
    n = ascii_number(value)
    if n is not None:
        if n < 1:
            raise UsageError(f"--nproc-per-node={text}: start at least 1 worker")
        return n
    if value == "cpu":
        return len(os.sched_getaffinity(0))
    if value == "xpu":
        # torchrun counts torch.xpu's devices; topo's device probes know NVIDIA/AMD GPUs and Ascend NPUs
        raise UsageError("--nproc-per-node=xpu: topo does not count Intel XPUs; give the number of workers")
    if value in ("gpu", "auto"):
        from topo.visible import visible_devices

        devices = visible_devices(topology(), "gpu" if value == "gpu" else None, env=environ)
        if devices:
            return len(devices)
        if value == "gpu":
            raise UsageError("--nproc-per-node=gpu: no GPU is visible on this machine (see `topo show` and "
                             "CUDA_VISIBLE_DEVICES); give a number of workers")
        return len(os.sched_getaffinity(0))
    raise UsageError(f"--nproc-per-node={text!r}: give a number, or gpu, cpu, xpu or auto")


# ------------------------------------------------------------------ the configuration
@record
class RunConfig:
    """One `topo run` invocation, resolved: torchrun's flags with their defaults and Slurm's values
    applied, validated, no I/O.

    Args:
        script / script_args: the training script (a module with `module`, a program with `no_python`).
        nnodes / nproc_per_node / node_rank: the job's shape; rank = node_rank * nproc_per_node + local rank.
        master_addr / master_port: where rank 0's TCPStore listens; `master_port` None picks a
            free port on this node at launch (single-node jobs, as torchrun's local rendezvous).
        run_id: TORCHELASTIC_RUN_ID; "" means a fresh UUID at launch.
        max_restarts: restarts of the whole local worker group after a failure.
        monitor_interval: torchrun's polling period, checked and otherwise unused: the supervisor
            polls on its own schedule (5 ms, backing off to 100 ms).
        role: the workers' ROLE_NAME.
        log_dir: base directory of `<run id>_<random>/attempt_<n>/<local rank>/`; None: a new
            directory under the system's temporary directory, removed after a successful run.
        redirects / tee: per local rank, which of stdout (1) and stderr (2) go to files / to files
            and the console.
        local_ranks_filter: the local ranks whose output reaches the console (None: all).
        numa_binding / memory: a topo planner mode, and its memory policy (none, numa, preferred).
        bind_fallback: as topo launch's: a refused memory policy is dropped and the CPUs kept, a
            binding that does not take leaves the worker as the kernel placed it.
        dry_run: print every worker's argv, binding and environment; start nothing.
        grace_period: seconds between SIGTERM and SIGKILL when the workers are stopped
            (--shutdown-timeout, else TORCH_ELASTIC_SHUTDOWN_TIMEOUT, else 30).
        signals_to_handle: the signals forwarded to the workers to stop them; also
            TORCHELASTIC_SIGNALS_TO_HANDLE.
        virtual_local_rank: LOCAL_RANK=0 for every worker, CUDA_VISIBLE_DEVICES its own GPU.
        python: the interpreter ($PYTHON_EXEC, else the one running topo).
    """

    script: str
    script_args: tuple[str, ...] = ()
    nnodes: int = 1
    nproc_per_node: int = 1
    node_rank: int = 0
    master_addr: str = "127.0.0.1"
    master_port: int | None = DEFAULT_MASTER_PORT
    run_id: str = "none"
    max_restarts: int = 0
    monitor_interval: float = 0.1
    role: str = "default"
    module: bool = False
    no_python: bool = False
    run_path: bool = False
    log_dir: str | None = None
    redirects: str = "0"
    tee: str = "0"
    local_ranks_filter: frozenset[int] | None = None
    numa_binding: str | None = None
    memory: str = "none"
    bind_fallback: bool = False
    dry_run: bool = False
    grace_period: float = 30.0
    signals_to_handle: str = DEFAULT_SIGNALS
    virtual_local_rank: bool = False
    python: str = field(default_factory=lambda: sys.executable or "python3")

    def __post_init__(self):
        object.__setattr__(self, "script_args", tuple(self.script_args))
        if self.nnodes < 1:
            raise UsageError(f"--nnodes={self.nnodes}: the node count must be at least 1")
        if self.nproc_per_node < 1:
            raise UsageError(f"--nproc-per-node={self.nproc_per_node}: start at least 1 worker")
        if not 0 <= self.node_rank < self.nnodes:
            raise UsageError(f"--node-rank={self.node_rank} is not a node of --nnodes={self.nnodes}: "
                             f"give 0 to {self.nnodes - 1}")
        if self.master_port is not None:
            _check_port(self.master_port, "--master-port")
        if self.max_restarts < 0:
            raise UsageError(f"--max-restarts={self.max_restarts} must be 0 or more")
        if not 0 < self.monitor_interval <= MAX_SECONDS:  # nan fails both
            raise UsageError(f"--monitor-interval={self.monitor_interval} must be more than 0 seconds, "
                             f"at most {MAX_SECONDS}")
        if not 0 <= self.grace_period <= MAX_SECONDS:
            raise UsageError(f"--grace-period={self.grace_period} must be 0 to {MAX_SECONDS} seconds")
        if self.module and self.no_python and not self.run_path:
            raise UsageError("--no-python and --module together: a module needs the interpreter; drop one")
        if self.memory not in MEMORY_POLICIES:
            raise UsageError(f"--memory={self.memory!r}: choose one of {', '.join(MEMORY_POLICIES)}")
        if not self.role or any(c.isspace() for c in self.role):
            raise UsageError(f"--role={self.role!r}: give a name without spaces")
        parse_signals(self.signals_to_handle)
        parse_std(self.redirects, "--redirects")
        parse_std(self.tee, "--tee")

    @property
    def world_size(self) -> int:
        return self.nnodes * self.nproc_per_node

    def rank(self, local_rank: int) -> int:
        return self.node_rank * self.nproc_per_node + local_rank

    def streams(self, local_rank: int) -> tuple[int, int]:
        """(to files, to the console as well) for one local rank: Std flags, STD_OUT | STD_ERR."""
        tee = parse_std(self.tee, "--tee")(local_rank)
        return parse_std(self.redirects, "--redirects")(local_rank) | tee, tee


def config_from_flags(script: str, script_args: Sequence[str], given: Mapping[str, object], *,
                      environ: Mapping[str, str] | None = None, topology: Callable | None = None,
                      ) -> tuple[RunConfig, str | None]:
    """Resolve torchrun's flags as `topo run` got them (`given`: only those the user set, by
    option name) into a RunConfig, plus the line saying which values came from Slurm (or None).

    Order: the user's flags, then Slurm's values (inside an allocation), then torchrun's defaults.
    `topology` (a function returning it) is needed only for --nproc-per-node=gpu|auto.
    """
    environ = os.environ if environ is None else environ
    topology = topology or _discover
    flags = dict(given)
    if flags.get("standalone"):
        # torchrun: "--rdzv-backend, --rdzv-endpoint, --rdzv-id are auto-assigned and any explicitly
        # set values are ignored"; the job is this one node
        for name in ("rdzv_backend", "rdzv_endpoint", "rdzv_id", "master_addr", "master_port"):
            flags.pop(name, None)
        if "nnodes" in flags and parse_nnodes(str(flags["nnodes"])) != 1:
            raise UsageError(f"--standalone runs one node, but --nnodes={flags['nnodes']}: drop one of them")
        flags["nnodes"] = 1
    user = {k: (parse_nnodes(str(v)) if k == "nnodes" else v) for k, v in flags.items()}
    if environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID"):  # launcher.slurm.slurm_node's test
        from launcher import slurm

        from_slurm = slurm.run_defaults(environ, user)
        slurm_values, slurm_note = from_slurm.values, from_slurm.note()
    else:  # not in an allocation: nothing to take, nothing to import
        slurm_values, slurm_note = {}, None
    values = {**TORCHRUN_DEFAULTS, **slurm_values, **user}

    nnodes = values["nnodes"] if isinstance(values["nnodes"], int) else parse_nnodes(str(values["nnodes"]))
    nproc = values["nproc_per_node"]
    nproc = nproc if isinstance(nproc, int) else nproc_from_text(str(nproc), environ, topology)
    backend = str(values["rdzv_backend"])
    if backend not in RDZV_BACKENDS:
        raise UsageError(f"--rdzv-backend={backend!r}: topo run has the static rendezvous only; drop the flag")
    node_rank_known = "node_rank" in user or "node_rank" in slurm_values
    if backend != "static" and nnodes > 1 and not node_rank_known:
        raise UsageError(f"--rdzv-backend={backend} with --nnodes={nnodes}: topo run has no dynamic membership; "
                         "give each node --node-rank=N (Slurm's SLURM_NODEID does this inside an allocation) "
                         "and keep --rdzv-endpoint=HOST:PORT as rank 0's address")
    if values["rdzv_conf"]:
        raise UsageError(f"--rdzv-conf={values['rdzv_conf']!r}: the static rendezvous takes no options; drop it")
    if values["logs_specs"]:
        raise UsageError(f"--logs-specs={values['logs_specs']!r}: topo run writes torchrun's default log layout "
                         "(<log dir>/<run id>_<random>/attempt_<n>/<local rank>/) and loads no LogsSpecs plug-in; "
                         "drop it")
    for stream in ("stdout", "stderr"):
        if str(values[f"duplicate_{stream}_filters"]).strip():
            raise UsageError(f"--duplicate-{stream}-filters: topo run does not copy matching lines to "
                             f"filtered_{stream}.log; use -t/--tee and grep the {stream}.log files instead")

    master_addr = str(values["master_addr"])
    master_port = values["master_port"]
    run_id = str(values["rdzv_id"])
    if values["rdzv_endpoint"]:
        master_addr, master_port = parse_endpoint(str(values["rdzv_endpoint"]))
    elif master_port is None and nnodes == 1:
        # torchrun 2.13: one node and no port is a local rendezvous on localhost:0 with a new id
        master_addr, run_id = "localhost", ""
    elif master_port is None:
        master_port = DEFAULT_MASTER_PORT
    if values["standalone"]:
        master_addr, master_port, run_id = "localhost", None, ""

    config = RunConfig(
        script=script, script_args=tuple(script_args), nnodes=nnodes, nproc_per_node=nproc,
        node_rank=int(values["node_rank"]), master_addr=master_addr,
        master_port=None if master_port is None else int(master_port), run_id=run_id,
        max_restarts=int(values["max_restarts"]),
        monitor_interval=_seconds(values["monitor_interval"], "--monitor-interval"),
        role=str(values["role"]), module=bool(values["module"]), no_python=bool(values["no_python"]),
        run_path=bool(values["run_path"]), log_dir=values["log_dir"],
        redirects=str(values["redirects"]), tee=str(values["tee"]),
        local_ranks_filter=parse_ranks_filter(str(values["local_ranks_filter"])),
        numa_binding=values["numa_binding"], memory=str(values.get("memory") or "none"),
        bind_fallback=bool(values.get("bind_fallback", False)), dry_run=bool(values.get("dry_run", False)),
        grace_period=_shutdown_timeout(values.get("grace_period"), environ),
        signals_to_handle=str(values["signals_to_handle"]), virtual_local_rank=bool(values["virtual_local_rank"]),
        python=environ.get("PYTHON_EXEC") or sys.executable or "python3",
    )
    return config, slurm_note


def _shutdown_timeout(given, environ: Mapping[str, str]) -> float:
    """--shutdown-timeout, else TORCH_ELASTIC_SHUTDOWN_TIMEOUT, else 30 s (torchrun's order)."""
    if given is not None:
        return _seconds(given, "--shutdown-timeout")
    text = environ.get("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "").strip()
    if not text:
        return DEFAULT_SHUTDOWN_TIMEOUT
    seconds = ascii_seconds(text)
    if seconds is None:
        raise UsageError(f"TORCH_ELASTIC_SHUTDOWN_TIMEOUT={excerpt(text, 40)!r} is not {SECONDS_FORM}: fix it or "
                         "give --shutdown-timeout")
    return seconds


def _seconds(value, flag: str) -> float:
    """A duration flag's value: a number (click's SECONDS read it), or text read by ascii_seconds."""
    seconds = ascii_seconds(value.strip()) if isinstance(value, str) else float(value)
    if seconds is None:
        raise UsageError(f"{flag}={excerpt(value, 40)!r} is not {SECONDS_FORM}")
    return seconds


def _discover():
    from topo.discovery import discover

    return discover()


# ------------------------------------------------------------------ planning
@record
class RunPlan:
    """Everything decided before the first worker starts."""

    config: RunConfig
    command: tuple[str, ...]  # interpreter + script + args, without a binding prefix
    bindings: tuple[Binding, ...]  # by local rank
    direct: tuple[Binding | None, ...]  # by local rank: applied with system calls when numactl / taskset is missing
    master_port: int
    run_id: str
    base_env: Mapping[str, str]
    environ: Mapping[str, str]
    warnings: tuple[str, ...] = ()

    def worker_env(self, local_rank: int, restart_count: int, error_file: str) -> dict[str, str]:
        """torchrun's variables for one worker (local_elastic_agent._start_workers), plus topo's
        OMP_NUM_THREADS rule for bound workers."""
        from launcher.environ import sharers, thread_env

        c = self.config
        rank = c.rank(local_rank)
        binding = self.bindings[local_rank]
        env = {
            "LOCAL_RANK": str(local_rank), "RANK": str(rank), "GROUP_RANK": str(c.node_rank),
            "ROLE_RANK": str(rank), "ROLE_NAME": c.role, "LOCAL_WORLD_SIZE": str(c.nproc_per_node),
            "WORLD_SIZE": str(c.world_size), "GROUP_WORLD_SIZE": str(c.nnodes), "ROLE_WORLD_SIZE": str(c.world_size),
            "MASTER_ADDR": c.master_addr, "MASTER_PORT": str(self.master_port),
            "TORCHELASTIC_RESTART_COUNT": str(restart_count), "TORCHELASTIC_MAX_RESTARTS": str(c.max_restarts),
            "TORCHELASTIC_RUN_ID": self.run_id,
            # no agent store runs in topo: rank 0's init_process_group must host the TCPStore
            "TORCHELASTIC_USE_AGENT_STORE": "False",
            "TORCH_NCCL_ASYNC_ERROR_HANDLING": self.environ.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
            "TORCHELASTIC_ERROR_FILE": error_file,
            "TORCHELASTIC_SIGNALS_TO_HANDLE": c.signals_to_handle,
        }
        if c.virtual_local_rank:
            # torchrun's --virtual-local-rank: every worker is local rank 0 and sees only its own GPU,
            # the local_rank-th entry of CUDA_VISIBLE_DEVICES (or GPU local_rank when it is unset)
            env["LOCAL_RANK"] = "0"
            env["CUDA_VISIBLE_DEVICES"] = self.virtual_device(local_rank)
        env.update(thread_env(self.environ, binding, c.nproc_per_node, sharers(self.bindings)[local_rank]))
        return env

    def virtual_device(self, local_rank: int) -> str:
        visible = self.environ.get("CUDA_VISIBLE_DEVICES")
        if visible is None:
            return str(local_rank)
        ids = visible.split(",")
        if local_rank >= len(ids):
            raise UsageError(f"--virtual-local-rank: local rank {local_rank} has no GPU in "
                             f"CUDA_VISIBLE_DEVICES={visible}; start at most {len(ids)} workers")
        return ids[local_rank].strip()


def plan_run(config: RunConfig, *, environ: Mapping[str, str] | None = None,
             topology: Callable | object | None = None) -> RunPlan:
    """Check and decide everything (command, bindings, port, run id). Raises UsageError before
    anything is created or started."""
    from launcher.environ import base_env
    from launcher.job import check_log_dir, direct_binding  # the launcher's rules, shared with topo launch

    environ = dict(os.environ if environ is None else environ)
    command = _command(config)
    _check_command(config, command, environ)
    if config.log_dir:
        check_log_dir(config.log_dir, "--log-dir")
    warnings: list[str] = []
    bindings: tuple[Binding, ...] = (UNBOUND,) * config.nproc_per_node
    if config.numa_binding:
        bindings = _bindings(config, environ, topology, warnings)
    search_path = environ.get("PATH", os.defpath)
    direct = tuple(direct_binding(b, search_path) for b in bindings)
    port = config.master_port if config.master_port is not None else _free_port()
    run_id = config.run_id or _uuid4()
    plan = RunPlan(config, command, bindings, direct, port, run_id, base_env(environ), environ, tuple(warnings))
    if config.virtual_local_rank:
        for local_rank in range(config.nproc_per_node):
            plan.virtual_device(local_rank)  # a rank without a GPU is refused before anything starts
    return plan


def _command(config: RunConfig) -> tuple[str, ...]:
    """torchrun's argv: `python -u [-m] SCRIPT ARGS`, or the program itself with --no-python.
    --run-path (torchrun: runpy.run_path in its own interpreter) runs the script the same way
    `python -u SCRIPT` does: as __main__, with sys.argv = [SCRIPT, ARGS...]."""
    if config.run_path:
        return (config.python, "-u", config.script, *config.script_args)
    if config.no_python:
        return (config.script, *config.script_args)
    if config.module:
        return (config.python, "-u", "-m", config.script, *config.script_args)
    return (config.python, "-u", config.script, *config.script_args)


def _check_command(config: RunConfig, command: tuple[str, ...], environ: Mapping[str, str]) -> None:
    from launcher.environ import which

    program = command[0]
    path = environ.get("PATH", os.defpath)
    if "/" in program:
        if not (os.path.isfile(program) and os.access(program, os.X_OK)):
            what = "$PYTHON_EXEC" if not config.no_python else "the program"
            raise UsageError(f"{what} {program!r} is not an executable file: give one that runs")
    elif which(program, path) is None:
        raise UsageError(f"{program!r} is not on PATH: install it or give its path")
    if config.run_path and not os.path.isabs(config.script):
        raise UsageError(f"--run-path needs the script as an absolute path, got {config.script!r}")
    if config.run_path or (not config.no_python and not config.module):
        if not os.path.isfile(config.script):
            raise UsageError(f"script {config.script!r} does not exist (relative to {os.getcwd()})")


def _bindings(config: RunConfig, environ: Mapping[str, str], topology, warnings: list[str]) -> tuple[Binding, ...]:
    """Each local rank's binding from `planners.plan(topology, MODE, nproc=...)`: local rank r runs
    next to the r-th visible device (torchrun's rule), or on its share of the CPUs without devices."""
    import planners
    from launcher.binding import binding_of, device_ids

    if topology is None:
        topology = _discover()
    elif callable(topology):
        topology = topology()
    if not topology.is_this_system:
        raise UsageError(f"refusing to bind from a topology read below {topology.root!r}: it is not this machine")
    plan = planners.plan(topology, config.numa_binding, nproc=config.nproc_per_node, memory=config.memory)
    warnings.extend(plan.warnings)
    keys = [f"device{d}" for d in device_ids(topology, config.nproc_per_node, environ)]
    bindings = tuple(binding_of(plan.get(key), topology, memory_policy=plan.memory_policy) for key in keys)
    for rank, (key, b) in enumerate(zip(keys, bindings)):
        if not b.is_bound:
            warnings.append(f"local rank {rank}: mode {config.numa_binding} gives {key} no binding; it runs unbound")
    return bindings


def _uuid4() -> str:
    """A random UUID in its text form, as torchrun's run id (uuid.uuid4() without importing uuid,
    which costs the launcher more start-up time than the rest of this module)."""
    value = int.from_bytes(os.urandom(16), "big")
    value = (value & ~(0xF000 << 64)) | (4 << 76)  # version 4
    value = (value & ~(0xC000 << 48)) | (0x8000 << 48)  # RFC 4122 variant
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _free_port() -> int:
    """A TCP port free on every interface now, for rank 0's TCPStore (torchrun binds port 0 likewise)."""
    import _socket  # socket's C module, the same calls without socket.py's enums (about 2 ms to import)

    s = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
    try:
        s.bind(("", 0))
        return s.getsockname()[1]
    finally:
        s.close()


# ------------------------------------------------------------------ running
@record
class RunResult:
    """How a `topo run` job ended."""

    exit_code: int  # 0, the failing worker's code (128 + N for signal N), or 128 + a signal we got
    plan: RunPlan
    restarts: int = 0  # how many times the worker group was started again
    failure: Failure | None = None  # the root cause of the last attempt's failure
    run_dir: str | None = None  # <log dir>/<run id>_<random>; None for a dry run or once removed


def run(config: RunConfig, *, environ: Mapping[str, str] | None = None, topology=None,
        out: TextIO | None = None, err: TextIO | None = None) -> RunResult:
    """Start the local worker group of `config`, follow it, restart it after a failure up to
    `max_restarts` times, and report. `out` gets the dry-run text and tee'd output, `err` the
    launcher's messages and the failure report. Must run on a thread that lives as long as the
    job (the workers die with it)."""
    from launcher.procgroup import check_open_file_limit

    out = out or sys.stdout
    err = err or sys.stderr
    plan = plan_run(config, environ=environ, topology=topology)
    if config.dry_run:
        print(describe_run(plan), file=out)
        return RunResult(0, plan)
    check_open_file_limit()

    def say(text: str) -> None:
        print(f"topo run: {text}", file=err, flush=True)

    for warning in plan.warnings:
        say(f"warning: {warning}")
    if config.nproc_per_node > 1 and "OMP_NUM_THREADS" not in plan.environ and not config.numa_binding:
        say(f"OMP_NUM_THREADS=1 for each of the {config.nproc_per_node} workers (they share this node's CPUs); "
            "set OMP_NUM_THREADS to tune it")
    threads = describe_threads([f"rank {config.rank(r)}" for r in range(config.nproc_per_node)], plan.bindings,
                               [plan.worker_env(r, 0, "") for r in range(config.nproc_per_node)])
    if threads:
        say(threads)
    run_dir = _make_run_dir(config, plan.run_id)
    restart = 0
    while True:
        code, failure, others = _attempt(plan, restart, run_dir, out, say)
        if code == 0 or failure is None or restart >= config.max_restarts:
            break
        left = config.max_restarts - restart
        say(f"[{config.role}] worker group failed (rank {failure.rank}: {_describe(failure.exitcode)}); "
            f"restarting it, {left} of {config.max_restarts} restarts left")
        restart += 1
    if failure is not None:
        print(format_failures(f"{config.script} FAILED", failure, others), file=err, flush=True)
        say(f"rank {failure.rank} (local rank {failure.local_rank}) failed with "
            f"{_describe(failure.exitcode)} on attempt {restart}; logs and error files under {run_dir}")
    elif config.log_dir is None:  # a success, or a stop by signal: no error file to keep
        _remove_tree(os.path.dirname(run_dir))  # the temporary base made for this run
        run_dir = None
    return RunResult(code, plan, restart, failure, run_dir)


def _attempt(plan: RunPlan, restart: int, run_dir: str, out: TextIO,
             say) -> tuple[int, Failure | None, tuple[Failure, ...]]:
    """Start the worker group once and follow it to its end: (exit code, the root cause or None,
    the other workers that ended badly, those stopped because of it included)."""
    from launcher.procgroup import ProcessGroup, ProcessSpec
    from launcher.supervisor import LAUNCH_JSON, Supervisor, exit_code, write_launch_json

    config = plan.config
    attempt_dir = os.path.join(run_dir, f"attempt_{restart}")
    specs = []
    try:
        os.makedirs(attempt_dir, exist_ok=True)
        for local_rank in range(config.nproc_per_node):
            rank_dir = os.path.join(attempt_dir, str(local_rank))
            os.makedirs(rank_dir, exist_ok=True)
            error_file = os.path.join(rank_dir, "error.json")
            if os.path.exists(error_file):
                os.unlink(error_file)
            binding = plan.bindings[local_rank]
            stdout, stderr, tail = _streams(config, local_rank, rank_dir)
            specs.append(ProcessSpec(
                f"rank {config.rank(local_rank)}", (*binding.prefix, *plan.command),
                plan.worker_env(local_rank, restart, error_file), stdout, binding,
                plan.direct[local_rank], config.role, config.rank(local_rank), local_rank, tail,
                stderr_path=stderr))
    except OSError as exc:
        from launcher.procgroup import LaunchError

        raise LaunchError(f"cannot create the run's files, {exc.filename}: {exc.strerror}; "
                          "give a writable --log-dir") from None
    group = ProcessGroup(specs, plan.base_env, job_id=os.urandom(8).hex(), inherit_stdin=True,
                         die_with_launcher=True, adopt_orphans=True, bind_fallback=config.bind_fallback)
    record = os.path.join(attempt_dir, LAUNCH_JSON)

    def write_record(start_times: bool) -> None:
        write_launch_json(record, group, join=True, log_dir=attempt_dir, grace_period=config.grace_period,
                          start_times=start_times)

    # the pids' start times (psutil) are recorded once the group has run a second, as topo launch does
    supervisor = Supervisor(group, grace_period=config.grace_period, bind_fallback=config.bind_fallback,
                            out=out, say=say, after_a_second=lambda: write_record(True))
    supervisor.install_signal_handlers(tuple(signal.Signals[name] for name in parse_signals(config.signals_to_handle)))
    try:
        group.start()
        supervisor.verify_all()
        write_record(False)
        result = supervisor.join()
    except BaseException:
        group.stop(signal.SIGTERM, config.grace_period, say=say)
        raise
    finally:
        supervisor.restore_signal_handlers()
        group.close()
    first = result.failed_process
    if first is None:  # success, or stopped by a signal
        return result.exit_code, None, ()
    failed = [p for p in result.processes if p.popen.returncode not in (None, 0)]

    def failure(p) -> Failure:
        return read_failure(rank=p.spec.rank, local_rank=p.spec.local_rank, pid=p.pid,
                            exitcode=p.popen.returncode, error_file=p.spec.env["TORCHELASTIC_ERROR_FILE"])

    return exit_code(first.popen.returncode), failure(first), tuple(failure(p) for p in failed if p is not first)


def _streams(config: RunConfig, local_rank: int, rank_dir: str) -> tuple[str | None, str, bool]:
    """(stdout file, stderr file, copy them to the console) for one worker. None: the console;
    a rank outside --local-ranks-filter writes what is not redirected to /dev/null, as torchrun."""
    from launcher.procgroup import INHERIT

    to_files, to_console = config.streams(local_rank)
    shown = config.local_ranks_filter is None or local_rank in config.local_ranks_filter
    hidden = None if shown else os.devnull
    stdout = os.path.join(rank_dir, "stdout.log") if to_files & STD_OUT else hidden
    stderr = os.path.join(rank_dir, "stderr.log") if to_files & STD_ERR else (hidden or INHERIT)
    return stdout, stderr, bool(to_console) and shown


def _make_run_dir(config: RunConfig, run_id: str) -> str:
    """`<log dir>/<run id>_<random>`, torchrun's layout; without --log-dir the base is a new
    `torchelastic_<random>` directory under the temporary directory."""
    from launcher.procgroup import LaunchError

    try:
        if config.log_dir:
            os.makedirs(config.log_dir, exist_ok=True)
            base = config.log_dir
        else:
            base = _mkdtemp("torchelastic_")
        return _mkdtemp(f"{run_id}_", base)
    except OSError as exc:
        raise LaunchError(f"cannot create the run directory, {exc.filename or config.log_dir}: {exc.strerror}; "
                          "give a writable --log-dir") from None


_NAME_CHARACTERS = "abcdefghijklmnopqrstuvwxyz0123456789_"  # tempfile's


def _mkdtemp(prefix: str, parent: str | None = None) -> str:
    """`tempfile.mkdtemp(prefix=prefix, dir=parent)` without importing tempfile (which imports
    shutil and random): a new private (0700) directory `<parent>/<prefix><8 random characters>`.
    Without `parent`, in the first of tempfile's candidates where one can be made: $TMPDIR, $TEMP,
    $TMP, /tmp, /var/tmp, /usr/tmp, the current directory."""
    if parent is not None:
        bases = [parent]
    else:
        named = [os.path.abspath(d) for d in (os.environ.get(v) for v in ("TMPDIR", "TEMP", "TMP")) if d]
        bases = [*named, "/tmp", "/var/tmp", "/usr/tmp", os.getcwd()]
    error: OSError = FileNotFoundError(2, f"No usable temporary directory found in {bases}")
    for base in bases:
        for _ in range(100 if parent is None else 10000):
            name = os.path.join(base, prefix + "".join(_NAME_CHARACTERS[b % len(_NAME_CHARACTERS)]
                                                       for b in os.urandom(8)))
            try:
                os.mkdir(name, 0o700)
                return name
            except FileExistsError:
                continue
            except OSError as exc:
                if parent is not None:
                    raise
                error = exc
                break
    raise error


def _remove_tree(path: str) -> None:
    """`shutil.rmtree(path, ignore_errors=True)` for a directory this run made, without importing
    shutil: its files and directories bottom-up, a symbolic link removed as itself, errors ignored."""
    if os.path.islink(path):
        return  # rmtree refuses to follow one
    for root, dirs, files in os.walk(path, topdown=False):
        for name in files:
            _ignore_oserror(os.unlink, os.path.join(root, name))
        for name in dirs:
            entry = os.path.join(root, name)
            _ignore_oserror(os.unlink if os.path.islink(entry) else os.rmdir, entry)
    _ignore_oserror(os.rmdir, path)


def _ignore_oserror(remove, path: str) -> None:
    try:
        remove(path)
    except OSError:
        pass


def _describe(code: int) -> str:
    if code < 0:
        name = _signal_name(-code)
        return f"signal {-code}" + (f" ({name})" if name else "")
    return f"exit code {code}"


def describe_run(plan: RunPlan) -> str:
    """The dry-run text: per worker its argv, binding and torchrun environment."""
    import shlex

    config = plan.config
    lines = [f"warning: {w}" for w in plan.warnings]
    lines.append(f"run id {plan.run_id}, {config.nnodes} node(s) x {config.nproc_per_node} worker(s), "
                 f"node rank {config.node_rank}, master {config.master_addr}:{plan.master_port}, "
                 f"restarts up to {config.max_restarts}")
    for local_rank, binding in enumerate(plan.bindings):
        env = plan.worker_env(local_rank, 0, f"<run dir>/attempt_0/{local_rank}/error.json")
        lines.append(f"rank {config.rank(local_rank)}, local rank {local_rank}: "
                     f"{shlex.join((*binding.prefix, *plan.command))}")
        lines.append(f"  binding: {binding.describe()}")
        lines.append("  env: " + " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items())))
    return "\n".join(lines)


# ------------------------------------------------------------------ error files
@record
class Failure:
    """One failed worker, as torchrun's ProcessFailure reports it."""

    rank: int
    local_rank: int
    pid: int
    exitcode: int  # negative: killed by that signal
    error_file: str
    message: str  # the exception ("ValueError: boom") or a description of the exit
    traceback: str  # the worker's Python traceback from its error file, "" without one
    timestamp: int

    @property
    def signal_name(self) -> str:
        if self.exitcode < 0:
            try:
                return signal.Signals(-self.exitcode).name
            except ValueError:
                return ""
        return ""


def read_failure(*, rank: int, local_rank: int, pid: int, exitcode: int, error_file: str) -> Failure:
    """A failed worker, with the root cause its error file holds when it wrote one (torch's
    `@record` / ErrorHandler format: {"message": {"message": "...", "extraInfo": {"py_callstack":
    "...", "timestamp": "..."}}}, or the older {"message": "...", "timestamp": ...})."""
    import json

    data = None
    try:
        with open(error_file) as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        data = None
    message = traceback = ""
    timestamp = int(time.time())
    if isinstance(data, dict) and "message" in data:
        raw = data["message"]
        if isinstance(raw, dict):
            message = str(raw.get("message", ""))
            extra = raw.get("extraInfo") or {}
            traceback = str(extra.get("py_callstack", "")) if isinstance(extra, dict) else ""
            stamp = extra.get("timestamp") if isinstance(extra, dict) else None
        else:
            message, stamp = str(raw), data.get("timestamp")
        try:
            timestamp = int(stamp)
        except (TypeError, ValueError):
            pass
    else:
        error_file = NO_ERROR_FILE
    if not message:
        if exitcode < 0:
            name = _signal_name(-exitcode)
            message = f"Signal {-exitcode} ({name}) received by PID {pid}" if name else f"Signal {-exitcode} received by PID {pid}"
        else:
            message = ("no error file: decorate the script's main() with "
                       "torch.distributed.elastic.multiprocessing.errors.record to get its traceback here")
    return Failure(rank, local_rank, pid, exitcode, error_file, message, traceback, timestamp)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return ""


def format_failures(title: str, root: Failure, others: Sequence[Failure]) -> str:
    """torchrun's ChildFailedError report: the other failures, then the root cause (first observed)."""
    import socket

    def block(i: int, f: Failure) -> str:
        when = time.strftime("%Y-%m-%d_%H:%M:%S", time.localtime(f.timestamp))
        sig = f" ({f.signal_name})" if f.signal_name else ""
        text = f.traceback or f.message
        text = text.rstrip("\n").replace("\n", "\n  ")
        return (f"[{i}]:\n  time      : {when}\n  host      : {socket.getfqdn()}\n"
                f"  rank      : {f.rank} (local_rank: {f.local_rank})\n"
                f"  exitcode  : {f.exitcode} (pid: {f.pid}){sig}\n  error_file: {f.error_file}\n"
                f"  traceback : {text}")

    blocks = [block(i + 1, f) for i, f in enumerate(others)]
    width = min(max([len(title)] + [len(line) for b in blocks + [block(0, root)] for line in b.split("\n")]), 60)
    return "\n".join([
        "=" * width, title, "-" * width, "Failures:", "\n".join(blocks) or "  <NO_OTHER_FAILURES>", "-" * width,
        "Root Cause (first observed failure):", block(0, root), "=" * width])


__all__ = ["RunConfig", "RunPlan", "config_from_flags", "plan_run", "read_failure", "format_failures",
           "Failure", "TORCHRUN_DEFAULTS", "parse_nnodes", "parse_std", "parse_endpoint", "nproc_from_text"]
