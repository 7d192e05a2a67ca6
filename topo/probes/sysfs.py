"""Linux sysfs/procfs: CPUs, caches, NUMA nodes and PCI functions, read below one FsRoot.

The result is "raw": every object with its complete cpuset, before cgroup restriction. Old kernels
(no die_id, cluster_id or cache directories), offline CPUs, sparse numbering and CPU-less nodes are
normal input here, not errors; a file with garbage in it is an error naming that file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from topo.cpuset import EMPTY, CpuSet, union_all
from topo.errors import ProbeError
from topo.fsroot import FsRoot
from topo.model import Cache, Cluster, Core, Die, MemorySideCache, NumaNode, Package, PciDevice

CPU = "/sys/devices/system/cpu"
NODE = "/sys/devices/system/node"
PCI = "/sys/bus/pci/devices"

_CPU_DIR = re.compile(r"cpu(\d+)\Z")
_NODE_DIR = re.compile(r"node(\d+)\Z")
_INDEX_DIR = re.compile(r"index(\d+)\Z")
_VIRTIO_DIR = re.compile(r"virtio\d+\Z")
_SIZE = re.compile(r"\A(\d+)\s*([KMG]?)B?\Z", re.I)


@dataclass
class RawCpus:
    complete: CpuSet  # every CPU sysfs knows of (present or possible), offline ones included
    online: CpuSet  # online CPUs that have a topology entry
    packages: list[Package]
    dies: list[Die]
    clusters: list[Cluster]
    cores: list[Core]
    caches: list[Cache]
    models: dict[int, str] = field(default_factory=dict)
    has_topology: bool = True  # False: no CPU had a topology directory, one core per PU assumed


@dataclass
class RawNodes:
    nodes: list[NumaNode]
    memory_side_caches: list[MemorySideCache]
    from_sysfs: bool  # False: no node directory, one node synthesised for the whole machine


def _size_bytes(fs: FsRoot, path: str) -> int | None:
    text = fs.read(path)
    if not text:
        return None
    m = _SIZE.match(text)
    if not m:
        raise ProbeError(f"{fs.path(path)}: expected a size like '32K', found {text[:40]!r}")
    return int(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2).upper()]


def _cpu_dirs(fs: FsRoot) -> dict[int, str]:
    dirs = {}
    for name in fs.listdir(CPU):
        m = _CPU_DIR.match(name)
        if m:
            dirs[int(m.group(1))] = f"{CPU}/{name}"
    return dirs


def probe_cpus(fs: FsRoot) -> RawCpus:
    dirs = _cpu_dirs(fs)
    present = fs.read_cpulist(f"{CPU}/present")
    possible = fs.read_cpulist(f"{CPU}/possible")
    online_file = fs.read_cpulist(f"{CPU}/online")
    listed = CpuSet(dirs)
    complete = present if present else (possible or listed)
    complete |= listed
    if online_file is None:
        # Old kernels: no global "online" file; a cpuN/online of 0 marks an offline CPU.
        online_file = CpuSet(i for i, d in dirs.items() if fs.read_int(f"{d}/online", 1) != 0)

    topo: dict[int, dict] = {}
    for cpu in sorted(dirs):
        if cpu not in online_file:
            continue
        d = f"{dirs[cpu]}/topology"
        pkg = fs.read_int(f"{d}/physical_package_id")
        core = fs.read_int(f"{d}/core_id")
        if pkg is None and core is None and not fs.exists(d):
            continue  # an online CPU without topology: hwloc ignores it as well
        topo[cpu] = {
            # No physical_package_id at all (PS3's Cell): no package object, as lstopo shows.
            "package": None if pkg is None else max(pkg, 0),
            "core": None if core is None else max(core, 0),
            "die": fs.read_int(f"{d}/die_id"),
            "cluster": fs.read_int(f"{d}/cluster_id"),
            "dir": dirs[cpu],
        }
    online = CpuSet(topo)
    has_topology = bool(online)
    if not online:
        # No per-CPU topology at all (some containers, very old kernels): one package, one core per PU.
        online = online_file & complete if complete else online_file
        if not online:
            raise ProbeError(
                f"no CPU found under {fs.path(CPU)} (is --root a captured machine with sys/ and proc/?)"
            )
        for cpu in online:
            topo[cpu] = {"package": 0, "core": cpu, "die": None, "cluster": None, "dir": None}

    # Packages: each CPU's package_cpus (core_siblings) mask, as hwloc builds them: ia64 dumps
    # reuse one physical_package_id for distinct sockets. Falls back to grouping by id.
    siblings = _SiblingMasks(fs, topo)
    packages = [Package(topo[c]["package"], s) for c, s in _sibling_sets(siblings, "package_cpus", "package", online)
                if topo[c]["package"] is not None]
    packages.sort(key=lambda p: p.cpuset.first())
    pkg_of = {cpu: t["package"] for cpu, t in topo.items()}

    # Cores: thread siblings when sysfs gives them (core_id can repeat across dies), else
    # (package, die, core_id).
    cores: list[Core] = []
    assigned = 0
    for cpu in sorted(topo):
        if assigned >> cpu & 1:
            continue
        t = topo[cpu]
        threads = siblings.get(cpu, "threads")
        if threads:
            members = (threads & online) | CpuSet([cpu])
            # siblings must agree on package; sysfs of buggy kernels sometimes disagrees
            members = CpuSet(c for c in members if pkg_of[c] == t["package"] and not assigned >> c & 1)
        else:
            members = CpuSet(
                c for c, u in topo.items()
                if u["package"] == t["package"] and u["die"] == t["die"] and u["core"] == t["core"]
                and not assigned >> c & 1
            )
        assigned |= members.mask
        cores.append(Core(t["core"], t["package"], members))
        for c in members:
            topo[c]["core_cpus"] = members

    dies = [Die(topo[c]["die"], topo[c]["package"], s) for c, s in _sibling_sets(siblings, "die_cpus", "die", online)]
    if all(d.cpuset in {p.cpuset for p in packages} for d in dies):
        dies = []  # one die per package: sysfs says nothing the package does not
    clusters = [Cluster(topo[c]["cluster"], topo[c]["package"], s)
                for c, s in _sibling_sets(siblings, "cluster_cpus", "cluster", online)]
    caches = _caches(fs, topo, online)
    models = _cpu_models(fs, topo)
    if models:
        packages = [
            Package(p.os_index, p.cpuset, models.get(p.os_index)) for p in packages
        ]
    # A cluster is a Group in hwloc: dropped where it repeats a core, a cache, a die or a package.
    redundant = {o.cpuset for o in (*packages, *dies, *cores, *caches)}
    clusters = [c for c in clusters if c.cpuset not in redundant]
    return RawCpus(complete | online, online, packages, dies, clusters, cores, caches, models, has_topology)


class _SiblingMasks:
    """Each CPU's sibling masks (threads, package, die, cluster), read on first use: the CPUs that
    an earlier CPU's mask already placed are never read, which halves the reads on big machines."""

    FILES = {
        "threads": (("thread_siblings_list", "thread_siblings"), ("core_cpus_list", "core_cpus")),
        "package_cpus": (("package_cpus_list", "package_cpus"), ("core_siblings_list", "core_siblings")),
        "die_cpus": (("die_cpus_list", "die_cpus"),),
        "cluster_cpus": (("cluster_cpus_list", "cluster_cpus"),),
    }

    def __init__(self, fs: FsRoot, topo: dict) -> None:
        self.fs = fs
        self.topo = topo

    def get(self, cpu: int, key: str) -> CpuSet | None:
        d = self.topo[cpu]["dir"]
        if d is None:
            return None
        for list_name, mask_name in self.FILES[key]:
            found = self.fs.read_set(f"{d}/topology/{list_name}", f"{d}/topology/{mask_name}")
            if found:
                return found
        return None


