"""What a Slurm allocation (`SLURM_JOB_ID` set) tells a launcher: node count, this node's index
(SLURM_NODEID), the master host (the node list's first) and processes per node (SLURM_GPUS_ON_NODE,
else SLURM_NTASKS_PER_NODE, else 1); a step's variables (`srun -N1` in a bigger allocation) before
the job's. Host lists (`gpu[01-04,07],login1`) are expanded here, without `scontrol`."""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass
from typing import Mapping

from topo.launcher.network import check_host
from topo.numbers import ascii_number
from topo.errors import UsageError
from topo.cpuset import excerpt

_NODE_COUNT_VARS = ("SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES")
_NODE_LIST_VARS = ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST")
_RANGE = re.compile(r"\A([0-9]+)(?:-([0-9]+))?\Z")
MAX_HOSTS = 1 << 20  # a hostlist naming more hosts than this is a typo ("n[0-99999999]")
_MAX_NUMBER = (1 << 32) - 1  # a host number with more digits than this is not a node name's
# A name as segments: literal text, or a bracket group's ranges as (low, high, width) triples.
_Name = list["str | list[tuple[int, int, int]]"]


def expand_hostlist(text: str) -> list[str]:
    """Slurm's hostlist expanded in order: `gpu[01-03,07],cpu1` -> gpu01 gpu02 gpu03 gpu07 cpu1;
    ranges keep their lower bound's width (`[08-10]`), bracket groups multiply (`r[1-2]n[1-2]`).
    UsageError for text that is not a hostlist or names more than MAX_HOSTS hosts (counted first)."""
    hosts: list[str] = []
    for name in _parse_hostlist(text):
        choices = [[s] if isinstance(s, str) else [str(i).zfill(width) for low, high, width in s
                                                   for i in range(low, high + 1)] for s in name]
        hosts.extend("".join(parts) for parts in itertools.product(*choices))
    return hosts


def first_host(text: str) -> str:
    """The first host (`gpu[01-04]` -> gpu01), checked as expand_hostlist checks, the rest not expanded."""
    return "".join(s if isinstance(s, str) else str(s[0][0]).zfill(s[0][2]) for s in _parse_hostlist(text)[0])


def _parse_hostlist(text: str) -> list[_Name]:
    """Every name of a hostlist as segments, checked, and the hosts they make counted (not listed)."""
    parsed: list[_Name] = []
    count = 0
    for entry in _split_outside_brackets(text):
        if not entry:
            raise UsageError(f"hostlist {text!r} has an empty entry; write names separated by single commas")
        pieces = re.split(r"\[([^\[\]]*)\]", entry)  # literal text, with bracket bodies at odd indexes
        for literal in pieces[::2]:
            if "[" in literal or "]" in literal:
                which = "'[' without ']'" if "[" in literal else "']' without '['"
                raise UsageError(f"hostlist {text!r}: {which} in {entry!r}")
        name: _Name = [_ranges(piece, text) if i % 2 else piece for i, piece in enumerate(pieces)]
        count += math.prod(sum(high - low + 1 for low, high, _ in s) for s in name if not isinstance(s, str))
        if count > MAX_HOSTS:
            raise UsageError(f"hostlist {text!r} names more than {MAX_HOSTS} hosts")
        parsed.append(name)
    return parsed


def _split_outside_brackets(text: str) -> list[str]:
    entries, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
            if depth > 1:
                raise UsageError(f"hostlist {text!r}: brackets cannot nest")
        elif ch == "]":
            depth = max(depth - 1, 0)
        elif ch == "," and depth == 0:
            entries.append(text[start:i].strip())
            start = i + 1
    entries.append(text[start:].strip())
    return entries


def _ranges(body: str, text: str) -> list[tuple[int, int, int]]:
    """A bracket group's `01-04,07` as (low, high, width) triples; numbers read by ascii_number."""
    out: list[tuple[int, int, int]] = []
    for part in body.split(","):
        m = _RANGE.match(part.strip())
        if not m:
            raise UsageError(f"hostlist {text!r}: {part!r} is not a number or a range like 01-04")
        low_text, high_text = m.groups()
        low = ascii_number(low_text, _MAX_NUMBER)
        high = low if high_text is None else ascii_number(high_text, _MAX_NUMBER)
        if low is None or high is None:
            raise UsageError(f"hostlist {text!r}: {part.strip()[:40]!r} has a host number above {_MAX_NUMBER}")
        if high < low:
            raise UsageError(f"hostlist {text!r}: range {part!r} runs backwards")
        out.append((low, high, len(low_text)))
    return out


