"""Checking a bind JSON: every problem at once, each with its JSON path, a fix and a severity.

`topo validate`, `topo launch` and `topo bind` run the same steps, in msrun's words: `read_plan`
(msrun's schema, not stopping at the first error), then `check_plan` (resources, overlapping main sets).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from topo.cpuset import CpuSet, excerpt
from topo.errors import ParseError

from topo.planners.bindplan import (
    CONFIG_KEYS, CPU_MODES, MEMORY_MODES, MEMORY_POLICY_KEY, MODULES, TOP_KEYS, BindPlan, ProcessBinding,
    as_written, normalize_key, parse_nodes,
)

NODES_FIX = 'write a node id (0) or a node range string ("0-1,3")'


@dataclass(frozen=True)
class Problem:
    path: str  # JSON path: "bind_cpu.device1.main"
    message: str
    fix: str = ""
    severity: str = "error"  # "warning": msrun runs such a file; only errors stop a launch or validate

    def __str__(self) -> str:
        text = f"{self.path}: {self.message}" if self.path else self.message
        return f"{text} Fix: {self.fix}" if self.fix else text


def validate_bind(data: Any, topology=None, *, allow_overlap: bool | None = None) -> list[Problem]:
    """Every problem of a bind JSON object: schema, then check_plan's."""
    reader = _Reader(data)
    return reader.problems + check_plan(reader.plan(), topology, allow_overlap=allow_overlap)


def read_plan(data: Any) -> tuple[BindPlan | None, list[Problem]]:
    """The schema problems of a bind JSON object, and its BindPlan when none of them is an error."""
    reader = _Reader(data)
    if any(p.severity == "error" for p in reader.problems):
        return None, reader.problems
    return reader.plan(), reader.problems


def check_plan(plan: BindPlan, topology, *, allow_overlap: bool | None = None) -> list[Problem]:
    """What a plan asks of `topology` (None: nothing) that it lacks or does not allow, then overlapping
    main sets unless allowed (by the caller, else by the notes of a CPU-sharing mode)."""
    problems = _resource_problems(plan.processes, topology) if topology is not None else []
    if allow_overlap is None:
        allow_overlap = plan.meta.get("shared_cpus") is True
    return problems if allow_overlap else problems + _overlap_problems(plan.processes)


def one_line(errors: list[Problem]) -> str:
    """The first of `errors`, and how many more there are: what a refused launch or load says."""
    more = f" (and {len(errors) - 1} more; run `topo validate`)" if len(errors) > 1 else ""
    return f"{errors[0]}{more}"


