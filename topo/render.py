"""`topo show` text output: the topology as a tree, as lstopo prints it (`render_console`), or
in the long form of `topo show --long` (`render_text`: every object with its P# and L#, devices,
the link matrix, a summary).

The model is flat; the tree is rebuilt here from cpuset containment. Objects with equal cpusets
nest by type (Package > Die > Group > Cluster > L3 > L2 > L1 > Core > PU), NUMA nodes hang as
memory children of the highest object whose CPUs are exactly their locality (else the smallest
that covers it), and devices hang under the NUMA node they are local to. Logical indices (L#) are
given in tree order, as hwloc numbers them; OS indices (P#) come from the model.
"""

from __future__ import annotations

from topo.cpuset import CpuSet
from topo.model import Topology
from topo.text import printable

# Rank of each CPU-side type: lower is higher in the tree when cpusets are equal.
_RANK = {"Machine": 0, "Package": 1, "Die": 2, "Group": 3, "Cluster": 4, "Cache": 5, "Core": 9, "PU": 10}


class TreeNode:
    """One line of the tree and the lines below it (a plain class: a dataclass here would cost
    more at import than building the tree of a small machine)."""

    __slots__ = ("kind", "detail", "cpuset", "rank", "os_index", "children", "memory", "extras", "label",
                 "numa_members")

    def __init__(self, kind: str, detail: str, cpuset: CpuSet, rank: int, os_index: int | None = None):
        self.kind = kind  # L# counter key: "Package", "L3", "Core", "NUMANode", ...
        self.detail = detail  # what follows "KIND L#n": "(P#3 ...)"
        self.cpuset = cpuset
        self.rank = rank
        self.os_index = os_index
        self.children: list[TreeNode] = []
        self.memory: list[TreeNode] = []
        self.extras: list[str] = []
        self.label = ""
        self.numa_members: tuple[int, ...] = ()  # a Group's NUMA nodes


