"""MindSpore's unified bind JSON: read it, check it, write it.

The bind JSON (contracts §3, anchors §1.12) is what `topo plan` writes, what `topo validate` checks,
what `topo launch --bind_numa=FILE` and `topo bind` apply, and what `msrun --bind_numa=FILE` accepts
unchanged::

    {"bind_config": {"bind_cpu_mode": "cpu", "bind_memory_mode": "numa", "actor_thread_fix_bind": true},
     "bind_cpu":    {"device0": {"main": "0-4", "runtime": "5-9"}, "scheduler": {"main": "40-45"}},
     "bind_memory": {"device0": 0, "scheduler": 2},
     "topo":        {...}}          # ours: mode, options, warnings; msrun ignores it

API
---
``BindPlan``
    Immutable. ``cpu_mode`` (``cpu|numa|none``), ``memory_mode`` (``numa|none``),
    ``actor_thread_fix_bind`` (bool or None = key absent), ``processes`` (tuple of
    ``ProcessBinding``, in output order: devices by local rank, then ``scheduler``), ``meta``
    (the ``"topo"`` object, a fresh dict each time) and ``warnings``.
    ``BindPlan.to_json() -> dict`` and ``BindPlan.from_json(dict) -> BindPlan`` (raises
    ``ParseError`` naming the first schema problem); ``plan.process(key)``; ``plan.keys()``.
``ProcessBinding``
    ``key`` (``"device3"`` / ``"scheduler"``), ``device`` (physical id or None), ``local_rank``
    (or None), ``modules`` (tuple of ``(module, cpulist)`` for cpu mode), ``cpu_nodes`` (node id or
    node-range string for numa cpu mode), ``memory`` (node id or range string); ``.cpus(module)``.
``load_bind(value) -> LoadedBind``
    ``value`` is a path or inline JSON text; msrun's argparse-time checks and messages
    (``bind_numa json file 'x.json' does not exist.`` ...). ``LoadedBind`` has ``data`` (dict,
    ``device_X`` keys renamed ``deviceX``), ``path`` (absolute, or None for inline text) and
    ``sha256`` of the raw text (msrun's ``MSRUN_BIND_FILE_HASH``), or None for inline text.
``validate_bind(data, topology=None, *, allow_overlap=None) -> list[Problem]``
    Every problem at once, each a ``Problem(path, message, fix)`` with a JSON path such as
    ``bind_cpu.device1.main``: bad keys, bad modes, bad range syntax (``3-1``, ``1,,2``), wrong
    value types, and with a topology: CPUs not present / not allowed, unknown / disallowed /
    memory-only NUMA nodes, overlapping ``main`` sets (unless the file's ``topo`` notes declare a
    CPU-sharing mode, ``"shared_cpus": true``). Messages reuse msrun's wording.
``process_entry(data_or_plan, key) -> ProcessEntry``
    What a launcher needs for one process key (``"device3"``, ``"device_3"``, ``"scheduler"``):
    ``cpu_mode``, ``memory_mode``, ``main`` (main CPU string), ``cpu_node`` (cpu node string),
    ``memory`` (memory node string), each kept as written with spaces removed (msrun passes them
    through uncompacted) or None; ``modules`` (module -> CPU string).
``msrun_prefix(entry) -> list[str]``
    The ``numactl`` / ``taskset`` argv msrun builds for that entry (anchors §1.12 table).
``device_key(physical_id) -> "deviceN"``; ``normalize_key(key) -> "deviceN" | "scheduler" | None``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from topo.cpuset import CpuSet
from topo.errors import ParseError

CPU_MODES = ("cpu", "numa", "none")
MEMORY_MODES = ("numa", "none")
MODULES = ("main", "runtime", "pynative", "minddata")
TOP_KEYS = ("bind_config", "bind_cpu", "bind_memory", "topo")
CONFIG_KEYS = ("bind_cpu_mode", "bind_memory_mode", "actor_thread_fix_bind")

_KEY = re.compile(r"\A(?:device_?(\d+)|scheduler)\Z")
_WS = re.compile(r"\s+")


# --------------------------------------------------------------------------- keys
def device_key(physical_id: int) -> str:
    return f"device{int(physical_id)}"


def normalize_key(key: str) -> str | None:
    """``device_3`` -> ``device3``; ``scheduler`` stays; anything else -> None (msrun rejects it)."""
    if not isinstance(key, str):
        return None
    m = _KEY.match(key)
    if not m:
        return None
    return "scheduler" if m.group(1) is None else f"device{int(m.group(1))}"


def _device_of(key: str) -> int | None:
    m = _KEY.match(key)
    return int(m.group(1)) if m and m.group(1) is not None else None


# --------------------------------------------------------------------------- ranges
def expand_ranges(text: str) -> list[int]:
    """msrun's ``_expand_ranges``: ``"0-3,8"`` -> [0, 1, 2, 3, 8] (whitespace removed first).

    Raises ParseError with msrun's messages: ``CPU range '3-1' start should not exceed end.``,
    ``CPU range '1,,2' is invalid due to empty segment.``, ``CPU range 'x' is invalid.``
    """
    s = _WS.sub("", text)
    out: list[int] = []
    if not s:
        return out
    for seg in s.split(","):
        if not seg:
            raise ParseError(f"CPU range '{s}' is invalid due to empty segment.")
        lo, dash, hi = seg.partition("-")
        if not lo.isdigit() or (dash and not hi.isdigit()):
            raise ParseError(f"CPU range '{seg}' is invalid.")
        a = int(lo)
        b = int(hi) if dash else a
        if a > b:
            raise ParseError(f"CPU range '{seg}' start should not exceed end.")
        out.extend(range(a, b + 1))
    return out


def _as_set(value: int | str) -> CpuSet:
    if isinstance(value, bool):
        raise ParseError(f"NUMA id {value!r} should be an int or a range string.")
    if isinstance(value, int):
        if value < 0:
            raise ParseError(f"CPU range '{value}' is invalid.")
        return CpuSet((value,))
    return CpuSet(expand_ranges(value))


def _as_text(value: int | str | None) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return str(value)
    return _WS.sub("", value)


# --------------------------------------------------------------------------- the plan
@dataclass(frozen=True)
class ProcessBinding:
    """One process's entry: key ``deviceN`` (N = physical device id) or ``scheduler``."""

    key: str
    modules: tuple[tuple[str, str], ...] = ()  # cpu mode: (module, cpulist) in output order
    cpu_nodes: int | str | None = None  # numa cpu mode: node id or node-range string
    memory: int | str | None = None  # memory node id or node-range string
    local_rank: int | None = None
    has_cpu_entry: bool = True  # False: no bind_cpu entry at all (vs. an empty/null one)

    @property
    def device(self) -> int | None:
        return _device_of(self.key)

    @property
    def is_scheduler(self) -> bool:
        return self.key == "scheduler"

    def cpus(self, module: str = "main") -> CpuSet:
        """The CPUs of one module (empty set when absent)."""
        for name, text in self.modules:
            if name == module:
                return CpuSet(expand_ranges(text))
        return CpuSet()

    def all_cpus(self) -> CpuSet:
        out = CpuSet()
        for _, text in self.modules:
            out |= CpuSet(expand_ranges(text))
        return out

    def memory_nodes(self) -> CpuSet:
        return CpuSet() if self.memory is None else _as_set(self.memory)