# --------------------------------------------------------------------------- schema
class _Reader:
    """One pass over a bind JSON object: its problems, and the entries that parsed."""

    def __init__(self, data: Any):
        self.problems: list[Problem] = []
        self.entries: list[ProcessBinding] = []
        self.notes: Mapping = {}
        self.cpu_mode = self.memory_mode = "none"
        self.fix_bind: bool | None = None
        if not isinstance(data, Mapping):
            self.problem("", f"bind JSON should be a json object, got {type(data).__name__}.",
                         "write an object with bind_config / bind_cpu / bind_memory keys")
            return
        self.duplicates(data, "")
        for k in data:
            if k not in TOP_KEYS:
                self.problem(str(k), f"unknown top-level key '{k}'.",
                             "use only bind_config, bind_cpu, bind_memory (and topo for notes)", "warning")
        config = self.read_config(data.get("bind_config", {}))
        notes = data.get("topo")
        self.notes = notes if isinstance(notes, Mapping) else {}
        self.read_policy()
        sections = {s: self.read_section(data, s) for s in ("bind_cpu", "bind_memory")}
        if self.cpu_mode == "cpu" and "bind_cpu" not in data:
            self.problem("bind_cpu", "bind_cpu must be a dict when bind_cpu_mode is 'cpu'.",
                         'add "bind_cpu": {"device0": {"main": "0-9"}} or set bind_cpu_mode to "none"')
        # A section its mode turns off (msrun reads bind_cpu only in cpu/numa mode, bind_memory only in
        # numa mode) binds nothing: say so, as a file that runs unbound is rarely what was meant.
        for section, mode_key, mode in (("bind_cpu", "bind_cpu_mode", self.cpu_mode),
                                        ("bind_memory", "bind_memory_mode", self.memory_mode)):
            written = config.get(mode_key, "none") if config is not None else None
            if data.get(section) and mode == "none" and isinstance(written, str) and written.lower() == "none":
                self.problem(section, f"ignored, because {mode_key} is 'none'"
                                      f"{'' if mode_key in config else ' (the default)'}.",
                             f'set "{mode_key}" in bind_config to bind what {section} says, or remove {section}',
                             "warning")
        cpu = self.read_cpu(sections["bind_cpu"])
        memory = self.read_memory(sections["bind_memory"])
        ranks = self.notes.get("local_ranks")
        ranks = ranks if isinstance(ranks, Mapping) else {}
        for key in dict.fromkeys([*cpu, *memory]):  # bind_cpu's order, then keys only in bind_memory
            modules, (cpu_value, cpu_set), has_entry = cpu.get(key, ((), (None, None), False))
            memory_value, memory_set = memory.get(key, (None, None))
            rank = ranks.get(key)
            self.entries.append(ProcessBinding(
                key, tuple((m, text) for m, text, _ in modules), cpu_value, memory_value,
                rank if isinstance(rank, int) and not isinstance(rank, bool) else None, has_entry,
                module_cpus=tuple((m, s) for m, _, s in modules), cpu_node_set=cpu_set, memory_nodes=memory_set))

    def problem(self, path: str, message: str, fix: str = "", severity: str = "error") -> None:
        self.problems.append(Problem(path, message, fix, severity))

    def duplicates(self, obj: Mapping, where: str) -> None:
        for key in getattr(obj, "duplicate_keys", ()):
            path = f"{where}.{key}" if where else str(key)
            self.problem(path, f"key '{key}' appears more than once{' in ' + where if where else ''}; "
                               "JSON keeps only the last.", "keep one entry per key")

    def read_config(self, config: Any) -> Mapping | None:
        if not isinstance(config, Mapping):
            self.problem("bind_config", "bind_config must be a json object.",
                         'write {"bind_cpu_mode": "cpu", "bind_memory_mode": "numa"}')
            return None
        self.duplicates(config, "bind_config")
        for k in config:
            if k not in CONFIG_KEYS:
                self.problem(f"bind_config.{k}", f"unknown key '{k}' in bind_config.",
                             "keys are bind_cpu_mode, bind_memory_mode, actor_thread_fix_bind", "warning")
        for key, modes, fix in (("bind_cpu_mode", CPU_MODES, 'one of "cpu", "numa", "none"'),
                                ("bind_memory_mode", MEMORY_MODES, '"numa" or "none"')):
            raw = config.get(key, "none")
            if isinstance(raw, str) and raw.lower() in modes:
                setattr(self, key.removeprefix("bind_"), raw.lower())  # cpu_mode, memory_mode
            else:
                self.problem(f"bind_config.{key}", f"'{key}' only supports {'/'.join(map(repr, modes))}.",
                             f"replace {raw!r} by {fix}")
        if "actor_thread_fix_bind" in config:
            if isinstance(config["actor_thread_fix_bind"], bool):
                self.fix_bind = config["actor_thread_fix_bind"]
            else:
                self.problem("bind_config.actor_thread_fix_bind",
                             "'actor_thread_fix_bind' only supports bool type True/False.",
                             "write true or false (JSON booleans, not strings)")
        return config

    def read_policy(self) -> None:
        policy = self.notes.get(MEMORY_POLICY_KEY, "bind")
        path = f"topo.{MEMORY_POLICY_KEY}"
        if policy == "bind":
            return
        if policy != "preferred":
            self.problem(path, f"memory policy {policy!r} is not one topo applies.",
                         'write "preferred", or remove the key for msrun\'s strict binding (--membind)')
        elif self.memory_mode == "numa":
            self.problem(path, "a preferred memory policy with bind_memory_mode 'numa': msrun would bind "
                               "memory strictly (numactl --membind), which is not what the file asks.",
                         'set "bind_memory_mode": "none" (topo applies the preferred nodes, msrun leaves memory alone)')
        else:
            self.memory_mode = "preferred"

    def read_section(self, data: Mapping, section: str) -> Mapping | None:
        value = data.get(section)
        if value is None:
            return None
        if not isinstance(value, Mapping):
            self.problem(section, f"{section} must be a json object, got {type(value).__name__}.",
                         f'write {{"device0": ...}} under {section}')
            return None
        self.duplicates(value, section)
        seen: dict[str, str] = {}
        out = {}
        for k, v in value.items():
            norm = normalize_key(k)
            if norm is None:
                self.problem(f"{section}.{k}",
                             f"Invalid key '{k}'. Only 'deviceX', 'device_X' (where X is a number), "
                             "and 'scheduler' are supported.",
                             "name the process 'deviceN' (N = physical device id) or 'scheduler'")
            elif norm in seen:
                self.problem(f"{section}.{k}", f"key '{k}' names the same process as '{seen[norm]}'.",
                             "keep one of the two entries")
            else:
                seen[norm] = k
                out[norm] = (k, v)
        return out

    def read_cpu(self, section: Mapping | None) -> dict:
        """normalized key -> (modules ((name, text, set), ...), (cpu node value, set) or None, has entry)."""
        out: dict = {}
        if self.cpu_mode == "none":
            return out
        for norm, (k, value) in (section or {}).items():
            path = f"bind_cpu.{k}"
            if self.cpu_mode == "numa":
                nodes = self.nodes("bind_cpu", k, value)
                if nodes is not None:
                    out[norm] = ((), nodes, True)
                continue
            if value is not None and not isinstance(value, Mapping):
                self.problem(path, f"'bind_cpu_mode' is 'cpu', in 'bind_cpu', type of value for "
                                   f"{k}:{value} should be dict, but got {type(value)}.",
                             f'write {{"main": "{value}"}}')
                continue
            self.duplicates(value, path)
            modules = []
            for module, text in (value or {}).items():  # null: an entry that binds nothing
                mpath = f"{path}.{module}"
                if module not in MODULES:
                    self.problem(mpath, f"unknown module '{module}'.", "modules are main, runtime, pynative, minddata",
                                 "warning")
                    continue
                if not isinstance(text, str):  # msrun strips and expands strings only
                    self.problem(mpath, f"CPU range {text!r} for {k} should be a string.",
                                 f'write a cpulist string such as "{text}"'
                                 if isinstance(text, int) and not isinstance(text, bool)
                                 else 'write a cpulist string such as "0-4,8"')
                    continue
                try:
                    cpus = CpuSet.parse(text, msrun=True)
                except ParseError as exc:
                    self.problem(mpath, str(exc), 'write a cpulist such as "0-4,8" (ranges ascending)')
                    continue
                modules.append((module, as_written(text), cpus))
            out[norm] = (tuple(modules), (None, None), True)
        return out

    def read_memory(self, section: Mapping | None) -> dict:
        """normalized key -> (node value, set)."""
        out: dict = {}
        if self.memory_mode == "none":
            return out
        for norm, (k, value) in (section or {}).items():
            nodes = self.nodes("bind_memory", k, value)
            if nodes is None:
                continue
            if self.memory_mode == "preferred" and nodes[1].weight() > 1:
                self.problem(f"bind_memory.{k}", f"a preferred memory policy takes one node, got {value!r} for {k} "
                                   "(numactl --preferred accepts a single node).",
                             f"name one node, e.g. {nodes[1].first()}")
                continue
            out[norm] = nodes
        return out

    def nodes(self, section: str, key, value) -> tuple[int | str, CpuSet] | None:
        """A node value of ``section`` (bind_cpu in numa mode, bind_memory): as written, and its set."""
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            self.problem(f"{section}.{key}", f"{section}_mode is 'numa', in '{section}', type of value for "
                                             f"{key}:{value} should be int/str, but got {type(value)}.", NODES_FIX)
            return None
        try:
            nodes = parse_nodes(value)
        except ParseError as exc:
            self.problem(f"{section}.{key}", str(exc), NODES_FIX)
            return None
        return (value if isinstance(value, int) else as_written(value)), nodes

    def plan(self) -> BindPlan:
        notes = self.notes
        warnings = notes.get("warnings")
        warnings = tuple(str(w) for w in warnings) if isinstance(warnings, list) else ()
        meta = {k: v for k, v in notes.items() if k not in ("warnings", "local_ranks", MEMORY_POLICY_KEY)}
        return BindPlan.build(self.entries, cpu_mode=self.cpu_mode, memory_mode=self.memory_mode,
                              actor_thread_fix_bind=self.fix_bind, meta=meta, warnings=warnings)


