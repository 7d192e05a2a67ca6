"""Priority cores (`priority_cores=True`): each rank's first CPU on the most efficient CPU kind (Intel
SST-TF's faster cores, DGX B300): one no earlier rank took, else one another rank of its home holds
beyond its own first, swapped for this rank's last ordinary core (sizes kept, unique modes disjoint)."""

from __future__ import annotations

from typing import Sequence

from topo.cpuset import CpuSet


def priority_pus(resources) -> CpuSet:
    """The allowed PUs of the most efficient CPU kind; empty with fewer than two ranked kinds."""
    kinds = resources.topology.cpukinds
    if len(kinds) < 2 or any(k.efficiency is None for k in kinds):
        return CpuSet()
    return max(kinds, key=lambda k: k.efficiency).cpuset & resources.allowed


def priority_first(cpus: Sequence[CpuSet], orders: Sequence[Sequence[int]] | None, homes: Sequence[tuple[int, ...]],
                   resources, warnings: list[str], keys: Sequence[str]) -> tuple[list[CpuSet], list[int | None], list]:
    """Each rank's CPUs (a swap may change them), its priority PU (or None), and its CPU list with that
    first, then the planner's order (``orders``, else ascending) less swapped-out CPUs, then those swapped in."""
    prio = priority_pus(resources)
    old = [list(o) for o in orders] if orders is not None else [list(c) for c in cpus]
    sets = list(cpus)
    firsts: list[int | None] = [None] * len(sets)
    if not prio:
        warnings.append("priority cores asked for, but this machine has no CPU kind above the others "
                        "(topo show --cpukinds): each rank's CPUs are as planned")
        return sets, firsts, old
    core_of = resources.core_of_pu
    taken: set[int] = set()
    for r, s in enumerate(sets):
        free = [p for p in s & prio if core_of[p] not in taken]
        if free:
            firsts[r] = free[0]
            taken.add(core_of[free[0]])
    for r, s in enumerate(sets):
        if firsts[r] is not None or not s:
            continue
        home = resources.cpus_of_nodes(h for h in homes[r] if h in resources.node_cpus)
        ordinary = [i for i in resources.core_indexes(s) if not (resources.cores[i] & prio)]
        for donor, other in enumerate(sets):
            spare = [p for p in other & prio & home if core_of[p] not in taken and p not in s]
            if donor == r or not spare or not ordinary:
                continue
            given, back = resources.cores[core_of[spare[0]]] & other, resources.cores[ordinary[-1]] & s
            sets[donor] = (other - given) | back
            sets[r] = (s - back) | given
            firsts[r] = spare[0]
            taken.add(core_of[spare[0]])
            break
    left = [keys[r] for r, s in enumerate(sets) if s and firsts[r] is None]
    if left:
        warnings.append(f"no priority core left in the home of {', '.join(left)}: their first CPU is an ordinary core")
    new_orders = []
    for first, order, s in zip(firsts, old, sets):
        kept, listed = set(s), set(order)
        head = [first] if first is not None else []
        new_orders.append([*head, *(c for c in order if c != first and c in kept),
                           *(c for c in s if c != first and c not in listed)])
    return sets, firsts, new_orders
