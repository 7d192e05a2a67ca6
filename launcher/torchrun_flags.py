"""torchrun's flags for `topo run`: defaults (TORCHRUN_DEFAULTS), where torch releases differ
(TORCHRUN_RELEASES), parsers of their values, and RunConfig, resolved by `config_from_flags`."""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import sys
from dataclasses import dataclass, field, fields
from typing import Callable, Mapping, Sequence

from topo.launcher import network, slurm
from topo.binding import MAX_PROCESSES, MEMORY
from topo.cpuset import excerpt
from topo.numbers import MAX_SECONDS, SECONDS_FORM, ascii_number, ascii_seconds
from topo.errors import UsageError

DEFAULT_MASTER_PORT = 29500
DEFAULT_SIGNALS = "SIGTERM,SIGINT,SIGHUP,SIGQUIT"
STD_NONE, STD_OUT, STD_ERR = 0, 1, 2  # torchrun's Std flags: -r/-t values 0..3, per rank as "0:1,1:2"
DEFAULT_LINE_PREFIX = "[${role_name}${local_rank}]:"  # torchrun's prefix of a tee'd line

# torchrun's defaults (newest release) of the flags `topo run` shares; nnodes and nproc_per_node as text
TORCHRUN_DEFAULTS: Mapping[str, object] = {
    "nnodes": "1:1", "nproc_per_node": "1", "node_rank": 0, "master_addr": "127.0.0.1", "master_port": None,
    "rdzv_backend": "static", "rdzv_endpoint": "", "rdzv_id": "none", "rdzv_conf": "", "standalone": False,
    "max_restarts": 0, "monitor_interval": 0.1, "start_method": "spawn", "role": "default",
    "module": False, "no_python": False, "run_path": False, "log_dir": None, "redirects": "0", "tee": "0",
    "local_ranks_filter": "", "signals_to_handle": DEFAULT_SIGNALS, "numa_binding": None,
    "local_addr": None, "event_log_handler": "null", "logs_specs": None, "duplicate_stdout_filters": "",
    "duplicate_stderr_filters": "", "virtual_local_rank": False, "log_line_prefix_template": "",
}
DEFAULT_SHUTDOWN_TIMEOUT = 30.0  # torchrun's, when neither the flag nor TORCH_ELASTIC_SHUTDOWN_TIMEOUT is set


@dataclass(frozen=True)
class TorchrunRelease:
    """What torchrun does where its releases differ, from `release` until the next row's. Flags a
    release added (2.10: --signals-to-handle, --virtual-local-rank, --duplicate-*-filters; 2.12:
    --shutdown-timeout; 2.14: --log-line-prefix-template, --print-completion) are always accepted."""

    release: tuple[int, int]
    master_port: int | None  # --master-port's default; None: one node without a port is a local rendezvous
    signals_variable: bool  # the workers get TORCHELASTIC_SIGNALS_TO_HANDLE
    cpu_word_allowed: bool  # --nproc-per-node=cpu counts the CPUs this process may use, else all online
    hip_virtual_devices: bool  # --virtual-local-rank maps HIP_VISIBLE_DEVICES when it is set


TORCHRUN_RELEASES = (  # oldest first; 2.9 is the first with --numa-binding
    TorchrunRelease((2, 9), DEFAULT_MASTER_PORT, False, False, False),
    TorchrunRelease((2, 10), DEFAULT_MASTER_PORT, True, False, False),
    TorchrunRelease((2, 12), None, True, True, False),
    TorchrunRelease((2, 15), None, True, True, True),
)
TORCH_VERSION_LIMIT = 4096  # bytes of torch/version.py read at most: it is a few lines


def torchrun_release(version: tuple[int, int] | None) -> TorchrunRelease:
    """The row for torch `version`: the newest for None (no torch) or newer, the oldest for older."""
    rows = [r for r in TORCHRUN_RELEASES if version is None or r.release <= version]
    return rows[-1] if rows else TORCHRUN_RELEASES[0]


