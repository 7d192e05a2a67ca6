"""`topo ps`: where running processes really are: per process its allowed CPUs, memory policy and resident pages per
node (topo.binding.observe), the CPU each thread last ran on, the accelerators it has open (device files in
/proc/PID/fd, or NVML's lists) and their node, and a verdict. Reads are bounded and below one root."""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import asdict, dataclass, field, replace

import topo
from topo.binding import BASE_PAGE_KB, observe, read_bounded
from topo.cpuset import CpuSet
from topo.probes.nvml import normalize_busid
from topo.text import printable

SCHEMA = "topo.ps/1"
MAX_THREADS = 1 << 15  # threads read per process; more are counted, not read
MAX_FDS = 1 << 16  # open files looked at per process
SMALL_LIMIT = 64 << 10  # a stat line, a driver's information file
# A few percent of a process's pages sit on another node for reasons no binding controls (shared
# libraries' page cache, first read by another process); a tenth is a binding problem.
REMOTE_WARN = 0.10

# device file -> (family, kind); the family says where its bus id is found
_DEVICE_FILES = (
    (re.compile(r"/dev/nvidia([0-9]{1,4})"), "nvidia", "gpu"),
    (re.compile(r"/dev/davinci([0-9]{1,4})"), "davinci", "npu"),
    (re.compile(r"/dev/dri/renderD([0-9]{1,4})"), "drm", "gpu"),
    (re.compile(r"/dev/accel/accel([0-9]{1,4})"), "accel", "accel"),  # Gaudi (habanalabs) and other accel drivers
    (re.compile(r"/dev/hl([0-9]{1,4})"), "habanalabs", "accel"),  # Gaudi before the driver moved to accel
    (re.compile(r"/dev/kfd()"), "kfd", "gpu"),  # ROCm's one file for all AMD GPUs: the render nodes say which
)


@dataclass(frozen=True)
class Thread:
    tid: int
    name: str
    state: str  # R running or runnable, S sleeping, D waiting on I/O, ...
    cpu: int  # the CPU it last ran on


@dataclass(frozen=True)
class DeviceUse:
    path: str  # the device file, or "nvml" when only NVML's process list named it
    kind: str  # "gpu", "npu", "accel", ...
    index: int | None  # the device's index as its runtime numbers it (NVML index, npu id, Gaudi module id)
    busid: str | None
    numa_node: int | None


@dataclass(frozen=True)
class ProcessView:
    pid: int
    label: str = ""  # "rank 0" for a job's process
    name: str = ""
    error: str | None = None  # why it could not be read: "exited", "permission denied (...)"
    cpus_allowed: CpuSet | None = None
    mems_allowed: CpuSet | None = None
    memory_policy: str | None = None  # numa_maps' word for the task's policy: "default", "bind:0", ...
    other_policies: dict[str, int] = field(default_factory=dict)  # policies of single mappings -> how many
    pages_by_node: dict[int, int] = field(default_factory=dict)  # resident pages (base pages) per node
    numa_maps: str = "read"  # "read", "cut at N bytes: partial counts", "unreadable: ...", "absent"
    threads: tuple[Thread, ...] = ()
    thread_count: int = 0  # all threads, also those past MAX_THREADS
    devices: tuple[DeviceUse, ...] = ()
    local_nodes: CpuSet = CpuSet()
    local_from: str = ""  # "device" or "allowed CPUs"
    remote_fraction: float | None = None
    problems: tuple[str, ...] = ()

    @property
    def last_cpus(self) -> CpuSet:
        return CpuSet(t.cpu for t in self.threads)

    @property
    def running(self) -> int:
        return sum(t.state == "R" for t in self.threads)


