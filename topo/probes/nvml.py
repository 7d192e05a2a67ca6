"""NVIDIA GPUs through NVML (`pynvml`, from the optional `nvidia-ml-py`: `topo-affinity[nvidia]`),
imported only when the probe runs. Failures degrade as gpustat's: no library or driver gives a
reason and no GPUs; an error on one GPU drops it, named; an optional field that errors is None.
Each GPU's CPU-side NUMA node is its NODE-scope memory affinity (nvidia-smi's "NUMA Affinity";
nvmlDeviceGetNumaNodeId is the GPU's own memory node on C2C machines).
"""
from __future__ import annotations

import itertools
import json
import os
import re
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from topo.archive import TOOLS_DIR
from topo.cpuset import CpuSet
from topo.errors import ParseError
from topo.fsroot import FsRoot

if TYPE_CHECKING:
    from topo.model import Topology

STORED = f"/{TOOLS_DIR}/nvml.json"  # what NVML said on the machine `topo capture` ran on

# nvmlGpuTopologyLevel_t -> nvidia-smi topo -m's legend. INTERNAL (two GPUs on one board, K80 /
# M60) goes through the board's own PCIe switch, which nvidia-smi shows as PIX.
TOPOLOGY_LEVELS = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}

_SCOPE_NODE = 0  # NVML_AFFINITY_SCOPE_NODE
_SCOPE_SOCKET = 1  # NVML_AFFINITY_SCOPE_SOCKET
_FEATURE_ENABLED = 1  # NVML_FEATURE_ENABLED, also NVML_DEVICE_MIG_ENABLE
_MAX_NVLINKS = 18  # NVML_NVLINK_MAX_LINKS of drivers before Blackwell; newer modules say more


@dataclass(frozen=True)
class NvmlGpu:
    index: int  # PCI bus order, as nvidia-smi numbers
    busid: str  # sysfs spelling, "0000:18:00.0"
    uuid: str | None
    name: str | None
    memory: int | None  # bytes
    numa_node: int | None  # CPU-side node (memory affinity), None when NVML does not say
    node_cpus: CpuSet | None  # NODE- and SOCKET-scope CPU affinity, as gpu_affinity reads them
    socket_cpus: CpuSet | None
    nvlinks: tuple[tuple[str, int], ...] = ()  # (remote PCI bus id, active links), by remote: nvidia-smi's NV#
    mig_uuids: tuple[str, ...] = ()


@dataclass(frozen=True)
class NvmlReport:
    status: str  # for Topology.probes["nvml"]
    gpus: tuple[NvmlGpu, ...] = ()
    pcie_levels: dict[tuple[int, int], str] = field(default_factory=dict)  # (index, index) -> PIX..SYS


# NVML writes "00000000:3B:00.0", sysfs and nvidia-smi "0000:3b:00.0", lspci "3b:00.0"
_BUS_ID = re.compile(r"\A(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])\Z")


def pci_bus_id(text: str, max_domain: int = 0xFFFFFFFF) -> str | None:
    """`text` as sysfs spells a PCI bus id ("0000:3b:00.0"), in any of the forms above; None when it
    is not one or its domain is past `max_domain`."""
    m = _BUS_ID.match(text.strip())
    if not m or int(m.group(1) or "0", 16) > max_domain:
        return None
    return f"{int(m.group(1) or '0', 16):04x}:{int(m.group(2), 16):02x}:{int(m.group(3), 16):02x}.{m.group(4)}"


def normalize_busid(busid: str | bytes) -> str:
    """NVML's bus id as sysfs spells it (domains past 0xffff kept); text that is none, lower case."""
    text = (busid.decode("ascii", "replace") if isinstance(busid, bytes) else busid).strip().rstrip("\x00")
    return pci_bus_id(text) or text.lower()


def words_to_cpuset(words) -> CpuSet | None:
    """An NVML affinity array (unsigned long words, word 0 = CPUs 0-63) as a CpuSet; None for None."""
    if words is None:
        return None
    return CpuSet.from_mask(sum((int(word) & 0xFFFFFFFFFFFFFFFF) << (64 * i) for i, word in enumerate(words)))


