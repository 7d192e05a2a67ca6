"""One process's binding, from the planner to the process: its CPUs, its memory nodes and policy,
and how it is applied. `topo launch`, `topo run`, `topo bind` and `set_affinity` all carry this
record (`planners.binding` makes it from a bind JSON entry). It lives in the model's package, beside
CpuSet, so the launcher can carry it without importing the planners (about 60 ms) for a job that
binds nothing.

A launcher hands the binding it applied to the process in `TOPO_BINDING` (`BINDING_VAR`):
space-separated tokens, only the parts that were bound::

    TOPO_BINDING="cpus=0-3 memory=bind:0"      # CPUs 0-3, memory bound to node 0
    TOPO_BINDING="cpus=8-15"                   # CPUs only
    TOPO_BINDING="memory=preferred:1"          # memory only

so code inside the process (`set_affinity`) can tell a launcher's binding from the kernel's default.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from topo.cpuset import CpuSet, excerpt
from topo.errors import ParseError

BINDING_VAR = "TOPO_BINDING"
MEMORY_POLICIES = ("bind", "preferred", "local")  # MPOL_BIND, MPOL_PREFERRED, MPOL_LOCAL
# ways a binding is applied: msrun's argv prefixes, or the same system calls made by topo
APPLIED_BY = ("", "numactl", "taskset", "system calls")
MAX_ENV_LENGTH = 1 << 16  # a TOPO_BINDING longer than this is not one topo wrote


@dataclass(frozen=True)
class Binding:
    """What one process is bound to, and how.

    `cpus` None: the CPUs are not bound. `memory_policy` None: the memory policy is not set
    (`memory_nodes` is then None too); "bind" and "preferred" name their `memory_nodes`;
    "local" allocates on the node of the running CPU. `device`: the physical device id the
    process runs next to, when it has one. `prefix`: msrun's `numactl ...` / `taskset -c ...` argv
    that applies it; `applied_by` says what applies it ("" until the launcher decides) and `note`
    why ("numactl not found").
    """

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
        """Applied with system calls (sched_setaffinity, set_mempolicy) rather than a tool."""
        return self.applied_by == "system calls"

    def without_memory(self) -> Binding:
        return replace(self, memory_nodes=None, memory_policy=None)

    def held(self, rung: str | None) -> Binding:
        """What holds of this binding once the memory-policy ladder stopped at `rung`
        (syscalls.apply_memory_policy's answer; None: no policy was set): the CPUs alone for
        "none", the policy relaxed to "preferred" for a refused "bind"."""
        if rung is None or rung == self.memory_policy:
            return self
        if rung == "none":
            return self.without_memory()
        return replace(self, memory_policy=rung)

    def describe(self) -> str:
        """"CPUs 0-3, memory bound to node 0"; "CPUs 0-3, memory not bound"; "not bound"."""
        if not self.is_bound:
            return "not bound"
        cpus = f"CPUs {self.cpus}" if self.cpus is not None else "CPUs not bound"
        return f"{cpus}, {describe_memory(self.memory_policy, self.memory_nodes)}"

    def env_value(self) -> str:
        """The `TOPO_BINDING` value: `cpus=0-3 memory=bind:0`, only the parts that are bound."""
        tokens = []
        if self.cpus is not None:
            tokens.append(f"cpus={self.cpus}")
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
                cpus = _parse(value, token)
                if not cpus:
                    raise ParseError(f"{BINDING_VAR}: {excerpt(token)!r} names no CPU")
            elif key == "memory" and sep and policy is None:
                policy, _, node_text = value.partition(":")
                if policy == "local" and not node_text:
                    continue
                if policy not in ("bind", "preferred") or not node_text:
                    raise ParseError(f"{BINDING_VAR}: {excerpt(token)!r} is not memory=bind:NODES, "
                                     "memory=preferred:NODES or memory=local")
                nodes = _parse(node_text, token)
                if not nodes:
                    raise ParseError(f"{BINDING_VAR}: {excerpt(token)!r} names no node")
            else:
                raise ParseError(f"{BINDING_VAR}: {excerpt(token)!r} is not cpus=LIST or memory=POLICY:NODES "
                                 "(each once)")
        return cls(cpus, nodes, policy)


def _parse(text: str, token: str) -> CpuSet:
    try:
        return CpuSet.parse(text)
    except ParseError as exc:
        raise ParseError(f"{BINDING_VAR}: {excerpt(token)!r}: {exc}") from None


def describe_memory(policy: str | None, nodes: CpuSet | None) -> str:
    """"memory bound to node 0", "memory preferred on nodes 0-1", "memory local", "memory not bound"."""
    if policy is None:
        return "memory not bound"
    if policy == "local":
        return "memory local to the running CPU"
    where = "bound to" if policy == "bind" else "preferred on"
    return f"memory {where} {node_words(nodes or CpuSet())}"


def node_words(nodes: CpuSet) -> str:
    return f"node {nodes}" if nodes.weight() == 1 else f"nodes {nodes}"


__all__ = ["Binding", "BINDING_VAR", "MEMORY_POLICIES", "describe_memory", "node_words"]
