"""Write a fake sysfs/procfs root from a compact machine description.

hwloc's captured machines cover real hardware; this covers the shapes they lack (cgroup v2
containers, no NUMA directory, old kernels, CPU-less nodes) without hand-copied trees:

    root = build(tmp_path, Machine(packages=2, cores=4, threads=2,
                                   cgroup=Cgroup(2, cpus="0-3", mems="0")))
    topo.discover(root)

Only the files topo's probes (and hwloc's) read are written, with the kernel's formats:
cpulists and 32-bit-word hex masks ending in a newline, `meminfo` in kB, `distance` rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from topo.cpuset import CpuSet

CPU = "sys/devices/system/cpu"
NODE = "sys/devices/system/node"
PCI = "sys/bus/pci/devices"


@dataclass
class Node:
    """A NUMA node: its CPUs (cpulist; "" for memory-only), memory and distance row."""

    cpus: str
    memory: int = 4 << 30  # bytes
    distances: list[int] | None = None  # one entry per node, in node order; default 10/20


@dataclass
class Cgroup:
    """The process's cpuset cgroup. None for cpus/mems leaves that file out."""

    version: int  # 1 or 2
    cpus: str | None = None
    mems: str | None = None
    path: str = "/job"


@dataclass
class Pci:
    busid: str  # "0000:07:00.0"
    class_id: str  # 24-bit class as sysfs writes it: "0x030200"
    vendor: str = "0x10de"
    device: str = "0x20b0"
    numa_node: int = -1
    local_cpulist: str | None = None  # None: no local_cpulist/local_cpus files
    # A PCI-to-PCI bridge's (secondary, subordinate) buses, written in its config space as the
    # kernel exposes it (hwloc builds the bridge tree from these bytes). None: not a bridge.
    bridge_buses: tuple[int, int] | None = None
    # An NVIDIA GPU whose memory the driver onlined as this NUMA node (GH200, GB200 without CDMM):
    # /proc/driver/nvidia/gpus/<busid>/numa_status says "Node: N". None: no such file.
    memory_node: int | None = None


