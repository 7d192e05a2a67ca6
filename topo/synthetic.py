"""Synthetic topologies from a text description, like hwloc's `hwloc_topology_set_synthetic`.

    synthetic("pack:2 numa:4 l3:2 core:8 pu:2", gpus_per_numa=1)

Each `level:N` is N children per parent, outermost first: `pack`, then `numa`, `l3`, `l2` (each
optional, in any order among themselves), then `core`, `pu`. `gpus_per_numa=k` puts k
accelerators on each node, `gpu_nodes=[3, 3, 1, ...]` accelerator g on node gpu_nodes[g];
`gpu_memory_nodes` gives each a memory-only node (GH200 HBM) that it reports as its `numa_node`;
`pu_order="scatter"` numbers the first thread of every core first, as Linux does on most x86;
`allowed`/`allowed_nodes` are a cgroup cpuset, applied as `discover()` applies one.
`from_nodes(["0-2", "3-9"], gpu_nodes=[0])` builds irregular shapes from node CPU lists.
"""

from __future__ import annotations

import re

from topo.cpuset import MAX_ID, CpuSet, union_all
from topo.numbers import ascii_number
from topo.errors import ParseError
from topo.model import Cache, Core, Device, NumaNode, Package, Topology

_TOKEN = re.compile(r"\A(pack|package|numa|l3|l2|core|pu):([0-9]+)\Z")


def parse_description(desc: str) -> list[tuple[str, int]]:
    levels: list[tuple[str, int]] = []
    for tok in desc.split():
        m = _TOKEN.match(tok.lower())
        if not m:
            raise ParseError(f"bad synthetic level {tok!r} in {desc!r}; use e.g. 'pack:2 numa:2 core:8 pu:2'")
        name = "pack" if m.group(1) == "package" else m.group(1)
        n = ascii_number(m.group(2))
        if not n:
            raise ParseError(f"synthetic level {tok!r} needs a count from 1 to {MAX_ID}")
        if any(name == lv for lv, _ in levels):
            raise ParseError(f"synthetic level {name!r} given twice in {desc!r}")
        levels.append((name, n))
    names = [lv for lv, _ in levels]
    for required in ("pack", "core", "pu"):
        if required not in names:
            raise ParseError(f"synthetic description {desc!r} lacks a {required}:N level")
    if names[0] != "pack" or names[-2:] != ["core", "pu"]:
        raise ParseError(f"synthetic description {desc!r} must start with pack:N and end with core:N pu:N")
    return levels