def _sibling_sets(siblings: _SiblingMasks, mask_key: str, id_key: str, online: CpuSet) -> list[tuple[int, CpuSet]]:
    """Distinct sets of CPUs sharing a package/die/cluster: from each CPU's sibling mask where
    sysfs has one, else by (package, id). Returns (first CPU, set) pairs; [] when ids are absent."""
    topo = siblings.topo
    out = []
    assigned = 0
    for cpu in sorted(topo):
        if assigned >> cpu & 1:
            continue
        t = topo[cpu]
        if t[id_key] is None or t[id_key] < 0:
            if id_key != "package":
                return []  # no die_id / cluster_id: the kernel has no such level
        mask = siblings.get(cpu, mask_key)
        if mask:
            members = (mask & online) | CpuSet([cpu])
        else:
            members = CpuSet(c for c, u in topo.items()
                             if u[id_key] == t[id_key] and u["package"] == t["package"])
        members = CpuSet.from_mask(members.mask & ~assigned)
        assigned |= members.mask
        out.append((cpu, members))
    return out


def _caches(fs: FsRoot, topo: dict, online: CpuSet) -> list[Cache]:
    seen: dict[tuple[int, str, CpuSet], Cache] = {}
    # (indexN, sharing set) already read: the other CPUs of a shared cache need read only
    # their sharing map, not level/type/size again (a quarter of the reads on big machines).
    read_already: set[tuple[str, CpuSet]] = set()
    for cpu in sorted(topo):
        d = topo[cpu]["dir"]
        if d is None:
            continue
        base = f"{d}/cache"
        for name in fs.listdir(base):
            if not _INDEX_DIR.match(name):
                continue
            idx = f"{base}/{name}"
            shared = fs.read_set(f"{idx}/shared_cpu_list", f"{idx}/shared_cpu_map")
            if not shared:
                # Empty sharing map (ia64, some VMs): the cache is private to the core.
                shared = topo[cpu].get("core_cpus") or CpuSet([cpu])
            # Some kernels report caches whose sharing map forgets the CPU itself.
            shared = (shared | CpuSet([cpu])) & online
            if (name, shared) in read_already:
                continue
            level = fs.read_int(f"{idx}/level")
            kind = (fs.read(f"{idx}/type") or "").lower()
            if level is None or kind not in ("data", "instruction", "unified"):
                continue
            key = (level, kind, shared)
            if key in seen:
                continue
            size = _size_bytes(fs, f"{idx}/size")
            if not size:
                continue  # hwloc ignores zero-sized caches (some VMs, PowerPC L1i)
            read_already.add((name, shared))
            seen[key] = Cache(
                level, kind, size, shared,
                fs.read_int(f"{idx}/coherency_line_size"),
                fs.read_int(f"{idx}/ways_of_associativity"),
            )
    caches = list(seen.values())
    caches.sort(key=lambda c: (c.level, c.type != "data", c.cpuset.first()))
    return caches


