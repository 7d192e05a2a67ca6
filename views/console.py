"""`topo show` as text, from the one tree of `topo.tree`: lstopo's console form (`render_console`, with lstopo's
options) and topo's long form (`render_text`: every object with its P# and L#, devices, links, a summary)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from topo.cpuset import CpuSet
from topo.model import Topology
from topo.numa_mode import numa_mode
from topo.text import printable
from topo.tree import IO_TYPES, TYPES, Obj, bitmap, build, levels, merge_levels, restrict, type_name, walk

# hwloc_pci_class_string: a class's name by its 16 bits, else by its base class
_PCI_CLASSES = dict(x.split("=") for x in (
    "0001=VGA 0100=SCSI 0101=IDE 0102=Floppy 0103=IPI 0104=RAID 0105=ATA 0106=SATA 0107=SAS 0108=NVMExp "
    "0200=Ethernet 0201=TokenRing 0202=FDDI 0203=ATM 0204=ISDN 0205=WorldFip 0206=PICMG 0207=InfiniBand "
    "0208=Fabric 0300=VGA 0301=XGA 0302=3D 0400=MultimediaVideo 0401=MultimediaAudio 0402=Telephony "
    "0403=AudioDevice 0500=RAM 0501=Flash 0502=CXLMem 0600=HostBridge 0601=ISABridge 0602=EISABridge "
    "0603=MicroChannelBridge 0604=PCIBridge 0605=PCMCIABridge 0606=NubusBridge 0607=CardBusBridge "
    "0608=RACEwayBridge 0609=SemiTransparentPCIBridge 060a=InfiniBandPCIHostBridge 0700=Serial "
    "0701=Parallel 0702=MultiportSerial 0703=Model 0704=GPIB 0705=SmartCard 0800=PIC 0801=DMA 0802=Timer "
    "0803=RTC 0804=PCIHotPlug 0805=SDHost 0806=IOMMU 0900=Keyboard 0901=DigitizerPen 0902=Mouse "
    "0903=Scanern 0904=Gameport 0b00=386 0b01=486 0b02=Pentium 0b10=Alpha 0b20=PowerPC 0b30=MIPS "
    "0b40=Co-Processor 0c00=FireWire 0c01=ACCESS 0c02=SSA 0c03=USB 0c04=FibreChannel 0c05=SMBus "
    "0c06=InfiniBand 0c07=IPMI-SMIC 0c08=SERCOS 0c09=CANBUS 0d00=IRDA 0d01=ConsumerIR 0d10=RF "
    "0d11=Bluetooth 0d12=Broadband 0d20=802.1a 0d21=802.1b 0e00=I2O 00=Other 01=Storage 02=Network "
    "03=Display 04=Multimedia 05=Memory 06=Bridge 07=Communication 08=SystemPeripheral 09=Input "
    "0a=DockingStation 0b=Processor 0c=SerialBus 0d=Wireless 0e=Intelligent 0f=Satellite 10=Encryption "
    "11=SignalProcessing 12=ProcessingAccelerator 13=Instrumentation 40=Co-Processor").split())
# topo's info keys that hwloc has under another name (lstopo -v prints them on the Machine)
_INFO_NAMES = {"architecture": "Architecture", "hostname": "HostName", "linux_cgroup": "LinuxCgroup"}


def pci_class_name(class_id: str) -> str:
    """A PCI class ("0108") as lstopo names it ("NVMExp")."""
    class_id = class_id.lower()
    return _PCI_CLASSES.get(class_id) or _PCI_CLASSES.get(class_id[:2], "Other")


def hwloc_size(n: int, verbose: bool = False) -> str:
    """A size as lstopo 2.x prints it: rounded, KB below 10 MiB, MB below 10 GiB, GB below 10 TiB, else TB (-v: KB)."""
    for limit, shift, unit in ((10 << 20, 10, "KB"), (10 << 30, 20, "MB"), (10 << 40, 30, "GB")):
        if n < limit or verbose:
            return f"{((n >> (shift - 1)) + 1) >> 1}{unit}"
    return f"{((n >> 39) + 1) >> 1}TB"


@dataclass(frozen=True)
class Options:
    """lstopo's console options, by its option names."""

    index: str = "default"  # -p: "physical", -l: "logical"
    verbose: int = 1  # lstopo's verbose mode: -s lowers it to 0 (the summary), -v raises it
    only: tuple | None = None  # --only TYPE, as topo.tree.parse_type reads it
    cpuset: int = 0  # -c: 1, -C: 2
    taskset: bool = False
    no_smt: bool = False
    drop: frozenset = frozenset()  # types lstopo's filters leave out (--no-caches, --filter T:none)
    structure: frozenset = frozenset()  # types kept only where they bring structure (--merge)
    restrict: CpuSet | None = None
    distances: bool = False  # --distances: the matrices only
    collapse: bool = True  # identical PCI functions on one line; --no-collapse: False
    cpukinds: bool = False  # --cpukinds: the CPU kinds only