@dataclass(frozen=True)
class BindPlan:
    """A whole job's binding, immutable; ``to_json()`` gives MindSpore's unified bind JSON."""

    cpu_mode: str = "cpu"
    memory_mode: str = "numa"
    processes: tuple[ProcessBinding, ...] = ()
    actor_thread_fix_bind: bool | None = None
    _meta: str = field(default="{}", repr=False)  # JSON text of the "topo" object: keeps this hashable
    warnings: tuple[str, ...] = ()

    def __post_init__(self):
        if self.cpu_mode not in CPU_MODES:
            raise ParseError(f"'bind_cpu_mode' only supports 'cpu'/'numa'/'none'; got {self.cpu_mode!r}")
        if self.memory_mode not in MEMORY_MODES:
            raise ParseError(f"'bind_memory_mode' only supports 'numa'/'none'; got {self.memory_mode!r}")
        seen = set()
        for p in self.processes:
            if normalize_key(p.key) != p.key:
                raise ParseError(f"process key {p.key!r} must be 'deviceN' or 'scheduler'")
            if p.key in seen:
                raise ParseError(f"process key {p.key!r} appears twice in the plan")
            seen.add(p.key)

    @classmethod
    def build(cls, processes: Iterable[ProcessBinding], *, cpu_mode: str = "cpu", memory_mode: str = "numa",
              actor_thread_fix_bind: bool | None = None, meta: Mapping | None = None,
              warnings: Iterable[str] = ()) -> "BindPlan":
        return cls(cpu_mode, memory_mode, tuple(processes), actor_thread_fix_bind,
                   json.dumps(dict(meta or {})), tuple(warnings))

    @property
    def meta(self) -> dict:
        return json.loads(self._meta)

    def keys(self) -> tuple[str, ...]:
        return tuple(p.key for p in self.processes)

    def process(self, key: str) -> ProcessBinding:
        k = normalize_key(key)
        for p in self.processes:
            if p.key == k:
                return p
        raise KeyError(key)

    def workers(self) -> tuple[ProcessBinding, ...]:
        return tuple(p for p in self.processes if not p.is_scheduler)

    # ---- JSON ---------------------------------------------------------
    def to_json(self) -> dict:
        config: dict[str, Any] = {"bind_cpu_mode": self.cpu_mode, "bind_memory_mode": self.memory_mode}
        if self.actor_thread_fix_bind is not None:
            config["actor_thread_fix_bind"] = self.actor_thread_fix_bind
        out: dict[str, Any] = {"bind_config": config}
        if self.cpu_mode == "cpu":
            out["bind_cpu"] = {
                p.key: (dict(p.modules) if p.modules else None)
                for p in self.processes if p.has_cpu_entry
            }
        elif self.cpu_mode == "numa":
            out["bind_cpu"] = {p.key: p.cpu_nodes for p in self.processes if p.cpu_nodes is not None}
        mem = {p.key: p.memory for p in self.processes if p.memory is not None}
        if mem or self.memory_mode == "numa":
            out["bind_memory"] = mem
        meta = self.meta
        if self.warnings:
            meta["warnings"] = list(self.warnings)
        ranks = {p.key: p.local_rank for p in self.processes if p.local_rank is not None}
        if ranks:
            meta.setdefault("local_ranks", ranks)
        if meta:
            out["topo"] = meta
        return out

    @classmethod
    def from_json(cls, data: Mapping) -> "BindPlan":
        """Read a bind JSON object; raises ParseError naming the first schema problem."""
        problems = validate_bind(data, allow_overlap=True)
        if problems:
            raise ParseError(str(problems[0]))
        data = normalize_keys(data)
        config = data.get("bind_config", {})
        cpu_mode = str(config.get("bind_cpu_mode", "none")).lower()
        memory_mode = str(config.get("bind_memory_mode", "none")).lower()
        bind_cpu = data.get("bind_cpu") or {}
        bind_mem = data.get("bind_memory") or {}
        meta = data.get("topo") if isinstance(data.get("topo"), Mapping) else {}
        ranks = meta.get("local_ranks", {}) if isinstance(meta.get("local_ranks"), Mapping) else {}
        warnings = tuple(meta.get("warnings", ())) if isinstance(meta.get("warnings"), list) else ()
        meta = {k: v for k, v in meta.items() if k not in ("warnings", "local_ranks")}
        keys = list(bind_cpu) + [k for k in bind_mem if k not in bind_cpu]
        procs = []
        for key in keys:
            value = bind_cpu.get(key)
            modules: tuple[tuple[str, str], ...] = ()
            cpu_nodes = None
            if cpu_mode == "cpu" and isinstance(value, Mapping):
                modules = tuple((m, _as_text(v)) for m, v in value.items())
            elif cpu_mode == "numa" and value is not None:
                cpu_nodes = value
            rank = ranks.get(key)
            procs.append(ProcessBinding(
                key=key, modules=modules, cpu_nodes=cpu_nodes, memory=bind_mem.get(key),
                local_rank=rank if isinstance(rank, int) else None,
                has_cpu_entry=key in bind_cpu,
            ))
        fix = config.get("actor_thread_fix_bind")
        return cls(cpu_mode, memory_mode, tuple(procs), fix if isinstance(fix, bool) else None,
                   json.dumps(meta), warnings)


