"""msrun's automatic allocation (`--bind_core=True`, `--bind_numa=True`): mode ``msrun-auto``.

``msrun_bind="core"``: devices in id order take the next ``allowed CPUs // processes`` CPUs of their
node, then of nodes without a device; memory on the node ``--bind_numa=True`` gives. Unlike msrun:
the allowed CPUs (any cgroup, affinity), not cgroup v1's ``cpuset.cpus``; ``share="job"`` divides by
the job, not the host's NPUs (``share="host"``); a device still short takes the nearest free CPUs.
CPU-only jobs: equal slices, the last taking the rest. ``affinity=False``: device r gets slice r.
``msrun_bind="numa"``: see `assign_nodes`; memoryless nodes are never used.
"""

from __future__ import annotations

from functools import cache

from topo.cpuset import CpuSet, union_all
from topo.errors import UsageError
from topo.model import Topology

from topo.planners.bindplan import BindPlan
from topo.planners.core import (PSEUDO_NODE, AllowedResources, Job, Options, build_plan, finish, nodes_entry,
                                 process_binding)


def plan_msrun_auto(topology: Topology, job: Job, options: Options) -> BindPlan:
    return (_bind_numa if options.msrun_bind == "numa" else _bind_core)(AllowedResources(topology), job, options)


def _participants(resources: AllowedResources, job: Job, options: Options) -> list[int]:
    """Device ids the CPUs are divided among, in id order (msrun iterates devices by id)."""
    if options.share == "host":
        return sorted(resources.devices)
    return sorted(d for d in job.devices if d is not None)


def assign_nodes(resources: AllowedResources, devices: list[int], *, use_affinity: bool,
                 available: list[int]) -> tuple[dict[int, int], list[str]]:
    """Device -> one NUMA node, msrun's `_assign_numa_by_affinity` (or equal distribution): its home node
    unless unavailable or used, else the nearest node with no affine device (msrun: the next by id), else
    (shared, with a warning, as gen_bind_json does) its home node, where msrun raises StopIteration."""
    warnings: list[str] = []
    if not available:
        raise UsageError("no NUMA node with both CPUs and memory is allowed: nothing to bind to")
    if not use_affinity:
        if len(available) < len(devices):
            warnings.append(f"{len(devices)} devices but only {len(available)} NUMA nodes "
                            f"({CpuSet(available)}): nodes are shared")
        return {d: available[i % len(available)] for i, d in enumerate(devices)}, warnings
    usable = set(available)
    affine = {}
    for d in devices:
        home = resources.home_of(d)[0]
        affine[d] = home if home in usable else resources.nearest(home, available)
    claimed = set(affine.values())
    pool = [n for n in available if n not in claimed]
    used: set[int] = set()
    out = {}
    for d in devices:
        node = affine[d]
        if node in used:
            if pool:  # msrun takes the lowest free node; we take the nearest (the same when distances tie)
                node = resources.nearest(node, pool)
                pool.remove(node)
            else:
                warnings.append(f"device {d}: no free NUMA node left (msrun raises StopIteration); "
                                f"shares node {node} with another device")
        used.add(node)
        out[d] = node
    return out, warnings


def _available_numa(resources: AllowedResources) -> tuple[list[int], list[str]]:
    if resources.node_ids == [PSEUDO_NODE]:
        raise UsageError("no allowed NUMA node has CPUs, so there is no node to bind; use msrun_bind core")
    memless = [n for n in resources.node_ids if resources.all_nodes[n].local_memory == 0]
    warnings = []
    if memless and len(memless) < len(resources.node_ids):
        warnings.append(f"memoryless NUMA nodes {CpuSet(memless)} are not used for NUMA binding")
        return [n for n in resources.node_ids if n not in memless], warnings
    return list(resources.node_ids), warnings


def _bind_numa(resources: AllowedResources, job: Job, options: Options) -> BindPlan:
    available, warnings = _available_numa(resources)
    if len(available) < job.nproc:
        warnings.append(f"{job.nproc} processes but only {len(available)} NUMA nodes: nodes are shared "
                        "(msrun would bind nothing)")
    if job.cpu_only:
        nodes = [available[r % len(available)] for r in range(job.nproc)]
    else:
        mapping, more = assign_nodes(resources, _participants(resources, job, options), use_affinity=options.affinity,
                                     available=available)
        warnings += more
        nodes = [mapping[d] for d in job.devices]
    procs = [process_binding(job.key(r), cpu_nodes=nodes_entry((nodes[r],)), local_rank=r,
                             memory=nodes_entry((nodes[r],), options.memory))
             for r in range(job.nproc)]
    return finish(procs, cpu_mode="numa", options=options, resources=resources, warnings=warnings)


ORPHANS = -2  # the pool of the allowed CPUs on no allowed node (their node's memory is not allowed)


