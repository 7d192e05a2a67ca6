"""Check a started process's binding in /proc instead of assuming numactl / taskset did their job.

- `/proc/<pid>/status` `Cpus_allowed_list`: the CPU affinity (taskset, --physcpubind, --cpunodebind).
- `/proc/<pid>/numa_maps`: each mapping's memory policy; a mapping without its own policy shows
  the task's (fs/proc/task_mmu.c falls back to it), so `bind:0` on the first line is what
  `numactl --membind 0` set. `Mems_allowed_list` is the cgroup's cpuset.mems and does not change
  with --membind (observed with msrun 2.10 and numactl 2.0).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence

from topo.binding import Binding, describe_memory, node_words
from topo.cpuset import CpuSet
from topo.errors import ParseError

# numactl's words when the kernel (a container without CAP_SYS_NICE, a seccomp profile) refuses it.
REFUSALS = ("Operation not permitted", "Permission denied")


@dataclass(frozen=True)
class Observed:
    """What /proc shows for one process: its CPUs and memory policy."""

    cpus: CpuSet  # Cpus_allowed_list
    mems_allowed: CpuSet  # Mems_allowed_list
    policy: str  # "default", "bind", "interleave", "prefer", ... ("" if unreadable)
    policy_nodes: CpuSet  # nodes of the policy (empty for default)

    def describe(self) -> str:
        """"CPUs 1, memory bound to node 0", in Binding.describe's words for what was asked."""
        if self.policy in ("bind", "prefer") and self.policy_nodes:
            memory = describe_memory("bind" if self.policy == "bind" else "preferred", self.policy_nodes)
        elif self.policy in ("default", "local", ""):
            memory = "memory not bound" if self.policy != "local" else describe_memory("local", None)
        else:
            memory = f"memory policy {self.policy}" + (f" on {node_words(self.policy_nodes)}" if self.policy_nodes else "")
        return f"CPUs {self.cpus}, {memory}"


def read_observed(pid: int, proc: str = "/proc", *, memory_policy: bool = True) -> Observed | None:
    """What the kernel says about `pid`'s CPUs and memory policy; None if it is gone.
    `memory_policy=False` skips numa_maps (the kernel walks every mapping to write it)."""
    try:
        with open(f"{proc}/{pid}/status") as fh:
            status = fh.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = {}
    for line in status.splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    if "Cpus_allowed_list" not in fields:
        return None  # a zombie has no mm and no affinity lines worth reading
    try:
        cpus = CpuSet.parse(fields["Cpus_allowed_list"])
        mems = CpuSet.parse(fields.get("Mems_allowed_list", ""))
    except ParseError:
        return None
    policy, nodes = "", CpuSet()
    if not memory_policy:
        return Observed(cpus, mems, policy, nodes)
    try:
        with open(f"{proc}/{pid}/numa_maps") as fh:
            first = fh.readline().split()
        if len(first) >= 2:
            policy, _, node_text = first[1].partition(":")
            # "bind:0-1", "interleave:0,2", "prefer:1", "default", "prefer (many):..." is not split further
            try:
                nodes = CpuSet.parse(node_text) if node_text else CpuSet()
            except ParseError:
                nodes = CpuSet()
    except OSError:  # no NUMA support compiled in, or the process went away meanwhile
        pass
    return Observed(cpus, mems, policy, nodes)


def wait_for_exec(pid: int, prefixes: Sequence[tuple[str, ...]], timeout: float) -> bool:
    """Wait until `pid` has left every argv prefix in `prefixes` (the death-signal shim, then
    numactl / taskset: each applied its part and exec'd what follows it). Its new command line is
    not compared with the one asked for: `python` may be a wrapper (pyenv's shim) that execs the
    real interpreter under another name. False if it did not get there (it exited, or the timeout
    passed)."""
    import psutil  # ~12 ms to import: only when a process is bound

    wants = [list(p) for p in prefixes if p]
    deadline = time.monotonic() + timeout
    delay = 0.0005
    try:
        process = psutil.Process(pid)
        while True:
            got = process.cmdline()
            if got and not any(got[:len(want)] == want for want in wants):
                return True
            # Empty: a zombie (it exited before or instead of running the command), or a process
            # in the middle of exec, whose new mm has no arguments yet.
            if not got and process.status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
                return False
            if time.monotonic() >= deadline:
                return False
            time.sleep(delay)
            delay = min(delay * 2, 0.01)
    except psutil.Error:  # gone, or a zombie whose cmdline cannot be read
        return False


# numa_maps' word for each set_mempolicy mode a binding asks for
_POLICY_WORDS = {"bind": "bind", "preferred": "prefer", "interleave": "interleave"}


def mismatch(binding: Binding, observed: Observed) -> str | None:
    """What differs between the binding asked for and what the kernel shows; None if it matches."""
    problems = []
    if binding.cpus is not None and observed.cpus != binding.cpus:
        problems.append(f"asked for CPUs {binding.cpus}, runs on CPUs {observed.cpus}")
    want = _POLICY_WORDS.get(binding.memory_policy, binding.memory_policy)
    nodes = binding.memory_nodes
    if nodes is not None and (observed.policy != want or observed.policy_nodes != nodes):
        shown = f"{observed.policy}:{observed.policy_nodes}" if observed.policy_nodes else observed.policy
        asked = "bound to" if want == "bind" else f"{binding.memory_policy} on"
        problems.append(f"asked for memory {asked} {node_words(nodes)}, memory policy is {shown or 'unreadable'}")
    return "; ".join(problems) or None


def changed_after_start(binding: Binding, observed: Observed, allowed: CpuSet) -> bool:
    """Whether a process whose binding was applied (its tool or system call succeeded) shows other
    CPUs because it, or something else, changed them after the start, rather than because the kernel
    narrowed the binding to the CPUs the cgroup allows (`allowed`, the launcher's own): what
    sched_setaffinity gives is the asked set within the allowed one."""
    if binding.cpus is not None and observed.cpus != binding.cpus:
        return observed.cpus != binding.cpus & allowed
    return True


def refusal_in(log_text: str) -> str | None:
    """The line where numactl / taskset says the kernel refused the binding, if any."""
    for line in log_text.splitlines():
        if any(word in line for word in REFUSALS) and any(
                call in line for call in ("set_mempolicy", "mbind", "sched_setaffinity", "numactl", "taskset")):
            return line.strip()
    return None