def normalize_keys(data: Mapping) -> dict:
    """A copy of ``data`` with ``device_X`` keys of bind_cpu / bind_memory renamed ``deviceX``
    (msrun renames them in place, keeping their position)."""
    out = dict(data)
    for section in ("bind_cpu", "bind_memory"):
        value = data.get(section)
        if isinstance(value, Mapping):
            out[section] = {(normalize_key(k) or k): v for k, v in value.items()}
    return out


# --------------------------------------------------------------------------- loading
@dataclass(frozen=True)
class LoadedBind:
    data: dict
    path: str | None  # absolute path (MSRUN_BIND_FILE), None for inline JSON text
    sha256: str | None  # of the raw file text (MSRUN_BIND_FILE_HASH)


def load_bind(value: str) -> LoadedBind:
    """Load a bind JSON from a file path or inline JSON text, with msrun's checks and messages."""
    if value.endswith(".json") and not os.path.exists(value):
        raise ParseError(f"bind_numa json file '{value}' does not exist.")
    if os.path.exists(value):
        if not os.path.isfile(value):
            raise ParseError(f"bind_numa json path '{value}' is not a file.")
        try:
            with open(value, encoding="utf-8") as f:
                raw = f.read()
            data = json.loads(raw)
        except (OSError, ValueError) as exc:
            # msrun's words first (scripts match them), then what is wrong and where
            why = exc.strerror if isinstance(exc, OSError) else str(exc)
            raise ParseError(f"Failed to load bind_numa json file: {value}. ({why}; fix the file or "
                             "write a new one with `topo plan -o FILE`)") from exc
        if not isinstance(data, dict):
            raise ParseError(f"bind_numa json file '{value}' should be a json object.")
        config = data.get("bind_config", {})
        if not isinstance(config, dict):
            raise ParseError("bind_config must be a json object.")
        if str(config.get("bind_cpu_mode", "none")).lower() not in CPU_MODES:
            raise ParseError("'bind_cpu_mode' only supports 'cpu'/'numa'/'none'.")
        if str(config.get("bind_memory_mode", "none")).lower() not in MEMORY_MODES:
            raise ParseError("'bind_memory_mode' only supports 'numa'/'none'.")
        return LoadedBind(normalize_keys(data), os.path.abspath(value),
                          hashlib.sha256(raw.encode("utf-8")).hexdigest())
    try:
        data = json.loads(value)
    except ValueError as exc:
        raise ParseError(
            f"bind file {value!r} is neither an existing file nor JSON text; "
            "pass the path of a bind JSON (see `topo plan -o FILE`)"
        ) from exc
    if not isinstance(data, dict) or "bind_config" not in data:
        raise ParseError(f"inline bind JSON must be an object with a 'bind_config' key, got {value!r}")
    return LoadedBind(normalize_keys(data), None, None)