def format_size(n: int) -> str:
    """Bytes as the tree shows them: 512B, 48KiB, 1.5MiB, 768GiB."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            value = n / (1 << shift)
            text = f"{value:.0f}" if value >= 100 else f"{value:.1f}".removesuffix(".0")
            return text + unit
    return f"{n}B"


def _pindex(os_index: int | None, rest: str = "") -> str:
    inner = " ".join(x for x in ((f"P#{os_index}" if os_index is not None else ""), rest) if x)
    return f"({inner})" if inner else ""


def _cpu_objects(t: Topology) -> list[TreeNode]:
    objs: list[TreeNode] = []
    for p in t.packages:
        model = f'"{p.model}"' if p.model else ""
        objs.append(TreeNode("Package", _pindex(p.os_index, model), p.cpuset, _RANK["Package"]))
    for d in t.dies:
        objs.append(TreeNode("Die", _pindex(d.os_index), d.cpuset, _RANK["Die"]))
    for g in t.groups:
        node = TreeNode("Group", "", g.cpuset, _RANK["Group"])
        node.numa_members = g.numa_nodes
        objs.append(node)
    for c in t.clusters:
        objs.append(TreeNode("Cluster", _pindex(c.os_index), c.cpuset, _RANK["Cluster"]))
    for c in t.caches:
        if c.type == "instruction":
            continue  # instruction caches do not nest; lstopo draws them beside the L1d
        # Higher-level caches sit above lower ones with the same cpuset.
        objs.append(TreeNode(c.label, f"({format_size(c.size)})", c.cpuset, _RANK["Cache"] + (4 - c.level)))
    for c in t.cores:
        objs.append(TreeNode("Core", _pindex(c.os_index), c.cpuset, _RANK["Core"]))
    for pu in t.pus:
        objs.append(TreeNode("PU", _pindex(pu), CpuSet([pu]), _RANK["PU"]))
    return objs


def build_tree(t: Topology) -> TreeNode:
    about = [t.info.get("architecture", ""), t.info.get("hostname", ""),
             f"cgroup={t.info['linux_cgroup']}" if t.info.get("linux_cgroup", "/") != "/" else ""]
    machine = TreeNode("Machine", " ".join(x for x in about if x), t.pus, _RANK["Machine"])
    objs = _cpu_objects(t)
    # Parents before children: bigger sets first, then higher types.
    objs.sort(key=lambda o: (-o.cpuset.weight(), o.rank, o.cpuset.first()))
    deepest: dict[int, TreeNode] = {}  # PU -> deepest object placed so far that covers it
    for obj in objs:
        parent = deepest.get(obj.cpuset.first(), machine) if obj.cpuset else machine
        parent.children.append(obj)
        for pu in obj.cpuset:
            deepest[pu] = obj
    for node in _walk(machine):
        node.children.sort(key=lambda o: (o.cpuset.first() if o.cpuset else 1 << 30, o.rank))

    numa_by_index = {}
    for node in t.numa_nodes:
        mem = f"local={format_size(node.local_memory)}" if node.local_memory else ""
        notes = " ".join(x for x in (mem, "memory-only" if node.memory_only else "", node.subtype or "") if x)
        numa = TreeNode("NUMANode", _pindex(node.os_index, notes), node.locality, 0, node.os_index)
        numa_by_index[node.os_index] = numa
        _attach_memory(machine, numa)
    for dev in t.devices:
        label = f"{dev.kind.upper()} {dev.index}"
        details = [x for x in (dev.name, dev.busid) if x]
        if details:
            label += f" ({' '.join(details)})"
        target = numa_by_index.get(dev.numa_node) if dev.numa_node is not None else None
        (target or machine).extras.append(label)
    _number(machine)
    return machine


def _attach_memory(machine: TreeNode, numa: TreeNode) -> None:
    best = machine
    if numa.cpuset:
        exact = None
        for n in _walk(machine):
            if n.kind == "PU":
                continue
            if n.cpuset == numa.cpuset and exact is None:
                exact = n  # walk is top-down: the first exact match is the highest
            elif numa.cpuset <= n.cpuset and n.cpuset.weight() <= best.cpuset.weight():
                best = n
        best = exact or best
    else:
        # No locality: the group hwloc makes for such nodes holds them.
        for n in machine.children:
            if n.kind == "Group" and numa.os_index in n.numa_members:
                best = n
                break
    best.memory.append(numa)


def _walk(node: TreeNode):
    yield node
    for child in node.children:
        yield from _walk(child)


def _number(machine: TreeNode) -> None:
    """Logical indices in tree order (memory children first, as lstopo lists them)."""
    counters: dict[str, int] = {}

    def visit(node: TreeNode) -> None:
        for mem in node.memory:
            visit(mem)
        if node.kind == "Machine":
            node.label = "Machine" + (f" ({node.detail})" if node.detail else "")
        else:
            n = counters.get(node.kind, 0)
            counters[node.kind] = n + 1
            node.label = f"{node.kind} L#{n}" + (f" {node.detail}" if node.detail else "")
        for child in node.children:
            visit(child)

    visit(machine)


def render_text(t: Topology) -> str:
    lines: list[str] = []

    def emit(node: TreeNode, depth: int) -> None:
        pad = "  " * depth
        lines.append(pad + node.label)
        for mem in node.memory:
            lines.append(pad + "  " + mem.label)
            for extra in mem.extras:
                lines.append(pad + "    " + extra)
        for extra in node.extras:
            lines.append(pad + "  " + extra)
        for child in node.children:
            emit(child, depth + 1)

    emit(build_tree(t), 0)
    if t.links:
        lines.append("")
        lines.extend(render_links(t))
    lines.append("")
    lines.append(t.summary())
    if t.probes:
        lines.append("probes: " + ", ".join(f"{k}: {v}" for k, v in t.probes.items()))
    return "\n".join(printable(line) for line in lines)


def render_links(t: Topology) -> list[str]:
    """The device link matrix, as `nvidia-smi topo -m` prints it."""
    names = list(t.links)
    width = max([len(n) for n in names] + [4]) + 1
    out = [" " * width + "".join(f"{n:<{width}}" for n in names)]
    for a in names:
        row = f"{a:<{width}}" + "".join(f"{t.links[a].get(b, 'X' if a == b else '-'):<{width}}" for b in names)
        out.append(row.rstrip())
    return out


# ---- lstopo's console form -------------------------------------------------------------------

# hwloc's order of types that share a cpuset (obj_type_order in topology.c): lower sits higher.
_HWLOC_ORDER = {"Machine": 0, "Group": 1, "MemCache": 2, "NUMANode": 3, "Package": 4, "Die": 5,
                "Core": 14, "PU": 18}
_CACHE_ORDER = {5: 6, 4: 7, 3: 8, 2: 10, 1: 12}  # data/unified; an instruction cache sits one below

INDEX_MODES = ("default", "physical", "logical")


class ConsoleObj:
    """One object of lstopo's console tree (a plain class, as TreeNode)."""

    __slots__ = ("type", "os_index", "attr", "cpuset", "order", "subtype", "children", "memory", "io", "logical",
                 "label")

    def __init__(self, type: str, os_index: int | None, attr: str, cpuset: CpuSet, order: int,
                 subtype: str | None = None):
        self.type = type  # what lstopo prints: "Package", "L2", "L1i", "Group", "NUMANode"
        self.os_index = os_index
        self.attr = attr  # "32MB", a NUMA node's local memory
        self.cpuset = cpuset
        self.order = order
        self.subtype = subtype  # printed in parentheses after the type: "Group0(Cluster)"
        self.children: list[ConsoleObj] = []
        self.memory: list[ConsoleObj] = []
        self.io: list[ConsoleObj] = []  # bridges, PCI functions, OS devices: no cpuset, no index
        self.logical = 0
        self.label = ""  # an I/O object's whole text: "PCI 02:00.0 (Ethernet)", 'Net "eth0"'


