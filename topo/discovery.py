"""discover(): run the probes below one root and assemble the Topology.

The sysfs probe yields complete objects; this module restricts them to what the process may use (cgroup
cpuset and, on this machine, the affinity mask) as hwloc does, adds Groups and attaches devices.
"""

from __future__ import annotations

import os
from dataclasses import replace

from topo.cpuset import CpuSet
from topo.fsroot import FsRoot
from topo.groups import Placed, fit_localities, node_groups
from topo.model import Topology
from topo.probes import pci as pci_probe, sysfs
from topo.probes.cgroup import probe_cgroup


def discover(root: str | os.PathLike | FsRoot | None = None, *, include_disallowed: bool = False,
             probes: tuple[str, ...] | None = None, live_probes: bool = False) -> Topology:
    """The topology of the machine whose /sys and /proc live below `root` (default: this one): a directory
    holding sys/ and proc/, a `topo capture` archive or an FsRoot (never taken from the environment).
    `probes` limits the optional device probes ("nvml", "npu-smi"; sysfs always runs). The probes asking
    this machine's tools (lscpu, NVML, npu-smi) run here, or with `live_probes` (a capture replayed)."""
    from topo.probes import devices as device_probes
    from topo.probes.cpukinds import probe_cpukinds

    fs = root if isinstance(root, FsRoot) else FsRoot(root)
    live = fs.is_this_system or live_probes
    cpus = sysfs.probe_cpus(fs)
    nodes = sysfs.probe_nodes(fs, cpus.online)
    state = "ok" if nodes.from_sysfs else "ok (no NUMA information: one node assumed)"
    if not cpus.has_topology:
        state += "; no CPU sibling masks: PUs without cores or packages"
    status = {"sysfs": state + "".join(f"; {note}" for note in cpus.notes + nodes.notes)}
    if not (nodes.from_sysfs and cpus.has_topology):
        # lscpu fallback: containers that hide /sys/devices/system/node or the CPU topology.
        from topo.probes import lscpu as lscpu_probe
        cpus, nodes, status["lscpu"] = lscpu_probe.fill_gaps(fs, cpus, nodes, live=live)
    cpu_side = [o.cpuset for o in (*cpus.packages, *cpus.dies, *cpus.clusters, *cpus.caches, *cpus.cores)]
    nodes = replace(nodes, nodes=fit_localities(nodes.nodes, cpu_side, cpus.online))
    topology = _restricted(fs, cpus, nodes, set(cpu_side), include_disallowed, status)
    topology = replace(topology, cpukinds=probe_cpukinds(fs, topology.pus))
    return device_probes.attach_devices(topology, fs, probes, live=live)


def _restricted(fs: FsRoot, cpus: sysfs.RawCpus, raw_nodes: sysfs.RawNodes, cpu_side: set[CpuSet],
                include_disallowed: bool, status: dict[str, str]) -> Topology:
    """The Topology of what the cgroup's cpuset and, on this machine, the affinity mask allow (everything
    online with `include_disallowed`). As in hwloc, an object keeps its allowed PUs; one left with none
    stays while it holds an allowed NUMA node's attachment point (its CPUs, or a memory-only node's
    locality). Cores have no memory and are simply dropped."""
    allowed_pus = cpus.online
    allowed_nodes = CpuSet(n.os_index for n in raw_nodes.nodes)
    cg = probe_cgroup(fs)
    status["cgroup"] = "none" if cg is None else f"{cg.version} {cg.path}"
    if cg is not None and cg.cpus is not None:
        allowed_pus &= cg.cpus
    if cg is not None and cg.mems is not None:
        allowed_nodes &= cg.mems
    if fs.is_this_system and hasattr(os, "sched_getaffinity"):
        allowed_pus &= CpuSet(os.sched_getaffinity(0))
        status["affinity"] = "ok"
    else:
        status["affinity"] = "off: not this system"

    pus = cpus.online if include_disallowed else allowed_pus
    kept_nodes = [n for n in raw_nodes.nodes if include_disallowed or n.os_index in allowed_nodes]
    anchors = [n.locality for n in kept_nodes if n.locality]

    def restrict(objs, attr="cpuset"):
        """Each object with its `attr` set restricted to `pus`; the object itself when nothing goes."""
        return tuple(o if getattr(o, attr) <= pus else replace(o, **{attr: getattr(o, attr) & pus}) for o in objs)

    def keep(objs):
        """The objects with allowed PUs, or holding an attachment point, restricted."""
        return restrict(o for o in objs if o.cpuset & pus or any(a <= o.cpuset for a in anchors))

    numa_nodes = tuple(replace(n, cpuset=n.cpuset & pus, locality=n.locality & pus, distances={
        k: v for k, v in n.distances.items() if include_disallowed or k in allowed_nodes}) for n in kept_nodes)
    pci = _pci(fs, cpus.online, cpu_side, raw_nodes.nodes)
    kept_ids = {n.os_index for n in kept_nodes}
    # What lstopo prints on the Machine line that a user wants: CPU model, cgroup, this machine's kernel.
    info = {"cpu_model": next(iter(cpus.models.values()))} if cpus.models else {}
    if cg is not None:
        info["linux_cgroup"] = cg.path
    if fs.is_this_system:
        uname = os.uname()
        info.update(architecture=uname.machine, os_release=uname.release, hostname=uname.nodename)
    return Topology(
        root=fs.root, pus=pus, allowed_pus=allowed_pus, complete_pus=cpus.complete, online_pus=cpus.online,
        allowed_numa_nodes=allowed_nodes, packages=keep(cpus.packages), dies=keep(cpus.dies),
        clusters=keep(cpus.clusters), numa_nodes=numa_nodes, cores=restrict(c for c in cpus.cores if c.cpuset & pus),
        caches=keep(cpus.caches), groups=node_groups(kept_nodes, cpu_side, cpus.online, pus),
        memory_side_caches=restrict(m for m in raw_nodes.memory_side_caches if set(m.numa_nodes) & kept_ids),
        pci_devices=restrict(pci.devices, "local_cpus"), pci_bridges=restrict(pci.bridges, "local_cpus"),
        os_devices=restrict(pci.os_devices, "local_cpus"), probes=status, info=info,
        include_disallowed=include_disallowed,
    )


def _pci(fs: FsRoot, machine: CpuSet, cpu_side: set[CpuSet], nodes) -> pci_probe.RawPci:
    """The PCI tree and OS devices, each host bridge's locality placed as hwloc places it: one that
    straddles an object of the tree (CPUs of two packages) hangs from the object covering it."""
    raw = pci_probe.probe_pci(fs, machine)
    tree = Placed([*cpu_side, *(n.locality & machine for n in nodes)])
    fitted = {b.local_cpus: tree.fit(b.local_cpus, machine) for b in raw.bridges if b.is_host}

    def fit(objs):
        return [o if fitted.get(o.local_cpus, o.local_cpus) == o.local_cpus
                else replace(o, local_cpus=fitted[o.local_cpus]) for o in objs]

    raw = pci_probe.RawPci(fit(raw.devices), fit(raw.bridges), [])
    localities = {n.os_index: n.locality & machine for n in nodes}
    return replace(raw, os_devices=pci_probe.probe_os_devices(fs, raw, localities, machine))
