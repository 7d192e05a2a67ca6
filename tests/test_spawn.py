"""Binding at birth: launcher.spawn's bound_argv (subprocess) and start_bound (multiprocessing's
spawn and forkserver), with real children that read their own /proc/self/status and numa_maps."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import pytest

from topo.launcher.affinity import AffinityError
from topo.launcher.spawn import bound_argv, start_bound
from topo import syscalls
from topo.cpuset import CpuSet

import seccomp
from livehost import NO_GPUS, cpus_text, planned_cpus

ROOT = Path(__file__).resolve().parent.parent
ALLOWED = sorted(os.sched_getaffinity(0))
pytestmark = pytest.mark.skipif(len(ALLOWED) < 2, reason="needs two allowed CPUs")


@pytest.fixture(autouse=True)
def no_gpus(monkeypatch):
    """Two processes on any host: with no GPU visible they share the allowed CPUs, and each gets
    set_affinity's plan for them (planned_cpus)."""
    for name, value in NO_GPUS.items():
        monkeypatch.setenv(name, value)


def where_am_i() -> dict:
    """What a child sees of itself: allowed CPUs, the memory policy of its first mapping (the
    program's own text, mapped at exec), its TOPO_BINDING."""
    with open("/proc/self/status") as fh:
        cpus = next(line.split(":", 1)[1].strip() for line in fh if line.startswith("Cpus_allowed_list"))
    with open("/proc/self/numa_maps") as fh:
        policy = fh.readline().split()[1]
    return {"cpus": cpus, "policy": policy, "binding": os.environ.get("TOPO_BINDING"),
            "omp": os.environ.get("OMP_NUM_THREADS")}


CHILD = [sys.executable, "-c", "import json, sys; sys.path.insert(0, sys.argv[1]); import test_spawn; "
         "print(json.dumps(test_spawn.where_am_i()))", str(Path(__file__).parent)]


def run(argv, *, refuse=None) -> subprocess.CompletedProcess:
    """Run `argv`; with `refuse`, under a seccomp filter refusing those set_mempolicy modes."""
    if refuse is not None:
        argv = [sys.executable, "-c", "import os, sys, seccomp; seccomp.refuse_set_mempolicy(eval(sys.argv[1])); "
                "os.execv(sys.argv[2], sys.argv[2:])", repr(refuse), *argv]
    env = {k: v for k, v in os.environ.items() if k not in ("TOPO_BINDING", "OMP_NUM_THREADS")}
    env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{ROOT / 'tests'}"
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)


# ---- subprocess --------------------------------------------------------------------------------


def test_bound_argv_starts_the_command_bound():
    argv = bound_argv(CHILD, 1, 2, memory="bind")
    assert argv[:3] == [sys.executable, "-m", "topo.launcher.bindexec"] and argv[-len(CHILD):] == CHILD
    proc = run(argv)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    cpus = cpus_text(planned_cpus(1, 2))
    assert got["cpus"] == cpus
    assert got["policy"].startswith("bind:")
    assert got["binding"] == f"cpus={cpus} memory={got['policy']}"