def _read(pid: int, root: str, label: str, by_bus: dict[str, DeviceUse], nvml_buses: set[str]) -> ProcessView:
    """What /proc shows of `pid`, not judged yet; `nvml_buses`: the bus ids NVML says it uses."""
    proc = os.path.join(root, "proc")
    try:
        fields = _stat(f"{proc}/{pid}/stat")
        if fields[2] in ("Z", "X"):
            return ProcessView(pid, label, fields[1], error="exited (a zombie)")
        seen = observe(pid, proc)
    except (FileNotFoundError, ProcessLookupError):
        seen = None
    except PermissionError as exc:
        return ProcessView(pid, label, error=f"permission denied ({exc.filename}): another user's process")
    except OSError as exc:
        return ProcessView(pid, label, error=f"unreadable: {exc.strerror or exc}")
    if seen is None:
        return ProcessView(pid, label, error="exited (no such process)")
    threads, count = _threads(proc, pid)
    policy = f"{seen.policy}:{seen.policy_nodes}" if seen.policy_nodes else seen.policy
    return ProcessView(pid, label, fields[1], cpus_allowed=seen.cpus, mems_allowed=seen.mems_allowed,
                       memory_policy=policy or None, other_policies=seen.other_policies,
                       pages_by_node=seen.pages_by_node, numa_maps=seen.numa_maps, threads=threads, thread_count=count,
                       devices=_devices(root, pid, by_bus, nvml_buses))


def _stat(path: str) -> list[str]:
    """proc(5)'s stat fields from 1; the name (fields[1]) may hold spaces and ")", so it ends at the last ")"."""
    text = read_bounded(path, SMALL_LIMIT).decode("ascii", "replace")
    head, sep, rest = text.rpartition(")")
    first, _, name = head.partition(" (")
    fields = [first.strip(), name] + rest.split()
    if not sep or len(fields) < 22:
        raise OSError(0, f"{path}: not a stat line the kernel writes")
    return fields


def _threads(proc: str, pid: int) -> tuple[tuple[Thread, ...], int]:
    names = []
    with contextlib.suppress(OSError):
        names = [n for n in os.listdir(f"{proc}/{pid}/task") if n.isascii() and n.isdigit()]
    threads = []
    for name in sorted(names, key=int)[:MAX_THREADS]:
        try:
            fields = _stat(f"{proc}/{pid}/task/{name}/stat")
        except OSError:
            continue  # the thread ended meanwhile
        if len(fields) > 38 and fields[38].isdigit():
            threads.append(Thread(int(name), fields[1], fields[2], int(fields[38])))
    return tuple(threads), len(names)


def _devices(root: str, pid: int, by_bus: dict[str, DeviceUse], nvml_buses: set[str]) -> tuple[DeviceUse, ...]:
    """The accelerators `pid` has open, each once."""
    found: dict[str, DeviceUse] = {}
    with contextlib.suppress(OSError):  # another user's: NVML may still name its GPUs
        for target, family, kind, number in _device_files(root, pid):
            use = _device_of(root, target, family, kind, number, by_bus)
            found.setdefault(use.busid or use.path, use)
    if "/dev/kfd" in found and any(use.path.startswith("/dev/dri/") for use in found.values()):
        del found["/dev/kfd"]
    for busid in sorted(nvml_buses - found.keys()):
        known = by_bus.get(busid)
        found[busid] = DeviceUse("nvml", "gpu", known.index if known else None, busid,
                                 known.numa_node if known else _pci_node(root, busid))
    return tuple(found.values())


def _device_files(root: str, pid: int) -> list[tuple[str, str, str, str]]:
    """(path, family, kind, number) of each accelerator device file `pid` has open; OSError if they cannot be seen."""
    fd_dir = os.path.join(root, "proc", str(pid), "fd")
    found = []
    for fd in sorted((n for n in os.listdir(fd_dir) if n.isascii() and n.isdigit()), key=int)[:MAX_FDS]:
        try:
            target = os.readlink(os.path.join(fd_dir, fd))
        except OSError:
            continue  # closed meanwhile
        for pattern, family, kind in _DEVICE_FILES:
            if m := pattern.fullmatch(target):
                found.append((target, family, kind, m.group(1)))
    return found


