"""msrun's automatic allocation (`--bind_core=True`, `--bind_numa=True`) and gen_bind_json's layout.

``msrun-auto`` with ``msrun_bind="core"`` (anchors §1.9)
    ``n = allowed CPUs // processes``. For devices in id order: take the next ``n`` CPUs of the
    device's own NUMA node (the *affinity pool*), then top up from the nodes that have no device
    (the *non-affinity pool*). **Ex.:** 2 devices on node 0 (CPUs 0-31) and node 1 (32-63) empty:
    n = 32, device0 gets 0-31, device1 finds node 0 used up and gets 32-63.
    Differences from msrun, each a place where msrun breaks: CPUs come from the topology's allowed
    set (cgroup v1 *and* v2 and the affinity mask), not only cgroup v1's ``cpuset.cpus``;
    ``share="job"`` (default) divides by the job's processes, not by every NPU on the host (which
    leaves most CPUs idle for a partial job; ``share="host"`` keeps msrun's division so concurrent
    jobs on one host never overlap); a device that still has fewer than ``n`` CPUs takes free CPUs
    of the nearest nodes instead of running short. CPU-only jobs: equal slices, the last process
    gets the remainder (msrun's fallback). ``affinity=False`` is msrun's no-affinity fallback:
    device ``r`` gets slice ``r`` of the allowed CPUs.
``msrun-auto`` with ``msrun_bind="numa"`` (anchors §1.10)
    Each device keeps its own node unless another device already took it, then takes the nearest
    node that has no device (msrun: the lowest-numbered; the same when distances tie). Where msrun raises StopIteration (no free node left) the device
    shares its own node, with a warning; fewer nodes than processes means shared nodes and a
    warning instead of msrun's silent "no binding". Memoryless nodes are never used.
Thread-module layout (``modules``, gen_bind_json.py, anchors §1.14)
    Each process's CPU list (in allocation order) is cut at relative positions, e.g.
    ``runtime=4-8, minddata=9-12, main=13-19``; the scheduler gets positions 20-23 of the free CPUs
    (those of no device), else of all allowed CPUs, or of device0's list. Applied by
    ``core.build_plan`` to any cpu-mode plan.
"""

from __future__ import annotations

from topo.cpuset import CpuSet
from topo.errors import UsageError
from topo.model import Topology

from planners.bindplan import BindPlan, ProcessBinding
from planners.core import PSEUDO_NODE, Job, Layout, Options, build_plan, finish, node_value


def plan_msrun_auto(topology: Topology, job: Job, options: Options) -> BindPlan:
    layout = Layout(topology)
    if options.msrun_bind == "numa":
        return _bind_numa(layout, job, options)
    return _bind_core(layout, job, options)


def _participants(layout: Layout, job: Job, options: Options) -> list[int]:
    """Device ids the CPUs are divided among, in id order (msrun iterates devices by id)."""
    if options.share == "host":
        return sorted(layout.devices)
    return sorted(d for d in job.devices if d is not None)


def assign_nodes(layout: Layout, devices: list[int], *, use_affinity: bool,
                 available: list[int]) -> tuple[dict[int, int], list[str]]:
    """Device -> one NUMA node, msrun's `_assign_numa_by_affinity` (or equal distribution).

    A device keeps its home node unless unavailable or already used; then it takes the nearest node
    with no affine device (msrun: the next by id). When none is left it keeps (shares) its home node, as gen_bind_json does,
    where msrun raises StopIteration.
    """
    warnings: list[str] = []
    if not available:
        raise UsageError("no NUMA node with both CPUs and memory is allowed: nothing to bind to")
    if not use_affinity:
        if len(available) < len(devices):
            warnings.append(f"{len(devices)} devices but only {len(available)} NUMA nodes "
                            f"({CpuSet(available)}): nodes are shared")
        return {d: available[i % len(available)] for i, d in enumerate(devices)}, warnings
    affine = {}
    for d in devices:
        home = layout.home_of(d)[0]
        affine[d] = home if home in available else _nearest(layout, home, available)
    pool = [n for n in available if n not in set(affine.values())]
    used: set[int] = set()
    out = {}
    for d in devices:
        node = affine[d]
        if node in used:
            # msrun takes the lowest free node; we take the nearest (the same when distances tie)
            nxt = _nearest(layout, node, pool) if pool else None
            if nxt is not None:
                pool.remove(nxt)
            if nxt is None:
                warnings.append(f"device {d}: no free NUMA node left (msrun raises StopIteration); "
                                f"shares node {node} with another device")
            else:
                node = nxt
        used.add(node)
        out[d] = node
    return out, warnings


