"""Generated sysfs roots of GPU and NPU servers, built from the captured tool outputs.

hwloc's corpus has no accelerator server, so these machines are written from what the samples in
`fixtures/probe-samples/` say (see INDEX.md there): the CPU and NUMA layout from `lscpu` or from
`nvidia-smi topo -m`'s CPU/NUMA affinity columns, the devices' bus ids from `nvidia-smi` /
`npu-smi info`, and a PCI tree shaped so that its switches give the PIX/PXB/NODE/SYS levels the
captured `topo -m` prints. What the samples do not say is marked "inferred" below.

`build(machine, dest)` writes `dest/sys/...` and `dest/proc/...` (the files topo's probes read),
and returns `dest`. Bridges are numbered on their host bridge's root bus: the BDFs are well formed
and unique, though a real BIOS numbers switch ports on their own buses.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

# ---- spec --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Endpoint:
    busid: str
    pci_class: str  # 6 hex digits, e.g. "030200"
    vendor: str  # "10de"
    device: str
    rdma: tuple[str, ...] = ()  # infiniband/ names
    net: tuple[str, ...] = ()  # net/ names


@dataclass(frozen=True)
class Switch:
    """An upstream port and one downstream port per child; a tuple child is a multi-function device."""

    children: tuple


def endpoints(child):
    """The endpoints below a complex's child (an Endpoint, a multi-function tuple or a Switch), in order."""
    if isinstance(child, Endpoint):
        yield child
    elif isinstance(child, tuple):
        yield from child
    else:
        for sub in child.children:
            yield from endpoints(sub)


@dataclass(frozen=True)
class Complex:
    """One PCI host bridge (root complex) with one root port."""

    host: str  # "0000:15"
    numa_node: int
    child: object  # Endpoint | Switch | tuple[Endpoint, ...]


@dataclass
class Machine:
    name: str
    cpu: Callable[[int], tuple[int, int, int]]  # cpu -> (package, core_id, node)
    ncpus: int
    nodes: int
    threads: Callable[[int], list[int]]  # cpu -> its SMT siblings (itself included)
    model: str
    complexes: list[Complex] = field(default_factory=list)
    node_memory: int = 64 << 30


def gpu(busid: str, device: str = "20b2") -> Endpoint:
    return Endpoint(busid, "030200", "10de", device)


def mlx(busid: str, rdma: str, net: str) -> Endpoint:
    return Endpoint(busid, "020700", "15b3", "101b", (rdma,), (net,))


def npu(busid: str) -> Endpoint:
    return Endpoint(busid, "120001", "19e5", "d802")


def mgmt_nic(busid: str, net: str) -> Endpoint:
    return Endpoint(busid, "020000", "8086", "1533", (), (net,))  # Intel I210: no RDMA


# ---- machines ----------------------------------------------------------------------------------


def _smt(ncores: int):
    """Linux numbering of an SMT2 machine: CPUs 0..n-1 are first threads, n..2n-1 their siblings."""
    return lambda c: [c % ncores, c % ncores + ncores]