@dataclass(frozen=True)
class SlurmNode:
    """This node's place in a Slurm allocation or step; None where Slurm did not say."""

    job_id: str
    nnodes: int | None
    node_rank: int | None
    nodelist: str  # Slurm's node list as it gave it (`gpu[01-04]`), checked; "" when it gave none
    nproc_per_node: int  # GPUs on this node, else tasks per node, else 1
    nproc_source: str  # the variable nproc_per_node came from ("" for the default 1)
    nnodes_source: str = _NODE_COUNT_VARS[-1]  # the variable nnodes came from
    nodelist_source: str = _NODE_LIST_VARS[-1]  # the variable nodelist came from

    @property
    def master_addr(self) -> str | None:
        if not self.nodelist:
            return None
        host = first_host(self.nodelist)
        check_host(host, f"Slurm's node list {excerpt(self.nodelist)!r} starts with host {excerpt(host)!r}, which",
                   "fix the node names, or give the master address yourself (--master_addr; --master-addr "
                   "for topo run; MASTER_ADDR for topo bind)")
        return host


def slurm_node(environ: Mapping[str, str]) -> SlurmNode | None:
    """The allocation this process runs in, or None outside Slurm (no SLURM_JOB_ID)."""
    job_id = environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID")
    if not job_id:
        return None
    count_var = next((var for var in _NODE_COUNT_VARS if environ.get(var, "").strip()), _NODE_COUNT_VARS[-1])
    nnodes, node_rank = _count(environ, count_var), _count(environ, "SLURM_NODEID")
    list_var = next((var for var in _NODE_LIST_VARS if environ.get(var)), _NODE_LIST_VARS[-1])
    nodelist = environ.get(list_var, "")
    if nodelist:
        try:
            first_host(nodelist)  # checked here, so the error names the variable
        except UsageError as exc:
            raise UsageError(f"{list_var}: {exc}") from None
    source = next((var for var in ("SLURM_GPUS_ON_NODE", "SLURM_NTASKS_PER_NODE") if _count(environ, var)), "")
    nproc = _count(environ, source) if source else 1
    return SlurmNode(job_id, nnodes, node_rank, nodelist, nproc, source, count_var, list_var)


def _count(environ: Mapping[str, str], name: str) -> int | None:
    text = environ.get(name, "").strip()
    if not text:
        return None
    # SLURM_NTASKS_PER_NODE may repeat a count as "2(x3)"; the count is what we need
    number = ascii_number(text.split("(", 1)[0])
    if number is None:
        raise UsageError(f"{name}={text!r} is not a count; unset it or give the value as a flag")
    return number


@dataclass(frozen=True)
class FromSlurm:
    """Values a launcher takes from Slurm because the user did not give them, and the line saying so."""

    values: Mapping[str, object]  # option name -> value
    sources: Mapping[str, str]  # option name -> the Slurm variable it came from
    job_id: str = ""

    def note(self, spell=lambda name: f"--{name.replace('_', '-')}") -> str | None:
        """`from Slurm job 42: --nnodes=2 (SLURM_NNODES), ...`, or None when nothing came from Slurm."""
        if not self.values:
            return None
        parts = [f"{spell(k)}={v} ({self.sources[k]})" for k, v in self.values.items()]
        return f"from Slurm job {self.job_id}: " + ", ".join(parts)


def _multi_node(node: SlurmNode, given: Mapping[str, object], values: dict, sources: dict, *addr_flags: str) -> None:
    """A multi-node job's node rank and master address from Slurm, where no flag in `given` set them."""
    if "node_rank" not in given and node.node_rank is not None:
        values["node_rank"], sources["node_rank"] = node.node_rank, "SLURM_NODEID"
    if not set(addr_flags) & set(given) and node.master_addr:
        values["master_addr"], sources["master_addr"] = node.master_addr, node.nodelist_source


