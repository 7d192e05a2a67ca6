"""The bind model: ``BindPlan`` (a whole job's binding, MindSpore's unified bind JSON) and
``ProcessBinding`` (one process's entry)::

    {"bind_config": {"bind_cpu_mode": "cpu", "bind_memory_mode": "numa", "actor_thread_fix_bind": true},
     "bind_cpu":    {"device0": {"main": "0-4", "runtime": "5-9"}, "scheduler": {"main": "40-45"}},
     "bind_memory": {"device0": 0, "scheduler": 2},
     "topo":        {...}}          # ours; msrun and MindSpore ignore it

Range text is kept as written less whitespace, as msrun passes it on. Our ``preferred`` memory mode
(``numactl --preferred N``) is written as ``"bind_memory_mode": "none"`` and ``"memory_policy": "preferred"``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from topo.cpuset import CpuSet
from topo.errors import ParseError

CPU_MODES = ("cpu", "numa", "none")
MEMORY_MODES = ("numa", "none")  # msrun's bind_memory_mode values
PLAN_MEMORY_MODES = ("numa", "preferred", "none")  # BindPlan.memory_mode: msrun's plus ours
MODULES = ("main", "runtime", "pynative", "minddata")
TOP_KEYS = ("bind_config", "bind_cpu", "bind_memory", "topo")
CONFIG_KEYS = ("bind_cpu_mode", "bind_memory_mode", "actor_thread_fix_bind")
MEMORY_POLICY_KEY = "memory_policy"  # under "topo": "preferred" (absent: msrun's strict binding)

# ASCII digits only; 18 at most, so int() stays cheap and the id is a plausible device number.
_KEY = re.compile(r"\A(?:device_?([0-9]{1,18})|scheduler)\Z")
_WHITESPACE = re.compile(r"\s+")


# --------------------------------------------------------------------------- keys
def device_key(physical_id: int) -> str:
    return f"device{int(physical_id)}"


def normalize_key(key: object) -> str | None:
    """``device_3`` / ``device03`` -> ``device3``; ``scheduler`` stays; anything else -> None."""
    m = _KEY.match(key) if isinstance(key, str) else None
    if m is None:
        return None
    return "scheduler" if m.group(1) is None else f"device{int(m.group(1))}"


def as_written(value: int | str) -> str:
    """A range value as msrun passes it on: an int as its digits, a string without whitespace."""
    return str(value) if isinstance(value, int) else _WHITESPACE.sub("", value)


def parse_nodes(value: int | str) -> CpuSet:
    """A NUMA node value of the bind JSON: an int id or a range string (msrun's rules and words)."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ParseError(f"NUMA id {value!r} should be an int or a range string.")
    return CpuSet.parse(str(value) if isinstance(value, int) else value, msrun=True)


# --------------------------------------------------------------------------- the plan
@dataclass(frozen=True)
class ProcessBinding:
    """One process's entry, ``deviceN`` (N = physical device id) or ``scheduler``, as text without
    whitespace, and the sets it names (parsed here, raising ParseError, unless a reader gives them)."""

    key: str
    modules: tuple[tuple[str, str], ...] = ()
    cpu_nodes: int | str | None = None
    memory: int | str | None = None
    local_rank: int | None = None
    has_cpu_entry: bool = True  # False: no bind_cpu entry at all (vs. an empty/null one)
    module_cpus: tuple[tuple[str, CpuSet], ...] | None = field(default=None, repr=False, compare=False)
    cpu_node_set: CpuSet | None = field(default=None, repr=False, compare=False)
    memory_nodes: CpuSet | None = field(default=None, repr=False, compare=False)

    def __post_init__(self):
        set_ = object.__setattr__
        if self.module_cpus is None:
            set_(self, "modules", tuple((m, as_written(text)) for m, text in self.modules))
            set_(self, "module_cpus", tuple((m, CpuSet.parse(text, msrun=True)) for m, text in self.modules))
        for name, parsed in (("cpu_nodes", "cpu_node_set"), ("memory", "memory_nodes")):
            value = getattr(self, name)
            if value is not None and getattr(self, parsed) is None:
                if isinstance(value, str):
                    set_(self, name, as_written(value))
                set_(self, parsed, parse_nodes(getattr(self, name)))

    @property
    def device(self) -> int | None:
        m = _KEY.match(self.key)
        return int(m.group(1)) if m and m.group(1) is not None else None

    @property
    def is_scheduler(self) -> bool:
        return self.key == "scheduler"

    @property
    def main(self) -> str | None:
        """The main CPU text as written (what numactl --physcpubind / taskset -c get), or None."""
        return next((text for m, text in self.modules if m == "main" and text), None)

    def cpus(self, module: str = "main") -> CpuSet:
        return next((s for m, s in self.module_cpus if m == module), CpuSet())


@dataclass(frozen=True)
class BindPlan:
    """A whole job's binding, immutable: ``processes`` in output order (devices by local rank, then
    ``scheduler``), ``meta`` the ``"topo"`` object (a fresh dict each time), ``warnings`` the notes."""

    cpu_mode: str = "cpu"
    memory_mode: str = "numa"
    processes: tuple[ProcessBinding, ...] = ()
    actor_thread_fix_bind: bool | None = None
    _meta: str = field(default="{}", repr=False)  # JSON text of the "topo" object: keeps this hashable
    warnings: tuple[str, ...] = ()

    def __post_init__(self):
        if self.cpu_mode not in CPU_MODES:
            raise ParseError(f"'bind_cpu_mode' only supports 'cpu'/'numa'/'none'; got {self.cpu_mode!r}")
        if self.memory_mode not in PLAN_MEMORY_MODES:
            raise ParseError(f"memory mode must be one of {', '.join(PLAN_MEMORY_MODES)}; got {self.memory_mode!r}")
        seen = set()
        for p in self.processes:
            if normalize_key(p.key) != p.key:
                raise ParseError(f"process key {p.key!r} must be 'deviceN' or 'scheduler'")
            if p.key in seen:
                raise ParseError(f"process key {p.key!r} appears twice in the plan")
            seen.add(p.key)
            if self.memory_mode == "preferred" and p.memory_nodes is not None and p.memory_nodes.weight() > 1:
                raise ParseError(f"{p.key}: a preferred memory policy takes one node, got {p.memory}")

    @classmethod
    def build(cls, processes: Iterable[ProcessBinding], *, cpu_mode: str = "cpu", memory_mode: str = "numa",
              actor_thread_fix_bind: bool | None = None, meta: Mapping | None = None,
              warnings: Iterable[str] = ()) -> "BindPlan":
        return cls(cpu_mode, memory_mode, tuple(processes), actor_thread_fix_bind,
                   json.dumps(dict(meta or {})), tuple(warnings))

    @property
    def meta(self) -> dict:
        return json.loads(self._meta)

    @property
    def memory_policy(self) -> str | None:
        """How memory nodes are applied: "bind" (numactl --membind), "preferred", or None (not bound)."""
        return {"numa": "bind", "preferred": "preferred"}.get(self.memory_mode)

    def get(self, key: str) -> ProcessBinding | None:
        """The entry of `key` (any spelling msrun reads), or None."""
        k = normalize_key(key)
        return next((p for p in self.processes if p.key == k), None)

    def workers(self) -> tuple[ProcessBinding, ...]:
        return tuple(p for p in self.processes if not p.is_scheduler)

    # ---- JSON ---------------------------------------------------------
    def to_json(self) -> dict:
        msrun_memory = "numa" if self.memory_mode == "numa" else "none"
        config: dict[str, Any] = {"bind_cpu_mode": self.cpu_mode, "bind_memory_mode": msrun_memory}
        if self.actor_thread_fix_bind is not None:
            config["actor_thread_fix_bind"] = self.actor_thread_fix_bind
        out: dict[str, Any] = {"bind_config": config}
        if self.cpu_mode == "cpu":
            out["bind_cpu"] = {p.key: dict(p.modules) or None for p in self.processes if p.has_cpu_entry}
        elif self.cpu_mode == "numa":
            out["bind_cpu"] = {p.key: p.cpu_nodes for p in self.processes if p.cpu_nodes is not None}
        mem = {p.key: p.memory for p in self.processes if p.memory is not None}
        if mem or self.memory_mode == "numa":
            out["bind_memory"] = mem
        meta = self.meta
        if self.memory_mode == "preferred":
            meta[MEMORY_POLICY_KEY] = "preferred"
        if self.warnings:
            meta["warnings"] = list(self.warnings)
        ranks = {p.key: p.local_rank for p in self.processes if p.local_rank is not None}
        if ranks:
            meta.setdefault("local_ranks", ranks)
        if meta:
            out["topo"] = meta
        return out
