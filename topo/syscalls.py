"""The few Linux system calls binding needs and Python's os module lacks.

`set_mempolicy`/`get_mempolicy` (the calls `numactl --membind/--preferred` make), `migrate_pages`
(what `migratepages` calls) and `prctl(PR_SET_PDEATHSIG)`. glibc exports none of the NUMA calls (libnuma wraps them), so they go
through `syscall(2)` with the number of this architecture. CPU affinity needs nothing here:
`os.sched_setaffinity` covers it.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform

from topo.cpuset import CpuSet
from topo.errors import TopoError

# The kernel's memory policies (include/uapi/linux/mempolicy.h).
MPOL_DEFAULT, MPOL_PREFERRED, MPOL_BIND, MPOL_INTERLEAVE, MPOL_LOCAL = 0, 1, 2, 3, 4
MPOL_PREFERRED_MANY = 5  # Linux 5.15+: prefer several nodes (MPOL_PREFERRED keeps only the first)
POLICIES = {"default": MPOL_DEFAULT, "preferred": MPOL_PREFERRED, "bind": MPOL_BIND,
            "interleave": MPOL_INTERLEAVE, "local": MPOL_LOCAL, "preferred-many": MPOL_PREFERRED_MANY}
POLICY_NAMES = {v: k for k, v in POLICIES.items()}

# (set_mempolicy, get_mempolicy, migrate_pages) per architecture: x86_64 has its own table, arm64
# and riscv64 use the generic one.
_NUMBERS = {
    "x86_64": (238, 239, 256), "amd64": (238, 239, 256),
    "aarch64": (237, 236, 238), "arm64": (237, 236, 238), "riscv64": (237, 236, 238),
    "ppc64le": (261, 260, 258), "ppc64": (261, 260, 258),
    "s390x": (270, 269, 287),
    "i686": (276, 275, 294), "i386": (276, 275, 294),
}
PR_SET_PDEATHSIG = 1
_MASK_BITS = 64  # one unsigned long per 64 nodes


class SyscallError(TopoError):
    """A binding system call the kernel refused (EPERM in a container, a node outside Mems_allowed)."""

    def __init__(self, call: str, errno: int, detail: str = ""):
        self.call, self.errno = call, errno
        why = os.strerror(errno)
        super().__init__(f"{call}: {why}{f' ({detail})' if detail else ''}")


_libc = None


def _libc_handle():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def _numbers() -> tuple[int, int, int]:
    machine = platform.machine().lower()
    try:
        return _NUMBERS[machine]
    except KeyError:
        raise TopoError(f"set_mempolicy: this architecture ({machine}) is not supported, "
                        "bind memory with numactl instead") from None


def _mask(nodes: CpuSet, top: int | None = None) -> tuple[ctypes.Array, int]:
    """`nodes` as the kernel's array of unsigned longs, long enough for node `top` (default: the
    last of `nodes`), and the maxnode argument that goes with it."""
    if top is None:
        top = nodes.last() if nodes else 0
    words = top // _MASK_BITS + 1
    arr = (ctypes.c_ulong * words)()
    bits = nodes.mask
    for i in range(words):
        arr[i] = (bits >> (i * _MASK_BITS)) & ((1 << _MASK_BITS) - 1)
    return arr, words * _MASK_BITS + 1  # maxnode counts one past the last bit, as numactl passes it


def set_mempolicy(policy: str, nodes: CpuSet = CpuSet()) -> None:
    """Set this thread's memory policy (`bind`, `preferred`, `interleave`, `local`, `default`) to
    `nodes`, as `numactl --membind/--preferred/--interleave` does before it execs. Children forked
    afterwards inherit it. Raises SyscallError with the kernel's reason."""
    mode = POLICIES[policy]
    set_nr = _numbers()[0]
    libc = _libc_handle()
    if mode in (MPOL_DEFAULT, MPOL_LOCAL):
        rc = libc.syscall(ctypes.c_long(set_nr), ctypes.c_int(mode), None, ctypes.c_ulong(0))
    else:
        if not nodes:
            raise TopoError(f"set_mempolicy: policy {policy!r} needs at least one NUMA node")
        mask, maxnode = _mask(nodes)
        rc = libc.syscall(ctypes.c_long(set_nr), ctypes.c_int(mode), mask, ctypes.c_ulong(maxnode))
    if rc != 0:
        raise SyscallError("set_mempolicy", ctypes.get_errno(), f"{policy} {nodes}" if nodes else policy)


class MemoryPolicyRefused(SyscallError):
    """The kernel refused a memory policy and no fallback was asked for; the message names the
    option that asks for it."""

    def __init__(self, refused: SyscallError, policy: str, nodes: CpuSet, option: str):
        self.policy, self.nodes, self.option = policy, nodes, option
        TopoError.__init__(self, f"{refused}: the kernel refused memory policy {policy!r}"
                           f"{f' on node(s) {nodes}' if nodes else ''} (seccomp, or a container without "
                           f"CAP_SYS_NICE, blocks set_mempolicy; the nodes must be in Mems_allowed); {option} "
                           "tries 'preferred', then binds CPUs alone")
        self.call, self.errno = refused.call, refused.errno


