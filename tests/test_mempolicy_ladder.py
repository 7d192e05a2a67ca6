"""syscalls.apply's memory ladder under a real refusal: each case runs in a child that installs a
seccomp filter refusing set_mempolicy (all of it, or only some modes), then applies a memory
binding and reports the policy that held and the one the kernel then holds for the thread."""

from __future__ import annotations

import json
import os
import re
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
    """Run `call` (an expression calling apply_memory_policy below) under a filter refusing `refuse`."""
    code = f"""
        import json
        import seccomp
        from topo import syscalls
        from topo.binding import Binding
        from topo.cpuset import CpuSet

        def apply_memory_policy(policy, nodes=None, **options):
            held = syscalls.apply(Binding(memory_nodes=nodes, memory_policy=policy), **options)
            return held.memory_policy or "none"

        seccomp.refuse_set_mempolicy({refuse!r})
        try:
            rung = {call}
        except syscalls.BindingRefused as exc:
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
    got = child({MPOL_INTERLEAVE: EPERM}, "apply_memory_policy('bind', CpuSet.parse('0'), fallback=True)")
    assert got == {"rung": "bind", "policy": "bind", "nodes": "0"}


def test_refused_bind_falls_back_to_preferred():
    got = child({MPOL_BIND: EPERM}, "apply_memory_policy('bind', CpuSet.parse('0'), fallback=True)")
    assert got == {"rung": "preferred", "policy": "preferred", "nodes": "0"}


def test_everything_refused_falls_back_to_cpus_alone_and_keeps_the_old_policy():
    got = child(None, "apply_memory_policy('bind', CpuSet.parse('0'), fallback=True)")
    assert got == {"rung": "none", "policy": "default", "nodes": ""}


def test_refused_preferred_many_on_an_old_kernel_falls_back_to_preferred():
    # a kernel before 5.15 answers MPOL_PREFERRED_MANY with EINVAL; MPOL_PREFERRED keeps the first node
    got = child({MPOL_BIND: EPERM, MPOL_PREFERRED_MANY: EINVAL},
                "apply_memory_policy('bind', CpuSet.parse('0-1'), fallback=True)")
    assert got["rung"] == "preferred" and got["policy"] == "preferred"


def test_refused_preferred_many_with_eperm_is_not_retried_as_preferred():
    got = child({MPOL_BIND: EPERM, MPOL_PREFERRED_MANY: EPERM},
                "apply_memory_policy('bind', CpuSet.parse('0-1'), fallback=True)")
    assert got == {"rung": "none", "policy": "default", "nodes": ""}


def test_refused_preferred_with_fallback_gives_none():
    got = child({MPOL_PREFERRED: EPERM}, "apply_memory_policy('preferred', CpuSet.parse('0'), fallback=True)")
    assert got == {"rung": "none", "policy": "default", "nodes": ""}


def test_refusal_without_fallback_is_one_error_naming_the_option():
    got = child({MPOL_BIND: EPERM}, "apply_memory_policy('bind', CpuSet.parse('0'))")
    assert got["rung"].startswith("raised: set_mempolicy: Operation not permitted")
    assert "--bind-fallback tries 'preferred'" in got["rung"] and "\n" not in got["rung"]
    assert got["policy"] == "default"  # nothing was applied
    got = child({MPOL_BIND: EPERM}, "apply_memory_policy('bind', CpuSet.parse('0'), option='fallback=True')")
    assert "fallback=True tries 'preferred'" in got["rung"]


def test_unknown_policy_is_refused_before_any_call():
    from topo.binding import Binding

    with pytest.raises(ValueError, match="memory policy 'membind' is not one of"):
        Binding(memory_policy="membind")


@pytest.mark.parametrize("refuse, told, rung", [({MPOL_BIND: EPERM}, " memory=preferred:0", "preferred held"),
                                                (None, "", "CPUs alone held")])  # None: every mode refused
def test_topo_binding_tells_the_rung_that_held_after_a_fallback(tmp_path, refuse, told, rung):
    """A worker bound by system calls (no numactl) under --bind-fallback gets TOPO_BINDING as the
    kernel answered the ladder, not as asked."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    os.symlink(sys.executable, bindir / "python")
    (tmp_path / "job.py").write_text("import os; print('TOPO_BINDING=' + os.environ['TOPO_BINDING'])\n")
    code = f"""
        import io, os, sys
        import seccomp
        from topo.launcher import LaunchConfig, launch
        seccomp.refuse_set_mempolicy({refuse!r})
        config = LaunchConfig.from_flags({str(tmp_path / "job.py")!r}, worker_num=1, local_worker_num=1, join=True,
                                         scheduler=False, log_dir={str(tmp_path / "logs")!r},
                                         bind_numa='{{"device0": ["0"]}}', bind_fallback=True)
        result = launch(config, environ={{**os.environ, "PATH": {str(bindir)!r}}}, out=io.StringIO())
        print("exit", result.exit_code)
    """
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{ROOT / 'tests'}")
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=60)
    assert proc.returncode == 0 and "exit 0" in proc.stdout, proc.stdout + proc.stderr
    assert f"memory policy bind refused, {rung} (--bind-fallback)" in proc.stderr, proc.stderr
    log = (tmp_path / "logs" / "worker_0.log").read_text()
    assert re.search(rf"^TOPO_BINDING=cpus=[0-9,-]+{told}$", log, re.M), log


def test_a_refused_get_mempolicy_leaves_the_fallback_to_the_cpus(monkeypatch):
    """Docker's default seccomp profile refuses get_mempolicy as it refuses set_mempolicy."""
    from topo import syscalls
    from topo.binding import Binding
    from topo.cpuset import CpuSet

    def refuse(*args):
        raise syscalls.SyscallError("get_mempolicy" if not args else "set_mempolicy", EPERM)

    moved = []
    monkeypatch.setattr(syscalls, "get_mempolicy", refuse)
    monkeypatch.setattr(syscalls, "set_mempolicy", refuse)
    monkeypatch.setattr(os, "sched_setaffinity", lambda pid, cpus: moved.append(cpus))
    binding = Binding(CpuSet([0]), CpuSet([0]), "bind")
    assert syscalls.apply(binding, fallback=True) == binding.without_memory() and moved == [CpuSet([0])]
    with pytest.raises(syscalls.BindingRefused, match="^set_mempolicy: Operation not permitted"):
        syscalls.apply(binding)
