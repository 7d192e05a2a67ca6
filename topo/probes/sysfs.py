"""Linux sysfs/procfs: CPUs, caches and NUMA nodes, read below one FsRoot (PCI: topo.probes.pci).

The result is "raw": every object with its complete cpuset, before cgroup restriction. Old kernels
(no die_id, cluster_id or cache directories), offline CPUs, sparse numbering and CPU-less nodes are
normal input here, not errors; a file with garbage in it is an error naming that file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from topo.cpuset import EMPTY, MAX_ID, CpuSet, union_all
from topo.numbers import ascii_number
from topo.errors import ParseError, ProbeError
from topo.fsroot import SYSFS_INT_MAX, FsRoot
from topo.model import Cache, Cluster, Core, Die, MemorySideCache, NumaNode, Package
from topo.probes.pci import PCI

CPU = "/sys/devices/system/cpu"
NODE = "/sys/devices/system/node"

# Only the kernel's own names ("cpu%u": no leading zero, no sign): hwloc formats cpu%lu / node%lu
# back from the number it read and reads that directory, so "cpu01" is never CPU 1 (nor an alias of it).
_CPU_DIR = re.compile(r"cpu(0|[1-9][0-9]*)\Z")
_NODE_DIR = re.compile(r"node(0|[1-9][0-9]*)\Z")
# ASCII digits, bounded: `\d` would also match "١", and int() of thousands of digits raises.
_INDEX_DIR = re.compile(r"index([0-9]{1,9})\Z")
# A cache size, "32K": up to 20 digits (a u64). re.ASCII: ignoring case, "K" would also match the
# Kelvin sign U+212A.
_SIZE = re.compile(r"\A([0-9]{1,20})[ \t]*([KMG]?)B?\Z", re.I | re.ASCII)


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
    has_topology: bool = True  # False: no CPU had sibling masks; PUs only, no core or package
    notes: list[str] = field(default_factory=list)  # objects sysfs described but that were ignored


@dataclass
class RawNodes:
    nodes: list[NumaNode]
    memory_side_caches: list[MemorySideCache]
    from_sysfs: bool  # False: no node directory, one node synthesised for the whole machine
    notes: list[str] = field(default_factory=list)


@dataclass
class _Cpu:
    """One online CPU that has a topology directory, and what sysfs says of it."""

    os_index: int
    dir: str
    core_cpus: CpuSet | None = None  # its core's PUs as the core mask file lists them


# The sibling-mask files, new names (Linux 5.4+) then old. hwloc picks one naming for the whole
# machine from the first CPU that has either (cpu0, or the first online CPU).
_NEW_NAMES = {"core": "core_cpus", "package": "package_cpus"}
_OLD_NAMES = {"core": "thread_siblings", "package": "core_siblings"}


def _size_bytes(fs: FsRoot, path: str) -> int | None:
    text = fs.read(path)
    if not text:
        return None
    m = _SIZE.match(text)
    if not m:
        raise ProbeError(f"{fs.shown(path)}: expected a size like '32K', found {text[:40]!r}")
    return int(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2).upper()]


def _numbered_dirs(fs: FsRoot, base: str, pattern: re.Pattern) -> dict[int, str]:
    """{N: path} of base's entries named like cpuN / nodeN. An N above CpuSet's limit is no kernel's
    (NR_CPUS and MAX_NUMNODES are far below it): an error naming the entry, not a huge bitmap."""
    dirs = {}
    for name in fs.listdir(base):
        m = pattern.match(name)
        if m:
            n = int(m.group(1))
            if n > MAX_ID:
                raise ProbeError(f"{fs.shown(base + '/' + name)}: id {n} exceeds {MAX_ID}, no kernel numbers "
                                 "CPUs or nodes so high (remove the entry or recapture the machine)")
            dirs[n] = f"{base}/{name}"
    return dirs


def _mask_file(fs: FsRoot, cpu: _Cpu, name: str) -> CpuSet | None:
    """A topology/ sibling mask of one CPU (`name` or its `name_list` twin), None when absent."""
    return fs.read_set(f"{cpu.dir}/topology/{name}_list", f"{cpu.dir}/topology/{name}")


def _file_names(fs: FsRoot, cpus: list[_Cpu]) -> dict[str, str] | None:
    """The sibling-mask naming this kernel uses, decided on the first CPU as hwloc does; None when
    that CPU has neither naming (no sibling masks at all)."""
    if not cpus:
        return None
    first = f"{cpus[0].dir}/topology"
    for names in (_NEW_NAMES, _OLD_NAMES):
        if any(fs.exists(f"{first}/{stem}") or fs.exists(f"{first}/{stem}_list") for stem in names.values()):
            return names
    return None


def _amd_compute_units(cpuinfo: str) -> bool:
    """AMD families 15h (Bulldozer to Excavator) and 16h: the kernel lists the two cores of a
    compute unit as thread siblings though each has its own core_id. hwloc checks the vendor and
    family of the first processor in /proc/cpuinfo (fields only x86 kernels write)."""
    if "AuthenticAMD" not in cpuinfo:
        return False  # no line can name that vendor
    vendor = family = None
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key == "vendor_id" and vendor is None:
            vendor = value
        elif key == "cpu family" and family is None:
            family = value
        elif not line.strip() and vendor is not None:
            break  # the first processor's block is enough
    return vendor == "AuthenticAMD" and family in ("21", "22")


def probe_cpus(fs: FsRoot) -> RawCpus:
    """PUs, cores, clusters, dies, packages and caches, by hwloc's rules (look_sysfscpu).

    Every object comes from a sibling mask restricted to the online CPUs that have a topology
    directory, and is created by the first CPU of its mask; its OS index (core_id,
    physical_package_id, ...) only names it. No mask file, no object: a PU without a core mask has
    no core, one without a package mask no package.
    """
    dirs = _numbered_dirs(fs, CPU, _CPU_DIR)
    present = fs.read_cpulist(f"{CPU}/present")
    possible = fs.read_cpulist(f"{CPU}/possible")
    online_file = fs.read_cpulist(f"{CPU}/online")
    listed = CpuSet(dirs)
    complete = present if present else (possible or listed)
    complete |= listed
    if online_file is None:
        # Old kernels: no global "online" file; a cpuN/online of 0 marks an offline CPU.
        online_file = CpuSet(i for i, d in dirs.items() if fs.read_int(f"{d}/online", 1) != 0)

    # An online CPU without a topology directory is ignored, as hwloc ignores it: the kernel
    # creates topology/ for every CPU it can place.
    cpus = [_Cpu(i, dirs[i]) for i in sorted(dirs) if i in online_file and fs.exists(f"{dirs[i]}/topology")]
    names = _file_names(fs, cpus)
    if names is None:
        # No sibling masks (some containers, very old kernels): PUs only. No core or package is
        # invented; lscpu may fill them in on the live machine.
        online = CpuSet(c.os_index for c in cpus) or (online_file & complete if complete else online_file)
        if not online:
            raise ProbeError(
                f"no CPU found under {fs.shown(CPU)} (is the root a captured machine with sys/ and proc/?)"
            )
        return RawCpus(complete | online, online, [], [], [], [], [], {}, False)

    online = CpuSet(c.os_index for c in cpus)
    cpuinfo = fs.read("/proc/cpuinfo") or ""  # read once: compute units and model names
    core_sets, clusters, dies, packages, notes = _mask_objects(fs, cpus, names, online, _amd_compute_units(cpuinfo))
    packages.sort(key=lambda p: p.cpuset.first())

    # Packages are disjoint (_add_package): the one holding a set's first CPU is the only one
    # that can hold the set.
    package_at = {cpu: p for p in packages for cpu in p.cpuset}

    def package_of(s: CpuSet) -> int | None:
        if not s:
            return packages[0].os_index if packages else None
        p = package_at.get(s.first())
        return p.os_index if p is not None and s <= p.cpuset else None

    cores = [Core(core_id, package_of(s), s) for core_id, s in core_sets]
    # A die outside every package (its CPUs had no package mask) has nothing to sit in.
    die_objs = [Die(i, p, s) for i, s in dies if (p := package_of(s)) is not None]
    if all(d.cpuset in {p.cpuset for p in packages} for d in die_objs):
        die_objs = []  # one die per package: sysfs says nothing the package does not
    caches = _caches(fs, cpus, online)
    caches, dropped = _nesting_caches([p.cpuset for p in packages] + [d.cpuset for d in die_objs]
                                      + [s for _, s in clusters] + [c.cpuset for c in cores], caches)
    notes += [f"L{c.level} {c.type} cache with CPUs {c.cpuset} ignored: it straddles another object, "
              "as in hwloc" for c in dropped]
    models = _cpu_models(cpuinfo, packages)
    if models:
        packages = [replace(p, model=models.get(p.os_index)) for p in packages]
    # A cluster is a Group in hwloc: merged away where it repeats a core, a cache, a die or a package.
    redundant = {o.cpuset for o in (*packages, *die_objs, *cores, *caches)}
    cluster_objs = [Cluster(i, package_of(s), s) for i, s in clusters if s not in redundant]
    return RawCpus(complete | online, online, packages, die_objs, cluster_objs, cores, caches, models, True, notes)


def _mask_objects(fs: FsRoot, cpus: list[_Cpu], names: dict[str, str], online: CpuSet, compute_units: bool):
    """(core id, set)s, (cluster id, set)s, (die id, set)s, packages and notes, CPU by CPU as hwloc goes.

    Only the first CPU of a core looks at its cluster, only the first of a cluster at its die,
    only the first of a die at its package; an object is made by the first CPU of its set.
    """
    cores: list[tuple[int | None, CpuSet]] = []
    clusters: list[tuple[int | None, CpuSet]] = []
    dies: list[tuple[int | None, CpuSet]] = []
    packages: list[Package] = []
    notes: list[str] = []
    by_index = {c.os_index: c for c in cpus}
    thread_with_core_id: bool | None = None if compute_units else False
    for cpu in cpus:
        i = cpu.os_index
        d = f"{cpu.dir}/topology"
        core_set = _mask_file(fs, cpu, names["core"])
        if core_set is not None:
            core_set = cpu.core_cpus = core_set & online
            if thread_with_core_id is None and core_set.weight() > 1:
                # Compute units or hyper-threads? Decided once for the machine, on the first
                # core with two PUs: siblings with different core_ids are distinct cores.
                sibling = by_index[next(c for c in core_set if c != i)]
                thread_with_core_id = fs.read_int(f"{d}/core_id") != fs.read_int(f"{sibling.dir}/topology/core_id")
            if core_set.first() == i or thread_with_core_id:
                core_id = _os_index(fs.read_int(f"{d}/core_id"))
                cores.append((core_id, CpuSet.from_mask(1 << i) if thread_with_core_id else core_set))
            if core_set.first() != i:
                continue  # the core's first CPU looks at its cluster, die and package
        first_of_cluster, cluster_set = _group_mask(fs, cpu, "cluster_cpus", online)
        if not first_of_cluster:
            continue
        first_of_die, die_set = _group_mask(fs, cpu, "die_cpus", online)
        if cluster_set is not None and cluster_set == die_set:
            cluster_set = None
        if first_of_die:
            package_set = _mask_file(fs, cpu, names["package"])
            if package_set is not None:
                package_set &= online
                if cluster_set is not None and package_set == cluster_set:
                    cluster_set = None
                if package_set.first() == i:
                    package_id = _os_index(fs.read_int(f"{d}/physical_package_id"))
                    _add_package(packages, Package(package_id, package_set), notes)
        if cluster_set is not None:
            clusters.append((_os_index(fs.read_int(f"{d}/cluster_id")), cluster_set))
        if die_set is not None:
            dies.append((_os_index(fs.read_int(f"{d}/die_id")), die_set))
    return cores, clusters, dies, packages, notes


def _group_mask(fs: FsRoot, cpu: _Cpu, name: str, online: CpuSet) -> tuple[bool, CpuSet | None]:
    """(whether `cpu` goes on to look at the next level up, the set when it makes an object) for
    a cluster_cpus or die_cpus mask. A one-PU set is the kernel's default on machines without
    that level (every CPU its own cluster or die): no object, and no CPU is the worse for it."""
    found = _mask_file(fs, cpu, name)
    if found is None:
        return True, None
    found &= online
    if found.weight() == 1:
        return True, None
    if found.first() != cpu.os_index:
        return False, None
    return True, found


def _os_index(value: int | None) -> int | None:
    """An id sysfs gives as -1 (no such information on this platform) is unknown, as in hwloc."""
    return None if value is None or value < 0 else value


def _add_package(packages: list[Package], new: Package, notes: list[str]) -> None:
    """Add a package made from one CPU's mask unless it overlaps one already made.

    Masks are normally identical for all CPUs of a package. After CPU hot-plug or with a buggy
    BIOS a CPU may report a stale, smaller mask: hwloc then nests a second Package inside the
    first, and topo, whose packages are disjoint, keeps the outer one (said in the notes unless
    the ids agree). A mask that straddles another package hwloc rejects, and so does topo (noted).
    Distinct sockets that reuse one physical_package_id (ia64 dumps) have disjoint masks and stay
    two packages.
    """
    for p in packages:
        if not new.cpuset.intersects(p.cpuset):
            continue
        if not (new.cpuset <= p.cpuset and new.os_index == p.os_index):
            notes.append(f"package P#{new.os_index} with CPUs {new.cpuset} ignored: "
                         f"it overlaps package P#{p.os_index} with CPUs {p.cpuset}")
        return
    packages.append(new)


def _caches(fs: FsRoot, cpus: list[_Cpu], online: CpuSet) -> list[Cache]:
    seen: dict[tuple[int, str, CpuSet], Cache] = {}
    # (indexN, sharing set) already read: the other CPUs of a shared cache need read only
    # their sharing map, not level/type/size again (a quarter of the reads on big machines).
    read_already: set[tuple[str, CpuSet]] = set()
    for cpu in cpus:
        base = f"{cpu.dir}/cache"
        own = CpuSet.from_mask(1 << cpu.os_index)
        # Empty sharing map (ia64, some VMs): the cache is private to the core.
        private = cpu.core_cpus or own
        for name in fs.listdir(base):
            if not _INDEX_DIR.match(name):
                continue
            idx = f"{base}/{name}/"
            shared = fs.read_set(idx + "shared_cpu_list", idx + "shared_cpu_map") or private
            # Some kernels report caches whose sharing map forgets the CPU itself.
            shared = (shared | own) & online
            if (name, shared) in read_already:
                continue
            level = fs.read_int(idx + "level")
            kind = (fs.read(idx + "type") or "").lower()
            if level is None or kind not in ("data", "instruction", "unified"):
                continue
            key = (level, kind, shared)
            if key in seen:
                continue
            size = _size_bytes(fs, idx + "size")
            if not size:
                continue  # hwloc ignores zero-sized caches (some VMs, PowerPC L1i)
            read_already.add((name, shared))
            line = fs.read_int(idx + "coherency_line_size") or None
            seen[key] = Cache(level, kind, size, shared, line, _ways(fs, idx, size, line))
    return list(seen.values())  # in hwloc's insertion order: CPU by CPU, index by index


def _nesting_caches(placed: list[CpuSet], caches: list[Cache]) -> tuple[list[Cache], list[Cache]]:
    """(kept, dropped) caches by hwloc's insertion (hwloc__insert_object_by_cpuset): packages, dies,
    clusters and cores first, then caches in the order found; one whose CPUs straddle an object
    already in the tree (part inside, part outside, not holding it whole) is dropped.

    The tree is laminar, so the objects holding a PU form a chain: a cache is checked against the
    chains of its own PUs, each object once, which is linear in the PUs times the depth."""
    chains: dict[int, list[CpuSet]] = {}

    def add(s: CpuSet) -> None:
        for pu in s:
            chains.setdefault(pu, []).append(s)

    def fits(s: CpuSet) -> bool:
        seen = set()
        for pu in s:
            for o in chains.get(pu, ()):
                if id(o) not in seen:
                    seen.add(id(o))
                    if not (o <= s or s <= o):
                        return False
        return True

    for s in dict.fromkeys(placed):
        if fits(s):
            add(s)
    kept, dropped = [], []
    for c in caches:
        if fits(c.cpuset):
            kept.append(c)
            add(c.cpuset)
        else:
            dropped.append(c)
    kept.sort(key=lambda c: (c.level, c.type != "data", c.cpuset.first()))
    return kept, dropped


def _ways(fs: FsRoot, idx: str, size: int, line: int | None) -> int | None:
    """Associativity as hwloc computes it: size / line size / lines per tag / sets, unknown (None)
    without those or with one set; ways_of_associativity itself is 0 or -1 for fully associative
    caches depending on the architecture."""
    sets = fs.read_int(idx + "number_of_sets") or 0
    per_tag = fs.read_int(idx + "physical_line_partition", 1) or 0
    if not line or not per_tag or sets <= 1:
        return None
    return size // line // per_tag // sets or None


def _cpu_models(cpuinfo: str, packages: list[Package]) -> dict[int, str]:
    """Package model names from /proc/cpuinfo ("model name", or "cpu" on POWER), by the package
    holding each processor."""
    if not cpuinfo:
        return {}
    package_of = {cpu: p.os_index for p in packages for cpu in p.cpuset}
    models: dict[int, str] = {}
    proc = None
    for line in cpuinfo.splitlines():
        if "processor" not in line and "model name" not in line and "cpu" not in line:
            continue  # a line whose key is none of these (the key is part of the line)
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key == "processor":
            proc = ascii_number(value)
        elif key in ("model name", "cpu") and proc in package_of and value:
            models.setdefault(package_of[proc], value)
    return models


# ---------------------------------------------------------------------------------------------
# NUMA nodes


def probe_nodes(fs: FsRoot, online: CpuSet) -> RawNodes:
    """NUMA nodes by hwloc's rules (look_sysfsnode): each node's CPUs from its cpumap, memory from
    its meminfo, and for a node without CPUs a locality from its initiators or distances."""
    ids = sorted(_numbered_dirs(fs, NODE, _NODE_DIR))
    if not ids:
        total = _meminfo_total(fs, "/proc/meminfo") or 0
        node = NumaNode(0, online, total, False, online, {0: 10})
        return RawNodes([node], [], False)

    # NUMA emulation (numa=fake= on the kernel command line) puts a CPU in every fake node cut
    # from its physical node, so node CPU sets overlap; hwloc accepts them then, and ignores
    # initiators, which the emulation does not update.
    fake_numa = "numa=fake=" in (fs.read("/proc/cmdline") or "")
    own = {i: _node_cpus(fs, i) for i in ids}
    gpu_memory = _nvidia_gpu_memory_nodes(fs)
    notes: list[str] = []
    cpus: dict[int, CpuSet] = {}
    memory: dict[int, int] = {}
    distances: dict[int, dict[int, int]] = {}
    initiators: dict[int, CpuSet] = {}
    shared: dict[int, CpuSet] = {}  # each kept node's cpumap, CPUs claimed by an earlier node included
    taken = EMPTY
    for i in ids:
        d = f"{NODE}/node{i}"
        c = own[i]
        if c & taken and not fake_numa:
            # A CPU belongs to one node on Linux; overlapping cpumaps come from a buggy BIOS,
            # and hwloc keeps the first node that claims the CPUs.
            notes.append(f"NUMA node P#{i} ignored: its CPUs {c & taken} belong to an earlier node "
                         f"({fs.shown(d + '/cpumap')})")
            continue
        # Under numa=fake a CPU is listed by several nodes; it belongs to the first (a CPU has one
        # node in topo's model) and the others are attached at their CPUs like CPU-less nodes.
        shared[i] = c
        cpus[i] = c - taken
        taken |= c
        memory[i] = _meminfo_total(fs, f"{d}/meminfo") or 0
        dist = fs.read(f"{d}/distance")
        if dist:
            values = [ascii_number(v) for v in dist.split()]
            if None in values:
                raise ProbeError(f"{fs.shown(d + '/distance')}: expected integers, found {dist[:40]!r}")
            distances[i] = dict(zip(ids, values))
        if fake_numa:
            continue
        # access1 lists the nearest CPU initiators, access0 the nearest of any kind (Generic
        # Initiators included, Linux 5.10+): hwloc prefers access1.
        for access in ("access1", "access0"):
            names = fs.listdir(f"{d}/{access}/initiators")
            init = [int(m.group(1)) for n in names if (m := _NODE_DIR.match(n)) and int(m.group(1)) != i]
            if init:
                initiators[i] = union_all(own.get(j, EMPTY) for j in init)
                break

    nvm = _dax_target_nodes(fs)
    subtype = {i: "NVM" for i in cpus if i in nvm}
    locality: dict[int, CpuSet] = {}
    for i in cpus:
        if i in gpu_memory:
            # A GPU's memory exposed as a node (POWER9 and Grace with NVLink-C2C): hwloc gives it
            # the GPU's local CPUs; without them it is placed below as any CPU-less node.
            busid = gpu_memory[i]
            gpu_cpus = (fs.read_set(f"{PCI}/{busid}/local_cpulist", f"{PCI}/{busid}/local_cpus") or EMPTY) & online
            subtype[i] = "GPUMemory"
            if gpu_cpus:
                locality[i] = gpu_cpus
        elif shared[i]:
            # hwloc adds the initiators' CPUs to a node's own (a node some other node's CPUs
            # reach as fast as their own).
            locality[i] = shared[i] | initiators.get(i, EMPTY)
    # Then CPU-less nodes in order, as hwloc fixes them: a node near an earlier CPU-less node
    # inherits the locality found for it.
    for i in cpus:
        if i not in locality:
            locality[i] = initiators[i] if i in initiators else _nearest_cpus(i, cpus, locality, distances)
    nodes = [NumaNode(i, c, memory[i], not c, locality[i],
                      {j: v for j, v in distances.get(i, {}).items() if j in cpus}, subtype.get(i), gpu_memory.get(i))
             for i, c in cpus.items()]
    return RawNodes(nodes, _memory_side_caches(fs, nodes), True, notes)


def _node_cpus(fs: FsRoot, i: int) -> CpuSet:
    """A node's CPUs from its cpumap (what hwloc reads), else its cpulist.

    The kernel writes a mask of zeros for a node without CPUs, so an empty file, a dangling link
    or a node directory with neither file is a damaged capture: read as hwloc does (a CPU-less
    node, or no node), it would silently make another machine. Each is an error naming the file.
    """
    for name, parse in (("cpumap", CpuSet.parse_mask), ("cpulist", CpuSet.parse)):
        path = f"{NODE}/node{i}/{name}"
        text = fs.read(path)
        if text is None:
            if fs.readlink(path) is not None:
                raise ProbeError(f"{fs.shown(path)}: a symbolic link to nothing (capture the machine again)")
            continue
        if not text:
            raise ProbeError(f"{fs.shown(path)}: empty, where the kernel writes a mask even for a node "
                             "without CPUs (capture the machine again)")
        try:
            return parse(text)
        except ParseError as exc:
            raise ProbeError(f"{fs.shown(path)}: {exc}") from None
    raise ProbeError(f"{fs.shown(f'{NODE}/node{i}')}: neither cpumap nor cpulist, which every kernel writes "
                     "(capture the machine again)")


def _nvidia_gpu_memory_nodes(fs: FsRoot) -> dict[int, str]:
    """{node: GPU bus id} for GPUs whose memory the NVIDIA driver onlined as a NUMA node: the
    driver's /proc/driver/nvidia/gpus/<bus id>/numa_status says "Node: N" (-1 when none)."""
    base = "/proc/driver/nvidia/gpus"
    out = {}
    for busid in fs.listdir(base):
        m = re.search(r"Node:[ \t]*(-?[0-9]{1,9})\b", fs.read(f"{base}/{busid}/numa_status") or "")
        if m and int(m.group(1)) >= 0:
            out[int(m.group(1))] = busid.lower()
    return out


def _nearest_cpus(i: int, nodes: dict, locality: dict[int, CpuSet], distances: dict[int, dict[int, int]]) -> CpuSet:
    """CPUs of the node(s) closest to CPU-less node i, by hwloc's rule: the nearest other nodes
    must be strictly farther than i itself and must not be *all* the other nodes (a node
    equidistant from everything has no locality: empty, attached to the machine). A nearest node
    contributes the locality known for it so far (none yet for a later CPU-less node)."""
    row = distances.get(i, {})
    others = [(row[j], j) for j in nodes if j != i and j in row]
    if not others:
        return EMPTY
    best = min(d for d, _ in others)
    nearest = [j for d, j in others if d == best]
    if best <= row.get(i, 0) or len(nearest) == len(nodes) - 1:
        return EMPTY
    return union_all(locality.get(j, EMPTY) for j in nearest)


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
            value = ascii_number(parts[0], SYSFS_INT_MAX) if parts else None
            if value is None:
                raise ProbeError(f"{fs.shown(path)}: malformed MemTotal line {line.strip()[:60]!r}")
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
