"""torchrun's flags for `topo run`: their defaults (TORCHRUN_DEFAULTS, the one place they are
written), the parsers of their values, and RunConfig, the resolved and checked configuration that
`config_from_flags` makes of what the user gave, Slurm's values and the defaults.
"""

from __future__ import annotations

import os
import re
import signal
import sys
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from topo.launcher import network, slurm
from topo.binding import MAX_PROCESSES
from topo.cpuset import excerpt
from topo.numbers import MAX_SECONDS, SECONDS_FORM, ascii_number, ascii_seconds
from topo.errors import UsageError

DEFAULT_MASTER_PORT = 29500
DEFAULT_SIGNALS = "SIGTERM,SIGINT,SIGHUP,SIGQUIT"
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
    n = ascii_number(value, most=1 << 63)
    if n is not None:
        if n < 1:
            raise UsageError(f"--nproc-per-node={text}: start at least 1 worker")
        if n > MAX_PROCESSES:
            raise UsageError(f"--nproc-per-node={n} is more than {MAX_PROCESSES} processes on one node: "
                             "start fewer")
        return n
    if value == "cpu":
        return len(os.sched_getaffinity(0))
    if value == "xpu":
        # torchrun counts torch.xpu's devices; topo's device probes know NVIDIA/AMD GPUs and Ascend NPUs
        raise UsageError("--nproc-per-node=xpu: topo does not count Intel XPUs; give the number of workers")
    if value in ("gpu", "auto"):
        from topo.visible import visible_devices  # the model and device probes: only for gpu / auto

        devices = visible_devices(topology(), "gpu" if value == "gpu" else None, env=environ)
        if devices:
            return len(devices)
        if value == "gpu":
            raise UsageError("--nproc-per-node=gpu: no GPU is visible on this machine (see `topo show` and "
                             "CUDA_VISIBLE_DEVICES); give a number of workers")
        return len(os.sched_getaffinity(0))
    raise UsageError(f"--nproc-per-node={text!r}: give a number, or gpu, cpu, xpu or auto")


_DEFAULT_NNODES = parse_nnodes(str(TORCHRUN_DEFAULTS["nnodes"]))
_DEFAULT_NPROC = int(str(TORCHRUN_DEFAULTS["nproc_per_node"]))


# ------------------------------------------------------------------ the configuration
@dataclass(frozen=True)
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
    nnodes: int = _DEFAULT_NNODES
    nproc_per_node: int = _DEFAULT_NPROC
    node_rank: int = TORCHRUN_DEFAULTS["node_rank"]
    master_addr: str = TORCHRUN_DEFAULTS["master_addr"]
    master_port: int | None = DEFAULT_MASTER_PORT
    run_id: str = TORCHRUN_DEFAULTS["rdzv_id"]
    max_restarts: int = TORCHRUN_DEFAULTS["max_restarts"]
    monitor_interval: float = TORCHRUN_DEFAULTS["monitor_interval"]
    role: str = TORCHRUN_DEFAULTS["role"]
    module: bool = TORCHRUN_DEFAULTS["module"]
    no_python: bool = TORCHRUN_DEFAULTS["no_python"]
    run_path: bool = TORCHRUN_DEFAULTS["run_path"]
    log_dir: str | None = TORCHRUN_DEFAULTS["log_dir"]
    redirects: str = TORCHRUN_DEFAULTS["redirects"]
    tee: str = TORCHRUN_DEFAULTS["tee"]
    local_ranks_filter: frozenset[int] | None = None
    numa_binding: str | None = TORCHRUN_DEFAULTS["numa_binding"]
    memory: str = "none"
    bind_fallback: bool = False
    dry_run: bool = False
    grace_period: float = DEFAULT_SHUTDOWN_TIMEOUT
    signals_to_handle: str = TORCHRUN_DEFAULTS["signals_to_handle"]
    virtual_local_rank: bool = TORCHRUN_DEFAULTS["virtual_local_rank"]
    python: str = field(default_factory=lambda: sys.executable or "python3")

    def __post_init__(self):
        if not isinstance(self.script_args, tuple):
            raise TypeError("RunConfig takes script_args as a tuple")
        if self.nnodes < 1:
            raise UsageError(f"--nnodes={self.nnodes}: the node count must be at least 1")
        if self.nproc_per_node < 1:
            raise UsageError(f"--nproc-per-node={self.nproc_per_node}: start at least 1 worker")
        if self.nproc_per_node > MAX_PROCESSES:
            raise UsageError(f"--nproc-per-node={self.nproc_per_node} is more than {MAX_PROCESSES} "
                             "processes on one node: start fewer")
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
    network.check_host(master_addr.strip("[]"), f"--master-addr={excerpt(master_addr)!r}")

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
    from topo.discovery import discover  # the probes: only when something needs this machine's topology

    return discover()


__all__ = ["RunConfig", "config_from_flags", "TORCHRUN_DEFAULTS", "DEFAULT_SHUTDOWN_TIMEOUT", "parse_nnodes",
           "parse_std", "parse_endpoint", "parse_signals", "parse_ranks_filter", "nproc_from_text", "STD_OUT", "STD_ERR"]