def _device_of(root: str, target: str, family: str, kind: str, number: str, by_bus: dict[str, DeviceUse]) -> DeviceUse:
    """The accelerator a device file names: its bus id from the driver (NVIDIA's information files; the device link of
    /sys/class/{drm,accel,habanalabs}/NAME), then its index and node from the topology. /dev/kfd names no one GPU."""
    if family == "kfd":
        return DeviceUse(target, kind, None, None, None)
    number, busid = int(number), None
    if family == "nvidia":
        busid = _nvidia_bus(root, number)
    elif family != "davinci":
        with contextlib.suppress(OSError):
            link = os.path.join(root, "sys", "class", family, os.path.basename(target), "device")
            busid = os.path.basename(os.readlink(link)).lower()
    if busid in by_bus:
        return replace(by_bus[busid], path=target)
    if family == "davinci":  # the davinci number is the NPU's physical id
        known = next((d for d in by_bus.values() if d.kind == "npu" and d.index == number), None)
        return DeviceUse(target, kind, number, known and known.busid, known and known.numa_node)
    index = number if family != "drm" and busid is None else None
    return DeviceUse(target, kind, index, busid, _pci_node(root, busid) if busid else None)


def _nvidia_bus(root: str, minor: int) -> str | None:
    """The bus id whose /proc/driver/nvidia/gpus/<busid>/information says "Device Minor: `minor`"."""
    base = os.path.join(root, "proc", "driver", "nvidia", "gpus")
    try:
        buses = sorted(os.listdir(base))
    except OSError:
        return None
    for bus in buses:
        with contextlib.suppress(OSError):
            text = read_bounded(os.path.join(base, bus, "information"), SMALL_LIMIT).decode("ascii", "replace")
            if re.search(rf"^[ \t]*Device Minor[ \t]*:[ \t]*{minor}[ \t]*$", text, re.MULTILINE):
                return bus.lower()
    return None


def _pci_node(root: str, busid: str) -> int | None:
    with contextlib.suppress(OSError):
        text = read_bounded(os.path.join(root, "sys", "bus", "pci", "devices", busid, "numa_node"), 64).strip()
        return int(text) if text.isdigit() else None
    return None