# --------------------------------------------------------------------------- validation
@dataclass(frozen=True)
class Problem:
    path: str  # JSON path: "bind_cpu.device1.main"
    message: str
    fix: str = ""
    # "warning": msrun runs such a file (overlapping main sets, keys it ignores); only errors
    # stop a launch or fail `topo validate`.
    severity: str = "error"

    def __str__(self) -> str:
        text = f"{self.path}: {self.message}" if self.path else self.message
        return f"{text} Fix: {self.fix}" if self.fix else text


def validate_bind(data: Any, topology=None, *, allow_overlap: bool | None = None) -> list[Problem]:
    """Every problem of a bind JSON object, schema first; resource checks when a topology is given.

    The schema is msrun's (anchors §1.12); where msrun stops at the first error we keep going.
    Overlapping ``main`` sets are a problem unless ``allow_overlap``; by default they are allowed
    only in a file whose ``"topo"`` notes say its mode shares CPUs (``"shared_cpus": true``, written
    by `topo plan` for node, socket, core-complex, all and single).
    """
    P: list[Problem] = []
    if not isinstance(data, Mapping):
        return [Problem("", f"bind JSON should be a json object, got {type(data).__name__}.",
                        "write an object with bind_config / bind_cpu / bind_memory keys")]
    for k in data:
        if k not in TOP_KEYS:
            P.append(Problem(str(k), f"unknown top-level key '{k}'.",
                             "use only bind_config, bind_cpu, bind_memory (and topo for notes)",
                             severity="warning"))
    config = data.get("bind_config", {})
    cpu_mode = mem_mode = "none"
    if not isinstance(config, Mapping):
        P.append(Problem("bind_config", "bind_config must be a json object.",
                         'write {"bind_cpu_mode": "cpu", "bind_memory_mode": "numa"}'))
        config = {}
    for k in config:
        if k not in CONFIG_KEYS:
            P.append(Problem(f"bind_config.{k}", f"unknown key '{k}' in bind_config.",
                             "keys are bind_cpu_mode, bind_memory_mode, actor_thread_fix_bind",
                             severity="warning"))
    raw = config.get("bind_cpu_mode", "none")
    if not isinstance(raw, str) or raw.lower() not in CPU_MODES:
        P.append(Problem("bind_config.bind_cpu_mode", "'bind_cpu_mode' only supports 'cpu'/'numa'/'none'.",
                         f"replace {raw!r} by one of \"cpu\", \"numa\", \"none\""))
    else:
        cpu_mode = raw.lower()
    raw = config.get("bind_memory_mode", "none")
    if not isinstance(raw, str) or raw.lower() not in MEMORY_MODES:
        P.append(Problem("bind_config.bind_memory_mode", "'bind_memory_mode' only supports 'numa'/'none'.",
                         f"replace {raw!r} by \"numa\" or \"none\""))
    else:
        mem_mode = raw.lower()
    if "actor_thread_fix_bind" in config and not isinstance(config["actor_thread_fix_bind"], bool):
        P.append(Problem("bind_config.actor_thread_fix_bind",
                         "'actor_thread_fix_bind' only supports bool type True/False.",
                         "write true or false (JSON booleans, not strings)"))

    sections = {}
    for section in ("bind_cpu", "bind_memory"):
        value = data.get(section)
        if value is None:
            continue
        if not isinstance(value, Mapping):
            P.append(Problem(section, f"{section} must be a json object, got {type(value).__name__}.",
                             f'write {{"device0": ...}} under {section}'))
            continue
        seen: dict[str, str] = {}
        for k in value:
            norm = normalize_key(k)
            if norm is None:
                P.append(Problem(f"{section}.{k}",
                                 f"Invalid key '{k}'. Only 'deviceX', 'device_X' (where X is a number), "
                                 "and 'scheduler' are supported.",
                                 "name the process 'deviceN' (N = physical device id) or 'scheduler'"))
            elif norm in seen:
                P.append(Problem(f"{section}.{k}", f"key '{k}' names the same process as '{seen[norm]}'.",
                                 "keep one of the two entries"))
            else:
                seen[norm] = k
        sections[section] = value

    present = allowed = nodes = allowed_nodes = cpu_nodes = None
    if topology is not None:
        present = topology.complete_pus | topology.pus
        allowed = topology.allowed_pus
        nodes = {n.os_index: n for n in topology.numa_nodes}
        allowed_nodes = topology.allowed_numa_nodes
        cpu_nodes = {n.os_index for n in topology.cpu_nodes()}

    mains: list[tuple[str, CpuSet]] = []
    bind_cpu = sections.get("bind_cpu")
    if cpu_mode == "cpu":
        if bind_cpu is None and "bind_cpu" not in data:
            P.append(Problem("bind_cpu", "bind_cpu must be a dict when bind_cpu_mode is 'cpu'.",
                             'add "bind_cpu": {"device0": {"main": "0-9"}} or set bind_cpu_mode to "none"'))
        for k, value in (bind_cpu or {}).items():
            if normalize_key(k) is None:
                continue
            path = f"bind_cpu.{k}"
            if value is None:
                continue
            if not isinstance(value, Mapping):
                P.append(Problem(path, f"'bind_cpu_mode' is 'cpu', in 'bind_cpu', type of value for "
                                       f"{k}:{value} should be dict, but got {type(value)}.",
                                 f'write {{"main": "{value}"}}'))
                continue
            for module, text in value.items():
                mpath = f"{path}.{module}"
                if module not in MODULES:
                    P.append(Problem(mpath, f"unknown module '{module}'.",
                                     "modules are main, runtime, pynative, minddata",
                                     severity="warning"))
                    continue
                if not isinstance(text, str):  # msrun strips and expands strings only
                    P.append(Problem(mpath, f"CPU range {text!r} for {k} should be a string.",
                                     f'write a cpulist string such as "{text}"' if isinstance(text, int)
                                     and not isinstance(text, bool) else 'write a cpulist string such as "0-4,8"'))
                    continue
                try:
                    cpus = _as_set(text)
                except ParseError as exc:
                    P.append(Problem(mpath, str(exc), 'write a cpulist such as "0-4,8" (ranges ascending)'))
                    continue
                if present is not None:
                    _check_cpus(P, mpath, k, dict(value), cpus, present, allowed)
                if module == "main" and cpus:
                    mains.append((k, cpus))
    elif cpu_mode == "numa":
        for k, value in (bind_cpu or {}).items():
            if normalize_key(k) is not None:
                _check_nodes(P, f"bind_cpu.{k}", k, value, "bind_cpu_mode", "bind_cpu",
                             nodes, allowed_nodes, cpu_nodes)
    if mem_mode == "numa":
        for k, value in (sections.get("bind_memory") or {}).items():
            if normalize_key(k) is not None:
                _check_nodes(P, f"bind_memory.{k}", k, value, "bind_memory_mode", "bind_memory",
                             nodes, allowed_nodes, None)

    if allow_overlap is None:
        notes = data.get("topo")
        allow_overlap = isinstance(notes, Mapping) and notes.get("shared_cpus") is True
    for i, (k1, s1) in enumerate([] if allow_overlap else mains):
        for k2, s2 in mains[i + 1:]:
            if s1.intersects(s2):
                P.append(Problem(f"bind_cpu.{k2}.main",
                                 f"main CPUs {s1 & s2} of {k2} overlap those of {k1}.",
                                 "give every process its own main CPUs (e.g. `topo plan --mode exclusive`)",
                                 severity="warning"))
    return P


