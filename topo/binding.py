"""One process's binding: the `Binding` record (`planners.binding.from_entry` makes it,
`topo.syscalls.apply` applies it) and `observe`, what /proc shows of a process's binding. A launcher
hands the binding that held to the process in `TOPO_BINDING` (the bound parts: `cpus=0-3
memory=bind:0`, `memory=preferred:1`), so that `set_affinity` inside it keeps that binding.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from dataclasses import dataclass, field, replace

from topo.cpuset import CpuSet, excerpt
from topo.errors import ParseError

BINDING_VAR = "TOPO_BINDING"
MEMORY_POLICIES = ("local", "bind", "preferred")  # MPOL_LOCAL, MPOL_BIND, MPOL_PREFERRED(_MANY)
MEMORY = ("numa", "preferred", "device", "none")  # the --memory words of the planners, topo run and topo launch
# how a binding is applied: msrun's argv prefixes, or the same system calls made by topo ("" undecided)
APPLIED_BY = ("", "numactl", "taskset", "system calls")
MAX_ENV_LENGTH = 1 << 16  # a TOPO_BINDING longer than this is not one topo wrote
# The most processes one node starts (and the largest local device index + 1): far above any
# machine's CPU count, and a bound on what is planned and read before anything starts.
MAX_PROCESSES = 1 << 16


@dataclass(frozen=True)
class Binding:
    """What one process is bound to, and how. `cpus` None: CPUs not bound. `memory_policy` None:
    memory not bound; "bind" and "preferred" name their `memory_nodes`, "local" allocates on the
    running CPU's node. `device`: the physical id of the device the process runs next to. `prefix`:
    msrun's `numactl ...` / `taskset -c ...` argv; `applied_by` says what applies it, `note` why."""

    cpus: CpuSet | None = None
    memory_nodes: CpuSet | None = None
    memory_policy: str | None = None
    device: int | None = None
    prefix: tuple[str, ...] = ()
    applied_by: str = ""
    note: str = ""

    def __post_init__(self):
        if self.memory_policy not in (None, *MEMORY_POLICIES):
            raise ValueError(f"memory policy {self.memory_policy!r} is not one of {', '.join(MEMORY_POLICIES)}")
        if self.memory_policy in ("bind", "preferred") and not self.memory_nodes:
            raise ValueError(f"memory policy {self.memory_policy!r} needs its nodes")
        if self.memory_policy is None and self.memory_nodes is not None:
            raise ValueError("memory nodes without a memory policy")
        if self.cpus is not None and not self.cpus:
            raise ValueError("a CPU binding to no CPU")
        if self.applied_by not in APPLIED_BY:
            raise ValueError(f"applied_by {self.applied_by!r} is not one of {APPLIED_BY}")

    @property
    def is_bound(self) -> bool:
        return self.cpus is not None or self.memory_policy is not None

    @property
    def direct(self) -> bool:
        """Applied with system calls (topo.syscalls.apply) rather than by a tool's argv."""
        return self.applied_by == "system calls"

    def without_memory(self) -> Binding:
        return replace(self, memory_nodes=None, memory_policy=None)

    def relaxed(self) -> Binding:
        """One rung down the fallback ladder for a refused memory policy: "bind" becomes
        "preferred" on the same nodes; any other policy is dropped, leaving the CPUs alone."""
        return replace(self, memory_policy="preferred") if self.memory_policy == "bind" else self.without_memory()

    def describe(self) -> str:
        """"CPUs 0-3, memory bound to node 0"; "CPUs 0-3, memory not bound"; "not bound"."""
        if not self.is_bound:
            return "not bound"
        cpus = f"CPUs {self.cpus}" if self.cpus is not None else "CPUs not bound"
        return f"{cpus}, {describe_memory(self.memory_policy, self.memory_nodes)}"

    def env_value(self) -> str:
        """The `TOPO_BINDING` value: `cpus=0-3 memory=bind:0`, only the parts that are bound."""
        tokens = [f"cpus={self.cpus}"] if self.cpus is not None else []
        if self.memory_policy == "local":
            tokens.append("memory=local")
        elif self.memory_policy is not None:
            tokens.append(f"memory={self.memory_policy}:{self.memory_nodes}")
        return " ".join(tokens)

    @classmethod
    def from_env(cls, text: str) -> Binding:
        """A `TOPO_BINDING` value back into a Binding; ParseError naming what is wrong."""
        if len(text) > MAX_ENV_LENGTH:
            raise ParseError(f"{BINDING_VAR} is {len(text)} characters long; topo writes at most {MAX_ENV_LENGTH}")
        cpus = nodes = policy = None
        for token in text.split():
            key, sep, value = token.partition("=")
            if key == "cpus" and sep and cpus is None:
                cpus = _parse(value, token, "CPU")
            elif key == "memory" and sep and policy is None:
                policy, _, node_text = value.partition(":")
                if policy == "local" and not node_text:
                    continue
                if policy not in ("bind", "preferred") or not node_text:
                    raise ParseError(f"{BINDING_VAR}: {excerpt(token)!r} is not memory=bind:NODES, "
                                     "memory=preferred:NODES or memory=local")
                nodes = _parse(node_text, token, "node")
            else:
                raise ParseError(f"{BINDING_VAR}: {excerpt(token)!r} is not cpus=LIST or memory=POLICY:NODES "
                                 "(each once)")
        return cls(cpus, nodes, policy)