def _bind_core(resources: AllowedResources, job: Job, options: Options) -> BindPlan:
    allowed = resources.allowed
    cpus = list(allowed)
    if job.cpu_only:
        n = len(cpus) // job.nproc
        if n < 1:
            raise UsageError(f"Available CPUs is less than 1 per process: {len(cpus)} allowed CPUs for "
                             f"{job.nproc} processes; use fewer processes")
        lists = [cpus[r * n:(r + 1) * n] for r in range(job.nproc)]
        lists[-1] = cpus[(job.nproc - 1) * n:]
        sets = [_span(allowed, lst) for lst in lists]
        return build_plan(job, sets, [resources.memory_for(s) for s in sets], options=options, resources=resources,
                          orders=lists)

    devs = _participants(resources, job, options)
    n = len(cpus) // len(devs)
    if n < 1:
        raise UsageError(f"Available CPUs is less than 1 per device: {len(cpus)} allowed CPUs for "
                         f"{len(devs)} devices; use fewer processes")
    warnings: list[str] = []
    numa = options.memory != "none" and resources.node_ids != [PSEUDO_NODE]
    if numa or options.spread_nodes:  # what ``--bind_numa=True`` gives each device
        available, warnings = _available_numa(resources)
        mapping, more = assign_nodes(resources, devs, use_affinity=options.affinity, available=available)
        warnings += more
    if not options.affinity and not options.spread_nodes:
        # msrun's "Affinity binding not applicable, fall back to average CPU distribution."
        warnings.append("affinity off: average CPU distribution (device r gets slice r)")
        slot = {d: i for i, d in enumerate(devs)}
        lists = [cpus[slot[d] * n:(slot[d] + 1) * n] for d in job.devices]
        memory = [(mapping[d],) if numa else None for d in job.devices]
        return build_plan(job, [_span(allowed, lst) for lst in lists], memory, options=options, resources=resources,
                          warnings=warnings, orders=lists)

    homes = {d: (mapping[d],) for d in devs} if options.spread_nodes else {d: resources.home_of(d) for d in devs}
    # per-node CPU lists handed out front to back (msrun's per-NUMA cursors)
    pools = dict(resources.node_cpus)
    orphans = allowed - union_all(pools.values())
    if orphans:
        pools[ORPHANS] = orphans
    pool_lists = {x: list(s) for x, s in pools.items()}
    taken = dict.fromkeys(pools, 0)
    affinity_nodes = {x for h in homes.values() for x in h}
    non_affinity = tuple(x for x in pools if x not in affinity_nodes)  # msrun's "-1" pool, orphans last
    nearest_first = cache(resources.by_distance)
    job_devices = set(job.devices)
    got: dict[int, list[int]] = {d: [] for d in devs}
    got_sets: dict[int, list[CpuSet]] = {d: [] for d in devs}
    remote: dict[int, list[CpuSet]] = {}

    def take(d: int, nodes) -> None:
        for x in nodes:
            short, at = n - len(got[d]), taken[x]
            if short <= 0:
                return
            part = pool_lists[x][at:at + short]
            if part:
                taken[x] = at + len(part)
                got[d].extend(part)
                # a slice of the node's ascending list: its CPUs within the slice's bounds
                got_sets[d].append(pools[x] & CpuSet.range(part[0], part[-1]))
                if x not in homes[d] and d in job_devices:
                    remote.setdefault(d, []).append(got_sets[d][-1])

    for d in devs:
        take(d, homes[d])  # the affinity pool
        # then the non-affinity pool, nearest node first (msrun: one cursor in node order, the
        # same order when all distances are equal)
        take(d, nearest_first(homes[d][0], non_affinity))
    # Better than msrun: a job device still short of n takes free CPUs of the nearest other nodes
    # instead of running with fewer.
    everywhere = tuple(pools)
    for d in devs:
        if d in job_devices and len(got[d]) < n:
            take(d, nearest_first(homes[d][0], everywhere))
    for d, parts in remote.items():
        warnings.append(f"device {d}: its node is used up; also given CPUs {union_all(parts)} of other nodes")
    lists = [got[d] for d in job.devices]
    # most devices take from one node: that part is their set, not ORed into a fresh mask
    sets = [parts[0] if len(parts) == 1 else union_all(parts) for parts in map(got_sets.__getitem__, job.devices)]
    memory = [(mapping[d],) if numa else homes[d] for d in job.devices]
    return build_plan(job, sets, memory, options=options, resources=resources, warnings=warnings, orders=lists)


def _span(allowed: CpuSet, lst: list[int]) -> CpuSet:
    """The set of a slice of ``allowed``'s ascending list, without building it bit by bit."""
    return allowed & CpuSet.range(lst[0], lst[-1]) if lst else CpuSet()
