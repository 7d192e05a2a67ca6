"""syscalls.apply_memory_policy under a real refusal: each case runs in a child that installs a
seccomp filter refusing set_mempolicy (all of it, or only some modes), then walks the ladder and
reports the rung and the policy the kernel then holds for the thread."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import seccomp

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(not seccomp.supported(), reason="seccomp filter written for x86_64 and aarch64")
EPERM, EINVAL = 1, 22
MPOL_PREFERRED, MPOL_BIND, MPOL_INTERLEAVE, MPOL_PREFERRED_MANY = 1, 2, 3, 5


def child(refuse, call: str) -> dict:
    """Run `call` (an apply_memory_policy(...) expression) under a filter refusing `refuse`."""
    code = f"""
        import json
        import seccomp
        from topo import syscalls
        from topo.cpuset import CpuSet
        seccomp.refuse_set_mempolicy({refuse!r})
        try:
            rung = {call}
        except syscalls.MemoryPolicyRefused as exc:
            rung = "raised: " + str(exc)
        policy, nodes = syscalls.get_mempolicy()
        print(json.dumps({{"rung": rung, "policy": policy, "nodes": str(nodes)}}))
    """
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{ROOT / 'tests'}")
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_bind_holds_when_nothing_refuses_it():
    got = child({MPOL_INTERLEAVE: EPERM}, "syscalls.apply_memory_policy('bind', CpuSet.parse('0'), fallback=True)")
    assert got == {"rung": "bind", "policy": "bind", "nodes": "0"}


def test_refused_bind_falls_back_to_preferred():
    got = child({MPOL_BIND: EPERM}, "syscalls.apply_memory_policy('bind', CpuSet.parse('0'), fallback=True)")
    assert got == {"rung": "preferred", "policy": "preferred", "nodes": "0"}


def test_everything_refused_falls_back_to_cpus_alone_and_keeps_the_old_policy():
    got = child(None, "syscalls.apply_memory_policy('bind', CpuSet.parse('0'), fallback=True)")
    assert got == {"rung": "none", "policy": "default", "nodes": ""}


def test_refused_preferred_many_on_an_old_kernel_falls_back_to_preferred():
    # a kernel before 5.15 answers MPOL_PREFERRED_MANY with EINVAL; MPOL_PREFERRED keeps the first node
    got = child({MPOL_BIND: EPERM, MPOL_PREFERRED_MANY: EINVAL},
                "syscalls.apply_memory_policy('bind', CpuSet.parse('0-1'), fallback=True)")
    assert got["rung"] == "preferred" and got["policy"] == "preferred"


def test_refused_preferred_many_with_eperm_is_not_retried_as_preferred():
    got = child({MPOL_BIND: EPERM, MPOL_PREFERRED_MANY: EPERM},
                "syscalls.apply_memory_policy('bind', CpuSet.parse('0-1'), fallback=True)")
    assert got == {"rung": "none", "policy": "default", "nodes": ""}


def test_refused_preferred_with_fallback_gives_none():
    got = child({MPOL_PREFERRED: EPERM}, "syscalls.apply_memory_policy('preferred', CpuSet.parse('0'), fallback=True)")
    assert got == {"rung": "none", "policy": "default", "nodes": ""}


def test_refusal_without_fallback_is_one_error_naming_the_option():
    got = child({MPOL_BIND: EPERM}, "syscalls.apply_memory_policy('bind', CpuSet.parse('0'))")
    assert got["rung"].startswith("raised: set_mempolicy: Operation not permitted")
    assert "--bind-fallback tries 'preferred'" in got["rung"] and "\n" not in got["rung"]
    assert got["policy"] == "default"  # nothing was applied
    got = child({MPOL_BIND: EPERM}, "syscalls.apply_memory_policy('bind', CpuSet.parse('0'), option='fallback=True')")
    assert "fallback=True tries 'preferred'" in got["rung"]


def test_unknown_policy_is_refused_before_any_call():
    from topo import syscalls
    from topo.errors import TopoError

    with pytest.raises(TopoError, match="memory policy must be one of"):
        syscalls.apply_memory_policy("membind")


@pytest.mark.parametrize("refuse, told, rung", [({MPOL_BIND: EPERM}, " memory=preferred:0", "preferred"),
                                                (None, "", "none")])  # None: every mode refused
def test_topo_binding_tells_the_rung_that_held_after_a_fallback(tmp_path, refuse, told, rung):
    """A child bound directly (no numactl) with --bind-fallback gets TOPO_BINDING as the kernel
    answered the ladder, not as asked."""
    code = f"""
        import os
        import seccomp
        from topo.launcher.procgroup import ProcessGroup, ProcessSpec
        from topo.binding import Binding
        from topo.cpuset import CpuSet
        seccomp.refuse_set_mempolicy({refuse!r})
        cpus = CpuSet(sorted(os.sched_getaffinity(0)))
        binding = Binding(cpus, CpuSet([0]), "bind", prefix=("numactl", "--membind=0"))
        argv = ("numactl", "--membind=0", "sh", "-c", "echo TOPO_BINDING=$TOPO_BINDING")
        spec = ProcessSpec("rank 0", argv, {{}}, {str(tmp_path / "log")!r}, binding, binding)
        group = ProcessGroup([spec], {{"PATH": os.environ["PATH"]}}, job_id="t", bind_fallback=True)
        group.start()
        print("exit", group.processes[0].popen.wait())
        print("cpus=" + str(cpus))
    """
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{ROOT / 'tests'}")
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=60)
    assert proc.returncode == 0 and "exit 0" in proc.stdout, proc.stdout + proc.stderr
    cpus = proc.stdout.strip().splitlines()[-1]
    log = (tmp_path / "log").read_text()
    assert f"TOPO_BINDING={cpus}{told}\n" in log, log
    assert f"held: {rung}\n" in log  # the child walked the ladder itself too
