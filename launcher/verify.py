"""Check a started process's binding in /proc instead of assuming numactl, taskset or the system calls did their job."""

from __future__ import annotations

import time
from typing import Sequence

from topo.binding import POLICY_WORDS, Binding, Observed, node_words
from topo.cpuset import CpuSet


def wait_for_exec(pid: int, prefixes: Sequence[tuple[str, ...]], timeout: float) -> bool:
    """Wait until `pid` has left every argv prefix in `prefixes` (numactl / taskset applied its part
    and exec'd what follows; what it became is not compared: `python` may be pyenv's shim). False
    if it exited, or the timeout passed, first."""
    import psutil  # only when a process is bound (benchmarks/launch_bench.py, N=8: ~10 ms of a launch)

    wants = [list(p) for p in prefixes if p]
    deadline, delay = time.monotonic() + timeout, 0.0005
    try:
        process = psutil.Process(pid)
        while True:
            got = process.cmdline()
            if got and not any(got[:len(want)] == want for want in wants):
                return True
            # empty: a zombie, or a process in the middle of exec, whose new mm has no arguments yet
            if not got and process.status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
                return False
            if time.monotonic() >= deadline:
                return False
            time.sleep(delay)
            delay = min(delay * 2, 0.01)
    except psutil.Error:  # gone, or a zombie whose cmdline cannot be read
        return False


def mismatch(binding: Binding, observed: Observed) -> str | None:
    """What differs between the binding asked for and what the kernel shows; None if it matches."""
    problems = []
    if binding.cpus is not None and observed.cpus != binding.cpus:
        problems.append(f"asked for CPUs {binding.cpus}, runs on CPUs {observed.cpus}")
    nodes = binding.memory_nodes
    if nodes is not None and (observed.policy not in POLICY_WORDS[binding.memory_policy]
                              or observed.policy_nodes != nodes):
        shown = f"{observed.policy}:{observed.policy_nodes}" if observed.policy_nodes else observed.policy
        asked = "bound to" if binding.memory_policy == "bind" else f"{binding.memory_policy} on"
        problems.append(f"asked for memory {asked} {node_words(nodes)}, memory policy is {shown or 'unreadable'}")
    return "; ".join(problems) or None


def changed_after_start(binding: Binding, observed: Observed, allowed: CpuSet) -> bool:
    """Whether a bound process shows other CPUs because it, or something else, changed them after the
    start, not because the kernel narrowed them to the cgroup's `allowed` CPUs (the launcher's own)."""
    if binding.cpus is not None and observed.cpus != binding.cpus:
        return observed.cpus != binding.cpus & allowed
    return True


def refusal_in(log_text: str) -> str | None:
    """The line where numactl / taskset (or topo in the child) says the kernel refused the binding."""
    for line in log_text.splitlines():  # numactl's words when a container (no CAP_SYS_NICE, seccomp) is refused
        if any(word in line for word in ("Operation not permitted", "Permission denied")) and any(
                call in line for call in ("set_mempolicy", "mbind", "sched_setaffinity", "numactl", "taskset")):
            return line.strip()
    return None