def run_defaults(environ: Mapping[str, str], given: Mapping[str, object]) -> FromSlurm:
    """`topo run`'s missing values from Slurm: nnodes, nproc_per_node, and for a multi-node job
    node_rank and master_addr. `given`: the options the user set, by name, with their values."""
    node = slurm_node(environ)
    if node is None:
        return FromSlurm({}, {})
    tasks_here = _tasks_on_node(environ) if environ.get("SLURM_STEP_ID") else None
    if tasks_here is not None and tasks_here > 1 and "node_rank" not in given:
        raise UsageError(f"this Slurm step runs {tasks_here} tasks on this node, and each would start the node's "
                         "workers with the same node rank: start topo run once per node (srun --ntasks-per-node=1), "
                         "or give each task its own --node-rank")
    values: dict[str, object] = {}
    sources: dict[str, str] = {}
    if "nnodes" not in given and node.nnodes is not None:
        values["nnodes"], sources["nnodes"] = node.nnodes, node.nnodes_source
    nnodes = given.get("nnodes", values.get("nnodes", 1))
    if isinstance(nnodes, int) and nnodes > 1:
        _multi_node(node, given, values, sources, "master_addr", "rdzv_endpoint")
    if "nproc_per_node" not in given and node.nproc_source:
        values["nproc_per_node"], sources["nproc_per_node"] = node.nproc_per_node, node.nproc_source
    return FromSlurm(values, sources, node.job_id)


def launch_defaults(environ: Mapping[str, str], given: Mapping[str, object]) -> FromSlurm:
    """`topo launch`'s missing values from Slurm: local_worker_num, worker_num (times the node
    count), and for a multi-node job node_rank and master_addr. `given`: as for run_defaults."""
    node = slurm_node(environ)
    if node is None:
        return FromSlurm({}, {})
    values: dict[str, object] = {}
    sources: dict[str, str] = {}
    if "local_worker_num" not in given:
        values["local_worker_num"], sources["local_worker_num"] = node.nproc_per_node, node.nproc_source or "default 1"
    nnodes = node.nnodes or 1
    if "worker_num" not in given:
        per_node = given.get("local_worker_num", values.get("local_worker_num"))
        values["worker_num"] = int(per_node) * nnodes
        sources["worker_num"] = f"{node.nnodes_source}={nnodes} x local_worker_num"
    if nnodes > 1:
        _multi_node(node, given, values, sources, "master_addr")
    return FromSlurm(values, sources, node.job_id)


def default_master_port(job_id: str) -> int:
    """15000 plus the job id's last four digits (PyTorch Lightning's rule): alike for every task of
    one job, different for jobs sharing a node."""
    digits = re.sub(r"[^0-9]", "", job_id)[-4:] or "0"
    return 15000 + int(digits)


def task_env(environ: Mapping[str, str]) -> dict[str, str]:
    """torch.distributed's variables for one `srun` task: RANK (SLURM_PROCID), WORLD_SIZE
    (SLURM_NTASKS), LOCAL_RANK (SLURM_LOCALID), LOCAL_WORLD_SIZE, MASTER_ADDR (the first host),
    MASTER_PORT (from the job id); those not already set. {} outside a task (no SLURM_PROCID)."""
    node = slurm_node(environ)
    if node is None or not environ.get("SLURM_PROCID"):
        return {}
    local = _tasks_on_node(environ)
    derived = {
        "RANK": environ["SLURM_PROCID"], "LOCAL_RANK": environ.get("SLURM_LOCALID"),
        "WORLD_SIZE": environ.get("SLURM_STEP_NUM_TASKS") or environ.get("SLURM_NTASKS"),
        "LOCAL_WORLD_SIZE": None if local is None else str(local),
        "MASTER_ADDR": None if environ.get("MASTER_ADDR") else node.master_addr,  # checked only when it is used
        "MASTER_PORT": str(default_master_port(node.job_id)),
    }
    return {k: v for k, v in derived.items() if v and not environ.get(k)}


def _tasks_on_node(environ: Mapping[str, str]) -> int | None:
    """Tasks of this step on node SLURM_NODEID, from SLURM_(STEP_)TASKS_PER_NODE ("2(x3),1")."""
    text = environ.get("SLURM_STEP_TASKS_PER_NODE") or environ.get("SLURM_TASKS_PER_NODE")
    index = ascii_number(environ.get("SLURM_NODEID", "0"))
    if not text or index is None:
        return None
    for part in text.split(","):
        m = re.fullmatch(r"([0-9]+)(?:\(x([0-9]+)\))?", part.strip())
        if not m:
            return None
        repeat = ascii_number(m.group(2) or "1")
        if repeat is None or index < repeat:
            return ascii_number(m.group(1))
        index -= repeat
    return None