def _check_cpus(P, path, key, value, cpus: CpuSet, present: CpuSet, allowed: CpuSet) -> None:
    missing = cpus - present
    if missing:
        P.append(Problem(path, f"CPU id {missing.first()} in {value} for {key} is not available: "
                               f"CPUs {missing} are not present on this machine.",
                         f"use CPUs from {allowed} (see `topo show`)"))
    disallowed = (cpus & present) - allowed
    if disallowed:
        P.append(Problem(path, f"CPU id {disallowed.first()} in {value} for {key} is not available: "
                               f"CPUs {disallowed} are not allowed by the cgroup cpuset / affinity.",
                         f"use CPUs from the allowed set {allowed}"))


def _check_nodes(P, path, key, value, mode_name, section, nodes, allowed_nodes, cpu_nodes) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        P.append(Problem(path, f"{mode_name} is 'numa', in '{section}', type of value for {key}:{value} "
                               f"should be int/str, but got {type(value)}.",
                         'write a node id (0) or a node range string ("0-1,3")'))
        return
    try:
        ids = _as_set(value)
    except ParseError as exc:
        P.append(Problem(path, str(exc), 'write a node id (0) or a node range string ("0-1,3")'))
        return
    if nodes is None:
        return
    for node in ids:
        if node not in nodes:
            P.append(Problem(path, f"NUMA id {node} in {value} for {key} is not available: no such NUMA node.",
                             f"use one of the NUMA nodes {CpuSet(nodes)}"))
        elif node not in allowed_nodes:
            P.append(Problem(path, f"NUMA id {node} in {value} for {key} is not available: "
                                   "not allowed by the cgroup (cpuset.mems).",
                             f"use an allowed node: {allowed_nodes}"))
        elif cpu_nodes is not None and node not in cpu_nodes:
            P.append(Problem(path, f"NUMA node {node} in {value} for {key} has no CPUs "
                                   "(memory-only), so numactl --cpunodebind fails on it.",
                             f"bind CPUs to a node with CPUs: {CpuSet(cpu_nodes)}"))


