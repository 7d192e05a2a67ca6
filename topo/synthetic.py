"""Synthetic topologies from a text description, like hwloc's `hwloc_topology_set_synthetic`.

    synthetic("pack:2 numa:4 l3:2 core:8 pu:2", gpus_per_numa=1)

Each `level:N` is N children per parent, outermost first: `pack`, then `numa`, `l3`, `l2` (each optional,
in any order among themselves), then `core`, `pu`. `gpus_per_numa=k` puts k accelerators on each node,
`gpu_nodes=[3, 3, 1, ...]` accelerator g on node gpu_nodes[g]; `gpu_memory_nodes` gives each a memory-only
node (GH200 HBM) that it reports as its `numa_node`; `pu_order="scatter"` numbers the first thread of every
core first, as Linux does on most x86; `allowed`/`allowed_nodes` are a cgroup cpuset, applied as
`discover()` applies one. `from_nodes(["0-2", "3-9"], gpu_nodes=[0])` builds irregular shapes from node CPU lists.
"""

from __future__ import annotations

import re

from topo.cpuset import MAX_ID, CpuSet, union_all
from topo.numbers import ascii_number
from topo.errors import ParseError
from topo.model import Cache, Core, Device, NumaNode, Package, Topology

_TOKEN = re.compile(r"\A(pack|package|numa|l3|l2|core|pu):([0-9]+)\Z")


def _levels(desc: str) -> dict[str, int]:
    """Each level's count, outermost first."""
    levels: dict[str, int] = {}
    for tok in desc.split():
        m = _TOKEN.match(tok.lower())
        if not m:
            raise ParseError(f"bad synthetic level {tok!r} in {desc!r}; use e.g. 'pack:2 numa:2 core:8 pu:2'")
        name = "pack" if m.group(1) == "package" else m.group(1)
        n = ascii_number(m.group(2))
        if not n:
            raise ParseError(f"synthetic level {tok!r} needs a count from 1 to {MAX_ID}")
        if name in levels:
            raise ParseError(f"synthetic level {name!r} given twice in {desc!r}")
        levels[name] = n
    for required in ("pack", "core", "pu"):
        if required not in levels:
            raise ParseError(f"synthetic description {desc!r} lacks a {required}:N level")
    if list(levels)[0] != "pack" or list(levels)[-2:] != ["core", "pu"]:
        raise ParseError(f"synthetic description {desc!r} must start with pack:N and end with core:N pu:N")
    return levels


def _distances(ids: list[int], hosts: dict[int, int], package_of: list[int]) -> dict[int, dict[int, int]]:
    """SLIT-like distances: a memory-only node (`hosts` maps it to its CPU node) is 80 from its host
    and the host's other memory nodes, 120 from the rest; CPU nodes 12 within a package, else 20."""
    def distance(a: int, b: int) -> int:
        if a == b:
            return 10
        if a in hosts or b in hosts:
            return 80 if hosts.get(a, a) == hosts.get(b, b) else 120
        return 12 if package_of[a] == package_of[b] else 20

    return {i: {j: distance(i, j) for j in ids} for i in ids}