def _cpu_models(fs: FsRoot, topo: dict) -> dict[int, str]:
    """Package model names from /proc/cpuinfo ("model name", or "cpu" on POWER)."""
    text = fs.read("/proc/cpuinfo")
    if not text:
        return {}
    models: dict[int, str] = {}
    proc = None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key == "processor":
            proc = int(value) if value.isdigit() else None
        elif key in ("model name", "cpu") and proc is not None and proc in topo and value:
            models.setdefault(topo[proc]["package"], value)
    return models


# ---------------------------------------------------------------------------------------------
# NUMA nodes


def probe_nodes(fs: FsRoot, online: CpuSet) -> RawNodes:
    ids = sorted(int(m.group(1)) for n in fs.listdir(NODE) if (m := _NODE_DIR.match(n)))
    if not ids:
        total = _meminfo_total(fs, "/proc/meminfo") or 0
        node = NumaNode(0, online, total, False, online, {0: 10})
        return RawNodes([node], [], False)

    has_memory = fs.read_cpulist(f"{NODE}/has_memory")
    own = {i: fs.read_set(f"{NODE}/node{i}/cpulist", f"{NODE}/node{i}/cpumap") or EMPTY for i in ids}
    cpus: dict[int, CpuSet] = {}
    memory: dict[int, int] = {}
    distances: dict[int, dict[int, int]] = {}
    initiators: dict[int, CpuSet] = {}
    taken = EMPTY
    for i in ids:
        d = f"{NODE}/node{i}"
        c = own[i]
        if has_memory is not None and i not in has_memory and c:
            # CPU-only initiator node (no memory): hwloc does not make it a NUMA node; its
            # CPUs find their memory through the access0/1 initiators of memory targets.
            continue
        if c & taken:
            # Buggy firmware: several nodes claim the same CPUs. Keep the first claim.
            continue
        taken |= c
        cpus[i] = c
        memory[i] = _meminfo_total(fs, f"{d}/meminfo") or 0
        dist = fs.read(f"{d}/distance")
        if dist:
            try:
                values = [int(v) for v in dist.split()]
            except ValueError:
                raise ProbeError(f"{fs.path(d + '/distance')}: expected integers, found {dist[:40]!r}") from None
            distances[i] = dict(zip(ids, values))
        for access in ("access1", "access0"):
            names = fs.listdir(f"{d}/{access}/initiators")
            init = [int(m.group(1)) for n in names if (m := _NODE_DIR.match(n))]
            if init:
                initiators[i] = union_all(own.get(j, EMPTY) for j in init)
                break

    nvm = _dax_target_nodes(fs)
    nodes = []
    for i, c in cpus.items():
        mine = {j: v for j, v in distances.get(i, {}).items() if j in cpus}
        if c:
            locality = c
        elif i in initiators:
            locality = initiators[i]
        else:
            locality = _nearest_cpus(i, cpus, distances)
        nodes.append(NumaNode(i, c, memory[i], not c, locality, mine, "NVM" if i in nvm else None))
    return RawNodes(nodes, _memory_side_caches(fs, nodes), True)