# --------------------------------------------------------------------------- per-process view
@dataclass(frozen=True)
class ProcessEntry:
    """One process's binding as msrun reads it: strings as written, spaces removed."""

    key: str
    cpu_mode: str
    memory_mode: str
    main: str | None  # cpu mode: the main CPU string
    cpu_node: str | None  # numa mode: the cpu node string
    memory: str | None  # memory node string (only when memory mode is numa)
    modules: tuple[tuple[str, str], ...] = ()


def process_entry(data: Mapping | BindPlan, key: str) -> ProcessEntry:
    """The binding of process ``key`` (``deviceN``, ``device_N`` or ``scheduler``)."""
    if isinstance(data, BindPlan):
        data = data.to_json()
    k = normalize_key(key)
    if k is None:
        raise ParseError(f"Invalid key '{key}'. Only 'deviceX', 'device_X' (where X is a number), "
                         "and 'scheduler' are supported.")
    data = normalize_keys(data)
    config = data.get("bind_config") or {}
    cpu_mode = str(config.get("bind_cpu_mode", "none")).lower()
    mem_mode = str(config.get("bind_memory_mode", "none")).lower()
    main = cpu_node = memory = None
    modules: tuple[tuple[str, str], ...] = ()
    value = (data.get("bind_cpu") or {}).get(k)
    if cpu_mode == "cpu" and isinstance(value, Mapping):
        modules = tuple((m, _as_text(v)) for m, v in value.items() if v is not None)
        main = _as_text(value.get("main")) or None
    elif cpu_mode == "numa" and value is not None:
        cpu_node = _as_text(value) or None
    if mem_mode == "numa":
        memory = _as_text((data.get("bind_memory") or {}).get(k)) or None
    return ProcessEntry(k, cpu_mode, mem_mode, main, cpu_node, memory, modules)