def _parse(text: str, token: str, what: str) -> CpuSet:
    try:
        parsed = CpuSet.parse(text)
    except ParseError as exc:
        raise ParseError(f"{BINDING_VAR}: {excerpt(token)!r}: {exc}") from None
    if not parsed:
        raise ParseError(f"{BINDING_VAR}: {excerpt(token)!r} names no {what}")
    return parsed


def describe_memory(policy: str | None, nodes: CpuSet | None) -> str:
    """"memory bound to node 0", "memory preferred on nodes 0-1", "memory local to the running CPU",
    "memory not bound"."""
    if policy is None:
        return "memory not bound"
    if policy == "local":
        return "memory local to the running CPU"
    where = "bound to" if policy == "bind" else "preferred on"
    return f"memory {where} {node_words(nodes or CpuSet())}"


def node_words(nodes: CpuSet) -> str:
    return f"node {nodes}" if nodes.weight() == 1 else f"nodes {nodes}"


STATUS_LIMIT = 256 << 10  # /proc/PID/status: well under a page, even with 8192 CPUs
# numa_maps has a line (~100 bytes) per mapping, up to vm.max_map_count (65530 by default) of them,
# about 7 MB; past this the page counts stop and say they are partial.
NUMA_MAPS_LIMIT = 16 << 20
BASE_PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024
# numa_maps' policy words (mm/mempolicy.c policy_modes), then "=static"/"=relative", then ":nodes"
_POLICY = re.compile(r"(weighted interleave|prefer \(many\)|default|prefer|bind|interleave|local)"
                     r"(?:=[a-z]+)?(?::([0-9,-]+))?")
# numa_maps' word for each policy a Binding holds
POLICY_WORDS = {"bind": ("bind",), "preferred": ("prefer", "prefer (many)"), "local": ("local",)}


@dataclass(frozen=True)
class Observed:
    """What /proc shows of one process's binding."""

    cpus: CpuSet  # Cpus_allowed_list
    mems_allowed: CpuSet | None  # Mems_allowed_list: the cgroup's cpuset.mems, not the memory policy
    # The task's memory policy in numa_maps' words ("default", "bind", "prefer", "interleave", ...; ""
    # unread) and nodes: a mapping without a policy of its own shows the task's (fs/proc/task_mmu.c),
    # so it is the policy most mappings show.
    policy: str = ""
    policy_nodes: CpuSet = CpuSet()
    other_policies: dict[str, int] = field(default_factory=dict)  # "interleave:0-1" -> mappings
    pages_by_node: dict[int, int] = field(default_factory=dict)  # resident base pages per node
    numa_maps: str = "not read"  # "read", "cut at N bytes: partial counts", "unreadable: ...", "absent ..."

    def describe(self) -> str:
        """"CPUs 1, memory bound to node 0", in Binding.describe's words."""
        words = {w: name for name, ws in POLICY_WORDS.items() for w in ws}
        if self.policy in words and (self.policy_nodes or self.policy == "local"):
            memory = describe_memory(words[self.policy], self.policy_nodes)
        elif self.policy in ("default", ""):
            memory = "memory not bound"
        else:
            memory = f"memory policy {self.policy}"
            memory += f" on {node_words(self.policy_nodes)}" if self.policy_nodes else ""
        return f"CPUs {self.cpus}, {memory}"