def _nearest(layout: Layout, node: int, among: list[int]) -> int:
    info = layout.all_nodes.get(node)
    dist = info.distances if info is not None else {}
    return min(among, key=lambda n: (dist.get(n, 1 << 30), n))


def _available_numa(layout: Layout) -> tuple[list[int], list[str]]:
    if layout.node_ids == [PSEUDO_NODE]:
        raise UsageError("no allowed NUMA node has CPUs, so there is no node to bind; "
                         "use --msrun-bind core")
    memless = [n for n in layout.node_ids if layout.node_memory.get(n, 1) == 0]
    warnings = []
    if memless and len(memless) < len(layout.node_ids):
        warnings.append(f"memoryless NUMA nodes {CpuSet(memless)} are not used for NUMA binding")
        return [n for n in layout.node_ids if n not in memless], warnings
    return list(layout.node_ids), warnings


def _bind_numa(layout: Layout, job: Job, options: Options) -> BindPlan:
    available, warnings = _available_numa(layout)
    if len(available) < job.nproc:
        warnings.append(f"{job.nproc} processes but only {len(available)} NUMA nodes: nodes are shared "
                        "(msrun would bind nothing)")
    if job.cpu_only:
        nodes = [available[r % len(available)] for r in range(job.nproc)]
    else:
        devs = _participants(layout, job, options)
        mapping, more = assign_nodes(layout, devs, use_affinity=options.affinity, available=available)
        warnings += more
        nodes = [mapping[d] for d in job.devices]
    procs = [ProcessBinding(job.key(r), cpu_nodes=nodes[r],
                            memory=nodes[r] if options.memory == "numa" else None, local_rank=r)
             for r in range(job.nproc)]
    plan = BindPlan.build(procs, cpu_mode="numa", memory_mode=options.memory,
                          actor_thread_fix_bind=options.actor_thread_fix_bind)
    return finish(plan, job, mode="msrun-auto", options=options, layout=layout, warnings=warnings)