def render_console(t: Topology, options: Options = Options()) -> str:
    """The machine as `lstopo-no-graphics` prints it with `options`: an only child with its parent's CPUs, and
    no memory or I/O child beside it, on its parent's line after " + " (not with -v, -c or -C). The I/O objects
    shown are those of `t`: `t.io_view()` picks them as lstopo's flags do."""
    if options.index not in ("default", "physical", "logical"):  # a library caller's typo: not silently default
        raise ValueError(f"index must be default, physical or logical, not {options.index!r}")
    machine = build(t, options.drop)
    if options.restrict is not None:
        restrict(machine, options.restrict)
    if options.structure:
        merge_levels(machine, options.structure)
    verbose, domains = options.verbose, pci_domains(t)
    if options.distances or options.cpukinds:  # these alone
        lines = _distances(t, machine, options.index) if options.distances else _cpukinds(t)
    elif options.only is not None:
        lines = [f"Only showing {options.only[0]} objects"] if verbose > 1 else []
        lines += [_line(o, t, options, domains) for o in walk(machine) if o.type == options.only[0]]
    else:
        lines = []
        if verbose >= 1:
            _tree_lines(lines, machine, None, 0, t, options, domains, _collapsed(machine) if options.collapse else {})
        lines += _summary(machine) if verbose != 1 else []
        if verbose > 1:
            lines += _distances(t, machine, options.index) + _cpukinds(t)
            for cpus, what in ((t.complete_pus - t.pus, "not represented in topology"),
                               (t.pus - t.allowed_pus, "represented but not allowed")):
                if cpus:
                    lines.append(f"{cpus.weight()} processors {what}: {bitmap(cpus)}")
            if not t.is_this_system:
                lines.append("Topology not from this system")
    return "\n".join(printable(x) for x in lines)


def _tree_lines(lines: list[str], obj: Obj, parent: Obj | None, depth: int, t: Topology, options: Options,
                domains: bool, collapsed: dict[int, tuple[int, Obj] | None]) -> None:
    if id(obj) in collapsed and collapsed[id(obj)] is None:
        return  # shown in the line of the first function of its run
    if (parent is not None and options.verbose <= 1 and not options.cpuset and len(parent.children) == 1
            and not parent.memory and not parent.io and obj.type not in IO_TYPES and obj.cpuset == parent.cpuset):
        lines[-1] += " + " + _line(obj, t, options, domains)
    elif id(obj) in collapsed:
        lines.append("  " * depth + _collapsed_line(obj, *collapsed[id(obj)], t, options, domains))
    else:
        lines.append("  " * depth + _line(obj, t, options, domains))
        depth += 1
    for child in (*obj.memory, *obj.children, *obj.io):
        if child.type != "PU" or not options.no_smt:
            _tree_lines(lines, child, obj, depth, t, options, domains, collapsed)