@dataclass
class Machine:
    """`packages` x `cores` x `threads` PUs.

    PU numbering follows Intel's: the first thread of every core first, package-major
    (cpu = thread * packages * cores + package * cores + core); `cpu_ids` renames PUs in that
    order to arbitrary (sparse) OS indices. `nodes` defaults to one node per package; `numa=False`
    leaves `/sys/devices/system/node` out entirely.
    """

    packages: int = 1
    cores: int = 2
    threads: int = 1
    cpu_ids: list[int] | None = None
    offline: str = ""  # cpulist of offline PUs (no topology/ or cache/ directory, online=0)
    nodes: list[Node] | None = None
    numa: bool = True
    caches: bool = True  # L1d+L1i+L2 per core, L3 per package
    die_id: bool = True
    cluster_id: bool = True
    dies: int = 1  # per package, splitting its cores evenly
    cluster_cores: int = 1  # cores per cluster (x86: 1; Kunpeng 920: 4)
    global_online: bool = True  # cpu/online (absent on very old kernels)
    model: str = "Fake CPU @ 2.00GHz"
    vendor: str = "GenuineIntel"  # /proc/cpuinfo vendor_id
    family: int = 6  # /proc/cpuinfo cpu family (AMD Bulldozer-class compute units: 21)
    # AMD compute units: the two "threads" of a core are two cores sharing a front end, each with
    # its own core_id (core * threads + thread) though thread_siblings lists both.
    compute_units: bool = False
    cmdline: str = "BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro"  # /proc/cmdline
    memory: int = 8 << 30  # /proc/meminfo MemTotal, bytes
    cgroup: Cgroup | None = None
    pci: list[Pci] = field(default_factory=list)
    # cpulist -> (cpufreq/cpuinfo_max_freq, cpufreq/base_frequency) in kHz, None leaving the file out
    cpufreq: dict[str, tuple[int | None, int | None]] = field(default_factory=dict)
    capacity: dict[str, int] = field(default_factory=dict)  # cpulist -> cpu_capacity (ARM big.LITTLE)

    # ---- derived layout ------------------------------------------------------------------
    def layout(self) -> dict[int, tuple[int, int, int]]:
        """OS index -> (package, core, thread) for every PU, offline ones included."""
        out = {}
        order = 0
        for thread in range(self.threads):
            for package in range(self.packages):
                for core in range(self.cores):
                    cpu = self.cpu_ids[order] if self.cpu_ids else order
                    out[cpu] = (package, core, thread)
                    order += 1
        return out

    def node_list(self) -> list[Node]:
        if self.nodes is not None:
            return self.nodes
        lay = self.layout()
        return [
            Node(CpuSet(c for c, (p, _, _) in lay.items() if p == pkg).to_list(), self.memory // self.packages)
            for pkg in range(self.packages)
        ]


def _mask(s: CpuSet, words: int) -> str:
    m = s.mask
    return ",".join(f"{(m >> (32 * w)) & 0xFFFFFFFF:08x}" for w in reversed(range(words)))


class Writer:
    def __init__(self, root: Path) -> None:
        self.root = root

    def __call__(self, rel: str, text: str) -> None:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def build(base: Path, m: Machine, name: str = "machine") -> Path:
    """Write machine `m` below `base/name` and return that root."""
    root = Path(base) / name
    w = Writer(root)
    lay = m.layout()
    every = CpuSet(lay)
    offline = CpuSet.parse(m.offline)
    online = every - offline
    words = max(1, (every.last() + 32) // 32)

    def cpus_where(pred) -> CpuSet:
        return CpuSet(c for c, t in lay.items() if pred(*t))

    # ---- /sys/devices/system/cpu ---------------------------------------------------------
    w(f"{CPU}/present", f"{every}\n")
    w(f"{CPU}/possible", f"{every}\n")
    w(f"{CPU}/kernel_max", f"{max(8191, every.last())}\n")
    if m.global_online:
        w(f"{CPU}/online", f"{online}\n")
        w(f"{CPU}/offline", f"{offline}\n")
    for cpu, (pkg, core, _thread) in sorted(lay.items()):
        d = f"{CPU}/cpu{cpu}"
        if cpu != 0:  # the boot CPU has no online file on x86
            w(f"{d}/online", "0\n" if cpu in offline else "1\n")
        if cpu in offline:
            (root / d).mkdir(parents=True, exist_ok=True)
            continue
        threads = cpus_where(lambda p, c, t: p == pkg and c == core)
        package = cpus_where(lambda p, c, t: p == pkg)
        per_die = m.cores // m.dies
        die = cpus_where(lambda p, c, t: p == pkg and c // per_die == core // per_die)
        cluster = cpus_where(lambda p, c, t: p == pkg and c // m.cluster_cores == core // m.cluster_cores)
        t = f"{d}/topology"
        w(f"{t}/physical_package_id", f"{pkg}\n")
        w(f"{t}/core_id", f"{core * m.threads + _thread if m.compute_units else core}\n")
        if m.die_id:
            w(f"{t}/die_id", f"{core // per_die}\n")
            w(f"{t}/die_cpus_list", f"{die}\n")
            w(f"{t}/die_cpus", _mask(die, words) + "\n")
        if m.cluster_id:
            # x86 numbers clusters machine-wide by the first core's APIC-ish id
            w(f"{t}/cluster_id", f"{pkg * 1000 + core // m.cluster_cores}\n")
            w(f"{t}/cluster_cpus_list", f"{cluster}\n")
            w(f"{t}/cluster_cpus", _mask(cluster, words) + "\n")
        for stem, s in (("thread_siblings", threads), ("core_cpus", threads),
                        ("core_siblings", package), ("package_cpus", package)):
            w(f"{t}/{stem}_list", f"{s}\n")
            w(f"{t}/{stem}", _mask(s, words) + "\n")
        if m.caches:
            caches = [(1, "Data", "48K", threads), (1, "Instruction", "32K", threads),
                      (2, "Unified", "2048K", threads), (3, "Unified", "32768K", package)]
            for i, (level, kind, size, shared) in enumerate(caches):
                c = f"{d}/cache/index{i}"
                w(f"{c}/level", f"{level}\n")
                w(f"{c}/type", f"{kind}\n")
                w(f"{c}/size", f"{size}\n")
                w(f"{c}/coherency_line_size", "64\n")
                w(f"{c}/ways_of_associativity", "8\n")
                w(f"{c}/shared_cpu_list", f"{shared}\n")
                w(f"{c}/shared_cpu_map", _mask(shared, words) + "\n")

    for cpus, (top, base) in m.cpufreq.items():
        for cpu in CpuSet.parse(cpus):
            for name, khz in (("cpuinfo_max_freq", top), ("base_frequency", base)):
                if khz is not None:
                    w(f"{CPU}/cpu{cpu}/cpufreq/{name}", f"{khz}\n")
    for cpus, capacity in m.capacity.items():
        for cpu in CpuSet.parse(cpus):
            w(f"{CPU}/cpu{cpu}/cpu_capacity", f"{capacity}\n")

    # ---- /sys/devices/system/node --------------------------------------------------------
    nodes = m.node_list()
    if m.numa:
        ids = CpuSet(range(len(nodes)))
        w(f"{NODE}/possible", f"{ids}\n")
        w(f"{NODE}/online", f"{ids}\n")
        w(f"{NODE}/has_cpu", f"{CpuSet(i for i, n in enumerate(nodes) if n.cpus)}\n")
        w(f"{NODE}/has_memory", f"{CpuSet(i for i, n in enumerate(nodes) if n.memory)}\n")
        w(f"{NODE}/has_normal_memory", f"{CpuSet(i for i, n in enumerate(nodes) if n.memory)}\n")
        for i, n in enumerate(nodes):
            d = f"{NODE}/node{i}"
            cpus = CpuSet.parse(n.cpus)
            w(f"{d}/cpulist", f"{cpus}\n")
            w(f"{d}/cpumap", _mask(cpus, words) + "\n")
            kb = n.memory // 1024
            w(f"{d}/meminfo", f"Node {i} MemTotal:       {kb} kB\nNode {i} MemFree:        {kb // 2} kB\n")
            row = n.distances or [10 if j == i else 20 for j in range(len(nodes))]
            w(f"{d}/distance", " ".join(map(str, row)) + "\n")
            for cpu in cpus:
                (root / d / f"cpu{cpu}").mkdir(parents=True, exist_ok=True)

    # ---- /proc ---------------------------------------------------------------------------
    info = []
    for cpu, (pkg, core, _thread) in sorted(lay.items()):
        if cpu in online:
            info.append(f"processor\t: {cpu}\nvendor_id\t: {m.vendor}\ncpu family\t: {m.family}\n"
                        f"model name\t: {m.model}\nphysical id\t: {pkg}\ncore id\t\t: {core}\n")
    w("proc/cpuinfo", "\n".join(info))
    w("proc/cmdline", m.cmdline + "\n")
    # What hwloc-gather-topology records of uname: hwloc applies its x86 quirks (AMD compute
    # units) to a captured root only when this file says x86_64.
    w("proc/hwloc-nofile-info", "OSName: Linux\nArchitecture: x86_64\n")
    w("proc/meminfo", f"MemTotal:       {m.memory // 1024} kB\nMemFree:        1024 kB\n")

    mounts = ["sysfs /sys sysfs rw,nosuid,nodev,noexec,relatime 0 0",
              "proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0"]
    cg = m.cgroup
    if cg is None:
        w("proc/self/cgroup", "0::/\n")
    elif cg.version == 2:
        mounts.append("cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime 0 0")
        w("proc/self/cgroup", f"0::{cg.path}\n")
        d = f"sys/fs/cgroup{cg.path}"
        if cg.cpus is not None:
            w(f"{d}/cpuset.cpus.effective", f"{cg.cpus}\n")
            w(f"{d}/cpuset.cpus", f"{cg.cpus}\n")
        if cg.mems is not None:
            w(f"{d}/cpuset.mems.effective", f"{cg.mems}\n")
            w(f"{d}/cpuset.mems", f"{cg.mems}\n")
        # the root cgroup allows everything; a probe reading it instead of ours would be wrong
        w("sys/fs/cgroup/cpuset.cpus.effective", f"{online}\n")
        w("sys/fs/cgroup/cpuset.mems.effective", f"{CpuSet(range(len(nodes)))}\n")
    elif cg.version == 1:
        mounts.append("tmpfs /sys/fs/cgroup tmpfs ro,nosuid,nodev,noexec,mode=755 0 0")
        mounts.append("cgroup /sys/fs/cgroup/cpuset cgroup rw,nosuid,nodev,noexec,relatime,cpuset 0 0")
        mounts.append("cgroup /sys/fs/cgroup/memory cgroup rw,nosuid,nodev,noexec,relatime,memory 0 0")
        w("proc/self/cgroup", f"5:memory:{cg.path}\n3:cpuset:{cg.path}\n0::/\n")
        d = f"sys/fs/cgroup/cpuset{cg.path}"
        if cg.cpus is not None:
            w(f"{d}/cpuset.cpus", f"{cg.cpus}\n")
        if cg.mems is not None:
            w(f"{d}/cpuset.mems", f"{cg.mems}\n")
        w("sys/fs/cgroup/cpuset/cpuset.cpus", f"{online}\n")
        w("sys/fs/cgroup/cpuset/cpuset.mems", f"{CpuSet(range(len(nodes)))}\n")
    else:
        raise ValueError(f"cgroup version must be 1 or 2, not {cg.version!r}")
    w("proc/mounts", "\n".join(mounts) + "\n")

    # ---- PCI -----------------------------------------------------------------------------
    for dev in m.pci:
        d = f"{PCI}/{dev.busid}"
        w(f"{d}/class", f"{dev.class_id}\n")
        w(f"{d}/vendor", f"{dev.vendor}\n")
        w(f"{d}/device", f"{dev.device}\n")
        w(f"{d}/numa_node", f"{dev.numa_node}\n")
        if dev.local_cpulist is not None:
            local = CpuSet.parse(dev.local_cpulist)
            w(f"{d}/local_cpulist", f"{local}\n")
            w(f"{d}/local_cpus", _mask(local, words) + "\n")
        # The first 64 bytes of config space, what an unprivileged reader gets: header type at
        # 0x0e (1 = PCI-to-PCI bridge), primary/secondary/subordinate bus at 0x18-0x1a.
        config = bytearray(64)
        config[0:2] = int(dev.vendor, 16).to_bytes(2, "little")
        config[2:4] = int(dev.device, 16).to_bytes(2, "little")
        if dev.bridge_buses is not None:
            config[0x0E] = 1
            config[0x18] = int(dev.busid.split(":")[1], 16)
            config[0x19], config[0x1A] = dev.bridge_buses
        (root / d / "config").write_bytes(bytes(config))
        if dev.memory_node is not None:
            w(f"proc/driver/nvidia/gpus/{dev.busid}/numa_status", f"Node: {dev.memory_node}\nStatus: online\n")
    return root