def _bind_core(layout: Layout, job: Job, options: Options) -> BindPlan:
    cpus = list(layout.allowed)
    warnings: list[str] = []
    if job.cpu_only:
        n = len(cpus) // job.nproc
        if n < 1:
            raise UsageError(f"Available CPUs is less than 1 per process: {len(cpus)} allowed CPUs for "
                             f"{job.nproc} processes; use fewer processes")
        lists = [cpus[r * n:(r + 1) * n] for r in range(job.nproc)]
        lists[-1] = cpus[(job.nproc - 1) * n:]
        memory = [layout.memory_for(CpuSet(lst)) for lst in lists]
        return _emit(layout, job, options, lists, memory, warnings)

    devs = _participants(layout, job, options)
    n = len(cpus) // len(devs)
    if n < 1:
        raise UsageError(f"Available CPUs is less than 1 per device: {len(cpus)} allowed CPUs for "
                         f"{len(devs)} devices; use fewer processes")
    if not options.affinity and not options.spread_nodes:
        # msrun's "Affinity binding not applicable, fall back to average CPU distribution."
        warnings.append("affinity off: average CPU distribution (device r gets slice r)")
        by_dev = {d: cpus[i * n:(i + 1) * n] for i, d in enumerate(devs)}
        lists = [by_dev[d] for d in job.devices]
        memory = [layout.memory_for(CpuSet(lst)) for lst in lists]
        return _emit(layout, job, options, lists, memory, warnings)

    if options.spread_nodes:
        available, more = _available_numa(layout)
        mapping, more2 = assign_nodes(layout, devs, use_affinity=options.affinity, available=available)
        warnings += more + more2
        homes = {d: (mapping[d],) for d in devs}
    else:
        homes = {d: layout.home_of(d) for d in devs}
    affinity_nodes = {x for h in homes.values() for x in h}
    cursor = {x: list(layout.node_cpus[x]) for x in layout.node_ids}
    pool_nodes = [x for x in layout.node_ids if x not in affinity_nodes]  # msrun's "-1" pool
    orphans = layout.orphan_cpus()
    if orphans:  # allowed CPUs whose node's memory is not allowed: last in the non-affinity pool
        cursor[_ORPHANS] = list(orphans)
        pool_nodes.append(_ORPHANS)

    def take(d: int, got: list[int], nodes: list[int]) -> None:
        for x in nodes:
            if len(got) >= n:
                return
            part = cursor[x][:n - len(got)]
            cursor[x] = cursor[x][len(part):]
            got += part
            if part and x not in homes[d] and d in job.devices:
                remote.setdefault(d, []).extend(part)

    remote: dict[int, list[int]] = {}
    by_dev: dict[int, list[int]] = {}
    for d in devs:
        got: list[int] = []
        take(d, got, list(homes[d]))  # the affinity pool
        # then the non-affinity pool; nearest node first (msrun: one cursor in node order, the
        # same order when all distances are equal)
        take(d, got, _by_distance(layout, homes[d][0], pool_nodes))
        by_dev[d] = got
    # Better than msrun: a job device still short of n takes free CPUs of the nearest other nodes
    # instead of running with fewer.
    for d in devs:
        if d in job.devices and len(by_dev[d]) < n:
            take(d, by_dev[d], _by_distance(layout, homes[d][0], list(cursor)))
    for d, cpus_taken in remote.items():
        warnings.append(f"device {d}: its node is used up; also given CPUs {CpuSet(cpus_taken)} of other nodes")
    lists = [by_dev[d] for d in job.devices]
    memory = [homes[d] for d in job.devices]
    return _emit(layout, job, options, lists, memory, warnings)


_ORPHANS = -2  # cursor key of the allowed CPUs on no allowed node


def _by_distance(layout: Layout, home: int, nodes: list[int]) -> list[int]:
    info = layout.all_nodes.get(home)
    dist = info.distances if info is not None else {}
    return sorted(nodes, key=lambda x: (dist.get(x, 1 << 30), x))


def _emit(layout: Layout, job: Job, options: Options, lists: list[list[int]], memory, warnings) -> BindPlan:
    return build_plan(job, [CpuSet(lst) for lst in lists], memory, mode="msrun-auto", options=options,
                      layout=layout, warnings=warnings, orders=lists)


def parse_range(name: str, value: str) -> tuple[int, int]:
    """gen_bind_json's strict ``start-end`` relative range, with its messages."""
    text = value.strip()
    lo, dash, hi = text.partition("-")
    if not dash or not lo.strip().isdigit() or not hi.strip().isdigit():
        raise UsageError(f"{name} must be in 'start-end' format, got '{value}'.")
    a, b = int(lo), int(hi)
    if a > b:
        raise UsageError(f"{name} start must be <= end, got '{value}'.")
    return a, b


def parse_modules(text: str) -> tuple[tuple[str, int, int], ...]:
    """``runtime=4-8,minddata=9-12,main=13-19`` -> (("runtime", 4, 8), ...), in the order given."""
    from planners.bindplan import MODULES

    out = []
    for item in text.split(","):
        name, eq, rng = item.strip().partition("=")
        name = name.strip()
        if not eq or name not in MODULES:
            raise UsageError(f"bad module {item.strip()!r} in --modules {text!r}: write NAME=START-END "
                             f"with NAME one of {', '.join(MODULES)}")
        if any(name == m for m, _, _ in out):
            raise UsageError(f"module {name!r} given twice in --modules {text!r}")
        out.append((name, *parse_range(f"--modules {name}", rng)))
    return tuple(out)


__all__ = ["plan_msrun_auto", "assign_nodes", "node_value", "parse_range", "parse_modules"]
