"""Boot Debian's own kernel under QEMU (TCG, no KVM needed) with a busybox initramfs that mounts
this host's `/` read-only over 9p and runs a check script there, chrooted, on the guest's NUMA
nodes. The initramfs is built once per kernel and harness version, below ~/.cache/topo-vm/.

Inside the guest, `/proc`, `/sys` and `/dev` are the guest's own, `/tmp` (and `/dev/shm`) a tmpfs,
everything else the host's tree as it is (its Python, numactl, hwloc, this checkout). The check
script prints one line per result, `TOPOVM-RESULT <json>`, on the serial console; the harness
collects them. A boot that does not power off within its bound is killed.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

HARNESS_VERSION = "2"
RESULT_MARK = "TOPOVM-RESULT "
DONE_MARK = "TOPOVM-DONE"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "topo-vm"
QEMU = "qemu-system-x86_64"
# loaded in this order; a module the kernel has built in is simply absent from modules.dep
MODULES = ["virtio_ring", "virtio", "virtio_pci_legacy_dev", "virtio_pci_modern_dev", "virtio_pci",
           "netfs", "fscache", "9pnet", "9pnet_virtio", "9p"]

INIT = r"""#!/bin/busybox sh
/bin/busybox --install -s /bin
mkdir -p /proc /sys /dev /newroot
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in $(cat /modules.list); do insmod "/modules/$m" 2>/dev/null; done
say() { echo "$@" > /dev/ttyS0; }
if ! mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,msize=262144 hostroot /newroot; then
    say "TOPOVM-FAIL cannot mount the host's root over 9p"
    poweroff -f