def nvml_processes() -> dict[int, set[str]]:
    """pid -> bus ids (as sysfs writes them) of the GPUs NVML says it runs on, compute and graphics;
    {} without pynvml or a driver that answers."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no pynvml, pynvml.NVMLError and its driver-less variants
        return {}
    found: dict[int, set[str]] = {}
    try:
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            busid = normalize_busid(pynvml.nvmlDeviceGetPciInfo(handle).busId)
            for query in (pynvml.nvmlDeviceGetComputeRunningProcesses, pynvml.nvmlDeviceGetGraphicsRunningProcesses):
                with contextlib.suppress(Exception):
                    for p in query(handle):
                        found.setdefault(int(p.pid), set()).add(busid)
    except Exception:
        return found
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()
    return found


def accelerator_pids(root: str = "/", nvml: dict[int, set[str]] | None = None) -> tuple[list[int], int]:
    """Every process with an accelerator's device file open (or in NVML's lists), and how many
    processes' open files could not be looked at (another user's)."""
    proc = os.path.join(root, "proc")
    found, hidden = set(nvml or {}), 0
    for pid in (int(n) for n in os.listdir(proc) if n.isascii() and n.isdigit()):
        try:
            if pid != os.getpid() and _device_files(root, pid):
                found.add(pid)
        except PermissionError:
            hidden += 1
        except OSError:
            continue
    return sorted(p for p in found if os.path.isdir(f"{proc}/{p}")), hidden


def judge(views: list[ProcessView], nodes: dict[int, CpuSet]) -> list[ProcessView]:
    """Each readable view with its local nodes, remote fraction and problems."""
    # who runs on each CPU and who may run on each CPU set, so each verdict names the others in one
    # line (output linear in the processes, not one line per pair)
    running_on: dict[int, list[int]] = {}
    by_cpus: dict[CpuSet, list[int]] = {}
    for view in (v for v in views if v.error is None):
        for cpu in {t.cpu for t in view.threads if t.state == "R"}:
            running_on.setdefault(cpu, []).append(view.pid)
        by_cpus.setdefault(view.cpus_allowed, []).append(view.pid)
    overlaps = {cpus: _overlap(cpus, by_cpus) for cpus in by_cpus}
    out = []
    for view in views:
        if view.error is not None:
            out.append(view)
            continue
        local, source = CpuSet(d.numa_node for d in view.devices if d.numa_node is not None), "device"
        if not local:
            local, source = CpuSet(n for n, cpus in nodes.items() if cpus & view.cpus_allowed), "allowed CPUs"
        total = sum(view.pages_by_node.values())
        remote = sum(n for node, n in view.pages_by_node.items() if node not in local)
        fraction = remote / total if total else None
        problems = []
        if fraction is not None and fraction > REMOTE_WARN:
            far = CpuSet(node for node, n in view.pages_by_node.items() if n and node not in local)
            problems.append(f"{fraction:.0%} of its resident pages ({_size(remote)}) are on node(s) {far}, not "
                            f"local to its {source} (node(s) {local})")
        outside = [t for t in view.threads if t.cpu not in view.cpus_allowed]
        if outside:
            problems.append(f"{len(outside)} thread(s) last ran outside its allowed CPUs {view.cpus_allowed}: "
                            + ", ".join(f"{t.tid} on CPU {t.cpu}" for t in outside[:8]))
        shared = CpuSet(t.cpu for t in view.threads if t.state == "R" and len(running_on[t.cpu]) > 1)
        if shared:
            sharers = {pid for cpu in shared for pid in running_on[cpu]} - {view.pid}
            problems.append(f"its running threads share CPU(s) {shared} with running threads of {_pids(sharers)}")
        overlap, others = overlaps[view.cpus_allowed]
        if others - {view.pid}:
            problems.append(f"its allowed CPUs overlap those of {_pids(others - {view.pid})} on CPU(s) {overlap}")
        width = view.cpus_allowed.weight()
        if view.running > width:
            problems.append(f"{view.running} threads ready to run on {width} allowed CPU(s)")
        out.append(replace(view, local_nodes=local, local_from=source, remote_fraction=fraction,
                           problems=tuple(problems)))
    return out


def _overlap(cpus: CpuSet, by_cpus: dict[CpuSet, list[int]]) -> tuple[CpuSet, set[int]]:
    """The CPUs of `cpus` that processes with other sets (or more than one with this set) may
    use too, and every pid whose set meets `cpus` (the caller's own included)."""
    overlap, pids = CpuSet(), set()
    for other, owners in by_cpus.items():
        common = cpus & other
        if common and (other != cpus or len(owners) > 1):
            overlap |= common
            pids.update(owners)
    return overlap, pids


def _pids(pids: set[int], shown: int = 8) -> str:
    """"pid 7", "pids 7, 9", or the first `shown` and how many more."""
    ordered = sorted(pids)
    if len(ordered) == 1:
        return f"pid {ordered[0]}"
    more = f" and {len(ordered) - shown} more" if len(ordered) > shown else ""
    return "pids " + ", ".join(map(str, ordered[:shown])) + more


def _size(pages: int) -> str:
    kb = pages * BASE_PAGE_KB
    return f"{kb / (1 << 20):.1f} GiB" if kb >= 1 << 20 else f"{kb / 1024:.1f} MiB" if kb >= 1024 else f"{kb} KiB"


def inspect(pids: list[int], *, root: str = "/", labels: dict[int, str] | None = None, topology=None,
            nvml: dict[int, set[str]] | None = None) -> list[ProcessView]:
    """Read and judge each of `pids` (in that order). `topology` defaults to topo.discover(root)
    with disallowed CPUs and nodes included (a process may be allowed what this one is not)."""
    if topology is None:
        topology = topo.discover(root, include_disallowed=True)
    # the topology's accelerators (not NICs or disks) by bus id
    by_bus = {d.busid.lower(): DeviceUse("", d.kind, d.index, d.busid.lower(), d.numa_node)
              for d in topology.devices if d.busid and d.kind not in ("nic", "nvme")}
    views = [_read(pid, root, (labels or {}).get(pid, ""), by_bus, (nvml or {}).get(pid, set())) for pid in pids]
    return judge(views, {n.os_index: n.cpuset for n in topology.numa_nodes})


def as_json(views: list[ProcessView], notes: list[str]) -> dict:
    """The `topo.ps/1` object: each view's fields (CPU and node sets as cpulist text), and what they imply."""
    processes = []
    for v in views:
        if v.error is not None:
            processes.append({"pid": v.pid, "label": v.label or None, "error": v.error})
            continue
        entry = {key: str(value) if isinstance(value, CpuSet) else value for key, value in asdict(v).items()}
        entry.update(label=v.label or None, pages_by_node={str(n): p for n, p in v.pages_by_node.items()},
                     page_kb=BASE_PAGE_KB, last_cpus=str(v.last_cpus), running_threads=v.running,
                     remote_fraction=None if v.remote_fraction is None else round(v.remote_fraction, 4),
                     threads=list(entry["threads"]), devices=list(entry["devices"]), problems=list(v.problems))
        processes.append(entry)
    return {"schema": SCHEMA, "processes": processes, "notes": notes}


def as_text(views: list[ProcessView], *, threads: bool = False) -> str:
    lines = []
    for v in views:
        lines.append(f"pid {v.pid}" + (f" ({v.label})" if v.label else "") + (f" {printable(v.name)}" if v.name else "")
                     + (f": {v.error}" if v.error is not None else ""))
        if v.error is not None:
            continue
        lines.append(f"  CPUs allowed {v.cpus_allowed} ({v.cpus_allowed.weight()}); {v.thread_count} thread(s), "
                     f"{v.running} running, last on CPU(s) {v.last_cpus or '-'}")
        extra = "; other mappings: " + ", ".join(f"{p} ({n})" for p, n in v.other_policies.items()) \
            if v.other_policies else ""
        mems = f"; memory nodes allowed {v.mems_allowed}" if v.mems_allowed is not None else ""
        lines.append(f"  memory policy {v.memory_policy or 'unknown'}{extra}{mems}")
        if v.pages_by_node:
            pages = ", ".join(f"node {n} {_size(p)}" for n, p in v.pages_by_node.items())
            lines.append(f"  resident: {pages}" + ("" if v.numa_maps == "read" else f" ({v.numa_maps})"))
        else:
            lines.append(f"  resident: numa_maps {v.numa_maps}" if v.numa_maps != "read" else "  resident: nothing")
        if v.devices:
            lines.append("  devices: " + ", ".join(
                f"{d.kind} {'?' if d.index is None else d.index} ({d.path}"
                + (f", {d.busid}" if d.busid else "") + f", node {'?' if d.numa_node is None else d.numa_node})"
                for d in v.devices))
        remote = "-" if v.remote_fraction is None else f"{v.remote_fraction:.1%}"
        lines.append(f"  local node(s) {v.local_nodes or '-'} (of its {v.local_from}); remote pages {remote}")
        lines.extend([f"  ! {p}" for p in v.problems] or ["  ok"])
        if threads:
            lines.extend(f"    thread {t.tid} {printable(t.name)}: {t.state} on CPU {t.cpu}" for t in v.threads)
            if v.thread_count > len(v.threads):
                lines.append(f"    ... {v.thread_count - len(v.threads)} more thread(s) not read")
    return "\n".join(lines)
