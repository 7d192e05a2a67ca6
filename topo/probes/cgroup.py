"""The CPUs and memory nodes the process's cgroup cpuset allows (v1 and v2), below one FsRoot: the path
from /proc/self/cgroup (v1 "cpuset" line, v2 "0::" line) or the older /proc/self/cpuset, the mount from
/proc/mounts."""

from __future__ import annotations

from dataclasses import dataclass

from topo.cpuset import CpuSet
from topo.fsroot import FsRoot


@dataclass(frozen=True)
class CgroupCpuset:
    version: str  # "v1" | "v2"
    path: str  # cgroup path, e.g. "/user.slice/job_1"
    cpus: CpuSet | None
    mems: CpuSet | None


def probe_cgroup(fs: FsRoot) -> CgroupCpuset | None:
    v1_path = v2_path = None
    for line in (fs.read("/proc/self/cgroup") or "").splitlines():
        hier, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hier == "0" and controllers == "":
            v2_path = path
        elif "cpuset" in controllers.split(","):
            v1_path = path
    legacy = fs.read("/proc/self/cpuset")
    if legacy:
        v1_path, v2_path = v1_path or legacy, v2_path or legacy
    text = fs.read("/proc/mounts") or fs.read("/proc/self/mounts") or ""
    mounts = [(p[1], p[2], p[3].split(",")) for line in text.splitlines() if len(p := line.split()) >= 4]
    for mountpoint, fstype, options in mounts:
        if v1_path is not None and ((fstype == "cgroup" and "cpuset" in options) or fstype == "cpuset"):
            base = mountpoint.rstrip("/") + (v1_path if v1_path != "/" else "")
            # "noprefix" mounts and the old cpuset filesystem name the files without "cpuset."
            cpus = fs.read_cpulist(f"{base}/cpuset.cpus") or fs.read_cpulist(f"{base}/cpus")
            mems = fs.read_cpulist(f"{base}/cpuset.mems") or fs.read_cpulist(f"{base}/mems")
            if cpus is not None or mems is not None:
                return CgroupCpuset("v1", v1_path, cpus, mems)
    for mountpoint, fstype, _ in mounts:
        if fstype == "cgroup2" and v2_path is not None:
            base = mountpoint.rstrip("/") + (v2_path if v2_path != "/" else "")
            cpus = fs.read_cpulist(f"{base}/cpuset.cpus.effective")
            mems = fs.read_cpulist(f"{base}/cpuset.mems.effective")
            if cpus is not None or mems is not None:
                return CgroupCpuset("v2", v2_path, cpus or None, mems or None)
    return None
