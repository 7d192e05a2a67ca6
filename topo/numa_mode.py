"""How a machine's NUMA nodes cut its packages, and devices whose sysfs locality contradicts itself.

Intel's SNC2/SNC3 and AMD's NPS1/2/4 split each package into nodes; `numa_mode` names the split as the
BIOS does, from the nodes per package and the distance classes (local, same package, other package).
"""

from __future__ import annotations

from topo.model import Topology


def numa_mode(t: Topology) -> str | None:
    """One line: nodes per package, the BIOS mode (SNCn on Intel, NPSn on AMD) and the distance classes;
    None on a machine with one package and one node."""
    # CPU node -> the package holding all its CPUs (None when it spans several)
    package_of = {n.os_index: next((i for i, p in enumerate(t.packages) if n.cpuset <= p.cpuset), None)
                  for n in t.numa_nodes if n.cpuset}
    if len(t.packages) < 2 and len(package_of) < 2:
        return None
    model = " ".join(p.model or "" for p in t.packages)
    vendor = "NPS" if "AMD" in model else "SNC" if "Intel" in model else None
    counts = {p: sum(1 for v in package_of.values() if v == p) for p in range(len(t.packages))}
    if None in package_of.values():
        per, label = "nodes spanning packages", "NPS0" if vendor == "NPS" else None
    elif len(set(counts.values())) == 1:
        k = next(iter(counts.values()))
        per = f"{k} node{'s' if k != 1 else ''} per package"
        label = f"{vendor}{k}" if vendor == "NPS" or (vendor == "SNC" and k > 1) else None
    else:
        per, label = "uneven nodes per package (" + ", ".join(str(c) for c in counts.values()) + ")", None
    classes = {"local": set(), "same package": set(), "other package": set()}
    for node in t.numa_nodes:
        for other, d in node.distances.items():
            if node.os_index not in package_of or other not in package_of:
                continue
            kind = "local" if other == node.os_index else (
                "same package" if package_of[other] == package_of[node.os_index] is not None else "other package")
            classes[kind].add(d)
    slit = ", ".join(f"{'/'.join(map(str, sorted(v)))} {k}" for k, v in classes.items() if v)
    return f"NUMA: {per}" + (f" ({label})" if label else "") + (f"; distances {slit}" if slit else "")


def locality_conflicts(t: Topology) -> list[str]:
    """One line per device whose sysfs `numa_node` shares no CPU with its `local_cpulist`."""
    out = []
    nodes = {n.os_index: n for n in t.numa_nodes}
    for d in t.devices:
        node = nodes.get(d.numa_node) if d.numa_node is not None else None
        if node is None or not d.local_cpus or d.local_cpus == t.pus or not node.locality:
            continue
        if not d.local_cpus.intersects(node.locality):
            where = sorted(n.os_index for n in t.numa_nodes if n.cpuset.intersects(d.local_cpus))
            on = f"node{'s' if len(where) > 1 else ''} {','.join(map(str, where))}" if where else "no node"
            out.append(f"{d.kind.upper()} {d.index} ({d.busid}): sysfs numa_node is {d.numa_node} but its "
                       f"local_cpulist {d.local_cpus} is on {on}; topo plans it on node {d.numa_node}, as torch "
                       "and msrun do (a BIOS setting; check the device's slot)")
    return out