def hwloc_size(n: int) -> str:
    """A size as lstopo 2.x prints it outside verbose mode: rounded, 1024-based, KB below 10 MiB,
    MB below 10 GiB, GB below 10 TiB, else TB."""
    for limit, shift, unit in ((10 << 20, 10, "KB"), (10 << 30, 20, "MB"), (10 << 40, 30, "GB")):
        if n < limit:
            return f"{((n >> (shift - 1)) + 1) >> 1}{unit}"
    return f"{((n >> 39) + 1) >> 1}TB"


def _console_objects(t: Topology) -> tuple[list[ConsoleObj], dict[int, ConsoleObj]]:
    """The CPU-side objects, and the Group holding each NUMA node the model grouped."""
    objs = [ConsoleObj("Package", p.os_index, "", p.cpuset, _HWLOC_ORDER["Package"]) for p in t.packages]
    objs += [ConsoleObj("Die", d.os_index, "", d.cpuset, _HWLOC_ORDER["Die"]) for d in t.dies]
    group_of_node: dict[int, ConsoleObj] = {}
    for g in t.groups:
        objs.append(ConsoleObj("Group", None, "", g.cpuset, _HWLOC_ORDER["Group"]))
        group_of_node.update((n, objs[-1]) for n in g.numa_nodes)
    objs += [ConsoleObj("Group", c.os_index, "", c.cpuset, _HWLOC_ORDER["Group"], "Cluster") for c in t.clusters]
    for c in t.caches:
        order = _CACHE_ORDER.get(c.level, 6) + (c.type == "instruction")
        objs.append(ConsoleObj(c.label, None, hwloc_size(c.size), c.cpuset, order))
    objs += [ConsoleObj("Core", c.os_index, "", c.cpuset, _HWLOC_ORDER["Core"]) for c in t.cores]
    objs += [ConsoleObj("PU", pu, "", CpuSet([pu]), _HWLOC_ORDER["PU"]) for pu in t.pus]
    return objs, group_of_node