def synthetic(desc: str, *, gpus_per_numa: int = 0, device_kind: str = "gpu", vendor: str = "nvidia",
              gpu_memory_nodes: bool = False, pu_order: str = "compact", allowed: str | None = None,
              allowed_nodes: str | None = None, gpu_nodes: list[int] | None = None) -> Topology:
    counts = _levels(desc)
    npu = counts["pu"]
    cores_per: dict[str, int] = {}  # how many cores one object of each level holds
    ncores = 1
    for name, n in reversed(list(counts.items())[:-1]):  # core, ..., pack
        cores_per[name] = ncores
        ncores *= n
    if pu_order not in ("compact", "scatter"):
        raise ParseError(f"pu_order must be 'compact' or 'scatter', got {pu_order!r}")

    def pus_of(c: int) -> CpuSet:
        if pu_order == "compact":
            return CpuSet.range(c * npu, c * npu + npu - 1)
        return CpuSet(t * ncores + c for t in range(npu))

    def objects(level: str) -> list[CpuSet]:
        per = cores_per[level]
        return [union_all(pus_of(c) for c in range(i * per, (i + 1) * per)) for i in range(ncores // per)]

    complete = CpuSet.range(0, ncores * npu - 1)
    pus = complete if allowed is None else CpuSet.parse(allowed) & complete
    per_pack = cores_per["pack"]
    cores = tuple(Core(c % per_pack, c // per_pack, pus_of(c) & pus) for c in range(ncores) if pus_of(c) & pus)
    caches = []
    for name, level, size in (("l2", 2, 1 << 20), ("l3", 3, 32 << 20)):
        if name in counts:
            caches += [Cache(level, "unified", size, s & pus) for s in objects(name) if s & pus]

    node_level = "numa" if "numa" in counts else "pack"
    node_sets = objects(node_level)
    nnodes = len(node_sets)
    # accelerator g sits on CPU node hosts[g]; with gpu_memory_nodes, its memory is node nnodes + g
    hosts = list(gpu_nodes) if gpu_nodes is not None else [n for n in range(nnodes) for _ in range(gpus_per_numa)]
    memory_of = {nnodes + g: host for g, host in enumerate(hosts)} if gpu_memory_nodes else {}
    every_node = CpuSet.range(0, nnodes + len(memory_of) - 1)
    dist = _distances(list(every_node), memory_of,
                      [i * cores_per[node_level] // per_pack for i in range(nnodes)])
    # disallowed nodes are kept, as `discover(include_disallowed=True)` does
    nodes = [NumaNode(i, s & pus, 64 << 30, False, s & pus, dist[i]) for i, s in enumerate(node_sets)]
    nodes += [NumaNode(m, CpuSet(), 96 << 30, True, node_sets[host] & pus, dist[m], "GPUMemory",
                       f"0000:{0x10 + m - nnodes:02x}:00.0") for m, host in memory_of.items()]
    devices = tuple(
        Device(kind=device_kind, vendor=vendor, index=g, busid=f"0000:{0x10 + g:02x}:00.0",
               numa_node=(nnodes + g) if gpu_memory_nodes else host, local_cpus=node_sets[host] & pus,
               name=f"synthetic {device_kind} {g}", source="synthetic")
        for g, host in enumerate(hosts))
    packages = tuple(Package(i, s & pus) for i, s in enumerate(objects("pack")) if s & pus)
    return Topology(
        root="synthetic:" + desc, pus=pus, allowed_pus=pus, complete_pus=complete, online_pus=complete,
        allowed_numa_nodes=every_node if allowed_nodes is None else every_node & CpuSet.parse(allowed_nodes),
        packages=packages, numa_nodes=tuple(nodes), cores=cores, caches=tuple(caches), devices=devices,
        probes={"synthetic": "ok"})


def from_nodes(nodes: list[str], *, packages: list[str] | None = None, threads_per_core: int = 1,
               gpu_nodes: list[int] = (), device_kind: str = "gpu", vendor: str = "nvidia",
               memory_only: dict[int, int] | None = None, allowed: str | None = None,
               caches: list[str] = ()) -> Topology:
    """A topology with arbitrary NUMA node CPU lists, for the irregular shapes `synthetic` cannot describe
    (a 3-core node next to a 7-core one). Cores are consecutive runs of `threads_per_core` PUs; `packages`
    defaults to one package holding everything; `memory_only` maps extra node ids to the CPU node they
    hang off (distance 80, others 120); `caches` are L3 cpulists; `gpu_nodes[g]` is accelerator g's node."""
    memory_only = memory_only or {}
    node_sets = [CpuSet.parse(n) for n in nodes]
    every = union_all(node_sets)
    pkg_sets = [CpuSet.parse(p) for p in packages] if packages else [every]
    pus = every if allowed is None else CpuSet.parse(allowed) & every
    cores = []
    ids = list(every)
    for i in range(0, len(ids), threads_per_core):
        cs = CpuSet(ids[i:i + threads_per_core]) & pus
        if cs:
            pkg = next(p for p, s in enumerate(pkg_sets) if s.intersects(cs))
            cores.append(Core(i // threads_per_core, pkg, cs))
    all_ids = list(range(len(node_sets))) + sorted(memory_only)
    dist = _distances(all_ids, memory_only, list(range(len(node_sets))))  # CPU nodes: 20 apart
    numa = [NumaNode(i, s & pus, 16 << 30, False, s & pus, dist[i]) for i, s in enumerate(node_sets)]
    numa += [NumaNode(m, CpuSet(), 16 << 30, True, node_sets[memory_only[m]] & pus, dist[m], "GPUMemory")
             for m in sorted(memory_only)]
    devices = tuple(Device(device_kind, vendor, g, f"0000:{0x10 + g:02x}:00.0", n,
                           node_sets[memory_only.get(n, n)] & pus, source="synthetic")
                    for g, n in enumerate(gpu_nodes))
    return Topology(
        root="synthetic:from_nodes", pus=pus, allowed_pus=pus, complete_pus=every, online_pus=every,
        allowed_numa_nodes=CpuSet(all_ids),
        packages=tuple(Package(i, s & pus) for i, s in enumerate(pkg_sets)),
        numa_nodes=tuple(numa), cores=tuple(cores),
        caches=tuple(Cache(3, "unified", 32 << 20, CpuSet.parse(c) & pus) for c in caches),
        devices=devices, probes={"synthetic": "ok"})
