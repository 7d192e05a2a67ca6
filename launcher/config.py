"""`topo launch`'s LaunchConfig: msrun 2.10's flags (names, defaults, values as msrun parses them) plus
topo's, typed and checked when made; every problem is a UsageError raised before anything starts."""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Union

from topo.launcher import slurm
from topo.binding import MAX_PROCESSES
from topo.numbers import MAX_SECONDS
from topo.errors import ParseError, UsageError

if TYPE_CHECKING:  # the planners are imported only when a binding is given
    from topo.planners.bindload import LoadedBind

_RANK = re.compile(r"-?[0-9]{1,9}")


def parse_literal_bool(text: str | bool, flag: str) -> bool:
    """msrun's `--join=True`: ast.literal_eval restricted to True/False (so 1/0 pass too).
    Lower-case true/false are accepted as well; msrun rejects them, nothing relies on that."""
    if isinstance(text, bool):
        return text
    value = str(text).strip()
    if value in ("True", "true", "1"):
        return True
    if value in ("False", "false", "0"):
        return False
    raise UsageError(f"{flag}={text!r}: expected True or False")


def parse_tail_worker_log(text: str | int) -> tuple[int, ...] | None:
    """`--tail_worker_log`: '-1' (every worker) -> None, else the ranks to tail."""
    ranks = []
    for part in str(text).split(","):
        part = part.strip()
        if not _RANK.fullmatch(part):  # ASCII digits only: int() would also read "١" as 1
            raise UsageError(f"--tail_worker_log={str(text)[:100]!r}: {part[:20]!r} is not a rank; give a comma "
                             "list like 0,3 or -1 for all")
        ranks.append(int(part))
    if -1 in ranks:
        return None
    return tuple(ranks)


def is_bind_file(value) -> bool:
    """A --bind_numa string naming a file (not True/False, not inline JSON)."""
    if not isinstance(value, str):
        return False
    text = value.strip()
    return text.lower() not in ("true", "false") and not text.startswith("{")


def parse_bind_core(value: Any) -> bool | LoadedBind:
    """--bind_core: True/False (any case) or a JSON table {"deviceX"|"scheduler": ["cpus", ...]}."""
    return _parse_bind(value, "--bind_core")


def parse_bind_numa(value: Any) -> bool | LoadedBind:
    """--bind_numa: True/False, a JSON table of NUMA ids, a unified bind JSON file, or inline unified JSON."""
    return _parse_bind(value, "--bind_numa")


def _parse_bind(value: Any, flag: str) -> bool | LoadedBind:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"  # without importing the planners, as an unbound launch
    from topo.planners.bindload import UNIFIED_KEYS, BindSource, LoadedBind, load_bind, load_table, parse_json, plan_of
    if isinstance(value, LoadedBind):
        return value
    try:
        if isinstance(value, str):
            text = value.strip()
            if flag == "--bind_numa" and is_bind_file(text):
                return load_bind(text)
            try:
                value = parse_json(text)
            except json.JSONDecodeError as exc:
                raise UsageError(f"{flag}={text[:200]!r}: not True, False or a JSON object: {exc.msg} at line "
                                 f"{exc.lineno} column {exc.colno} (character {exc.pos})") from None
            except (ValueError, RecursionError):
                raise UsageError(f"{flag}={text[:200]!r}: not True, False or a JSON object") from None
        if not isinstance(value, Mapping):
            raise UsageError(f"{flag}: {value!r} should be True, False or a JSON object, not {type(value).__name__}")
        if any(k in value for k in UNIFIED_KEYS):
            if flag != "--bind_numa":
                raise UsageError(f"{flag}: a unified bind JSON (bind_config/bind_cpu/bind_memory) goes to --bind_numa")
            if "bind_config" not in value:
                raise UsageError(f"{flag}: inline bind JSON must be an object with a 'bind_config' key")
            return plan_of(BindSource(value, None, None))
        return load_table(value, flag)
    except ParseError as exc:
        raise UsageError(str(exc) if str(exc).startswith(flag) else f"{flag}: {exc}") from None