def observe(pid: int | str, proc: str = "/proc", *, numa_maps: bool = True) -> Observed | None:
    """What the kernel shows of process `pid` below the proc root `proc`; None once it is gone or a
    zombie. `numa_maps=False` skips the memory policy and pages (the kernel walks every mapping to
    write them). OSError when its status cannot be read."""
    try:
        status = read_bounded(f"{proc}/{pid}/status", STATUS_LIMIT).decode("ascii", "replace")
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = dict(line.partition(":")[::2] for line in status.splitlines())
    if "Cpus_allowed_list" not in fields:
        return None  # a zombie: no affinity worth reading
    try:
        cpus = CpuSet.parse(fields["Cpus_allowed_list"].strip())
        mems = CpuSet.parse(fields["Mems_allowed_list"].strip()) if "Mems_allowed_list" in fields else None
    except ParseError as exc:
        raise OSError(errno.EINVAL, f"{proc}/{pid}/status: {exc}") from None
    seen = Observed(cpus, mems)
    return _with_numa_maps(seen, f"{proc}/{pid}/numa_maps") if numa_maps else seen


def _with_numa_maps(seen: Observed, path: str) -> Observed:
    """`seen` with numa_maps' policies and resident pages: N<node>=<pages> counts pages of the
    mapping's own size (kernelpagesize_kB), converted to base pages so huge pages weigh what they hold."""
    try:
        data = read_bounded(path, NUMA_MAPS_LIMIT)
    except (FileNotFoundError, ProcessLookupError):
        return replace(seen, numa_maps="absent (a kernel without NUMA, or the process exited)")
    except PermissionError:
        return replace(seen, numa_maps="unreadable: permission denied (another user's process; run as root)")
    except OSError as exc:
        return replace(seen, numa_maps=f"unreadable: {exc.strerror or exc}")
    state = "read"
    if len(data) >= NUMA_MAPS_LIMIT:
        data = data[:data.rfind(b"\n") + 1]
        state = f"cut at {NUMA_MAPS_LIMIT} bytes: partial counts"
    policies: dict[tuple[str, str], int] = {}
    pages: dict[int, int] = {}
    for line in data.decode("ascii", "replace").splitlines():
        rest = line.partition(" ")[2]
        m = _POLICY.match(rest)
        if not m:
            continue
        policies[m.groups("")] = policies.get(m.groups(""), 0) + 1
        size_kb, counts = BASE_PAGE_KB, []
        for token in rest[m.end():].split():
            key, _, value = token.partition("=")
            if key == "kernelpagesize_kB" and value.isdigit():
                size_kb = int(value)
            elif key[:1] == "N" and key[1:].isdigit() and value.isdigit():
                counts.append((int(key[1:]), int(value)))
        for node, n in counts:
            pages[node] = pages.get(node, 0) + n * max(1, size_kb // BASE_PAGE_KB)
    word, nodes = task = max(policies, key=policies.get, default=("", ""))
    try:
        policy_nodes = CpuSet.parse(nodes)
    except ParseError:
        policy_nodes = CpuSet()
    others = {f"{w}:{n}" if n else w: count for (w, n), count in policies.items() if (w, n) != task}
    return replace(seen, policy=word, policy_nodes=policy_nodes, other_policies=others,
                   pages_by_node=dict(sorted(pages.items())), numa_maps=state)


def read_bounded(path: str, limit: int) -> bytes:
    """At most `limit` bytes of the file at `path`, opened without following a last link or blocking
    (a FIFO planted in a fake tree must not hang a reader), and refused unless it is a regular file."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", path)
        chunks, got = [], 0
        while got < limit and (chunk := os.read(fd, min(1 << 20, limit - got))):
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)
