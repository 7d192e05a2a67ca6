"""`topo plan --explain`: one row per process (rank, key, device, its node: ``2>0`` planned on the
nearest node with CPUs, ``?>0`` sysfs gives none, each noted below; CPUs, cores, L3 groups, memory,
whether the CPUs are local to the device) and the warnings a reader should see."""

from __future__ import annotations

from topo.cpuset import CpuSet
from topo.model import Topology

from topo.planners.binding import from_entry
from topo.planners.bindplan import BindPlan, ProcessBinding
from topo.planners.core import AllowedResources, nodes_text


def process_cpus(proc: ProcessBinding, resources: AllowedResources) -> CpuSet:
    """The CPUs a process ends up on: its main CPUs, else its CPU nodes' allowed CPUs."""
    return from_entry(proc, resources.topology, None).cpus or CpuSet()


def driven_device(plan: BindPlan, proc: ProcessBinding, resources: AllowedResources) -> int | None:
    """The device a process drives, by its key; None for the scheduler and in a CPU-only job (whose
    ``deviceN`` is the rank)."""
    if proc.is_scheduler or plan.meta.get("cpu_only"):
        return None
    return proc.device if proc.device in resources.devices else None


def analyse(topology: Topology, plan: BindPlan) -> tuple[list[dict], list[str]]:
    """The table's rows (column -> text) and the warnings, each once."""
    resources = AllowedResources(topology)
    rows: list[dict] = []
    warnings: list[str] = list(plan.warnings)
    want_max = plan.meta.get("options", {}).get("max_physical_cores")
    owners: dict[int, list[str]] = {}  # core index -> keys touching it
    sets: dict[str, CpuSet] = {}
    llc_of_pu = {pu: i for i, g in enumerate(resources.llcs) for pu in g}
    for proc in plan.processes:
        cpus = sets[proc.key] = process_cpus(proc, resources)
        dev = driven_device(plan, proc, resources)
        home = resources.home_of(dev) if dev is not None else ()
        node_text = "-"
        if dev is not None:
            raw = resources.devices[dev].numa_node
            node_text = str(raw) if (raw,) == home else f"{'?' if raw is None else raw}>{nodes_text(home)}"
        home_cpus = resources.cpus_of_nodes(home)
        local = "-"
        if dev is not None and cpus:
            local = "yes" if cpus <= home_cpus else "partly" if cpus.intersects(home_cpus) else "no"
        cores = resources.core_indexes(cpus)
        for i in cores:
            owners.setdefault(i, []).append(proc.key)
        l3 = {llc_of_pu[pu] for i in cores for pu in resources.cores[i] & cpus if pu in llc_of_pu}
        rows.append({
            "rank": "-" if proc.local_rank is None else str(proc.local_rank),
            "key": proc.key,
            "device": "-" if dev is None else str(dev),
            "node": node_text,
            "cpus": cpus.to_list() or "-",
            "cores": f"{len(cores)} ({cpus.weight()} PUs)" if cpus else "-",
            "l3": ("L3#" + CpuSet(l3).to_list()) if l3 else "-",
            "memory": "-" if proc.memory is None else str(proc.memory),
            "local": local,
        })
        if local in ("no", "partly") and not proc.is_scheduler:
            remote = cpus - home_cpus
            warnings.append(f"{proc.key}: CPUs {remote} are remote from device {dev} "
                            f"(its node {nodes_text(home)} has CPUs {home_cpus})")
        if want_max is not None and dev is not None and len(cores) < want_max:
            warnings.append(f"{proc.key}: {len(cores)} physical cores, fewer than the {want_max} asked "
                            "(max_physical_cores)")
    for idx in sorted(owners):
        keys, core = sorted(set(owners[idx])), resources.cores[idx]
        if len(keys) > 1 and any(sets[k] & core != core for k in keys):
            warnings.append(f"SMT siblings of core {core} are split across processes {', '.join(keys)}")
    return rows, list(dict.fromkeys(warnings))


COLUMNS = (("rank", "RANK"), ("key", "KEY"), ("device", "DEVICE"), ("node", "NODE"), ("cpus", "CPUS"),
           ("cores", "CORES"), ("l3", "L3"), ("memory", "MEM"), ("local", "LOCAL"))


def explain(topology: Topology, plan: BindPlan) -> str:
    rows, warnings = analyse(topology, plan)
    meta = plan.meta
    n = len(plan.workers())
    head = (f"mode {meta.get('mode', '?')}: {n} process{'es' if n != 1 else ''} on {topology.summary()}; "
            f"bind_cpu_mode={plan.cpu_mode}, bind_memory_mode={plan.memory_mode}")
    table = [dict(COLUMNS), *rows]  # the titles, then the rows
    widths = {k: max(len(r[k]) for r in table) for k, _ in COLUMNS}
    lines = [head, *("  ".join(r[k].ljust(widths[k]) for k, _ in COLUMNS).rstrip() for r in table)]
    notes = node_notes(rows)
    if warnings or notes:
        lines.append("")
    lines.extend(f"note: {n}" for n in notes)
    lines.extend(f"warning: {w}" for w in warnings)
    return "\n".join(lines)


def node_notes(rows: list[dict]) -> list[str]:
    """What each `A>B` of the NODE column means: the device's node A, and B, where it was planned."""
    notes = {}
    for r in rows:
        node, device = r["node"], r["device"]
        known, sep, home = node.partition(">")
        if not sep or node in notes:
            continue
        if known == "?":
            notes[node] = (f"NODE {node}: sysfs gives device {device} no NUMA node (numa_node -1, as on "
                           f"one-node machines and most VMs); planned on node {home}, that of its local CPUs "
                           "(the first node when they are unknown)")
        else:
            notes[node] = (f"NODE {node}: device {device}'s node {known} has no allowed CPUs (memory-only, or "
                           f"outside the cgroup); planned on the nearest node with them, {home}")
    return list(notes.values())