# --------------------------------------------------------------------------- resources
def _resource_problems(entries: Iterable[ProcessBinding], topology) -> list[Problem]:
    problems: list[Problem] = []
    present = topology.complete_pus | topology.pus
    allowed = topology.allowed_pus
    usable = present & allowed
    nodes = {n.os_index for n in topology.numa_nodes}
    allowed_nodes = topology.allowed_numa_nodes
    cpu_nodes = {n.os_index for n in topology.cpu_nodes()}
    for p in entries:
        for module, cpus in p.module_cpus:
            if cpus <= usable:
                continue
            written = excerpt(str(dict(p.modules)), 120)
            for bad, why, fix in ((cpus - present, "not present on this machine", f"{allowed} (see `topo show`)"),
                                  ((cpus & present) - allowed, "not allowed by the cgroup cpuset / affinity",
                                   f"the allowed set {allowed}")):
                if bad:
                    problems.append(Problem(f"bind_cpu.{p.key}.{module}", f"CPU id {bad.first()} in {written} for "
                                            f"{p.key} is not available: CPUs {bad} are {why}.", f"use CPUs from {fix}"))
        for section, value, ids, need in (("bind_cpu", p.cpu_nodes, p.cpu_node_set, cpu_nodes),
                                          ("bind_memory", p.memory, p.memory_nodes, None)):
            if ids is not None:
                problems += _node_problems(f"{section}.{p.key}", p.key, value, ids, nodes, allowed_nodes, need)
    return problems