def _collapsed(machine: Obj) -> dict[int, tuple[int, Obj] | None]:
    """lstopo_add_collapse_attributes: in logical order, a PCI function without I/O children starts a run, the next
    ones without, with its parent and vendor, device and subsystem ids join it (one with I/O children between leaves
    it open). A run of n > 1 maps its first function to (n, its last function), the others to None."""
    functions = [o for o in walk(machine) if o.type == "PCIDev"]
    out: dict[int, tuple[int, Obj] | None] = {}
    first, count = 0, 0  # the run's first function (an index in functions) and its length
    for i, obj in enumerate(functions + [None]):
        head = functions[first] if count else None
        if obj is not None and head is not None and not obj.io and obj.parent is head.parent and (
                (obj.model.id, obj.model.subsystem_id) == (head.model.id, head.model.subsystem_id)):
            out[id(obj)] = None
            count += 1
            continue
        if count > 1:
            out[id(head)] = (count, functions[first + count - 1])
            count = 0
        if obj is not None and not obj.io:
            first, count = i, 1
    return out


def _collapsed_line(obj: Obj, count: int, last: Obj, t: Topology, options: Options, domains: bool) -> str:
    """A run's line: `2 x { PCI 00:04.0-05.0 (Other) }` (one device's functions: `00:04.0-3`; verbose: `L#4-5`)."""
    text = _line(obj, t, options, domains)
    busid = obj.model.busid if domains else obj.model.busid[5:]
    device, last_device = (f.model.busid.rsplit(":", 1)[1] for f in (obj, last))  # "04.0"
    shown = f"{busid}-{last_device[-1] if last_device[:2] == device[:2] else last_device}"
    if options.verbose > 1:
        text = text.replace(f" L#{obj.logical}", f" L#{obj.logical}-{obj.logical + count - 1}", 1)
        return f"{count} x {{ {text.replace(f'busid={obj.model.busid}', f'busid={shown}', 1)} }}"
    return f"{count} x {{ {text.replace(f' {busid} (', f' {shown} (', 1)} }}"


def _line(obj: Obj, t: Topology, options: Options, domains: bool) -> str:
    """One object as lstopo's output_console_obj prints it."""
    index, verbose = options.index, options.verbose > 1
    text = "" if options.cpuset == 2 else label(obj, t, index, verbose, domains)
    if options.cpuset and obj.type not in IO_TYPES:
        text += (" cpuset=" if options.cpuset == 1 else "") + (
            f"0x{obj.cpuset.mask:x}" if options.taskset else bitmap(obj.cpuset))
    if verbose and obj.type in ("PU", "NUMANode"):
        allowed = t.allowed_pus if obj.type == "PU" else t.allowed_numa_nodes
        text += "" if obj.os_index in allowed else " (disallowed)"
    return text


def pci_domains(t: Topology) -> bool:
    """Whether PCI bus ids are printed with their domain: when one is not 0000, as lstopo does."""
    return any(d.busid[:4] != "0000" for d in t.pci_devices) or any(
        b.id[:4] != "0000" for b in t.pci_bridges if not b.is_host)


