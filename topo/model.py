"""The Topology model: flat, immutable lists of objects tied together by their cpusets.

Containment (package > die > NUMA node > L3 > core > PU) is not stored as pointers but follows from
cpusets, as in hwloc; `topo.render` rebuilds the tree for display. Objects carry their OS index
(P#) as `os_index`; logical indices (L#) are their position in the sorted lists.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Iterable, Mapping

from topo.cpuset import EMPTY, CpuSet
from topo.errors import ProbeError

SCHEMA = "topo.topology/1"


@dataclass(frozen=True)
class Package:
    os_index: int
    cpuset: CpuSet
    model: str | None = None


@dataclass(frozen=True)
class Die:
    os_index: int
    package: int
    cpuset: CpuSet


@dataclass(frozen=True)
class Cluster:
    os_index: int
    package: int
    cpuset: CpuSet


@dataclass(frozen=True)
class Core:
    os_index: int | None  # sysfs core_id: unique only within a package; None when sysfs has none
    package: int | None  # None on machines without package information
    cpuset: CpuSet


@dataclass(frozen=True)
class Cache:
    level: int
    type: str  # "data" | "instruction" | "unified"
    size: int  # bytes
    cpuset: CpuSet
    line_size: int | None = None
    ways: int | None = None

    @property
    def label(self) -> str:
        suffix = {"data": "d", "instruction": "i"}.get(self.type, "")
        return f"L{self.level}{suffix}"


@dataclass(frozen=True)
class MemorySideCache:
    size: int
    numa_nodes: tuple[int, ...]
    cpuset: CpuSet


@dataclass(frozen=True)
class NumaNode:
    os_index: int
    cpuset: CpuSet  # the node's own CPUs; empty for a memory-only node
    local_memory: int  # bytes
    memory_only: bool
    locality: CpuSet  # own CPUs, or the CPUs of the nearest CPU-bearing node(s)
    distances: Mapping[int, int] = field(default_factory=dict)
    subtype: str | None = None  # e.g. "GPUMemory", "NVM"


@dataclass(frozen=True)
class Group:
    """A level hwloc inserts where no package/die/cache matches: NUMA nodes spanning several
    packages, or nodes clustered by their distances."""

    cpuset: CpuSet
    numa_nodes: tuple[int, ...]
    reason: str


@dataclass(frozen=True)
class PciDevice:
    busid: str  # "0000:07:00.0"
    class_id: str  # "0302"
    vendor_id: str  # "10de"
    device_id: str  # "20b0"
    numa_node: int | None
    local_cpus: CpuSet
    driver: str | None = None
    names: tuple[str, ...] = ()  # OS devices under it, RDMA first: "mlx5_0", "eth0", "nvme0"
    rdma_names: tuple[str, ...] = ()  # those sysfs lists under infiniband/ (the RDMA devices)

    @property
    def id(self) -> str:
        return f"{self.vendor_id}:{self.device_id}"


@dataclass(frozen=True)
class Device:
    """An accelerator or NIC that planners place processes next to."""

    kind: str  # "gpu" | "npu" | "nic" | "nvme" | "accel"
    vendor: str  # "nvidia", "huawei", "amd", "intel", "mellanox", ...
    index: int  # physical id as its runtime numbers it (NVML index, npu-smi logical id)
    busid: str | None
    numa_node: int | None
    local_cpus: CpuSet
    name: str | None = None
    uuid: str | None = None
    source: str = "sysfs"
    memory: int | None = None  # bytes of device memory, when a runtime tool reports it
    socket_cpus: CpuSet | None = None  # NVML's SOCKET-scope affinity; None when not reported


@dataclass(frozen=True)
class Topology:
    root: str
    pus: CpuSet  # online PUs with a topology entry, restricted as the view says
    allowed_pus: CpuSet
    complete_pus: CpuSet  # every PU known, offline or disallowed included
    online_pus: CpuSet
    allowed_numa_nodes: CpuSet
    packages: tuple[Package, ...]
    numa_nodes: tuple[NumaNode, ...]
    cores: tuple[Core, ...]
    caches: tuple[Cache, ...] = ()
    dies: tuple[Die, ...] = ()
    clusters: tuple[Cluster, ...] = ()
    groups: tuple[Group, ...] = ()
    memory_side_caches: tuple[MemorySideCache, ...] = ()
    pci_devices: tuple[PciDevice, ...] = ()
    devices: tuple[Device, ...] = ()
    links: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    probes: Mapping[str, str] = field(default_factory=dict)
    info: Mapping[str, str] = field(default_factory=dict)
    include_disallowed: bool = False

    # ---- queries ------------------------------------------------------
    @property
    def is_this_system(self) -> bool:
        return self.root in ("/", "")

    def numa_node(self, os_index: int) -> NumaNode:
        for node in self.numa_nodes:
            if node.os_index == os_index:
                return node
        raise KeyError(os_index)

    def cpu_nodes(self) -> tuple[NumaNode, ...]:
        """NUMA nodes that own CPUs (never memory-only), allowed ones only."""
        return tuple(
            n for n in self.numa_nodes
            if not n.memory_only and n.os_index in self.allowed_numa_nodes and n.cpuset
        )

    def last_level_caches(self) -> tuple[Cache, ...]:
        """The highest-level data/unified caches (L3 on most servers), the 'core complexes'."""
        levels = [c.level for c in self.caches if c.type != "instruction" and c.cpuset]
        if not levels:
            return ()
        top = max(levels)
        return tuple(c for c in self.caches if c.level == top and c.type != "instruction" and c.cpuset)

    def summary(self) -> str:
        parts = [
            _count(len(self.packages), "package"),
            _count(len(self.numa_nodes), "NUMA node"),
            _count(len(self.cores), "core"),
            _count(self.pus.weight(), "PU"),
        ]
        kinds: dict[str, int] = {}
        for d in self.devices:
            kinds[d.kind] = kinds.get(d.kind, 0) + 1
        for kind in ("gpu", "npu", "accel", "nic"):
            if kinds.get(kind):
                parts.append(_count(kinds[kind], kind.upper() if kind != "accel" else "accelerator"))
        return ", ".join(parts)

    def with_devices(self, devices: Iterable[Device], **changes) -> "Topology":
        return replace(self, devices=tuple(devices), **changes)

    # ---- invariants ---------------------------------------------------
    def check(self) -> None:
        """Raise ProbeError if the topology breaks an invariant hwloc's checker would catch."""
        problems = []
        if not self.allowed_pus <= self.pus | self.allowed_pus and not self.include_disallowed:
            problems.append("allowed PUs outside PUs")
        if not self.pus <= self.complete_pus:
            problems.append(f"PUs {self.pus - self.complete_pus} outside the complete set")
        covered = EMPTY
        for core in self.cores:
            if core.package is None and not self.packages:
                pass  # no package level at all
            elif not any(p.os_index == core.package and core.cpuset <= p.cpuset for p in self.packages):
                problems.append(f"core P#{core.os_index} not inside a package P#{core.package}")
            if not core.cpuset:
                problems.append(f"core P#{core.os_index} of package {core.package} has no PU")
            if covered.intersects(core.cpuset):
                problems.append(f"PUs {covered & core.cpuset} in two cores")
            covered |= core.cpuset
        if covered != self.pus:
            problems.append(f"PUs not in exactly one core: {covered ^ self.pus}")
        seen = EMPTY
        for pkg in self.packages:
            if seen.intersects(pkg.cpuset):
                problems.append(f"package P#{pkg.os_index} overlaps another")
            seen |= pkg.cpuset
            if not pkg.cpuset <= self.pus:
                problems.append(f"package P#{pkg.os_index} has PUs outside the topology")
        seen = EMPTY
        for node in self.numa_nodes:
            if seen.intersects(node.cpuset):
                problems.append(f"NUMA node P#{node.os_index} overlaps another")
            seen |= node.cpuset
            if node.memory_only and node.cpuset:
                problems.append(f"memory-only NUMA node P#{node.os_index} has CPUs")
            if not node.cpuset <= node.locality:
                problems.append(f"NUMA node P#{node.os_index} CPUs outside its locality")
        for die in self.dies:
            if not any(die.package == p.os_index and die.cpuset <= p.cpuset for p in self.packages):
                problems.append(f"die P#{die.os_index} not inside package P#{die.package}")
        # caches nest: two caches either are disjoint or one contains the other at a higher level
        by_level: dict[int, list[Cache]] = {}
        for cache in self.caches:
            if cache.type != "instruction":
                by_level.setdefault(cache.level, []).append(cache)
        levels = sorted(by_level)
        for lo, hi in zip(levels, levels[1:]):
            for small in by_level[lo]:
                if not small.cpuset:
                    continue
                for big in by_level[hi]:
                    if big.cpuset.intersects(small.cpuset) and not small.cpuset <= big.cpuset:
                        problems.append(
                            f"L{lo} cache {small.cpuset} straddles L{hi} cache {big.cpuset}"
                        )
        for cache in self.caches:
            if not cache.cpuset <= self.pus:
                problems.append(f"L{cache.level} cache {cache.cpuset} has PUs outside the topology")
        if problems:
            raise ProbeError("topology check failed: " + "; ".join(problems[:5]))

    # ---- JSON ---------------------------------------------------------
    def to_dict(self) -> dict:
        return {
            "schema": SCHEMA,
            "source": {"root": self.root, "probes": dict(self.probes)},
            "info": dict(self.info),
            "pus": self.pus.to_list(),
            "allowed_pus": self.allowed_pus.to_list(),
            "complete_pus": self.complete_pus.to_list(),
            "online_pus": self.online_pus.to_list(),
            "allowed_numa_nodes": self.allowed_numa_nodes.to_list(),
            "packages": [
                {"os_index": p.os_index, "cpuset": p.cpuset.to_list(), "model": p.model}
                for p in self.packages
            ],
            "dies": [
                {"os_index": d.os_index, "package": d.package, "cpuset": d.cpuset.to_list()}
                for d in self.dies
            ],
            "clusters": [
                {"os_index": c.os_index, "package": c.package, "cpuset": c.cpuset.to_list()}
                for c in self.clusters
            ],
            "numa_nodes": [
                {
                    "os_index": n.os_index,
                    "cpuset": n.cpuset.to_list(),
                    "local_memory": n.local_memory,
                    "memory_only": n.memory_only,
                    "locality": n.locality.to_list(),
                    "distances": {str(k): v for k, v in sorted(n.distances.items())},
                    "subtype": n.subtype,
                }
                for n in self.numa_nodes
            ],
            "cores": [
                {"os_index": c.os_index, "package": c.package, "cpuset": c.cpuset.to_list()}
                for c in self.cores
            ],
            "caches": [
                {
                    "level": c.level,
                    "type": c.type,
                    "size": c.size,
                    "cpuset": c.cpuset.to_list(),
                    "line_size": c.line_size,
                    "ways": c.ways,
                }
                for c in self.caches
            ],
            "memory_side_caches": [
                {"size": m.size, "numa_nodes": list(m.numa_nodes), "cpuset": m.cpuset.to_list()}
                for m in self.memory_side_caches
            ],
            "groups": [
                {"cpuset": g.cpuset.to_list(), "numa_nodes": list(g.numa_nodes), "reason": g.reason}
                for g in self.groups
            ],
            "pci_devices": [
                {
                    "busid": d.busid,
                    "class": d.class_id,
                    "id": d.id,
                    "numa_node": d.numa_node,
                    "local_cpus": d.local_cpus.to_list(),
                    "driver": d.driver,
                    "names": list(d.names),
                    "rdma_names": list(d.rdma_names),
                }
                for d in self.pci_devices
            ],
            "devices": [
                {
                    "kind": d.kind,
                    "vendor": d.vendor,
                    "index": d.index,
                    "busid": d.busid,
                    "numa_node": d.numa_node,
                    "local_cpus": d.local_cpus.to_list(),
                    "name": d.name,
                    "uuid": d.uuid,
                    "source": d.source,
                    "memory": d.memory,
                    "socket_cpus": None if d.socket_cpus is None else d.socket_cpus.to_list(),
                }
                for d in self.devices
            ],
            "links": {k: dict(v) for k, v in self.links.items()},
        }

    @classmethod
    def from_dict(cls, data: Mapping) -> "Topology":
        """Read back what `to_dict` wrote (the `topo show --json` schema)."""
        if data.get("schema") != SCHEMA:
            raise ProbeError(
                f"not a topo topology: schema is {data.get('schema')!r}, expected {SCHEMA!r} "
                "(write one with `topo show --json`)"
            )
        P = CpuSet.parse
        try:
            return cls(
                root=data["source"]["root"],
                probes=dict(data["source"].get("probes", {})),
                info=dict(data.get("info", {})),
                pus=P(data["pus"]),
                allowed_pus=P(data["allowed_pus"]),
                complete_pus=P(data.get("complete_pus", data["pus"])),
                online_pus=P(data.get("online_pus", data["pus"])),
                allowed_numa_nodes=P(data["allowed_numa_nodes"]),
                packages=tuple(
                    Package(p["os_index"], P(p["cpuset"]), p.get("model")) for p in data["packages"]
                ),
                dies=tuple(Die(d["os_index"], d["package"], P(d["cpuset"])) for d in data["dies"]),
                clusters=tuple(
                    Cluster(c["os_index"], c["package"], P(c["cpuset"])) for c in data["clusters"]
                ),
                numa_nodes=tuple(
                    NumaNode(
                        n["os_index"],
                        P(n["cpuset"]),
                        n["local_memory"],
                        n["memory_only"],
                        P(n["locality"]),
                        {int(k): v for k, v in n.get("distances", {}).items()},
                        n.get("subtype"),
                    )
                    for n in data["numa_nodes"]
                ),
                cores=tuple(Core(c["os_index"], c["package"], P(c["cpuset"])) for c in data["cores"]),
                caches=tuple(
                    Cache(c["level"], c["type"], c["size"], P(c["cpuset"]), c.get("line_size"), c.get("ways"))
                    for c in data.get("caches", [])
                ),
                memory_side_caches=tuple(
                    MemorySideCache(m["size"], tuple(m["numa_nodes"]), P(m["cpuset"]))
                    for m in data.get("memory_side_caches", [])
                ),
                groups=tuple(
                    Group(P(g["cpuset"]), tuple(g["numa_nodes"]), g.get("reason", ""))
                    for g in data.get("groups", [])
                ),
                pci_devices=tuple(
                    PciDevice(
                        d["busid"],
                        d["class"],
                        *d["id"].split(":", 1),
                        d["numa_node"],
                        P(d["local_cpus"]),
                        d.get("driver"),
                        tuple(d.get("names", ())),
                        tuple(d.get("rdma_names", ())),
                    )
                    for d in data.get("pci_devices", [])
                ),
                devices=tuple(
                    Device(
                        d["kind"], d["vendor"], d["index"], d.get("busid"), d.get("numa_node"),
                        P(d.get("local_cpus", "")), d.get("name"), d.get("uuid"), d.get("source", "json"),
                        d.get("memory"), None if d.get("socket_cpus") is None else P(d["socket_cpus"]),
                    )
                    for d in data.get("devices", [])
                ),
                links={k: dict(v) for k, v in data.get("links", {}).items()},
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ProbeError(f"malformed topology JSON: {exc!r} (regenerate it with `topo show --json`)") from exc


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"