def bind_prefix(*, cpus: str | None = None, cpu_nodes: str | None = None,
                memory: str | None = None) -> list[str]:
    """msrun's prefix for a process bound to CPUs `cpus` or to the CPUs of nodes `cpu_nodes`, with
    memory on nodes `memory` (anchors §1.11/§1.12). Options are separate argv items, --membind
    first, as msrun writes them.

    >>> bind_prefix(cpus="0-9", memory="0")
    ['numactl', '--membind', '0', '--physcpubind', '0-9']
    >>> bind_prefix(cpus="0-9")
    ['taskset', '-c', '0-9']
    """
    if cpus and not memory and not cpu_nodes:
        return ["taskset", "-c", cpus]
    argv = []
    if memory:
        argv += ["--membind", memory]
    if cpus:
        argv += ["--physcpubind", cpus]
    elif cpu_nodes:
        argv += ["--cpunodebind", cpu_nodes]
    return ["numactl", *argv] if argv else []


def msrun_prefix(entry: ProcessEntry) -> list[str]:
    """The command prefix msrun puts before ``python script.py`` for this entry (anchors §1.12)."""
    return bind_prefix(cpus=entry.main if entry.cpu_mode == "cpu" else None,
                       cpu_nodes=entry.cpu_node if entry.cpu_mode == "numa" else None,
                       memory=entry.memory)