def dgx_a100() -> Machine:
    """DGX A100 (topo-m_dgx-a100-8gpu_epyc-nps4.txt): 2x EPYC 7742, 64 cores each, SMT2, NPS4 ->
    node n = cores 16n..16n+15 and their siblings; GPU0/1 on node 3 (48-63,176-191), GPU2/3 on 1,
    GPU4/5 on 7, GPU6/7 on 5. Bus ids are a real DGX A100's (inferred from NVIDIA's docs, not in the
    sample); mlx5_4/5 and mlx5_10/11 (dual-port storage NICs, SYS to every GPU) on nodes 2 and 6
    (inferred); eno1 a management port without RDMA, which `topo -m` does not show."""
    def pair(host, node, g0, g1, n0, n1):
        # Every pair PXB in the sample: each device behind its own second-level switch.
        return Complex(host, node, Switch((Switch((g0,)), Switch((g1,)), Switch((n0,)), Switch((n1,)))))

    return Machine(
        "dgx-a100", lambda c: ((c % 128) // 64, c % 64, (c % 128) // 16), 256, 8, _smt(128),
        "AMD EPYC 7742 64-Core Processor",
        [
            pair("0000:00", 3, gpu("0000:07:00.0"), gpu("0000:0f:00.0"),
                 mlx("0000:0c:00.0", "mlx5_0", "ibp12s0"), mlx("0000:12:00.0", "mlx5_1", "ibp18s0")),
            Complex("0000:20", 3, mgmt_nic("0000:22:00.0", "eno1")),
            pair("0000:40", 1, gpu("0000:47:00.0"), gpu("0000:4e:00.0"),
                 mlx("0000:4b:00.0", "mlx5_2", "ibp75s0"), mlx("0000:54:00.0", "mlx5_3", "ibp84s0")),
            Complex("0000:60", 2, (mlx("0000:61:00.0", "mlx5_4", "enp97s0f0"),
                                   mlx("0000:61:00.1", "mlx5_5", "enp97s0f1"))),
            pair("0000:80", 7, gpu("0000:87:00.0"), gpu("0000:90:00.0"),
                 mlx("0000:8d:00.0", "mlx5_6", "ibp141s0"), mlx("0000:94:00.0", "mlx5_7", "ibp148s0")),
            pair("0000:b0", 5, gpu("0000:b7:00.0"), gpu("0000:bd:00.0"),
                 mlx("0000:ba:00.0", "mlx5_8", "ibp186s0"), mlx("0000:cc:00.0", "mlx5_9", "ibp204s0")),
            Complex("0000:e0", 6, (mlx("0000:e1:00.0", "mlx5_10", "enp225s0f0"),
                                   mlx("0000:e1:00.1", "mlx5_11", "enp225s0f1"))),
        ],
    )


def hgx_h200_xeon() -> Machine:
    """HGX H200 on a 2-socket Xeon (topo-m_hgx-h200-8gpu_xeon-2numa.txt): 224 CPUs, 56 cores per
    socket, SMT2, node = socket; GPU0-3 on node 0 (0-55,112-167), GPU4-7 on node 1. Each GPU shares
    a switch pair with one NIC (PXB); NIC1/2 and NIC7/8 are dual-port cards (PIX). Bus ids inferred."""
    gpus = ["0000:19:00.0", "0000:3b:00.0", "0000:4c:00.0", "0000:5d:00.0",
            "0000:9b:00.0", "0000:bb:00.0", "0000:cb:00.0", "0000:db:00.0"]
    nic_of_gpu = {0: 0, 1: 3, 2: 4, 3: 5, 4: 6, 5: 9, 6: 10, 7: 11}
    complexes = []
    for g, busid in enumerate(gpus):
        bus = int(busid[5:7], 16)
        n = nic_of_gpu[g]
        nic = mlx(f"0000:{bus - 1:02x}:00.0", f"mlx5_{n}", f"ibp{bus - 1}s0")
        complexes.append(Complex(f"0000:{bus - 2:02x}", g // 4,
                                 Switch((Switch((gpu(busid, "2335"),)), Switch((nic,))))))
    for node, (a, b), bus in ((0, (1, 2), 0x2a), (1, (7, 8), 0xaa)):
        complexes.append(Complex(f"0000:{bus - 1:02x}", node, (
            mlx(f"0000:{bus:02x}:00.0", f"mlx5_{a}", f"enp{bus}s0f0np0"),
            mlx(f"0000:{bus:02x}:00.1", f"mlx5_{b}", f"enp{bus}s0f1np1"))))
    return Machine("hgx-h200-xeon", lambda c: ((c % 112) // 56, c % 56, (c % 112) // 56), 224, 2, _smt(112),
                   "Intel(R) Xeon(R) Platinum 8480+", complexes)


def h200_epyc() -> Machine:
    """8x H200 on 2x EPYC 9534 NPS1 (topo-m_h200-8gpu_2x-epyc9534-nps1.txt): 256 CPUs, node = socket;
    GPU0-3 on node 0 (0-63,128-191). Each GPU shares one switch with exactly one NIC (PIX), in the
    sample's non-monotonic pairing. Bus ids inferred."""
    nic_of_gpu = {0: 4, 1: 1, 2: 0, 3: 3, 4: 6, 5: 7, 6: 5, 7: 2}
    complexes = []
    for g in range(8):
        bus = 0x01 + 0x20 * g
        nic = mlx(f"0000:{bus + 2:02x}:00.0", f"mlx5_{nic_of_gpu[g]}", f"ibs{g}")
        complexes.append(Complex(f"0000:{bus - 1:02x}", g // 4, Switch((gpu(f"0000:{bus + 1:02x}:00.0", "2335"), nic))))
    return Machine("h200-epyc", lambda c: ((c % 128) // 64, c % 64, (c % 128) // 64), 256, 2, _smt(128),
                   "AMD EPYC 9534 64-Core Processor", complexes)


# The HGX H100 of nvidia-smi-q_hgx-h100-8gpu.txt: bus ids as captured.
H100_BUSIDS = ["0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
               "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"]


def dgx_h100() -> Machine:
    """DGX H100-like: the captured HGX H100's bus ids on 2x Xeon 8480C (56 cores, SMT2, node =
    socket; the sample has no CPU side, so that and GPUs below bus 0x80 on node 0 are inferred)."""
    complexes = [Complex(f"0000:{int(b[5:7], 16) - 2:02x}", 1 if int(b[5:7], 16) >= 0x80 else 0,
                         Switch((gpu(b, "2330"),)))
                 for b in H100_BUSIDS]
    return Machine("dgx-h100", lambda c: ((c % 112) // 56, c % 56, (c % 112) // 56), 224, 2, _smt(112),
                   "Intel(R) Xeon(R) Platinum 8480C", complexes)


def amd_8gpu() -> Machine:
    """8 AMD Instinct GPUs on 2 NUMA nodes (rocm-smi-showtoponuma_8gpu-2numa.txt: GPU0-3 node 0,
    GPU4-7 node 1). The CPU side (2x 64-core EPYC, SMT2) and bus ids are inferred; MI300X report
    PCI class 1200, so the generator uses it."""
    buses = [0x05, 0x15, 0x65, 0x75, 0x85, 0x95, 0xe5, 0xf5]
    complexes = [Complex(f"0000:{b - 2:02x}", i // 4, Switch((Endpoint(f"0000:{b:02x}:00.0", "120000", "1002", "74a1"),)))
                 for i, b in enumerate(buses)]
    return Machine("amd-8gpu", lambda c: ((c % 128) // 64, c % 64, (c % 128) // 64), 256, 2, _smt(128),
                   "AMD EPYC 9534 64-Core Processor", complexes)


def kunpeng_ascend(busids: list[str], name: str) -> Machine:
    """Atlas 800-class: 4x Kunpeng 920 (48 cores, no SMT), 8 NUMA nodes of 24 CPUs (the lscpu
    samples). On these boards a root bus's top two bits pick the socket's first node: bus 0x01 ->
    node 0, 0x41 -> 2, 0x81 -> 4, 0xc1 -> 6, which is what `npu-smi info -t topo`'s CPU Affinity
    column says for the 910B1 host (NPU0 at c1 -> 144-167, NPU1 at 01 -> 0-23)."""
    complexes = []
    for busid in busids:
        bus = int(busid[5:7], 16)
        complexes.append(Complex(f"0000:{bus - 1:02x}", 2 * (bus >> 6), npu(busid)))
    return Machine(name, lambda c: (c // 48, c, c // 24), 192, 8, lambda c: [c],
                   "Kunpeng-920", complexes)


ATLAS800_910B3_BUSIDS = ["0000:c1:00.0", "0000:c2:00.0", "0000:81:00.0", "0000:82:00.0",
                         "0000:01:00.0", "0000:02:00.0", "0000:41:00.0", "0000:42:00.0"]
# The 910B1 host's `npu-smi info` is elided to NPUs 0, 1 and 7 (c1, 01, 42); the others are inferred
# from its `-t topo` CPU Affinity column and the bus -> node rule above.
KUNPENG_910B1_BUSIDS = ["0000:c1:00.0", "0000:01:00.0", "0000:c2:00.0", "0000:02:00.0",
                        "0000:81:00.0", "0000:41:00.0", "0000:82:00.0", "0000:42:00.0"]


# ---- writer ------------------------------------------------------------------------------------


def _cpulist(cpus) -> str:
    cpus = sorted(cpus)
    out, i = [], 0
    while i < len(cpus):
        j = i
        while j + 1 < len(cpus) and cpus[j + 1] == cpus[j] + 1:
            j += 1
        out.append(str(cpus[i]) if i == j else f"{cpus[i]}-{cpus[j]}")
        i = j + 1
    return ",".join(out)


def _mask(cpus) -> str:
    m = 0
    for c in cpus:
        m |= 1 << c
    words = []
    while True:
        words.append(f"{m & 0xFFFFFFFF:08x}")
        m >>= 32
        if not m:
            break
    return ",".join(reversed(words))


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def build(machine: Machine, dest: Path) -> Path:
    sys_ = dest / "sys"
    cpu_dir = sys_ / "devices/system/cpu"
    all_cpus = range(machine.ncpus)
    for f in ("possible", "present", "online"):
        _write(cpu_dir / f, f"0-{machine.ncpus - 1}")
    node_cpus: dict[int, list[int]] = {n: [] for n in range(machine.nodes)}
    for c in all_cpus:
        pkg, core, node = machine.cpu(c)
        node_cpus[node].append(c)
        t = cpu_dir / f"cpu{c}/topology"
        siblings = machine.threads(c)
        _write(t / "physical_package_id", str(pkg))
        _write(t / "core_id", str(core))
        _write(t / "thread_siblings_list", _cpulist(siblings))
        _write(t / "core_cpus_list", _cpulist(siblings))
        _write(t / "package_cpus_list", _cpulist(x for x in all_cpus if machine.cpu(x)[0] == pkg))
    node_dir = sys_ / "devices/system/node"
    ids = _cpulist(range(machine.nodes))
    for f in ("possible", "online", "has_memory", "has_cpu"):
        _write(node_dir / f, ids)
    pkg_of_node = {machine.cpu(cs[0])[2]: machine.cpu(cs[0])[0] for cs in node_cpus.values() if cs}
    for n, cs in node_cpus.items():
        d = node_dir / f"node{n}"
        _write(d / "cpulist", _cpulist(cs))
        _write(d / "cpumap", _mask(cs))
        kb = machine.node_memory >> 10
        _write(d / "meminfo", f"Node {n} MemTotal:       {kb} kB\nNode {n} MemFree:        {kb // 2} kB")
        dist = [10 if m == n else (12 if pkg_of_node.get(m) == pkg_of_node.get(n) else 32)
                for m in range(machine.nodes)]
        _write(d / "distance", " ".join(map(str, dist)))
    proc = dest / "proc"
    _write(proc / "cpuinfo", "\n\n".join(f"processor\t: {c}\nmodel name\t: {machine.model}" for c in all_cpus))
    _write(proc / "meminfo", f"MemTotal:       {(machine.node_memory >> 10) * machine.nodes} kB")

    bus_dir = sys_ / "bus/pci/devices"
    bus_dir.mkdir(parents=True, exist_ok=True)
    for cx in machine.complexes:
        _write_complex(sys_, bus_dir, cx, node_cpus[cx.numa_node])
    return dest


def _write_complex(sys_: Path, bus_dir: Path, cx: Complex, local: list[int]) -> None:
    """One host bridge: its root port, switches and endpoints, each linked from /sys/bus/pci/devices."""
    counter = iter(range(1, 256))

    def bridge_id():
        k = next(counter)
        return f"{cx.host}:{k >> 3:02x}.{k & 7}"

    def function(path: Path, busid: str, pci_class: str, vendor: str, device: str) -> Path:
        d = path / busid
        _write(d / "class", f"0x{pci_class}")
        _write(d / "vendor", f"0x{vendor}")
        _write(d / "device", f"0x{device}")
        _write(d / "numa_node", str(cx.numa_node))
        _write(d / "local_cpulist", _cpulist(local))
        _write(d / "local_cpus", _mask(local))
        os.symlink(os.path.relpath(d, bus_dir), bus_dir / busid)
        return d

    def place(path: Path, child) -> None:
        if isinstance(child, Endpoint):
            child = (child,)
        if isinstance(child, tuple):
            for ep in child:
                d = function(path, ep.busid, ep.pci_class, ep.vendor, ep.device)
                for name in ep.rdma:
                    (d / "infiniband" / name).mkdir(parents=True)
                for name in ep.net:
                    (d / "net" / name).mkdir(parents=True)
            return
        up = function(path, bridge_id(), "060400", "10b5", "c010")  # a PLX/Broadcom switch
        for sub in child.children:
            place(function(up, bridge_id(), "060400", "10b5", "c010"), sub)

    root_port = function(sys_ / f"devices/pci{cx.host}", bridge_id(), "060400", "1022", "1483")
    place(root_port, cx.child)


MACHINES = {
    "dgx-a100": dgx_a100,
    "hgx-h200-xeon": hgx_h200_xeon,
    "h200-epyc": h200_epyc,
    "dgx-h100": dgx_h100,
    "amd-8gpu": amd_8gpu,
    "atlas800-910b3": lambda: kunpeng_ascend(ATLAS800_910B3_BUSIDS, "atlas800-910b3"),
    "kunpeng-910b1": lambda: kunpeng_ascend(KUNPENG_910B1_BUSIDS, "kunpeng-910b1"),
}