def installed_torch() -> tuple[int, int] | None:
    """(major, minor) of the torch this interpreter would import, read from its torch/version.py
    without importing torch (which takes a second); None when there is none."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for where in spec.submodule_search_locations:
        try:
            with open(os.path.join(where, "version.py"), "rb") as fh:
                text = fh.read(TORCH_VERSION_LIMIT).decode("ascii", "replace")
        except OSError:
            continue
        m = re.search(r"^__version__\s*=\s*['\"]([0-9]{1,4})\.([0-9]{1,4})", text, re.M)
        if m:
            return int(m.group(1)), int(m.group(2))
    return None


def torchrun_defaults(release: TorchrunRelease) -> dict[str, object]:
    return {**TORCHRUN_DEFAULTS, "master_port": release.master_port}


def parse_nnodes(text: str) -> tuple[int, int]:
    """`N`, or `MIN:MAX` (an elastic job: torch's rendezvous admits MIN to MAX nodes)."""
    numbers = [ascii_number(p.strip()) for p in str(text).strip().split(":")]
    if None in numbers:
        raise UsageError(f"--nnodes={text!r} is not a node count: give --nnodes=N or MIN:MAX")
    if len(numbers) > 2:
        raise UsageError(f"--nnodes={text!r} is not N or MIN:MAX")
    low, high = numbers[0], numbers[-1]
    if low < 1:
        raise UsageError(f"--nnodes={text}: the node count must be at least 1")
    if low > high:
        raise UsageError(f"--nnodes={text}: MIN is more than MAX; give MIN:MAX")
    return low, high


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


def nproc_from_text(text: str, environ: Mapping[str, str], topology: Callable,
                    release: TorchrunRelease = TORCHRUN_RELEASES[-1]) -> int:
    """--nproc-per-node: a number, or torchrun's words: `gpu` (the visible GPUs), `cpu` (the CPUs this
    process may use; every online CPU before torch 2.12), `auto` (the visible accelerators, else the
    CPUs)."""
    value = str(text).strip()
    n = ascii_number(value, most=1 << 63)
    if n is not None:
        return n  # RunConfig checks the count
    cpus = len(os.sched_getaffinity(0)) if release.cpu_word_allowed else (os.cpu_count() or 1)
    if value == "cpu":
        return cpus
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
        return cpus
    raise UsageError(f"--nproc-per-node={text!r}: give a number, or gpu, cpu, xpu or auto")


@dataclass(frozen=True)
class RunConfig:
    """One `topo run` invocation, resolved: torchrun's flags with their defaults and Slurm's values
    applied, validated, no I/O. Rank = node_rank * nproc_per_node + local rank."""

    script: str
    script_args: tuple[str, ...] = ()
    nnodes: int = 1  # the most nodes; min_nodes the fewest an elastic job starts with
    nproc_per_node: int = 1
    node_rank: int = TORCHRUN_DEFAULTS["node_rank"]
    master_addr: str = TORCHRUN_DEFAULTS["master_addr"]  # where rank 0's TCPStore listens
    master_port: int | None = DEFAULT_MASTER_PORT  # None: a free port at launch (torchrun's local rendezvous)
    run_id: str = TORCHRUN_DEFAULTS["rdzv_id"]  # TORCHELASTIC_RUN_ID; "": a fresh UUID at launch
    min_nodes: int | None = None  # None: nnodes
    torch_agent: str | None = None  # the flag that makes torch's agent run the job; None: topo's static plan
    rdzv_backend: str = TORCHRUN_DEFAULTS["rdzv_backend"]
    rdzv_endpoint: str = TORCHRUN_DEFAULTS["rdzv_endpoint"]
    rdzv_conf: str = TORCHRUN_DEFAULTS["rdzv_conf"]
    local_addr: str | None = TORCHRUN_DEFAULTS["local_addr"]
    max_restarts: int = TORCHRUN_DEFAULTS["max_restarts"]  # of the whole local worker group
    monitor_interval: float = TORCHRUN_DEFAULTS["monitor_interval"]  # torch's agent's; topo polls every 5-100 ms
    role: str = TORCHRUN_DEFAULTS["role"]
    module: bool = TORCHRUN_DEFAULTS["module"]
    no_python: bool = TORCHRUN_DEFAULTS["no_python"]
    run_path: bool = TORCHRUN_DEFAULTS["run_path"]
    log_dir: str | None = TORCHRUN_DEFAULTS["log_dir"]  # None: a temporary one, removed after a success
    redirects: str = TORCHRUN_DEFAULTS["redirects"]  # per local rank, the Std streams that go to files
    tee: str = TORCHRUN_DEFAULTS["tee"]  # per local rank, the Std streams that go to files and the console
    local_ranks_filter: frozenset[int] | None = None  # the local ranks shown on the console; None: all
    line_prefix: str = DEFAULT_LINE_PREFIX  # a tee'd line's: ${role_name}, ${rank}, ${local_rank}, ${hostname}
    numa_binding: str | None = TORCHRUN_DEFAULTS["numa_binding"]
    memory: str = "none"  # the memory policy of the numa_binding mode (planners' MEMORY); none is torch's
    priority_cores: bool = False  # each worker's first CPU on a priority core (planners.priority)
    bind_fallback: bool = False  # as topo launch's: a refused memory policy dropped, the CPUs kept
    dry_run: bool = False  # print every worker's argv, binding and environment; start nothing
    grace_period: float = DEFAULT_SHUTDOWN_TIMEOUT  # seconds from SIGTERM to SIGKILL
    signals_to_handle: str = TORCHRUN_DEFAULTS["signals_to_handle"]  # forwarded to stop the workers
    virtual_local_rank: bool = TORCHRUN_DEFAULTS["virtual_local_rank"]  # LOCAL_RANK=0, each worker its own GPU
    torch_extras: Mapping[str, object] = field(default_factory=dict)  # TORCH_AGENT_OPTIONS, as given
    torchrun: TorchrunRelease = TORCHRUN_RELEASES[-1]  # the release followed: the installed torch's
    python: str = field(default_factory=lambda: sys.executable or "python3")  # $PYTHON_EXEC, else this one

    def __post_init__(self):
        if not isinstance(self.script_args, tuple):
            raise TypeError("RunConfig takes script_args as a tuple")
        if self.nnodes < 1:
            raise UsageError(f"--nnodes={self.nnodes}: the node count must be at least 1")
        if self.min_nodes is not None and not 1 <= self.min_nodes <= self.nnodes:
            raise UsageError(f"--nnodes={self.min_nodes}:{self.nnodes}: give 1 <= MIN <= MAX")
        if self.nproc_per_node < 1:
            raise UsageError(f"--nproc-per-node={self.nproc_per_node}: start at least 1 worker")
        if self.nproc_per_node > MAX_PROCESSES:
            raise UsageError(f"--nproc-per-node={self.nproc_per_node} is more than {MAX_PROCESSES} "
                             "processes on one node: start fewer")
        if not 0 <= self.node_rank < self.nnodes:
            raise UsageError(f"--node-rank={self.node_rank} is not a node of --nnodes={self.nnodes}: "
                             f"give 0 to {self.nnodes - 1}")
        if self.master_port is not None and not 1 <= self.master_port <= 65535:
            raise UsageError(f"--master-port: port {self.master_port} is outside 1-65535")
        if self.max_restarts < 0:
            raise UsageError(f"--max-restarts={self.max_restarts} must be 0 or more")
        if not 0 < self.monitor_interval <= MAX_SECONDS:  # nan fails both
            raise UsageError(f"--monitor-interval={self.monitor_interval} must be more than 0 seconds, "
                             f"at most {MAX_SECONDS}")
        if not 0 <= self.grace_period <= MAX_SECONDS:
            raise UsageError(f"--grace-period={self.grace_period} must be 0 to {MAX_SECONDS} seconds")
        if self.module and self.no_python and not self.run_path:
            raise UsageError("--no-python and --module together: a module needs the interpreter; drop one")
        if self.memory not in MEMORY:
            raise UsageError(f"--memory={self.memory!r}: choose one of {', '.join(MEMORY)}")
        if not self.role or any(c.isspace() for c in self.role):
            raise UsageError(f"--role={self.role!r}: give a name without spaces")
        parse_signals(self.signals_to_handle)
        self.streams(0)  # checks --redirects and --tee

    @property
    def world_size(self) -> int:
        return self.nnodes * self.nproc_per_node

    def rank(self, local_rank: int) -> int:
        return self.node_rank * self.nproc_per_node + local_rank

    def streams(self, local_rank: int) -> tuple[int, int]:
        """(to files, to the console as well) for one local rank: Std flags, STD_OUT | STD_ERR."""
        tee = parse_std(self.tee, "--tee")(local_rank)
        return parse_std(self.redirects, "--redirects")(local_rank) | tee, tee


_INSTALLED = object()  # config_from_flags' torch_version default: read the installed torch's
# acted on by torch's agent only; topo's static plan takes the first two, the others at their defaults
TORCH_AGENT_OPTIONS = ("start_method", "event_log_handler", "logs_specs", "duplicate_stdout_filters",
                       "duplicate_stderr_filters")


def config_from_flags(script: str, script_args: Sequence[str], given: Mapping[str, object], *,
                      environ: Mapping[str, str] | None = None, topology: Callable | None = None,
                      torch_version: tuple[int, int] | None | object = _INSTALLED,
                      ) -> tuple[RunConfig, str | None]:
    """A RunConfig from the flags the user set (`given`, by option name), then Slurm's values, then
    the defaults of the torchrun release of `torch_version` (None: no torch; default: the installed
    one's); and the line saying which values came from Slurm (or None). `topology`, a function, is
    called only for --nproc-per-node=gpu|auto."""
    environ = os.environ if environ is None else environ
    version = installed_torch() if torch_version is _INSTALLED else torch_version
    release = torchrun_release(version)
    flags = dict(given)
    if flags.get("standalone"):
        # torchrun: the rendezvous flags "are auto-assigned and any explicitly set values are ignored"
        for name in ("rdzv_backend", "rdzv_endpoint", "rdzv_id", "master_addr", "master_port"):
            flags.pop(name, None)
        if "nnodes" in flags and parse_nnodes(str(flags["nnodes"])) != (1, 1):
            raise UsageError(f"--standalone runs one node, but --nnodes={flags['nnodes']}: drop one of them")
        flags["nnodes"] = 1
    nodes_given = parse_nnodes(str(flags["nnodes"])) if "nnodes" in flags else None
    user = {k: (nodes_given[1] if k == "nnodes" else v) for k, v in flags.items()}
    from_slurm = slurm.run_defaults(environ, user)
    values = {**torchrun_defaults(release), **from_slurm.values, **user}

    nnodes = values["nnodes"] if isinstance(values["nnodes"], int) else parse_nnodes(str(values["nnodes"]))[1]
    min_nodes = nodes_given[0] if nodes_given else nnodes
    nproc = values["nproc_per_node"]
    if not isinstance(nproc, int):
        nproc = nproc_from_text(str(nproc), environ, topology or discover_here, release)
    backend = str(values["rdzv_backend"]).strip()
    node_rank_known = "node_rank" in user or "node_rank" in from_slurm.values
    agent = _torch_agent_form(values, min_nodes, nnodes, backend, node_rank_known, version is not None)
    if agent and version is None:
        also = (" or give each node --node-rank=N for a static job" if backend == "c10d" and min_nodes == nnodes
                else "")
        raise UsageError(f"{agent} needs torch's rendezvous and agent (torch.distributed.elastic), and torch is not "
                         f"importable by {sys.executable}: install torch beside topo{also}")

    master_addr, master_port, run_id = str(values["master_addr"]), values["master_port"], str(values["rdzv_id"])
    if values["rdzv_endpoint"] and not agent:
        master_addr, master_port = parse_endpoint(str(values["rdzv_endpoint"]))
    elif master_port is None and nnodes == 1 and not agent:
        # torchrun 2.12 on: one node and no port is a local rendezvous on localhost:0 with a new id
        master_addr, run_id = "localhost", ""
    elif master_port is None:  # torch's agent: the static backend's endpoint is --master-addr:--master-port
        master_port = DEFAULT_MASTER_PORT
    if values["standalone"]:
        master_addr, master_port, run_id = "localhost", None, ""
    network.check_host(master_addr.strip("[]"), f"--master-addr={excerpt(master_addr)!r}")
    prefix = str(values["log_line_prefix_template"] or environ.get("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE")
                 or DEFAULT_LINE_PREFIX)
    shown = str(values["local_ranks_filter"])
    ranks = frozenset(ascii_number(p.strip()) for p in shown.split(",")) if shown.strip() else None
    if ranks and None in ranks:
        raise UsageError(f"--local-ranks-filter={shown!r}: give a comma-separated list of local ranks, "
                         "e.g. --local-ranks-filter=0,1")
    # --shutdown-timeout, else TORCH_ELASTIC_SHUTDOWN_TIMEOUT, else 30 s (torchrun's order)
    timeout = environ.get("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "").strip()
    if values.get("grace_period") is not None:
        grace = _seconds(values["grace_period"], "--shutdown-timeout")
    else:
        fix = ": fix it or give --shutdown-timeout"
        grace = _seconds(timeout, "TORCH_ELASTIC_SHUTDOWN_TIMEOUT", fix) if timeout else DEFAULT_SHUTDOWN_TIMEOUT
    same = {f.name: values[f.name] for f in fields(RunConfig) if f.name in values}  # flags named as the fields
    return RunConfig(**{
        **same, "script": script, "script_args": tuple(script_args), "nnodes": nnodes, "nproc_per_node": nproc,
        "master_addr": master_addr, "master_port": master_port, "run_id": run_id, "min_nodes": min_nodes,
        "torch_agent": agent, "rdzv_backend": backend, "rdzv_endpoint": str(values["rdzv_endpoint"]),
        "monitor_interval": _seconds(values["monitor_interval"], "--monitor-interval"),
        "local_ranks_filter": ranks, "line_prefix": prefix,
        "grace_period": grace,
        "torch_extras": {k: values[k] for k in TORCH_AGENT_OPTIONS}, "torchrun": release,
        "python": environ.get("PYTHON_EXEC") or sys.executable or "python3",
    }), from_slurm.note()


def _torch_agent_form(values: Mapping[str, object], min_nodes: int, max_nodes: int, backend: str,
                      node_rank_known: bool, torch: bool) -> str | None:
    """The flag that makes this a job for torch's agent; None for topo's static plan: one node under
    static or c10d, or nodes that each know their --node-rank (c10d too where torch is missing)."""
    if min_nodes != max_nodes:
        return f"--nnodes={min_nodes}:{max_nodes}"
    if str(values["rdzv_conf"]).strip():
        return f"--rdzv-conf={excerpt(str(values['rdzv_conf']), 40)!r}"
    if backend not in ("static", "c10d"):
        return f"--rdzv-backend={excerpt(backend, 40)!r}"
    if backend == "c10d" and max_nodes > 1 and (torch or not node_rank_known):
        return f"--rdzv-backend=c10d with --nnodes={max_nodes}"
    if values["logs_specs"]:
        return f"--logs-specs={excerpt(str(values['logs_specs']), 40)!r}"
    for stream in ("stdout", "stderr"):
        if str(values[f"duplicate_{stream}_filters"]).strip():
            return f"--duplicate-{stream}-filters"
    return None


def _seconds(value, name: str, fix: str = "") -> float:
    seconds = ascii_seconds(value.strip()) if isinstance(value, str) else float(value)
    if seconds is None:
        raise UsageError(f"{name}={excerpt(value, 40)!r} is not {SECONDS_FORM}{fix}")
    return seconds


def discover_here():
    from topo.discovery import discover  # the probes: only when something needs this machine's topology
    return discover()