def console_tree(t: Topology) -> ConsoleObj:
    """The tree lstopo builds for `t`: objects nested by cpuset and hwloc's type order, NUMA nodes
    (behind their memory-side caches) as memory children, the I/O trees as I/O children, logical
    indices in tree order."""
    machine = ConsoleObj("Machine", None, "", t.pus, _HWLOC_ORDER["Machine"])
    objs, group_of_node = _console_objects(t)
    objs.sort(key=lambda o: (-o.cpuset.weight(), o.order, o.cpuset.first()))
    deepest: dict[int, ConsoleObj] = {}  # PU -> deepest object placed so far that covers it
    for obj in objs:
        parent = deepest.get(obj.cpuset.first(), machine) if obj.cpuset else machine
        parent.children.append(obj)
        for pu in obj.cpuset:
            deepest[pu] = obj
    placed = [machine, *objs]
    for obj in placed:
        obj.children.sort(key=lambda o: (o.cpuset.first() if o.cpuset else 1 << 30, o.order))
    # top-down, so that the first object with a node's exact CPUs is the highest one
    placed.sort(key=lambda o: (-o.cpuset.weight(), o.order))
    for node in t.numa_nodes:
        top = ConsoleObj("NUMANode", node.os_index, hwloc_size(node.local_memory) if node.local_memory else "",
                         node.locality, _HWLOC_ORDER["NUMANode"], node.subtype)
        for cache in t.memory_side_caches:
            if node.os_index in cache.numa_nodes:
                wrapper = ConsoleObj("MemCache", None, hwloc_size(cache.size), node.locality,
                                     _HWLOC_ORDER["MemCache"])
                wrapper.memory.append(top)
                top = wrapper
        _memory_parent(placed, machine, node.locality, group_of_node.get(node.os_index)).memory.append(top)
    for obj, local_cpus in _io_trees(t):
        _io_parent(placed, machine, local_cpus).io.append(obj)
    _console_number(machine)
    return machine


_OS_DEVICE_TYPES = {"block": "Block", "net": "Net", "openfabrics": "OpenFabrics", "gpu": "GPU",
                    "coproc": "CoProc", "dma": "DMA"}
# hwloc_pci_class_string: a class's name by its 16 bits, else by its base class
_PCI_CLASSES = {
    "0001": "VGA", "0100": "SCSI", "0101": "IDE", "0102": "Floppy", "0103": "IPI", "0104": "RAID", "0105": "ATA",
    "0106": "SATA", "0107": "SAS", "0108": "NVMExp", "0200": "Ethernet", "0201": "TokenRing", "0202": "FDDI",
    "0203": "ATM", "0204": "ISDN", "0205": "WorldFip", "0206": "PICMG", "0207": "InfiniBand", "0208": "Fabric",
    "0300": "VGA", "0301": "XGA", "0302": "3D", "0400": "MultimediaVideo", "0401": "MultimediaAudio",
    "0402": "Telephony", "0403": "AudioDevice", "0500": "RAM", "0501": "Flash", "0502": "CXLMem",
    "0600": "HostBridge", "0601": "ISABridge", "0602": "EISABridge", "0603": "MicroChannelBridge",
    "0604": "PCIBridge", "0605": "PCMCIABridge", "0606": "NubusBridge", "0607": "CardBusBridge",
    "0608": "RACEwayBridge", "0609": "SemiTransparentPCIBridge", "060a": "InfiniBandPCIHostBridge",
    "0700": "Serial", "0701": "Parallel", "0702": "MultiportSerial", "0703": "Model", "0704": "GPIB",
    "0705": "SmartCard", "0800": "PIC", "0801": "DMA", "0802": "Timer", "0803": "RTC", "0804": "PCIHotPlug",
    "0805": "SDHost", "0806": "IOMMU", "0900": "Keyboard", "0901": "DigitizerPen", "0902": "Mouse",
    "0903": "Scanern", "0904": "Gameport", "0b00": "386", "0b01": "486", "0b02": "Pentium", "0b10": "Alpha",
    "0b20": "PowerPC", "0b30": "MIPS", "0b40": "Co-Processor", "0c00": "FireWire", "0c01": "ACCESS",
    "0c02": "SSA", "0c03": "USB", "0c04": "FibreChannel", "0c05": "SMBus", "0c06": "InfiniBand",
    "0c07": "IPMI-SMIC", "0c08": "SERCOS", "0c09": "CANBUS", "0d00": "IRDA", "0d01": "ConsumerIR", "0d10": "RF",
    "0d11": "Bluetooth", "0d12": "Broadband", "0d20": "802.1a", "0d21": "802.1b", "0e00": "I2O",
}
_PCI_BASES = {
    "00": "Other", "01": "Storage", "02": "Network", "03": "Display", "04": "Multimedia", "05": "Memory",
    "06": "Bridge", "07": "Communication", "08": "SystemPeripheral", "09": "Input", "0a": "DockingStation",
    "0b": "Processor", "0c": "SerialBus", "0d": "Wireless", "0e": "Intelligent", "0f": "Satellite",
    "10": "Encryption", "11": "SignalProcessing", "12": "ProcessingAccelerator", "13": "Instrumentation",
    "40": "Co-Processor",
}