def _nearest_cpus(i: int, cpus: dict[int, CpuSet], distances: dict[int, dict[int, int]]) -> CpuSet:
    """CPUs of the node(s) closest to CPU-less node i, by hwloc's rule: the nearest other nodes
    must be strictly farther than i itself and must not be *all* the other nodes (a node
    equidistant from everything has no locality: empty, attached to the machine)."""
    row = distances.get(i, {})
    others = [(row[j], j) for j in cpus if j != i and j in row]
    if not others:
        return EMPTY
    best = min(d for d, _ in others)
    nearest = [j for d, j in others if d == best]
    if best <= row.get(i, 0) or len(nearest) == len(cpus) - 1:
        return EMPTY
    return union_all(cpus[j] for j in nearest)


def _dax_target_nodes(fs: FsRoot) -> set[int]:
    """Nodes backed by DAX persistent memory (kmem): /sys/bus/dax names their target node."""
    base = "/sys/bus/dax/devices"
    return {n for dev in fs.listdir(base) if (n := fs.read_int(f"{base}/{dev}/target_node")) is not None}


def _meminfo_total(fs: FsRoot, path: str) -> int | None:
    text = fs.read(path)
    if not text:
        return None
    for line in text.splitlines():
        if "MemTotal:" in line:
            parts = line.split("MemTotal:")[1].split()
            try:
                value = int(parts[0])
            except (ValueError, IndexError):
                raise ProbeError(f"{fs.path(path)}: malformed MemTotal line {line.strip()[:60]!r}") from None
            unit = parts[1].lower() if len(parts) > 1 else "kb"
            return value * (1024 if unit == "kb" else 1)
    return None


def _memory_side_caches(fs: FsRoot, nodes: list[NumaNode]) -> list[MemorySideCache]:
    out = []
    for node in nodes:
        base = f"{NODE}/node{node.os_index}/memory_side_cache"
        for name in sorted(fs.listdir(base)):
            if not name.startswith("index"):
                continue
            size = fs.read_int(f"{base}/{name}/size")
            if size:
                out.append(MemorySideCache(size, (node.os_index,), node.locality))
    return out


# ---------------------------------------------------------------------------------------------
# PCI


def probe_pci(fs: FsRoot, machine: CpuSet) -> list[PciDevice]:
    out = []
    for busid in sorted(fs.listdir(PCI), key=_bus_key):
        d = f"{PCI}/{busid}"
        cls = fs.read(f"{d}/class")
        if not cls:
            continue
        try:
            class_id = f"{int(cls, 16) >> 8:04x}"
        except ValueError:
            raise ProbeError(f"{fs.path(d + '/class')}: expected a hex class, found {cls[:20]!r}") from None
        if class_id.startswith("06"):
            continue  # bridges are plumbing, not devices
        vendor = (fs.read(f"{d}/vendor") or "0x0000").lower().removeprefix("0x")
        device = (fs.read(f"{d}/device") or "0x0000").lower().removeprefix("0x")
        node = fs.read_int(f"{d}/numa_node")
        local = fs.read_set(f"{d}/local_cpulist", f"{d}/local_cpus")
        if not local:
            local = machine  # no locality information: the whole machine, as hwloc does
        rdma, names = _os_devices(fs, d)
        driver = fs.link_name(f"{d}/driver")
        out.append(
            PciDevice(busid.lower(), class_id, vendor, device,
                      node if node is not None and node >= 0 else None, local, driver, names, rdma)
        )
    return out


def _os_devices(fs: FsRoot, d: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(RDMA names, all OS device names with RDMA first, then netdevs, block, drm, dma) of one PCI
    function. virtio-net keeps its netdev one level down, in virtioN/net."""
    rdma = sorted(fs.listdir(f"{d}/infiniband"), key=_natural)
    net = sorted(fs.listdir(f"{d}/net"), key=_natural)
    for child in fs.listdir(d):
        if _VIRTIO_DIR.match(child):
            net += sorted(fs.listdir(f"{d}/{child}/net"), key=_natural)
    rest = [n for sub in ("nvme", "drm", "dma") for n in sorted(fs.listdir(f"{d}/{sub}"), key=_natural)]
    return tuple(rdma), tuple(rdma + net + rest)


def _natural(name: str) -> tuple:
    """mlx5_2 before mlx5_10."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def _bus_key(busid: str):
    try:
        dom, bus, rest = busid.split(":")
        dev, fn = rest.split(".")
        return (int(dom, 16), int(bus, 16), int(dev, 16), int(fn, 16))
    except ValueError:
        return (1 << 32, 0, 0, 0)