def label(obj: Obj, t: Topology, index: str = "default", verbose: bool = False, domains: bool = False) -> str:
    """An object's text: type, index and attributes (hwloc_obj_attr_snprintf)."""
    m = obj.model
    text = type_name(obj, verbose) + (f"({obj.subtype})" if obj.subtype else "")
    if obj.type != "Machine" and (verbose or obj.type not in IO_TYPES):
        if index != "physical":
            text += f" L#{obj.logical}"
        elif obj.os_index is not None:
            text += f" P#{obj.os_index}"
    phys = f"P#{obj.os_index}" if (index == "default" and obj.os_index is not None
                                   and (verbose or obj.type in ("PU", "NUMANode"))) else ""
    attrs = []
    if obj.type == "PCIDev" and not verbose:
        text += f" {m.busid if domains else m.busid[5:]} ({pci_class_name(m.class_id)})"
    if verbose and obj.type in ("PCIDev", "Bridge"):
        if obj.type == "PCIDev" or not m.is_host:
            busid, cls = (m.busid, m.class_id) if obj.type == "PCIDev" else (m.id, m.class_id or "0604")
            attrs.append(f"busid={busid} id={m.vendor_id or '0000'}:{m.device_id or '0000'} "
                         f"class={cls}({pci_class_name(cls)})")
        if obj.type == "Bridge":
            attrs.append(f"buses={m.domain:04x}:[{m.secondary_bus:02x}-{m.subordinate_bus:02x}]")
    elif verbose:
        total = sum(o.model.local_memory for o in walk(obj) if o.type == "NUMANode")
        if obj.type == "NUMANode" and m.local_memory:
            attrs.append(f"local={hwloc_size(m.local_memory, True)} total={hwloc_size(total, True)}")
        elif total:
            attrs.append(f"total={hwloc_size(total, True)}")
    elif obj.type == "NUMANode" and m.local_memory:
        attrs.append(hwloc_size(m.local_memory))
    if obj.type.endswith("Cache"):
        size = hwloc_size(m.size, verbose)
        attrs.append(f"size={size} linesize={getattr(m, 'line_size', 0) or 0}"
                     + (f" ways={m.ways}" if getattr(m, "ways", None) else "") if verbose else size)
    if verbose:  # hwloc's infos: the machine's facts under hwloc's names, a package's CPU model, a GPU's
        infos = obj.infos
        if obj.type == "Machine":
            infos = [(_INFO_NAMES[k], v) for k, v in t.info.items() if k in _INFO_NAMES and v and v != "/"]
        elif obj.type == "Package" and m.model:
            infos = (("CPUModel", m.model),)
        attrs += [f'{k}="{v}"' if " " in v else f"{k}={v}" for k, v in infos]
    inside = " ".join(x for x in (phys, *attrs) if x)
    if inside:
        text += f" ({inside})"
    if not verbose and obj.type == "Machine":
        total = sum(n.local_memory for n in t.numa_nodes)
        text += f" ({hwloc_size(total)} total)" if total else ""
    if obj.type == "OSDev":
        text += f' "{m.name}"'
    return text


def _summary(machine: Obj) -> list[str]:
    """lstopo's depth table (hwloc_lstopo_show_summary)."""
    normal = levels(machine)
    width = max(len(normal) - 1 + len("depth xyz:  "), len("Special depth -x:  "))
    out = []
    for depth, level in enumerate(normal):
        head = f"{' ' * depth}depth {depth}:"
        out.append(f"{head:<{width}}{len(level)} {type_name(level[0], True)} (type #{TYPES[level[0].type][1]})")
    counts = Counter(o.type for o in walk(machine))
    for depth, kind in ((-3, "NUMANode"), (-8, "MemCache"), (-4, "Bridge"), (-5, "PCIDev"), (-6, "OSDev")):
        if counts[kind]:
            out.append(f"{f'Special depth {depth}:':<{width}}{counts[kind]} {kind} (type #{TYPES[kind][1]})")
    return out


def _cpukinds(t: Topology) -> list[str]:
    """lstopo's output_cpukinds: each kind's efficiency (-1: unranked), cpuset and infos."""
    lines = []
    for i, kind in enumerate(t.cpukinds):
        efficiency = -1 if kind.efficiency is None else kind.efficiency
        lines.append(f"CPU kind #{i} efficiency {efficiency} cpuset {bitmap(kind.cpuset)}")
        lines += [f"  {name} = {value}" for name, value in kind.infos.items()]
    return lines


def _distances(t: Topology, machine: Obj, index: str) -> list[str]:
    """hwloc_utils_print_distance_matrix over the NUMA nodes with a distance to each other one, by OS index."""
    objs = sorted((o for o in walk(machine) if o.type == "NUMANode" and o.model.distances), key=lambda o: o.os_index)
    if len(objs) < 2 or not all(all(p.os_index in o.model.distances for p in objs) for o in objs):
        return []
    physical = index == "physical"
    names = [str(o.os_index if physical else o.logical) for o in objs]
    rows = [[str(o.model.distances[p.os_index]) for p in objs] for o in objs]
    width = max(5, *(len(x) for x in names), *(len(x) for row in rows for x in row))
    out = [f"Relative latency matrix (name NUMALatency kind 5) between {len(objs)} NUMANodes (depth -3) "
           f"by {'physical' if physical else 'logical'} indexes:",
           " " + "index".rjust(width) + "".join(" " + x.rjust(width) for x in names)]
    out += [" " + name.rjust(width) + "".join(" " + x.rjust(width) for x in row) for name, row in zip(names, rows)]
    return out


