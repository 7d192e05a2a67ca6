"""Generated sysfs roots of the machines DL jobs run on in 2026 (tests/sysfs_builder.py writes them).

Grace Hopper and Grace Blackwell: the NVIDIA driver onlines each GPU's HBM as a CPU-less NUMA
node and reserves seven more empty nodes after it for MIG (one GPU: nodes 0-8, four: 36 nodes),
and names the node in /proc/driver/nvidia/gpus/<bus id>/numa_status. Distances: 10 to itself,
40 between Grace nodes, 80 within one Grace's block (its GPU's nodes), 120 elsewhere. With CDMM
(driver R580+) the GPU nodes are gone. GB10 (DGX Spark) has one node and a GPU without one. Bus
and device ids are those NVIDIA's systems report (lspci); how each GPU's PCI function gives its
node differs per machine below, so that every homing rule is exercised.
"""

from __future__ import annotations

from sysfs_builder import Machine, Node, Pci

GPU_CLASS = "0x030200"


def _grace_nodes(graces: int, cores: int, gpus_per_grace: int, gpu_nodes: bool) -> tuple[list[Node], list[int]]:
    """Grace nodes 0..graces-1, then per GPU its memory node and seven empty ones; the memory
    node ids."""
    owner = list(range(graces))  # node -> the Grace whose block it is in
    memory_nodes = []
    if gpu_nodes:
        for g in range(graces * gpus_per_grace):
            memory_nodes.append(len(owner))
            owner += [g // gpus_per_grace] * 8

    def distance(a: int, b: int) -> int:
        if a == b:
            return 10
        if a < graces and b < graces:
            return 40
        return 80 if owner[a] == owner[b] else 120

    nodes = []
    for i in range(len(owner)):
        cpus = f"{i * cores}-{i * cores + cores - 1}" if i < graces else ""
        memory = 480 << 30 if i < graces else (96 << 30 if i in memory_nodes else 0)
        nodes.append(Node(cpus, memory, [distance(i, j) for j in range(len(owner))]))
    return nodes, memory_nodes


def gh200(gpus: int = 1) -> Machine:
    """GH200 with 1 GPU (the GPU's function on the Grace node with its local CPUs) or 4 (a
    function that gives no node and no local CPUs: the GPU's home comes from its memory node's
    distances)."""
    nodes, memory = _grace_nodes(gpus, 72, 1, True)
    pci = []
    for g in range(gpus):
        local = (g, f"{72 * g}-{72 * g + 71}") if gpus == 1 else (-1, None)
        pci.append(Pci(f"00{g}9:01:00.0", GPU_CLASS, device="0x2342", numa_node=local[0], local_cpulist=local[1],
                       memory_node=memory[g]))
    return Machine(packages=gpus, cores=72, nodes=nodes, pci=pci, model="Neoverse-V2", vendor="ARM")


def gb200(cdmm: bool = False) -> Machine:
    """A GB200 compute tray: 2 Grace, 4 Blackwell GPUs, two per Grace. Without CDMM each GPU's
    function names its memory node (2, 10, 18, 26) as its node, with the Grace's CPUs as local
    CPUs; with CDMM the memory nodes are gone and the function names its Grace node."""
    nodes, memory = _grace_nodes(2, 72, 2, not cdmm)
    pci = []
    for g, bus in enumerate(("0008", "0009", "0018", "0019")):
        grace = g // 2
        pci.append(Pci(f"{bus}:01:00.0", GPU_CLASS, device="0x2941", numa_node=grace if cdmm else memory[g],
                       local_cpulist=f"{72 * grace}-{72 * grace + 71}", memory_node=None if cdmm else memory[g]))
    return Machine(packages=2, cores=72, nodes=nodes, pci=pci, model="Neoverse-V2", vendor="ARM")


def gb10() -> Machine:
    """GB10 (DGX Spark): 20 cores on one node, an integrated GPU sharing its memory (no GPU node;
    the function gives no node, its local CPUs are every CPU)."""
    pci = [Pci("000f:01:00.0", GPU_CLASS, device="0x2e12", numa_node=-1, local_cpulist="0-19")]
    return Machine(packages=1, cores=20, pci=pci, model="Cortex-X925", vendor="ARM")


def split_packages(per_package: int, *, amd: bool = False, packages: int = 2, cores: int = 12,
                   gpus: int = 8, wrong_node: int | None = None) -> Machine:
    """Intel SNC<per_package> (distances 10 / 12 same package / 21) or AMD NPS<per_package>
    (10 / 12 / 32), SMT2, each package's cores cut into `per_package` nodes in order, GPU g on node
    g * nodes // gpus with its node's CPUs as local CPUs. `wrong_node`: GPU 0's function says
    that node while its local CPUs are its real node's (a BIOS reporting one node per device)."""
    same, remote = (12, 32) if amd else (12, 21)
    threads = 2
    nodes = []
    package_of = []
    for p in range(packages):
        for k in range(per_package):
            lo, hi = k * cores // per_package, (k + 1) * cores // per_package
            cpus = [t * packages * cores + p * cores + c for t in range(threads) for c in range(lo, hi)]
            nodes.append(",".join(map(str, cpus)))
            package_of.append(p)
    n = len(nodes)
    node_list = [Node(cpus, 64 << 30, [10 if i == j else same if package_of[i] == package_of[j] else remote
                                       for j in range(n)]) for i, cpus in enumerate(nodes)]
    pci = []
    for g in range(gpus):
        node = g * n // gpus
        pci.append(Pci(f"0000:{0x18 + 0x10 * g:02x}:00.0", GPU_CLASS, device="0x2901",
                       numa_node=wrong_node if g == 0 and wrong_node is not None else node,
                       local_cpulist=nodes[node]))
    model = "AMD EPYC 9654 96-Core Processor" if amd else "Intel(R) Xeon(R) 6980P"
    return Machine(packages=packages, cores=cores, threads=threads, nodes=node_list, pci=pci, model=model,
                   vendor="AuthenticAMD" if amd else "GenuineIntel", family=25 if amd else 6)


def priority_cores(mixed_max: bool = False) -> Machine:
    """A DGX B300-like host scaled down: 2 x Xeon 6776P (here 8 cores, SMT2) whose Intel SST-TF
    priority cores (2 per package: cores 0-1) have base frequency 2.6 GHz, the others 2.0 GHz;
    max 4.6 GHz everywhere, or (`mixed_max`) Turbo Boost Max 3.0 favoured cores at 4.8 GHz, within
    hwloc's 10% adjustment, so not another kind."""
    packages, cores = 2, 8
    priority = [t * packages * cores + p * cores + c for t in range(2) for p in range(packages) for c in (0, 1)]
    others = [cpu for cpu in range(2 * packages * cores) if cpu not in priority]
    as_list = lambda cpus: ",".join(map(str, cpus))  # noqa: E731
    cpufreq = {as_list(priority): (4_600_000, 2_600_000), as_list(others): (4_600_000, 2_000_000)}
    if mixed_max:
        cpufreq = {as_list(priority[:2]): (4_800_000, 2_600_000), as_list(priority[2:]): (4_600_000, 2_600_000),
                   as_list(others): (4_600_000, 2_000_000)}
    return Machine(packages=packages, cores=cores, threads=2, cpufreq=cpufreq, model="Intel(R) Xeon(R) 6776P")


def hybrid() -> Machine:
    """An Alder Lake-like desktop: 4 P-cores (SMT2, base 3.2 GHz, max 5.0) and 4 E-cores (base
    2.4, max 3.8) - without SMT on the E-cores the builder cannot say, so all have 2 threads."""
    cpufreq = {"0-3,8-11": (5_000_000, 3_200_000), "4-7,12-15": (3_800_000, 2_400_000)}
    return Machine(packages=1, cores=8, threads=2, cpufreq=cpufreq, model="12th Gen Intel(R) Core(TM) i7-12700")


def big_little() -> Machine:
    """An ARM big.LITTLE (GB10-like): capacities 1024 and 512, max frequency only."""
    cpufreq = {"0-9": (3_900_000, None), "10-19": (2_800_000, None)}
    return Machine(packages=1, cores=20, cpufreq=cpufreq, capacity={"0-9": 1024, "10-19": 512},
                   model="Cortex-X925", vendor="ARM")