def test_bound_argv_cpus_only_leaves_memory_alone(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    proc = run(bound_argv(CHILD, 0, 2))
    got = json.loads(proc.stdout)
    cpus = planned_cpus(0, 2)
    assert (got["cpus"], got["policy"], got["binding"]) == (cpus_text(cpus), "default", f"cpus={cpus_text(cpus)}")
    assert got["omp"] == str(len(cpus))  # its CPUs, as topo launch sets it


def test_bound_argv_divides_shared_cpus_among_the_processes(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    argv = bound_argv(CHILD, 1, 2, mode="node")  # both ranks on every CPU of a one-node machine
    cpus = planned_cpus(1, 2, mode="node")
    threads = max(1, len(cpus) // sum(1 for r in range(2) if set(planned_cpus(r, 2, mode="node")) & set(cpus)))
    assert f"--env=OMP_NUM_THREADS={threads}" in argv
    got = json.loads(run(argv).stdout)
    assert got["cpus"] == cpus_text(cpus) and got["omp"] == str(threads)
    monkeypatch.setenv("OMP_NUM_THREADS", "7")  # the user's choice wins
    assert not any(a.startswith("--env=") for a in bound_argv(CHILD, 1, 2, mode="node"))


@pytest.mark.skipif(not seccomp.supported(), reason="seccomp filter written for x86_64 and aarch64")
def test_bound_argv_where_the_kernel_refuses_mpol_bind():
    first = cpus_text(planned_cpus(0, 2))
    refused = run(bound_argv(CHILD, 0, 2, memory="bind"), refuse={2: 1})
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr.startswith("topo: error: set_mempolicy: Operation not permitted (bind ")
    assert "--bind-fallback tries 'preferred', then binds CPUs alone" in refused.stderr
    relaxed = run(bound_argv(CHILD, 0, 2, memory="bind", bind_fallback=True), refuse={2: 1})
    assert relaxed.returncode == 0, relaxed.stderr
    got = json.loads(relaxed.stdout)
    assert got["policy"].startswith("prefer:") and got["cpus"] == first
    assert got["binding"] == f"cpus={first} memory=preferred:{got['policy'].split(':')[1]}"
    node = got["policy"].split(":")[1]
    assert relaxed.stderr == (f"topo: the kernel refused the memory policy of CPUs {first}, memory bound to "
                              f"node {node}; --bind-fallback: CPUs {first}, memory preferred on node {node}\n")
    alone = run(bound_argv(CHILD, 0, 2, memory="bind", bind_fallback=True), refuse=None)
    assert json.loads(alone.stdout)["policy"].startswith("bind:")
    cpus_only = run(bound_argv(CHILD, 0, 2, memory="preferred", bind_fallback=True), refuse={1: 1, 5: 1})
    got = json.loads(cpus_only.stdout)
    assert (got["policy"], got["binding"]) == ("default", f"cpus={first}")


def test_the_prefix_exits_as_a_shell_does():
    missing = run(bound_argv(["no-such-command-here"], 0, 2))
    assert missing.returncode == 127 and "topo: error: no-such-command-here: No such file" in missing.stderr
    malformed = run([sys.executable, "-m", "topo.launcher.bindexec", "cpus=x", "--", "true"])
    assert malformed.returncode == 2 and malformed.stderr.startswith("topo: error: ")
    bad_env = run([sys.executable, "-m", "topo.launcher.bindexec", "--env=1X=2", "cpus=0", "--", "true"])
    assert bad_env.returncode == 2 and "'--env=1X=2' is not --env=NAME=VALUE" in bad_env.stderr
    no_command = run([sys.executable, "-m", "topo.launcher.bindexec", "cpus=0"])
    assert no_command.returncode == 2 and "no '--' before the command" in no_command.stderr


def test_bound_argv_checks_its_arguments_first():
    with pytest.raises(AffinityError, match="bound_argv: the command is empty"):
        bound_argv([], 0, 2)
    with pytest.raises(AffinityError, match="device_id=2 should be smaller than nproc_per_node=2"):
        bound_argv(["true"], 2, 2)


# ---- multiprocessing ---------------------------------------------------------------------------


def report(queue) -> None:
    queue.put(where_am_i())


class OwnRun(multiprocessing.get_context("forkserver").Process):
    def run(self):
        pass


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_start_bound_binds_each_child(method, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    ctx = multiprocessing.get_context(method)
    before = (os.sched_getaffinity(0), syscalls.get_mempolicy(), os.environ.get("TOPO_BINDING"),
              os.environ.get("OMP_NUM_THREADS"))
    queue = ctx.Queue()
    children = [ctx.Process(target=report, args=(queue,)) for _ in range(2)]
    bindings = [start_bound(child, rank, 2, memory="bind") for rank, child in enumerate(children)]
    got = sorted((queue.get(timeout=60) for _ in children), key=lambda g: g["cpus"])
    for child in children:
        child.join(60)
        assert child.exitcode == 0
    planned = [planned_cpus(r, 2) for r in range(2)]
    assert [g["cpus"] for g in got] == sorted(cpus_text(c) for c in planned)
    assert [b.cpus for b in bindings] == [CpuSet(c) for c in planned]
    for g, b in zip(got, sorted(bindings, key=lambda b: str(b.cpus))):
        assert g["binding"] == b.env_value() and g["omp"] == str(len(b.cpus))
        assert g["policy"] == f"bind:{b.memory_nodes}"
    # the parent's thread has its own binding back
    assert (os.sched_getaffinity(0), syscalls.get_mempolicy(), os.environ.get("TOPO_BINDING"),
            os.environ.get("OMP_NUM_THREADS")) == before


def test_start_bound_refuses_what_it_cannot_bind_at_birth():
    with pytest.raises(AffinityError, match=r"start method 'fork' copies this process, pages and all; use spawn"):
        start_bound(multiprocessing.get_context("fork").Process(target=print), 0, 2)
    with pytest.raises(AffinityError, match=r"OwnRun overrides run\(\), which forkserver children run without a hook"):
        start_bound(OwnRun(), 0, 2)