# ---- topo's long form --------------------------------------------------------------------------


def format_size(n: int) -> str:
    """Bytes as the long form shows them: 512B, 48KiB, 1.5MiB, 768GiB."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            value = n / (1 << shift)
            return (f"{value:.0f}" if value >= 100 else f"{value:.1f}".removesuffix(".0")) + unit
    return f"{n}B"


def long_detail(obj: Obj, t: Topology) -> str:
    """What the long form and pictures say after a type: '(P#0 "EPYC")', '(32MiB)', '(P#1 local=16GiB memory-only)'."""
    m = obj.model
    if obj.type == "Machine":
        details = [t.info.get("architecture", ""), t.info.get("hostname", ""),
                   f"cgroup={t.info['linux_cgroup']}" if t.info.get("linux_cgroup", "/") != "/" else ""]
    else:
        details = [f"P#{obj.os_index}" if obj.os_index is not None else ""]
    if obj.type == "Package" and m.model:
        details.append(f'"{m.model}"')
    elif obj.type.endswith("Cache"):
        details.append(format_size(m.size))
    elif obj.type == "NUMANode":
        details += [f"local={format_size(m.local_memory)}" if m.local_memory else "",
                    "memory-only" if m.memory_only else "", m.subtype or ""]
    inside = " ".join(x for x in details if x)
    return f"({inside})" if inside else ""


def render_text(t: Topology) -> str:
    """topo's long form: the tree (no I/O), each NUMA node followed by the devices local to it, the device link
    matrix, how nodes cut packages (SNC/NPS), the summary and how each probe fared."""
    machine = build(t, ("Bridge", "PCIDev", "OSDev"))
    lines: list[str] = []
    devices: dict[int | None, list[str]] = {}
    for dev in t.devices:
        details = " ".join(x for x in (dev.name, dev.busid) if x)
        entry = f"{dev.kind.upper()} {dev.index}" + (f" ({details})" if details else "")
        devices.setdefault(dev.numa_node, []).append(entry)
    shown = {o.os_index for o in walk(machine) if o.type == "NUMANode"}

    def emit(obj: Obj, depth: int) -> None:  # 'Package L#0 (P#0 "EPYC")', 'L3 L#0 (32MiB)'
        name = type_name(obj) + (f"({obj.subtype})" if obj.subtype and obj.type == "Group" else "")
        index = "" if obj.type == "Machine" else f"L#{obj.logical}"
        lines.append("  " * depth + " ".join(x for x in (name, index, long_detail(obj, t)) if x))
        if obj.type == "NUMANode":
            lines.extend("  " * (depth + 1) + d for d in devices.get(obj.os_index, ()))
        for child in obj.memory:
            emit(child, depth + 1)
        if obj.type == "Machine":
            lines.extend("  " + d for n, ds in devices.items() if n not in shown for d in ds)
        for child in obj.children:
            emit(child, depth + 1)

    emit(machine, 0)
    if t.links:  # as `nvidia-smi topo -m` prints it
        width = max([len(n) for n in t.links] + [4]) + 1
        lines += ["", " " * width + "".join(f"{n:<{width}}" for n in t.links)]
        lines += [(f"{a:<{width}}" + "".join(f"{x:<{width}}" for x in row)).rstrip() for a, row in link_rows(t)]
    mode = numa_mode(t)  # how nodes cut packages, if they do
    lines += ["", mode, t.summary()] if mode else ["", t.summary()]
    if t.probes:
        lines.append("probes: " + ", ".join(f"{k}: {v}" for k, v in t.probes.items()))
    return "\n".join(printable(line) for line in lines)


def link_rows(t: Topology) -> list[tuple[str, list[str]]]:
    """The device link matrix: each device with its link to every device ("X" to itself)."""
    return [(a, [t.links[a].get(b, "X" if a == b else "-") for b in t.links]) for a in t.links]