fi
mount --bind /proc /newroot/proc
mount --bind /sys /newroot/sys
mount --bind /dev /newroot/dev
# the guest's /tmp is its own; host paths below /tmp the job needs (a checkout, a venv, the job
# itself: topovm_keep=, comma-separated) are bound back in at the same place
mkdir -p /hosttmp
mount --bind /newroot/tmp /hosttmp
mount -t tmpfs -o mode=1777 tmp /newroot/tmp
for p in $(sed -n 's/.*topovm_keep=\([^ ]*\).*/\1/p' /proc/cmdline | tr ',' ' '); do
    case "$p" in /tmp/*) mkdir -p "/newroot$p" && mount --bind "/hosttmp${p#/tmp}" "/newroot$p";; esac
done
mkdir -p /newroot/dev/shm
mount -t tmpfs -o mode=1777 shm /newroot/dev/shm
mount -t cgroup2 cgroup2 /newroot/sys/fs/cgroup 2>/dev/null
# the job: a shell command line in a file on the host's tree, named on the kernel command line
job=$(sed -n 's/.*topovm_job=\([^ ]*\).*/\1/p' /proc/cmdline)
say "TOPOVM-START"
chroot /newroot /bin/sh "$job" > /dev/ttyS0 2>&1 < /dev/null
say "TOPOVM-DONE rc=$?"
sync
poweroff -f
"""


@dataclasses.dataclass(frozen=True)
class Machine:
    """One QEMU machine: its name, vCPUs, memory and the -numa/-device arguments that shape it."""

    name: str
    cpus: int
    memory_mib: int
    args: tuple[str, ...]


def _nodes(sizes_mib: list[int], cpus: list[str | None]) -> tuple[str, ...]:
    args: list[str] = []
    for i, (size, cpu) in enumerate(zip(sizes_mib, cpus)):
        args += ["-object", f"memory-backend-ram,id=m{i},size={size}M",
                 "-numa", f"node,nodeid={i},memdev=m{i}" + (f",cpus={cpu}" if cpu else "")]
    return tuple(args)


def _distances(matrix: list[list[int]]) -> tuple[str, ...]:
    args: list[str] = []
    for i, row in enumerate(matrix):
        for j, value in enumerate(row):
            if i != j:
                args += ["-numa", f"dist,src={i},dst={j},val={value}"]
    return tuple(args)


def _expander(bridge: str, bus_nr: int, node: int) -> tuple[str, ...]:
    """A PCI expander bridge on `node` with a pci-bridge `bridge` behind it, for devices."""
    return ("-device", f"pxb,id=pxb-{bridge},bus_nr={bus_nr},numa_node={node},bus=pci.0",
            "-device", f"pci-bridge,id={bridge},bus=pxb-{bridge},chassis_nr={bus_nr}")


# 2 CPU nodes (0-1, 2-3), a memory-only node 2, distances 0->1 12 but 1->0 14, and a NIC and an
# NVMe drive on node 1 behind an expander bridge
NUMA2 = Machine("numa2", 4, 1024, _nodes([384, 384, 256], ["0-1", "2-3", None])
                + _distances([[10, 12, 20], [14, 10, 22], [20, 22, 10]])
                + _expander("br1", 64, 1)
                + ("-netdev", "user,id=n0", "-device", "e1000,bus=br1,addr=1,netdev=n0",
                   "-blockdev", "driver=null-co,node-name=nvm0,size=1048576",
                   "-device", "nvme,serial=topovm,drive=nvm0,bus=br1,addr=2"))
# 4 nodes of one CPU each, two pairs with asymmetric distances, an NVMe drive on node 2
NUMA4 = Machine("numa4", 4, 768, _nodes([192, 192, 192, 192], ["0", "1", "2", "3"])
                + _distances([[10, 12, 20, 22], [16, 10, 22, 20], [20, 22, 10, 13], [22, 20, 11, 10]])
                + _expander("br2", 96, 2)
                + ("-blockdev", "driver=null-co,node-name=nvm0,size=1048576",
                   "-device", "nvme,serial=topovm4,drive=nvm0,bus=br2,addr=1"))
MACHINES = {m.name: m for m in (NUMA2, NUMA4)}


def guest_job(machine: Machine, repo: Path, python: str) -> str:
    """The job script: vm_guest.py for `machine`, with this checkout's topo and `python`'s
    directory first on PATH (launchers run `python` from PATH). The checkout's modules are
    compiled on the host first: the guest sees the tree read-only and could not cache them."""
    subprocess.run([python, "-m", "compileall", "-q", *(str(repo / p) for p in ("topo", "planners", "views", "launcher", "topo_cli"))],
                   check=True, stdout=subprocess.DEVNULL)
    return (f"cd {repo} || exit 1\n"
            f"export PYTHONPATH={repo} PATH={Path(python).parent}:/usr/local/bin:/usr/bin:/bin\n"
            f"exec {python} {repo / 'tests/vm/vm_guest.py'} {machine.name}\n")


def kernel() -> tuple[Path, str] | None:
    """The newest /boot/vmlinuz-* with its modules directory, as (image, version)."""
    images = sorted(Path("/boot").glob("vmlinuz-*"),
                    key=lambda p: [int(x) if x.isdigit() else x for x in re.split(r"(\d+)", p.name)])
    for image in reversed(images):
        version = image.name.removeprefix("vmlinuz-")
        if (Path("/lib/modules") / version / "modules.dep").is_file() and os.access(image, os.R_OK):
            return image, version
    return None


def missing() -> str | None:
    """Why the VM tests cannot run here, or None."""
    if shutil.which(QEMU) is None:
        return f"{QEMU} not found (apt-get install qemu-system-x86)"
    if kernel() is None:
        return "no readable /boot/vmlinuz-* with /lib/modules/<version>/modules.dep (apt-get install linux-image-amd64)"
    if busybox() is None:
        return "no static busybox (apt-get install busybox-static)"
    return None


def busybox() -> Path | None:
    """A statically linked busybox (a dynamic one cannot run from the initramfs)."""
    for path in ("/bin/busybox", "/usr/bin/busybox"):
        p = Path(path)
        if p.is_file():
            with open(p, "rb") as fh:
                head = fh.read(4096)
            # ELF program header type 3 is PT_INTERP: only dynamic executables have it
            if head[:4] == b"\x7fELF" and b"/lib64/ld-linux" not in head and b"/lib/ld-linux" not in head:
                return p
    return None


def module_files(version: str) -> list[Path]:
    """The .ko files of MODULES and their dependencies, dependencies first, from modules.dep."""
    base = Path("/lib/modules") / version
    deps: dict[str, list[str]] = {}
    for line in (base / "modules.dep").read_text().splitlines():
        target, _, rest = line.partition(":")
        deps[target] = rest.split()
    by_name = {re.sub(r"\.ko(\.\w+)?$", "", Path(t).name).replace("-", "_"): t for t in deps}
    ordered: list[str] = []

    def add(rel: str) -> None:
        for dep in reversed(deps.get(rel, [])):
            add(dep)
        if rel not in ordered:
            ordered.append(rel)

    for name in MODULES:
        if name in by_name:
            add(by_name[name])
    return [base / rel for rel in ordered]


def _cpio(entries: list[tuple[str, int, bytes]]) -> bytes:
    """An uncompressed newc cpio archive of (name, mode, data) entries."""
    out = bytearray()
    for ino, (name, mode, data) in enumerate(entries + [("TRAILER!!!", 0, b"")], start=1):
        encoded = name.encode() + b"\0"
        fields = [ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(encoded), 0]
        out += b"070701" + b"".join(b"%08X" % f for f in fields) + encoded
        out += b"\0" * (-len(out) % 4) + data
        out += b"\0" * (-len(out) % 4)
    return bytes(out)


def initramfs(version: str) -> Path:
    """The cached initramfs for this kernel version, built on first use."""
    path = CACHE / f"{version}-h{HARNESS_VERSION}" / "initramfs.cpio"
    if path.is_file():
        return path
    bb = busybox()
    assert bb is not None
    modules = module_files(version)
    entries = [("bin", 0o40755, b""), ("modules", 0o40755, b""),
               ("bin/busybox", 0o100755, bb.read_bytes()), ("init", 0o100755, INIT.encode()),
               ("modules.list", 0o100644, "".join(m.name + "\n" for m in modules).encode())]
    entries += [(f"modules/{m.name}", 0o100644, m.read_bytes()) for m in modules]
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent)
    with os.fdopen(fd, "wb") as fh:
        fh.write(_cpio(entries))
    os.replace(tmp, path)
    return path


@dataclasses.dataclass(frozen=True)
class Boot:
    """What one boot gave: the results by check name, the console, and whether it finished."""

    results: dict[str, dict]
    console: str
    finished: bool
    timed_out: bool


def boot(machine: Machine, job: str, *, timeout: float, keep: Sequence[Path] = ()) -> Boot:
    """Boot `machine`, run the shell script text `job` inside (chrooted in the host's tree), and
    collect every `TOPOVM-RESULT` line. The VM is killed after `timeout` seconds. The guest's
    `/tmp` is a tmpfs of its own; the host paths in `keep` (a checkout, a venv) stay visible."""
    image, version = kernel()
    rd = initramfs(version)
    runs = CACHE / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"{machine.name}-", dir=runs))
    try:
        (work / "job.sh").write_text(job)
        console = work / "console.log"
        argv = [QEMU, "-accel", "tcg", "-machine", "pc", "-cpu", "max", "-smp", str(machine.cpus),
                "-m", f"{machine.memory_mib}M", *machine.args,
                # -virtfs spelled out, so the 9p device sits on the root bus beside an expander bridge
                "-fsdev", "local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap",
                "-device", "virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot,bus=pci.0",
                "-kernel", str(image), "-initrd", str(rd),
                "-append", f"console=ttyS0 quiet loglevel=1 panic=-1 topovm_job={work / 'job.sh'} "
                f"topovm_keep={','.join(str(p) for p in (work, *keep))}",
                "-display", "none", "-monitor", "none", "-serial", f"file:{console}",
                "-no-reboot", "-nodefaults"]
        timed_out = False
        with open(work / "qemu.log", "wb") as log:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
                proc.kill()
                proc.wait()
        text = console.read_text(errors="replace") if console.exists() else ""
        text += (work / "qemu.log").read_text(errors="replace")
        results = {}
        for line in text.splitlines():
            if line.startswith(RESULT_MARK):
                record = json.loads(line[len(RESULT_MARK):])
                results[record["name"]] = record
        return Boot(results, text, DONE_MARK in text, timed_out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