def pci_class_name(class_id: str) -> str:
    """A PCI class ("0108") as lstopo names it ("NVMExp")."""
    class_id = class_id.lower()
    return _PCI_CLASSES.get(class_id) or _PCI_BASES.get(class_id[:2], "Other")


def _io_trees(t: Topology) -> list[tuple[ConsoleObj, CpuSet]]:
    """The I/O objects of `t` as lstopo nests them (`Topology.io_view` picks which): host bridges
    with the bridges and PCI functions below them, in bus order, each function with its OS
    devices; functions without a bridge and OS devices without a function stand alone. Each tree
    comes with the CPUs it is local to."""
    domains = any(busid[:4] != "0000" for busid in (*(d.busid for d in t.pci_devices),
                                                    *(b.id for b in t.pci_bridges if not b.is_host)))
    by_parent: dict[str | None, list[tuple[str, ConsoleObj, CpuSet]]] = {}
    for dev in t.pci_devices:
        obj = ConsoleObj("PCI", None, "", CpuSet(), 16)
        obj.label = f"PCI {dev.busid if domains else dev.busid[5:]} ({pci_class_name(dev.class_id)})"
        obj.io = [_os_device(d) for d in t.os_devices if d.parent == dev.busid]
        by_parent.setdefault(dev.parent, []).append((dev.busid, obj, dev.local_cpus))
    bridges = {b.id: b for b in t.pci_bridges}
    trees: list[tuple[tuple, ConsoleObj, CpuSet]] = []
    # deepest bridges first, so that each finds everything below it already made
    for bridge in sorted(t.pci_bridges, key=lambda b: -_bridge_depth(b, bridges)):
        obj = ConsoleObj("HostBridge" if bridge.is_host else "PCIBridge", None, "", CpuSet(), 15)
        obj.label = obj.type
        obj.io = [o for _, o, _ in sorted(by_parent.pop(bridge.id, []), key=lambda entry: entry[0])]
        if bridge.is_host:
            trees.append(((bridge.domain, bridge.secondary_bus, ""), obj, bridge.local_cpus))
        else:
            by_parent.setdefault(bridge.parent, []).append((bridge.id, obj, bridge.local_cpus))
    for busid, obj, cpus in (entry for entries in by_parent.values() for entry in entries):
        trees.append(((int(busid[:busid.index(":")], 16), -1, busid), obj, cpus))  # no bridge above it
    trees.sort(key=lambda entry: entry[0])
    out = [(obj, cpus) for _, obj, cpus in trees]
    out += [(_os_device(d), d.local_cpus) for d in t.os_devices if d.parent is None]
    return out


def _bridge_depth(bridge, bridges: dict) -> int:
    depth = 0
    while bridge.parent is not None and bridge.parent in bridges and depth < len(bridges):
        bridge, depth = bridges[bridge.parent], depth + 1
    return depth


def _os_device(d) -> ConsoleObj:
    obj = ConsoleObj("OSDev", None, "", CpuSet(), 17)
    obj.label = f'{_OS_DEVICE_TYPES.get(d.type, "OS")}{f"({d.subtype})" if d.subtype else ""} "{d.name}"'
    return obj


def _io_parent(placed: list[ConsoleObj], machine: ConsoleObj, local_cpus: CpuSet) -> ConsoleObj:
    """Where hwloc attaches an I/O tree (hwloc_find_insert_io_parent_by_complete_cpuset): the
    machine when the CPUs are all of its own or none of them, else the highest object with exactly
    those CPUs, else the smallest holding them."""
    local_cpus = local_cpus & machine.cpuset
    if not local_cpus or local_cpus == machine.cpuset:
        return machine
    return _cpus_holder(placed, machine, local_cpus)