# The rungs of apply_memory_policy's fallback ladder, strongest first.
RUNGS = ("bind", "preferred", "none")


def apply_memory_policy(policy: str, nodes: CpuSet = CpuSet(), *, fallback: bool = False,
                        option: str = "--bind-fallback") -> str:
    """Set this thread's memory policy like `set_mempolicy`, walking a fallback ladder when the
    kernel refuses it and `fallback` is true; return the rung that held:

    - "bind": MPOL_BIND on `nodes`, as asked;
    - "preferred": MPOL_PREFERRED_MANY on `nodes` (MPOL_PREFERRED on the first node when there is
      one node, or when the kernel predates Linux 5.15 and answers EINVAL), asked for as
      "preferred" or reached because MPOL_BIND was refused;
    - "none": every policy was refused; the thread keeps the policy it had, and the caller's CPU
      binding is all that holds.

    "interleave", "local" and "default" are set as asked (the rung is their name) or, refused with
    `fallback`, give "none". Without `fallback` a refusal raises MemoryPolicyRefused, whose message
    names `option` (the flag or keyword that asks for the ladder)."""
    if policy not in POLICIES:
        raise TopoError(f"memory policy must be one of {', '.join(POLICIES)}; got {policy!r}")
    try:
        if policy == "bind":
            set_mempolicy("bind", nodes)
            return "bind"
        if policy in ("preferred", "preferred-many"):
            _set_preferred(nodes)
            return "preferred"
        set_mempolicy(policy, nodes)
        return policy
    except SyscallError as exc:
        if not fallback:
            raise MemoryPolicyRefused(exc, policy, nodes, option) from exc
    if policy == "bind":
        try:
            _set_preferred(nodes)
            return "preferred"
        except SyscallError:
            pass
    return "none"


def _set_preferred(nodes: CpuSet) -> None:
    """MPOL_PREFERRED_MANY for several nodes, MPOL_PREFERRED (the first node) for one node or on a
    kernel before 5.15, which answers MPOL_PREFERRED_MANY with EINVAL."""
    if nodes.weight() > 1:
        try:
            set_mempolicy("preferred-many", nodes)
            return
        except SyscallError as exc:
            if exc.errno != errno.EINVAL:
                raise
    set_mempolicy("preferred", nodes)


def get_mempolicy() -> tuple[str, CpuSet]:
    """This thread's memory policy and its nodes, e.g. ("bind", CpuSet("0"))."""
    get_nr = _numbers()[1]
    libc = _libc_handle()
    mode = ctypes.c_int(0)
    words = 16  # 1024 nodes: the kernel's largest MAX_NUMNODES on common configurations
    mask = (ctypes.c_ulong * words)()
    rc = libc.syscall(ctypes.c_long(get_nr), ctypes.byref(mode), mask, ctypes.c_ulong(words * _MASK_BITS),
                      None, ctypes.c_ulong(0))
    if rc != 0:
        raise SyscallError("get_mempolicy", ctypes.get_errno())
    bits = 0
    for i in range(words):
        bits |= int(mask[i]) << (i * _MASK_BITS)
    return POLICY_NAMES.get(mode.value & 0xFF, str(mode.value)), CpuSet.from_mask(bits)


def migrate_pages(pid: int, old_nodes: CpuSet, new_nodes: CpuSet) -> int:
    """Move process `pid`'s pages (0: this process) that lie on `old_nodes` to `new_nodes`, node
    for node in order as the kernel pairs them; return how many pages could not be moved. Moving
    another user's process needs CAP_SYS_NICE. Raises SyscallError with the kernel's reason."""
    if not new_nodes:
        raise TopoError("migrate_pages: name at least one node to move pages to")
    if not old_nodes:
        return 0
    nr = _numbers()[2]
    top = max(old_nodes.last(), new_nodes.last())
    old, maxnode = _mask(old_nodes, top)
    new, _ = _mask(new_nodes, top)
    rc = _libc_handle().syscall(ctypes.c_long(nr), ctypes.c_int(pid), ctypes.c_ulong(maxnode), old, new)
    if rc < 0:
        raise SyscallError("migrate_pages", ctypes.get_errno(), f"nodes {old_nodes} to {new_nodes}")
    return rc


def prctl(option: int, arg2: int = 0) -> None:
    """prctl(2) with one argument (an integer, or an address from ctypes.addressof)."""
    if _libc_handle().prctl(ctypes.c_int(option), ctypes.c_ulong(arg2), ctypes.c_ulong(0), ctypes.c_ulong(0),
                            ctypes.c_ulong(0)) != 0:
        raise SyscallError(f"prctl({option})", ctypes.get_errno())


def set_pdeathsig(signum: int) -> None:
    """Ask the kernel to send `signum` to this process when its parent thread dies. It survives
    exec (so a numactl/taskset prefix keeps it), and is cleared by fork in the child."""
    if _libc_handle().prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0) != 0:
        raise SyscallError("prctl(PR_SET_PDEATHSIG)", ctypes.get_errno())


def load() -> None:
    """Resolve libc and this architecture's syscall numbers now. A child between fork and exec
    calls these functions and must not load libraries or import modules there."""
    _libc_handle()
    try:
        _numbers()
    except TopoError:
        pass  # set_mempolicy will say so when it is called
