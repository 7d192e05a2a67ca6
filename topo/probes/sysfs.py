"""Linux sysfs/procfs: CPUs, caches and NUMA nodes below one FsRoot, by hwloc's rules (PCI: topo.probes.pci).

Every object comes with its complete cpuset, before cgroup restriction. Old kernels, offline CPUs, sparse
numbering and CPU-less nodes are normal input; a file with garbage in it is an error naming that file.
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

# The kernel's own names only ("cpu%u"): hwloc reads back the directory it formats, so "cpu01" is no CPU.
_CPU_DIR = re.compile(r"cpu(0|[1-9][0-9]*)\Z")
_NODE_DIR = re.compile(r"node(0|[1-9][0-9]*)\Z")
_INDEX_DIR = re.compile(r"index([0-9]{1,9})\Z")  # ASCII and bounded: `\d` takes "١"
# "32K", a u64 at most; re.ASCII, or ignoring case "K" would match the Kelvin sign U+212A.
_SIZE = re.compile(r"\A([0-9]{1,20})[ \t]*([KMG]?)B?\Z", re.I | re.ASCII)
_SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


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


# The sibling-mask files, new names (Linux 5.4+) then old; hwloc picks one naming from the first CPU.
_NEW_NAMES = {"core": "core_cpus", "package": "package_cpus"}
_OLD_NAMES = {"core": "thread_siblings", "package": "core_siblings"}


def _numbered_dirs(fs: FsRoot, base: str, pattern: re.Pattern) -> dict[int, str]:
    """{N: path} of base's cpuN / nodeN entries; an N above CpuSet's limit (no kernel's) is an error."""
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


def _mask_file(fs: FsRoot, cpu_dir: str, name: str) -> CpuSet | None:
    return fs.read_set(f"{cpu_dir}/topology/{name}_list", f"{cpu_dir}/topology/{name}")


def _cpuinfo_fields(cpuinfo: str):
    """(key, value) of each /proc/cpuinfo line; ("", "") for the blank line ending a processor's block."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        yield key.strip(), value.strip()


def _amd_compute_units(cpuinfo: str) -> bool:
    """AMD families 15h and 16h list the two cores of a compute unit as thread siblings though each has
    its own core_id; hwloc checks the first processor's vendor and family (x86 kernels only)."""
    vendor = family = None
    for key, value in _cpuinfo_fields(cpuinfo):
        if key == "vendor_id" and vendor is None:
            vendor = value
        elif key == "cpu family" and family is None:
            family = value
        elif not key and not value and vendor is not None:
            break  # the first processor's block is enough
    return vendor == "AuthenticAMD" and family in ("21", "22")


def probe_cpus(fs: FsRoot) -> RawCpus:
    """PUs, cores, clusters, dies, packages and caches by hwloc's rules (look_sysfscpu): each object from a
    sibling mask restricted to the online CPUs with a topology directory, made by the first CPU of its
    mask; its OS index (core_id, ...) only names it. No mask file, no object."""
    dirs = _numbered_dirs(fs, CPU, _CPU_DIR)
    present, possible, online_file = (fs.read_cpulist(f"{CPU}/{name}") for name in ("present", "possible", "online"))
    listed = CpuSet(dirs)
    complete = (present if present else (possible or listed)) | listed
    if online_file is None:
        # Old kernels: no global "online" file; a cpuN/online of 0 marks an offline CPU.
        online_file = CpuSet(i for i, d in dirs.items() if fs.read_int(f"{d}/online", 1) != 0)
    # An online CPU without a topology directory is ignored, as hwloc does.
    cpus = {i: dirs[i] for i in sorted(dirs) if i in online_file and fs.exists(f"{dirs[i]}/topology")}
    first = f"{next(iter(cpus.values()))}/topology" if cpus else None
    names = None  # the kernel's sibling-mask file names, new or old
    for table in (_NEW_NAMES, _OLD_NAMES) if first else ():
        if any(fs.exists(f"{first}/{stem}") or fs.exists(f"{first}/{stem}_list") for stem in table.values()):
            names = table
            break
    if names is None:
        # No sibling masks (some containers, very old kernels): PUs only; lscpu may add the rest live.
        online = CpuSet(cpus) or (online_file & complete if complete else online_file)
        if not online:
            raise ProbeError(f"no CPU found under {fs.shown(CPU)} "
                             "(is the root a captured machine with sys/ and proc/?)")
        return RawCpus(complete | online, online, [], [], [], [], [], {}, False)

    online = CpuSet(cpus)
    cpuinfo = fs.read("/proc/cpuinfo") or ""
    core_cpus: dict[int, CpuSet] = {}  # each CPU's core as its mask lists it
    compute_units = _amd_compute_units(cpuinfo)
    core_sets, clusters, dies, packages, notes = _mask_objects(fs, cpus, names, online, compute_units, core_cpus)
    packages.sort(key=lambda p: p.cpuset.first())
    # Packages are disjoint: the one holding a set's first CPU is the only one that can hold the set.
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
    placed = [*(p.cpuset for p in packages), *(d.cpuset for d in die_objs), *(s for _, s in clusters),
              *(c.cpuset for c in cores)]
    caches, dropped = _nesting_caches(placed, _caches(fs, cpus, core_cpus, online))
    notes += [f"L{c.level} {c.type} cache with CPUs {c.cpuset} ignored: it straddles another object, "
              "as in hwloc" for c in dropped]
    models = _cpu_models(cpuinfo, package_at)
    packages = [replace(p, model=models.get(p.os_index)) for p in packages] if models else packages
    # A cluster is a Group in hwloc: merged away where it repeats a core, a cache, a die or a package.
    redundant = {o.cpuset for o in (*packages, *die_objs, *cores, *caches)}
    cluster_objs = [Cluster(i, package_of(s), s) for i, s in clusters if s not in redundant]
    return RawCpus(complete | online, online, packages, die_objs, cluster_objs, cores, caches, models, True, notes)


def _mask_objects(fs: FsRoot, cpus: dict[int, str], names: dict[str, str], online: CpuSet, compute_units: bool,
                  core_cpus: dict[int, CpuSet]):
    """(core id, set)s, (cluster id, set)s, (die id, set)s, packages and notes, CPU by CPU as hwloc goes: only
    the first CPU of a core looks at its cluster, of a cluster at its die, of a die at its package."""
    cores, clusters, dies, packages, notes = [], [], [], [], []
    thread_with_core_id: bool | None = None if compute_units else False
    for i, cpu in cpus.items():
        d = f"{cpu}/topology"
        core_set = _mask_file(fs, cpu, names["core"])
        if core_set is not None:
            core_set = core_cpus[i] = core_set & online
            if thread_with_core_id is None and core_set.weight() > 1:
                # Compute units or hyper-threads? Decided on the first core with two PUs: distinct core_ids.
                sibling = cpus[next(c for c in core_set if c != i)]
                thread_with_core_id = fs.read_int(f"{d}/core_id") != fs.read_int(f"{sibling}/topology/core_id")
            if core_set.first() == i or thread_with_core_id:
                core_id = _os_index(fs.read_int(f"{d}/core_id"))
                cores.append((core_id, CpuSet.from_mask(1 << i) if thread_with_core_id else core_set))
            if core_set.first() != i:
                continue
        first_of_cluster, cluster_set = _group_mask(fs, i, cpu, "cluster_cpus", online)
        if not first_of_cluster:
            continue
        first_of_die, die_set = _group_mask(fs, i, cpu, "die_cpus", online)
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


def _group_mask(fs: FsRoot, i: int, cpu: str, name: str, online: CpuSet) -> tuple[bool, CpuSet | None]:
    """(whether CPU i goes on to the next level up, the set when it makes an object) of a cluster_cpus
    or die_cpus mask. A one-PU set is the kernel's default on machines without that level: no object."""
    found = _mask_file(fs, cpu, name)
    if found is None or (found := found & online).weight() == 1:
        return True, None
    return (True, found) if found.first() == i else (False, None)


def _os_index(value: int | None) -> int | None:
    """An id sysfs gives as -1 (no such information on this platform) is unknown, as in hwloc."""
    return None if value is None or value < 0 else value


def _add_package(packages: list[Package], new: Package, notes: list[str]) -> None:
    """Add a package made from one CPU's mask unless it overlaps one already made: a stale, smaller mask
    (hot-plug, buggy BIOS), nested in hwloc, or one straddling another package is noted unless the ids
    agree. Sockets reusing one physical_package_id have disjoint masks and stay two packages."""
    p = next((p for p in packages if new.cpuset.intersects(p.cpuset)), None)
    if p is None:
        packages.append(new)
    elif not (new.cpuset <= p.cpuset and new.os_index == p.os_index):
        notes.append(f"package P#{new.os_index} with CPUs {new.cpuset} ignored: "
                     f"it overlaps package P#{p.os_index} with CPUs {p.cpuset}")


def _caches(fs: FsRoot, cpus: dict[int, str], core_cpus: dict[int, CpuSet], online: CpuSet) -> list[Cache]:
    """Caches in hwloc's insertion order: CPU by CPU, index by index."""
    seen: dict[tuple[int, str, CpuSet], Cache] = {}
    # (indexN, sharing set) already read: the other CPUs of a shared cache read only their sharing map.
    read_already: set[tuple[str, CpuSet]] = set()
    for i, cpu in cpus.items():
        base = f"{cpu}/cache"
        own = CpuSet.from_mask(1 << i)
        private = core_cpus.get(i) or own  # an empty sharing map (ia64, some VMs): private to the core
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
            if level is None or kind not in ("data", "instruction", "unified") or (level, kind, shared) in seen:
                continue
            text = fs.read(idx + "size") or ""
            m = _SIZE.match(text)
            if text and not m:
                raise ProbeError(f"{fs.shown(idx + 'size')}: expected a size like '32K', found {text[:40]!r}")
            size = int(m.group(1)) * _SIZE_UNITS[m.group(2).upper()] if m else 0
            if not size:
                continue  # hwloc ignores zero-sized caches (some VMs, PowerPC L1i)
            read_already.add((name, shared))
            line = fs.read_int(idx + "coherency_line_size") or None
            # Associativity as hwloc computes it (ways_of_associativity is 0 or -1 when fully associative).
            sets = fs.read_int(idx + "number_of_sets") or 0
            per_tag = fs.read_int(idx + "physical_line_partition", 1) or 0
            ways = (size // line // per_tag // sets or None) if line and per_tag and sets > 1 else None
            seen[level, kind, shared] = Cache(level, kind, size, shared, line, ways)
    return list(seen.values())


def _nesting_caches(placed: list[CpuSet], caches: list[Cache]) -> tuple[list[Cache], list[Cache]]:
    """(kept, dropped) caches by hwloc's insertion: packages, dies, clusters and cores first, then the caches
    in order; one straddling an object already in the tree (holding part of it, not all) is dropped."""
    chains: dict[int, list[CpuSet]] = {}

    def fits(s: CpuSet) -> bool:
        around = {id(o): o for pu in s for o in chains.get(pu, ())}
        return all(o <= s or s <= o for o in around.values())

    def add(s: CpuSet) -> None:
        for pu in s:
            chains.setdefault(pu, []).append(s)

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


def _cpu_models(cpuinfo: str, package_at: dict[int, Package]) -> dict[int, str]:
    """Package model names from /proc/cpuinfo ("model name", or "cpu" on POWER), by each processor's package."""
    models: dict[int, str] = {}
    proc = None
    for key, value in _cpuinfo_fields(cpuinfo):
        if key == "processor":
            proc = ascii_number(value)
        elif key in ("model name", "cpu") and proc in package_at and value:
            models.setdefault(package_at[proc].os_index, value)
    return models


def probe_nodes(fs: FsRoot, online: CpuSet) -> RawNodes:
    """NUMA nodes by hwloc's rules (look_sysfsnode): CPUs from each cpumap, memory from meminfo, and for
    a node without CPUs a locality from its initiators or distances."""
    ids = sorted(_numbered_dirs(fs, NODE, _NODE_DIR))
    if not ids:
        return RawNodes([NumaNode(0, online, _meminfo_total(fs, "/proc/meminfo"), False, online, {0: 10})], [], False)

    # numa=fake= puts a CPU in every node cut from its own: hwloc accepts the overlap and ignores initiators.
    fake_numa = "numa=fake=" in (fs.read("/proc/cmdline") or "")
    own = {i: _node_cpus(fs, i) for i in ids}
    gpu_memory = {}  # node -> bus id of the GPU whose memory the NVIDIA driver onlined as it ("Node: N")
    for busid in fs.listdir("/proc/driver/nvidia/gpus"):
        m = re.search(r"Node:[ \t]*(-?[0-9]{1,9})\b", fs.read(f"/proc/driver/nvidia/gpus/{busid}/numa_status") or "")
        if m and int(m.group(1)) >= 0:
            gpu_memory[int(m.group(1))] = busid.lower()
    notes, taken = [], EMPTY
    cpus, memory, distances, initiators = {}, {}, {}, {}  # by node id: CPUs, bytes, {node: distance}, CPUs
    for i in ids:
        d = f"{NODE}/node{i}"
        if own[i] & taken and not fake_numa:
            # Overlapping cpumaps come from a buggy BIOS; hwloc keeps the first node that claims the CPUs.
            notes.append(f"NUMA node P#{i} ignored: its CPUs {own[i] & taken} belong to an earlier node "
                         f"({fs.shown(d + '/cpumap')})")
            continue
        # Under numa=fake a CPU belongs to the first node listing it; the others are attached at their CPUs.
        cpus[i] = own[i] - taken
        taken |= own[i]
        memory[i] = _meminfo_total(fs, f"{d}/meminfo")
        dist = fs.read(f"{d}/distance")
        if dist:
            values = [ascii_number(v) for v in dist.split()]
            if None in values:
                raise ProbeError(f"{fs.shown(d + '/distance')}: expected integers, found {dist[:40]!r}")
            distances[i] = dict(zip(ids, values))
        # access1: the nearest CPU initiators, access0: of any kind (Linux 5.10+); hwloc prefers access1.
        for access in () if fake_numa else ("access1", "access0"):
            names = fs.listdir(f"{d}/{access}/initiators")
            init = [int(m.group(1)) for n in names if (m := _NODE_DIR.match(n)) and int(m.group(1)) != i]
            if init:
                initiators[i] = union_all(own.get(j, EMPTY) for j in init)
                break

    base = "/sys/bus/dax/devices"  # nodes backed by DAX persistent memory (kmem) are NVM
    nvm = {n for dev in fs.listdir(base) if (n := fs.read_int(f"{base}/{dev}/target_node")) is not None}
    subtype = {i: "NVM" for i in cpus if i in nvm}
    locality: dict[int, CpuSet] = {}
    for i in cpus:
        if i in gpu_memory:
            # GPU memory as a node (POWER9, Grace C2C): at the GPU's local CPUs, else as any CPU-less node.
            busid = gpu_memory[i]
            gpu_cpus = (fs.read_set(f"{PCI}/{busid}/local_cpulist", f"{PCI}/{busid}/local_cpus") or EMPTY) & online
            subtype[i] = "GPUMemory"
            if gpu_cpus:
                locality[i] = gpu_cpus
        elif own[i]:
            # hwloc adds the initiators' CPUs to a node's own (CPUs reaching it as fast as their own).
            locality[i] = own[i] | initiators.get(i, EMPTY)
    # Then CPU-less nodes in order: a node near an earlier CPU-less node inherits the locality found for it.
    for i in cpus:
        if i not in locality:
            locality[i] = initiators[i] if i in initiators else _nearest_cpus(i, cpus, locality, distances)
    nodes = [NumaNode(i, c, memory[i], not c, locality[i],
                      {j: v for j, v in distances.get(i, {}).items() if j in cpus}, subtype.get(i), gpu_memory.get(i))
             for i, c in cpus.items()]
    side_caches = []
    for n in nodes:
        base = f"{NODE}/node{n.os_index}/memory_side_cache"
        for name in sorted(fs.listdir(base)):
            size = fs.read_int(f"{base}/{name}/size") if name.startswith("index") else None
            if size:
                side_caches.append(MemorySideCache(size, (n.os_index,), n.locality))
    return RawNodes(nodes, side_caches, True, notes)


def _node_cpus(fs: FsRoot, i: int) -> CpuSet:
    """A node's CPUs from its cpumap (what hwloc reads), else its cpulist. The kernel writes a mask even
    for a node without CPUs: an empty file, a dangling link or neither file is a damaged capture."""
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


def _nearest_cpus(i: int, nodes: dict, locality: dict[int, CpuSet], distances: dict[int, dict[int, int]]) -> CpuSet:
    """The locality known so far of the nodes nearest to CPU-less node i, by hwloc's rule: they must be
    strictly farther than i itself and not all the other nodes (else empty: attached to the machine)."""
    row = distances.get(i, {})
    others = [(row[j], j) for j in nodes if j != i and j in row]
    best = min((d for d, _ in others), default=None)
    nearest = [j for d, j in others if d == best]
    if best is None or best <= row.get(i, 0) or len(nearest) == len(nodes) - 1:
        return EMPTY
    return union_all(locality.get(j, EMPTY) for j in nearest)


def _meminfo_total(fs: FsRoot, path: str) -> int:
    for line in (fs.read(path) or "").splitlines():
        if "MemTotal:" in line:
            parts = line.split("MemTotal:")[1].split()
            value = ascii_number(parts[0], SYSFS_INT_MAX) if parts else None
            if value is None:
                raise ProbeError(f"{fs.shown(path)}: malformed MemTotal line {line.strip()[:60]!r}")
            unit = parts[1].lower() if len(parts) > 1 else "kb"
            return value * (1024 if unit == "kb" else 1)
    return 0