def _memory_parent(placed: list[ConsoleObj], machine: ConsoleObj, locality: CpuSet,
                   group: ConsoleObj | None) -> ConsoleObj:
    """Where hwloc attaches a memory object: the highest object below the machine with exactly
    its CPUs (the machine's only child when it has the machine's CPUs), else the smallest holding
    them; a node without CPUs goes to the Group made for it, else the machine."""
    if not locality:
        return group or machine
    return _cpus_holder(placed, machine, locality)


def _cpus_holder(placed: list[ConsoleObj], machine: ConsoleObj, cpus: CpuSet) -> ConsoleObj:
    """The first object of `placed` below the machine (not a PU) with exactly `cpus`, else the
    smallest holding them, else the machine."""
    best = machine
    for obj in placed:
        if obj.type == "PU" or obj is machine:
            continue
        if obj.cpuset == cpus:
            return obj
        if cpus <= obj.cpuset and obj.cpuset.weight() <= best.cpuset.weight():
            best = obj
    return best


def _console_walk(obj: ConsoleObj):
    yield obj
    for child in (*obj.memory, *obj.children):
        yield from _console_walk(child)


def _console_number(machine: ConsoleObj) -> None:
    """Logical indices as hwloc gives them: per type (per cache level and kind, per Group depth),
    in depth-first order; hwloc lists memory objects after an object's normal children, though
    it prints them before."""
    counters: dict[str, int] = {}

    def visit(obj: ConsoleObj, groups_above: int) -> None:
        if obj.type == "Group":
            obj.type = f"Group{groups_above}"
            groups_above += 1
        obj.logical = counters.get(obj.type, 0)
        counters[obj.type] = obj.logical + 1
        for child in (*obj.children, *obj.memory):
            visit(child, groups_above)

    visit(machine, 0)


def _console_label(obj: ConsoleObj, index: str, total_memory: int) -> str:
    """One object as lstopo's output_console_obj prints it outside verbose mode."""
    text = obj.type + (f"({obj.subtype})" if obj.subtype else "")
    if obj.type != "Machine":
        if index != "physical":
            text += f" L#{obj.logical}"
        elif obj.os_index is not None:
            text += f" P#{obj.os_index}"
    phys = f"P#{obj.os_index}" if (index == "default" and obj.os_index is not None
                                   and obj.type in ("PU", "NUMANode")) else ""
    inside = " ".join(x for x in (phys, obj.attr) if x)
    if inside:
        text += f" ({inside})"
    if obj.type == "Machine" and total_memory:
        text += f" ({hwloc_size(total_memory)} total)"
    return text


def render_console(t: Topology, index: str = "default") -> str:
    """The tree as `lstopo-no-graphics` prints it (`-p`: index="physical", `-l`: "logical"): an
    object whose parent has it as its only child, with the same CPUs and no memory child, is
    printed on its parent's line after " + ". The I/O objects shown are those of `t`: `t.io_view()` picks them as
    lstopo's flags do."""
    if index not in INDEX_MODES:
        raise ValueError(f"index must be one of {INDEX_MODES}, not {index!r}")
    total = sum(n.local_memory for n in t.numa_nodes)
    lines: list[str] = []

    def emit(obj: ConsoleObj, parent: ConsoleObj | None, depth: int) -> None:
        if obj.label:
            lines.append("  " * depth + obj.label)
            depth += 1
        elif (parent is not None and len(parent.children) == 1 and not parent.memory and not parent.io
                and obj.cpuset == parent.cpuset and obj.type != "NUMANode"):
            lines[-1] += " + " + _console_label(obj, index, total)
        else:
            lines.append("  " * depth + _console_label(obj, index, total))
            depth += 1
        for child in (*obj.memory, *obj.children, *obj.io):
            emit(child, obj, depth)

    emit(console_tree(t), None, 0)
    return "\n".join(printable(line) for line in lines)