def _node_problems(path, key, value, ids: CpuSet, nodes, allowed_nodes, cpu_nodes) -> list[Problem]:
    problems = []
    for node in ids:
        if node not in nodes:
            problems.append(Problem(path, f"NUMA id {node} in {value} for {key} is not available: no such NUMA node.",
                                    f"use one of the NUMA nodes {CpuSet(nodes)}"))
        elif node not in allowed_nodes:
            problems.append(Problem(path, f"NUMA id {node} in {value} for {key} is not available: "
                                          "not allowed by the cgroup (cpuset.mems).",
                                    f"use an allowed node: {allowed_nodes}"))
        elif cpu_nodes is not None and node not in cpu_nodes:
            problems.append(Problem(path, f"NUMA node {node} in {value} for {key} has no CPUs "
                                          "(memory-only), so numactl --cpunodebind fails on it.",
                                    f"bind CPUs to a node with CPUs: {CpuSet(cpu_nodes)}"))
        if len(problems) >= 8:  # a range of a million unknown nodes is one mistake, not a million lines
            break
    return problems


# --------------------------------------------------------------------------- overlaps
def _overlap_problems(entries: Iterable[ProcessBinding]) -> list[Problem]:
    """A warning per process whose main CPUs overlap earlier ones, naming three owners. ``owner[cpu]``
    is the first process with that CPU: the work grows with the CPUs listed, not with pairs."""
    problems: list[Problem] = []
    owner: list[str | None] = []
    seen = CpuSet()
    for p in entries:
        main = p.cpus("main")
        if not main:
            continue
        owner += [None] * (main.last() + 1 - len(owner))
        owners: dict[str, None] = {}
        for lo, hi in main.ranges():
            run = owner[lo:hi + 1]
            owners.update(dict.fromkeys(o for o in run if o is not None))
            owner[lo:hi + 1] = [p.key if o is None else o for o in run]
        if owners:
            names = ", ".join(list(owners)[:3]) + (" and others" if len(owners) > 3 else "")
            problems.append(Problem(f"bind_cpu.{p.key}.main", f"main CPUs {main & seen} of {p.key} overlap those of "
                                    f"{names}.", "give every process its own main CPUs (e.g. `topo plan --mode "
                                    "exclusive`)", "warning"))
        seen |= main
    return problems