def synthetic(desc: str, *, gpus_per_numa: int = 0, device_kind: str = "gpu", vendor: str = "nvidia",
              gpu_memory_nodes: bool = False, pu_order: str = "compact", allowed: str | None = None,
              allowed_nodes: str | None = None, memory_per_node: int = 64 << 30,
              gpu_nodes: list[int] | None = None) -> Topology:
    levels = parse_description(desc)
    counts = dict(levels)
    npu = counts["pu"]
    # cores_per[level]: how many cores one object of that level holds
    cores_per: dict[str, int] = {}
    prod = 1
    for name, n in reversed(levels[:-1]):  # core, ..., pack
        cores_per[name] = prod
        prod *= n
    ncores = prod

    if pu_order == "compact":
        def pus_of(c: int) -> CpuSet:
            return CpuSet.range(c * npu, c * npu + npu - 1)
    elif pu_order == "scatter":
        def pus_of(c: int) -> CpuSet:
            return CpuSet(t * ncores + c for t in range(npu))
    else:
        raise ParseError(f"pu_order must be 'compact' or 'scatter', got {pu_order!r}")

    def objects(level: str) -> list[CpuSet]:
        per = cores_per[level]
        return [union_all(pus_of(c) for c in range(i * per, (i + 1) * per)) for i in range(ncores // per)]

    complete = CpuSet.range(0, ncores * npu - 1)
    allowed_pus = complete if allowed is None else CpuSet.parse(allowed) & complete
    pus = allowed_pus

    pack_sets = objects("pack")
    pack_of_core = [c // cores_per["pack"] for c in range(ncores)]
    packages = tuple(Package(i, s & pus) for i, s in enumerate(pack_sets) if s & pus)
    cores = tuple(
        Core(c % cores_per["pack"], pack_of_core[c], pus_of(c) & pus)
        for c in range(ncores) if pus_of(c) & pus
    )
    caches = []
    for level_name, level in (("l2", 2), ("l3", 3)):
        if level_name in counts:
            size = (1 << 20) if level == 2 else (32 << 20)
            caches += [Cache(level, "unified", size, s & pus) for s in objects(level_name) if s & pus]

    node_sets = objects("numa") if "numa" in counts else pack_sets
    nnodes = len(node_sets)
    node_pack = [(i * (cores_per["numa"] if "numa" in counts else cores_per["pack"])) // cores_per["pack"]
                 for i in range(nnodes)]
    if gpu_nodes is not None:  # explicit: accelerator g sits on CPU node gpu_nodes[g]
        gpus_per_numa = 1
        hosts = list(gpu_nodes)
    else:
        hosts = [n for n in range(nnodes) for _ in range(gpus_per_numa)]
    ngpus = len(hosts)
    nall = nnodes + (ngpus if gpu_memory_nodes else 0)
    allowed_node_set = CpuSet.range(0, nall - 1)
    if allowed_nodes is not None:
        allowed_node_set &= CpuSet.parse(allowed_nodes)

    def distance(a: int, b: int) -> int:
        if a == b:
            return 10
        if a >= nnodes or b >= nnodes:  # HBM node: near its GPU's CPU node, far from the rest
            ga = a - nnodes if a >= nnodes else None
            gb = b - nnodes if b >= nnodes else None
            host_a = hosts[ga] if ga is not None else a
            host_b = hosts[gb] if gb is not None else b
            return 80 if host_a == host_b else 120
        return 12 if node_pack[a] == node_pack[b] else 20

    nodes = []
    for i in range(nall):  # disallowed nodes are kept, as `discover(include_disallowed=True)` does
        dist = {j: distance(i, j) for j in range(nall)}
        if i < nnodes:
            own = node_sets[i] & pus
            nodes.append(NumaNode(i, own, memory_per_node, False, own, dist))
        else:
            host = hosts[i - nnodes]
            nodes.append(NumaNode(i, CpuSet(), 96 << 30, True, node_sets[host] & pus, dist, "GPUMemory",
                                  f"0000:{0x10 + i - nnodes:02x}:00.0"))

    devices = []
    for g in range(ngpus):
        host = hosts[g]
        devices.append(Device(
            kind=device_kind, vendor=vendor, index=g, busid=f"0000:{0x10 + g:02x}:00.0",
            numa_node=(nnodes + g) if gpu_memory_nodes else host,
            local_cpus=node_sets[host] & pus, name=f"synthetic {device_kind} {g}", source="synthetic",
        ))

    return Topology(
        root="synthetic:" + desc,
        pus=pus,
        allowed_pus=allowed_pus,
        complete_pus=complete,
        online_pus=complete,
        allowed_numa_nodes=allowed_node_set,
        packages=packages,
        numa_nodes=tuple(nodes),
        cores=cores,
        caches=tuple(caches),
        devices=tuple(devices),
        probes={"synthetic": "ok"},
    )


def from_nodes(nodes: list[str], *, packages: list[str] | None = None, threads_per_core: int = 1,
               gpu_nodes: list[int] = (), device_kind: str = "gpu", vendor: str = "nvidia",
               memory_only: dict[int, int] | None = None, allowed: str | None = None,
               caches: list[str] = ()) -> Topology:
    """A topology with arbitrary NUMA node CPU lists, for the irregular shapes `synthetic` cannot
    describe (a 3-core node next to a 7-core one). Cores are consecutive runs of
    `threads_per_core` PUs; `packages` defaults to one package holding everything; `memory_only`
    maps extra node ids to the CPU node they hang off (distance 80, others 120); `caches` are L3
    cpulists; `gpu_nodes[g]` is accelerator g's node."""
    memory_only = memory_only or {}
    node_sets = [CpuSet.parse(n) for n in nodes]
    every = union_all(node_sets)
    pkg_sets = [CpuSet.parse(p) for p in packages] if packages else [every]
    allowed_pus = every if allowed is None else CpuSet.parse(allowed) & every
    pus = allowed_pus
    cores = []
    ids = list(every)
    for i in range(0, len(ids), threads_per_core):
        cs = CpuSet(ids[i:i + threads_per_core]) & pus
        if cs:
            pkg = next(p for p, s in enumerate(pkg_sets) if s.intersects(cs))
            cores.append(Core(i // threads_per_core, pkg, cs))
    all_ids = list(range(len(node_sets))) + sorted(memory_only)

    def dist(a, b):
        if a == b:
            return 10
        ha, hb = memory_only.get(a, a), memory_only.get(b, b)
        if a in memory_only or b in memory_only:
            return 80 if ha == hb else 120
        return 20

    numa = []
    for i in all_ids:
        d = {j: dist(i, j) for j in all_ids}
        if i in memory_only:
            numa.append(NumaNode(i, CpuSet(), 16 << 30, True, node_sets[memory_only[i]] & pus, d, "GPUMemory"))
        else:
            numa.append(NumaNode(i, node_sets[i] & pus, 16 << 30, False, node_sets[i] & pus, d))
    devices = tuple(
        Device(device_kind, vendor, g, f"0000:{0x10 + g:02x}:00.0", n,
               node_sets[memory_only.get(n, n)] & pus, source="synthetic")
        for g, n in enumerate(gpu_nodes)
    )
    return Topology(
        root="synthetic:from_nodes", pus=pus, allowed_pus=allowed_pus, complete_pus=every, online_pus=every,
        allowed_numa_nodes=CpuSet(all_ids),
        packages=tuple(Package(i, s & pus) for i, s in enumerate(pkg_sets)),
        numa_nodes=tuple(numa), cores=tuple(cores),
        caches=tuple(Cache(3, "unified", 32 << 20, CpuSet.parse(c) & pus) for c in caches),
        devices=devices, probes={"synthetic": "ok"},
    )