def affinity_words(cpu_count: int) -> int:
    """How many 64-bit words an affinity query needs to cover `cpu_count` CPU ids."""
    return max(1, -(-cpu_count // 64))


def nvlink_label(a: NvmlGpu, b: NvmlGpu, gpu_busids: set[str]) -> str | None:
    """`NV#` between two GPUs: direct links between them, else the links both have into an NVSwitch
    fabric (every remote that is not a GPU is a switch), as nvidia-smi shows NV12 / NV18 for every
    pair on DGX A100 / H100 baseboards."""
    direct = dict(a.nvlinks).get(b.busid, 0)
    if direct:
        return f"NV{direct}"
    a_switch = sum(n for remote, n in a.nvlinks if remote not in gpu_busids)
    b_switch = sum(n for remote, n in b.nvlinks if remote not in gpu_busids)
    if a_switch and b_switch:
        return f"NV{min(a_switch, b_switch)}"
    return None


def probe_for(topology: Topology) -> NvmlReport:
    """probe_nvml with affinity words for every CPU id of `topology` (gpu_affinity: os.cpu_count())."""
    cpu_count = topology.complete_pus.last() + 1
    if topology.is_this_system:
        cpu_count = max(cpu_count, os.cpu_count() or 1)
    return probe_nvml(cpu_count)


def probe_nvml(cpu_count: int) -> NvmlReport:
    """Ask NVML about every GPU; never raises for a missing library, driver or GPU."""
    try:
        import pynvml as nvml
    except ImportError:
        return NvmlReport("unavailable: pynvml is not installed (pip install 'topo-affinity[nvidia]')")
    error = getattr(nvml, "NVMLError", Exception)
    try:
        nvml.nvmlInit()
    except error as exc:
        return NvmlReport(f"unavailable: {_reason(exc)}")
    except OSError as exc:  # a broken libnvidia-ml.so can fail to load below pynvml's own checks
        return NvmlReport(f"unavailable: {exc}")
    try:
        return _query(nvml, error, cpu_count)
    finally:
        try:
            nvml.nvmlShutdown()
        except error:
            pass


def _query(nvml, error, cpu_count: int) -> NvmlReport:
    try:
        count = nvml.nvmlDeviceGetCount()
    except error as exc:
        return NvmlReport(f"error: nvmlDeviceGetCount: {_reason(exc)}")

    def optional(fn, *args):
        try:
            return fn(*args)
        except (error, AttributeError):  # AttributeError: a pynvml too old for the call
            return None

    words = affinity_words(cpu_count)
    gpus: list[NvmlGpu] = []
    handles, problems = {}, []
    for index in range(count):
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            busid = normalize_busid(nvml.nvmlDeviceGetPciInfo(handle).busId)
        except error as exc:
            problems.append(f"GPU {index}: {_reason(exc)}")
            continue
        memory = optional(nvml.nvmlDeviceGetMemoryInfo, handle)
        # drivers before the scoped call (R450) know only the NODE-like default
        node_words = (optional(nvml.nvmlDeviceGetCpuAffinityWithinScope, handle, words, _SCOPE_NODE)
                      or optional(nvml.nvmlDeviceGetCpuAffinity, handle, words))
        socket_words = optional(nvml.nvmlDeviceGetCpuAffinityWithinScope, handle, words, _SCOPE_SOCKET)
        # one word of nodeset covers 64 NUMA nodes
        nodes = words_to_cpuset(optional(nvml.nvmlDeviceGetMemoryAffinity, handle, 1, _SCOPE_NODE))
        gpus.append(NvmlGpu(
            index, busid, uuid=_text(optional(nvml.nvmlDeviceGetUUID, handle)),
            name=_text(optional(nvml.nvmlDeviceGetName, handle)),
            memory=int(memory.total) if memory is not None else None,
            numa_node=nodes.first() if nodes is not None and nodes.weight() == 1 else None,
            node_cpus=words_to_cpuset(node_words), socket_cpus=words_to_cpuset(socket_words),
            nvlinks=_nvlinks(nvml, error, handle), mig_uuids=_mig_uuids(nvml, optional, handle)))
        handles[index] = handle
    levels: dict[tuple[int, int], str] = {}
    for a, b in itertools.combinations(sorted(handles), 2):
        label = TOPOLOGY_LEVELS.get(optional(nvml.nvmlDeviceGetTopologyCommonAncestor, handles[a], handles[b]))
        if label:
            levels[(a, b)] = levels[(b, a)] = label
    status = f"ok ({len(gpus)} GPU{'' if len(gpus) == 1 else 's'})"
    if problems:
        status += "; skipped " + "; ".join(problems)
    return NvmlReport(status, tuple(gpus), levels)


def _nvlinks(nvml, error, handle) -> tuple[tuple[str, int], ...]:
    remote_pci = getattr(nvml, "nvmlDeviceGetNvLinkRemotePciInfo_v2", None) or getattr(
        nvml, "nvmlDeviceGetNvLinkRemotePciInfo", None)
    if remote_pci is None:
        return ()
    counts: dict[str, int] = {}
    for link in range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", _MAX_NVLINKS)):
        try:
            if nvml.nvmlDeviceGetNvLinkState(handle, link) != _FEATURE_ENABLED:
                continue
            remote = normalize_busid(remote_pci(handle, link).busId)
        except error:
            # NotSupported (PCIe-only GPU) or InvalidArgument (past this GPU's last link): no
            # further link can answer either.
            break
        counts[remote] = counts.get(remote, 0) + 1
    return tuple(sorted(counts.items()))


def _mig_uuids(nvml, optional, handle) -> tuple[str, ...]:
    mode = optional(nvml.nvmlDeviceGetMigMode, handle)  # (current, pending)
    if mode is None or mode[0] != _FEATURE_ENABLED:
        return ()
    slots = range(optional(nvml.nvmlDeviceGetMaxMigDeviceCount, handle) or 0)
    migs = [optional(nvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, slot) for slot in slots]  # None: empty
    return tuple(filter(None, (_text(optional(nvml.nvmlDeviceGetUUID, mig)) for mig in migs if mig is not None)))


def _text(value) -> str | None:
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return None if value is None else value.strip() or None


def _reason(exc: BaseException) -> str:
    return str(exc).strip() or type(exc).__name__


def report_json(report: NvmlReport) -> str:
    """The report as JSON, CPU sets as cpulists and the link levels as [a, b, level] rows."""
    levels = [[a, b, label] for (a, b), label in sorted(report.pcie_levels.items())]
    return json.dumps({"status": report.status, "gpus": [asdict(g) for g in report.gpus], "pcie_levels": levels},
                      indent=1, default=CpuSet.to_list) + "\n"


def stored_report(fs: FsRoot) -> NvmlReport | None:
    """The report a capture stored below `fs` (None when it stored none), its status saying so;
    a malformed one is an "error:" status naming the file, with no GPUs."""
    text = fs.read(STORED)
    if text is None:
        return None
    try:
        data = json.loads(text)
        gpus = tuple(_stored_gpu(g) for g in _checked(data["gpus"], list))
        levels = {}
        for row in _checked(data["pcie_levels"], list):
            a, b, label = _checked(row, list)
            levels[(_checked(a, int), _checked(b, int))] = _checked(label, str)
        status = _checked(data["status"], str)
    except (ValueError, TypeError, KeyError, ParseError, RecursionError) as exc:
        return NvmlReport(f"error: {fs.shown(STORED)}: {exc or type(exc).__name__}"[:300])
    return NvmlReport(f"{status}, as stored by topo capture", gpus, levels)


def _stored_gpu(g: dict) -> NvmlGpu:
    def cpus(key):
        text = _checked(g[key], str, optional=True)
        return None if text is None else CpuSet.parse(text)

    return NvmlGpu(
        index=_checked(g["index"], int), busid=normalize_busid(_checked(g["busid"], str)),
        uuid=_checked(g["uuid"], str, optional=True), name=_checked(g["name"], str, optional=True),
        memory=_checked(g["memory"], int, optional=True), numa_node=_checked(g["numa_node"], int, optional=True),
        node_cpus=cpus("node_cpus"), socket_cpus=cpus("socket_cpus"),
        nvlinks=tuple((normalize_busid(_checked(r, str)), _checked(n, int))
                      for r, n in map(tuple, _checked(g["nvlinks"], list))),
        mig_uuids=tuple(_checked(u, str) for u in _checked(g["mig_uuids"], list)))


def _checked(value, kind: type, optional: bool = False):
    """`value` when it is a `kind` (an int from 0 to 2**64, a printable string of at most 256
    characters: it is shown on terminals)."""
    if value is None and optional:
        return value
    if (not isinstance(value, kind) or isinstance(value, bool) or kind is int and not 0 <= value < 1 << 64
            or kind is str and (len(value) > 256 or not value.isprintable())):
        raise ValueError(f"{str(value)[:40]!r} is not {kind.__name__}")
    return value