@dataclass(frozen=True)
class LaunchConfig:
    """One `topo launch` (msrun) invocation: msrun 2.10's fields and defaults, then topo's."""

    script: str  # `python` goes in front unless it is python, python3 or pytest
    script_args: tuple[str, ...] = ()
    worker_num: int = 8  # in the whole job
    local_worker_num: int = 8  # on this node
    master_addr: str = "127.0.0.1"  # the scheduler's (MindSpore) or rank 0's store (PyTorch)
    master_port: int = 8118
    node_rank: int = -1  # -1: the cluster assigns the ranks (MindSpore only)
    log_dir: str = ""  # "": the current directory
    join: bool = False  # wait for the job, tail its logs, stop it all when one worker fails
    cluster_time_out: int = 600  # MS_TOPO_TIMEOUT, seconds
    bind_core: Union[bool, "LoadedBind"] = False  # True: automatic; or msrun's table
    bind_numa: Union[bool, str, "LoadedBind"] = False  # True, a table, or a unified bind JSON (or its path)
    sim_level: int = -1  # MindSpore's dry-run simulation (no scheduler)
    sim_rank_id: int = -1
    rank_table_file: str = ""
    worker_log_name: str = ""  # "worker" by default; {ip} and {hostname} are filled in
    tail_worker_log: tuple[int, ...] | None = None  # the ranks --join shows; None: all
    scheduler: bool | None = None  # None: when master_addr is this machine and node_rank is 0 or -1
    dry_run: bool = False
    grace_period: float = 5.0  # seconds from SIGTERM to SIGKILL
    bind_fallback: bool = False  # a refused binding falls back (less memory binding, or none)
    python: str = "python"  # found on PATH, as msrun does
    priority_cores: bool = False  # with bind_core=True: each worker's first CPU on a priority core (planners.priority)

    @classmethod
    def from_flags(cls, script: str, script_args=(), **flags) -> LaunchConfig:
        """A config from msrun's text values ("True", JSON tables, "0,3"); a --bind_numa file stays a
        path until the job is planned."""
        if "join" in flags:
            flags["join"] = parse_literal_bool(flags["join"], "--join")
        if "bind_core" in flags:
            flags["bind_core"] = parse_bind_core(flags["bind_core"])
        if "bind_numa" in flags and not is_bind_file(flags["bind_numa"]):  # a file is read when planned
            flags["bind_numa"] = parse_bind_numa(flags["bind_numa"])
        if "tail_worker_log" in flags and not isinstance(flags["tail_worker_log"], tuple):
            text = flags["tail_worker_log"]
            flags["tail_worker_log"] = None if text is None else parse_tail_worker_log(text)
        return cls(script, tuple(script_args), **flags)

    def __post_init__(self):
        # a loaded bind JSON exists only once the planners are: an unbound launch does not import them
        bindload = sys.modules.get("topo.planners.bindload")
        loaded = (bool, bindload.LoadedBind) if bindload else (bool,)
        if (not isinstance(self.script_args, tuple) or not isinstance(self.join, bool)
                or not isinstance(self.bind_core, loaded) or not isinstance(self.bind_numa, (str, *loaded))
                or not (self.tail_worker_log is None or isinstance(self.tail_worker_log, tuple))):
            raise TypeError("LaunchConfig takes script_args and tail_worker_log as tuples, join as a bool, "
                            "bind_core / bind_numa as bools or loaded bind JSON; LaunchConfig.from_flags reads "
                            "msrun's text values")
        if self.worker_num <= 0:
            raise UsageError(f"--worker_num must be greater than 0, got {self.worker_num}")
        if self.local_worker_num <= 0:
            raise UsageError(f"--local_worker_num must be greater than 0, got {self.local_worker_num}")
        if self.local_worker_num > MAX_PROCESSES:
            raise UsageError(f"--local_worker_num={self.local_worker_num} is more than {MAX_PROCESSES} "
                             "processes on one node: start fewer")
        if self.local_worker_num > self.worker_num:
            raise UsageError(f"--local_worker_num={self.local_worker_num} exceeds --worker_num={self.worker_num}: "
                             "a node cannot start more workers than the whole job has")
        if not 1 <= self.master_port <= 65535:
            raise UsageError(f"--master_port={self.master_port} is outside 1-65535")
        if self.node_rank < -1:
            raise UsageError(f"--node_rank={self.node_rank}: give a node index >= 0, or -1")
        if self.multi_node and self.node_rank >= 0:
            last = (self.node_rank + 1) * self.local_worker_num - 1
            if last >= self.worker_num:
                raise UsageError(f"--node_rank={self.node_rank} with --local_worker_num={self.local_worker_num} gives "
                                 f"ranks up to {last}, beyond --worker_num={self.worker_num}; lower --node_rank or "
                                 "raise --worker_num")
        if self.sim_level not in (-1, 0, 1, 2, 3):
            raise UsageError(f"--sim_level={self.sim_level}: choose from 0, 1, 2, 3")
        if not 0 <= self.grace_period <= MAX_SECONDS:  # nan fails both
            raise UsageError(f"--grace-period={self.grace_period} must be 0 to {MAX_SECONDS} seconds")
        if self.priority_cores and self.bind_core is not True:
            raise UsageError("--priority-cores places topo's automatic CPU split: add --bind_core=True (a table or "
                             "bind JSON names every CPU itself)")
        name, parts = self.worker_log_name, self.worker_log_name.split("/")
        if os.path.isabs(name) or ".." in parts:  # a subdirectory of --log_dir at most
            raise UsageError(f"log name leaves the log directory, --worker_log_name={name!r}: "
                             "give a name relative to --log_dir, without '..'")
        if name and ("\0" in name or not parts[-1]):
            raise UsageError(f"not a file name, --worker_log_name={name!r}: give a base name such as 'worker'")
        if not self.python:
            raise UsageError("no interpreter, --python='': give an interpreter name or path, or leave the default "
                             "python")

    @property
    def multi_node(self) -> bool:
        return self.local_worker_num < self.worker_num

    @property
    def simulation(self) -> bool:
        return self.sim_level != -1


def config_from_flags(script: str, script_args, flags: dict, given, *,
                      environ=None) -> tuple[LaunchConfig, str | None]:
    """A LaunchConfig from `topo launch`'s flags (`given`: the names the user set), what a Slurm
    allocation gives filled in where not given, and the line saying so (or None)."""
    environ = os.environ if environ is None else environ
    taken = slurm.launch_defaults(environ, {name: flags[name] for name in given if name in flags})
    config = LaunchConfig.from_flags(script, script_args, **{**flags, **taken.values})
    return config, taken.note(lambda name: f"--{name}")

