"""Binding late still ends local: set_affinity's migrate=True, threads="all", a launcher's binding
kept (TOPO_BINDING), planning under taskset, and the memory fallback ladder, in real processes.

This machine may have one NUMA node: pages that really move between nodes are checked in the
multi-NUMA VM; here the migration is checked through the kernel's answer and the page count."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from topo.launcher import affinity
from topo.binding import observe
from topo.launcher.affinity import AffinityError, bind_process
from topo import syscalls
from topo.cpuset import CpuSet
from topo import discover
from topo.synthetic import synthetic

import seccomp
from livehost import bind_core_cpus, cpus_text, hide_gpus, path_with_python, planned, planned_cpus

ROOT = Path(__file__).resolve().parent.parent
ALLOWED = sorted(os.sched_getaffinity(0))
TWO_CPUS = pytest.mark.skipif(len(ALLOWED) < 2, reason="needs two allowed CPUs")
TASKSET = pytest.mark.skipif(shutil.which("taskset") is None, reason="needs taskset (util-linux)")


def run(code: str, *prefix: str, **env) -> dict:
    """Run `code` in a fresh interpreter (after `prefix`, e.g. taskset), no GPU visible; it prints
    one JSON object as its last line, which is returned with the warnings it wrote to stderr."""
    full_env = hide_gpus({k: v for k, v in os.environ.items() if k not in ("TOPO_ROOT", "TOPO_BINDING")})
    full_env.update(env, PYTHONPATH=f"{ROOT}{os.pathsep}{ROOT / 'tests'}")
    proc = subprocess.run([*prefix, sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=full_env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return {**json.loads(proc.stdout.strip().splitlines()[-1]), "stderr": proc.stderr}


# ---- migrate=True ----------------------------------------------------------------------------


def test_pages_by_node_reads_this_process():
    pages = observe("self").pages_by_node
    assert pages and all(n >= 0 and count > 0 for n, count in pages.items())


def test_migrate_pages_is_a_real_system_call():
    home = CpuSet([min(observe("self").pages_by_node)])
    assert syscalls.migrate_pages(0, home, home) == 0  # from a node to itself: nothing to move
    assert syscalls.migrate_pages(0, CpuSet(), home) == 0
    with pytest.raises(syscalls.SyscallError, match=r"^migrate_pages: .* \(nodes 0 to 1023\)"):
        syscalls.migrate_pages(0, CpuSet([0]), CpuSet([1023]))  # no such node


def test_migrate_moves_the_pages_off_other_nodes_and_counts_them(monkeypatch):
    """What the kernel is asked, and the count: pages off the target before, less those off it after."""
    maps = iter([{0: 100, 1: 30, 2: 5}, {0: 10, 1: 125, 2: 0}])
    calls = []
    monkeypatch.setattr(affinity, "observe", lambda pid: SimpleNamespace(pages_by_node=next(maps)))
    monkeypatch.setattr(syscalls, "migrate_pages", lambda pid, old, new: calls.append((pid, old, new)) or 0)
    assert affinity.migrate_to(CpuSet([1])) == 95
    assert calls == [(0, CpuSet([0, 2]), CpuSet([1]))]


def test_a_refused_migration_names_the_option(monkeypatch):
    def refuse(pid, old, new):
        raise syscalls.SyscallError("migrate_pages", 22, f"nodes {old} to {new}")

    monkeypatch.setattr(affinity, "observe", lambda pid: SimpleNamespace(pages_by_node={0: 10, 1: 10}))
    monkeypatch.setattr(syscalls, "migrate_pages", refuse)
    with pytest.raises(AffinityError, match=r"^migrate=True: migrate_pages: Invalid argument \(nodes 0 to 1\): the "
                                            r"kernel refused to move the pages .*; pass migrate=False$"):
        affinity.migrate_to(CpuSet([1]))


def test_the_one_liner_binds_and_migrates():
    got = run("""
        import json, os, topo
        from topo.launcher.affinity import bind_process
        first = sorted(topo.set_affinity(0, 1, migrate=True))
        result = bind_process(0, 1, migrate=True, memory="bind")
        print(json.dumps({"first": first, "cpus": sorted(result.cpus), "memory": result.memory,
                          "pages": result.pages_moved, "applied": result.binding.applied_by,
                          "policy": result.binding.memory_policy}))
    """)
    assert got["first"] == got["cpus"] == ALLOWED  # one process: every allowed CPU
    assert got["pages"] == 0  # one node here: every page is already on it
    assert (got["memory"], got["policy"], got["applied"]) == ("bind", "bind", "system calls")


# ---- which threads move ----------------------------------------------------------------------


@TWO_CPUS
def test_threads_all_moves_threads_with_their_own_cpus_too():
    code = f"""
        import json, os, threading, topo
        from topo.launcher.affinity import bind_process
        ready, done, ids = threading.Barrier(2), threading.Event(), {{}}

        def pinned():                      # a thread that chose its own CPU
            os.sched_setaffinity(0, {{{ALLOWED[1]}}})
            ids["pinned"] = threading.get_native_id(); ready.wait(); done.wait()

        t = threading.Thread(target=pinned); t.start(); ready.wait()
        result = bind_process(0, 2, mode="single_unique", threads=os.environ["THREADS"])
        out = {{"main": sorted(result.cpus), "pinned": sorted(os.sched_getaffinity(ids["pinned"])),
               "moved": result.threads_moved}}
        done.set(); t.join()
        print(json.dumps(out))
    """
    shared = run(code, THREADS="shared")
    every = run(code, THREADS="all")
    first = planned_cpus(0, 2, mode="single_unique")
    assert shared["main"] == every["main"] == first
    # threads="all" moves the pinned thread besides what "shared" moves (threads the test did not
    # start, such as a GPU driver's, share the CPUs and move in both)
    assert shared["pinned"] == [ALLOWED[1]] and every["pinned"] == first
    assert every["moved"] - shared["moved"] == 1


# ---- a launcher's binding is kept --------------------------------------------------------------


KEEP = """
    import json, os, warnings
    from topo.launcher.affinity import bind_process
    from topo import syscalls
    from topo.cpuset import CpuSet
    if os.environ.get("POLICY"):
        syscalls.set_mempolicy(os.environ["POLICY"], CpuSet([0]))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = bind_process(1, 2, mode="single_unique")
    print(json.dumps({"cpus": sorted(result.cpus), "kept": result.kept,
                      "warnings": [str(w.message) for w in caught if 'hides every GPU' not in str(w.message)]}))
"""


@TWO_CPUS
@TASKSET
def test_a_process_a_launcher_bound_keeps_its_binding():
    # started on CPU 0 with its memory bound, as `topo launch` leaves it: rank 1 of 2 would be CPU 1
    got = run(KEEP, "taskset", "-c", str(ALLOWED[0]), TOPO_BINDING=f"cpus={ALLOWED[0]} memory=bind:0", POLICY="bind")
    assert got["cpus"] == [ALLOWED[0]] and got["kept"]
    assert got["warnings"] == [f"set_affinity: keeping the binding the launcher applied (TOPO_BINDING='cpus="
                               f"{ALLOWED[0]} memory=bind:0'); unset TOPO_BINDING to plan again"]


@TWO_CPUS
@TASKSET
def test_a_binding_changed_since_the_launcher_is_planned_again():
    # the variable says rank 1's CPUs but the process runs on all: it rebound itself, set_affinity plans
    second = planned_cpus(1, 2, mode="single_unique")
    got = run(KEEP, TOPO_BINDING=f"cpus={cpus_text(second)}")
    assert got["cpus"] == second and not got["kept"] and got["warnings"] == []
    # the CPUs match but the memory policy the variable names is not the process's any more
    got = run(KEEP.replace('bind_process(1, 2, mode="single_unique")', "bind_process(0, 1)"),
              "taskset", "-c", str(ALLOWED[0]), TOPO_BINDING=f"cpus={ALLOWED[0]} memory=bind:0")
    assert got["cpus"] == [ALLOWED[0]] and not got["kept"] and got["warnings"] == []


def test_a_malformed_topo_binding_is_one_error(monkeypatch):
    monkeypatch.setenv("TOPO_BINDING", "cpus=0 gpus=1")
    with pytest.raises(AffinityError, match=r"^TOPO_BINDING: 'gpus=1' is not cpus=LIST or memory=POLICY:NODES "
                                            r"\(each once\): topo's launchers write .*; unset TOPO_BINDING to let "
                                            r"set_affinity plan$"):
        bind_process(0, 1)


# ---- under taskset -----------------------------------------------------------------------------


def test_a_restriction_that_leaves_nothing_is_named():
    # two sockets of 4 cores, 2 GPUs on each; taskset -c 0-1
    t = synthetic("pack:2 numa:1 l3:1 core:4 pu:1", gpus_per_numa=2, allowed="0-1")
    pci = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    with pytest.raises(AffinityError) as err:
        affinity.plan_affinity(t, 3, env=pci)
    assert str(err.value).startswith("mode 'unique-contiguous' cannot give each of 4 processes its CPUs within the "
                                     "CPUs this process may use (0-1 of 0-7: taskset, numactl, the cgroup's cpuset "
                                     "or the batch system restrict them)")
    assert str(err.value).endswith("; widen the restriction, start fewer processes, or use a mode that shares CPUs "
                                   "(node, single)")
    assert "GPU rank" not in str(err.value) and "predefinied" not in str(err.value)
    # what fits is planned within the allowed CPUs, as gpu_affinity does
    assert str(affinity.plan_affinity(t, 3, mode="single", env=pci).cpus) == "0"


def test_more_processes_than_cores_without_accelerators_is_said_so():
    # set_affinity(1, 3) on two cores and no GPU: gpu_affinity's words spoke of "GPU rank 0" and
    # listed no cores
    t = synthetic("pack:1 numa:1 l3:1 core:2 pu:1")
    with pytest.raises(AffinityError) as err:
        affinity.plan_affinity(t, 1, 3)
    assert str(err.value) == (
        "local rank 0 gets 0 physical cores (none), fewer than min_physical_cores=1: without accelerators the "
        "allowed cores are split among the job's 3 processes; start fewer processes, use a mode that shares "
        "cores (node, single) or lower min_physical_cores")


@TWO_CPUS
@TASKSET
def test_under_taskset_the_plan_stays_within_the_allowed_cpus():
    code = """
        import json, topo
        try:
            print(json.dumps({"cpus": sorted(topo.set_affinity(0, 1))}))
        except topo.AffinityError as exc:
            print(json.dumps({"error": str(exc)}))
    """
    assert run(code, "taskset", "-c", str(ALLOWED[1]))["cpus"] == [ALLOWED[1]]
    got = run(code.replace("set_affinity(0, 1)", "set_affinity(1, 2, mode='single_unique')"),
              "taskset", "-c", str(ALLOWED[1]))
    assert "within the CPUs this process may use" in got["error"] and "taskset" in got["error"]


# ---- the memory fallback ladder --------------------------------------------------------------


@pytest.mark.skipif(not seccomp.supported(), reason="seccomp filter written for x86_64 and aarch64")
def test_bind_fallback_under_a_refused_mpol_bind():
    code = """
        import json, os, warnings
        import seccomp
        from topo.launcher.affinity import AffinityError, bind_process
        from topo import syscalls
        seccomp.refuse_set_mempolicy({2: 1})  # MPOL_BIND: EPERM
        out = {}
        nproc = int(os.environ["NPROC"])  # rank 0 of one process per NUMA node: one node
        try:
            bind_process(0, nproc, memory="bind")
        except AffinityError as exc:
            out["error"] = str(exc)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = bind_process(0, nproc, memory="bind", bind_fallback=True)
        out.update(rung=result.memory, policy=result.binding.memory_policy, kernel=syscalls.get_mempolicy()[0],
                   warnings=[str(w.message) for w in caught if 'hides every GPU' not in str(w.message)])
        print(json.dumps(out))
    """
    nproc = len(discover("/").cpu_nodes())
    got = run(code, NPROC=str(nproc))
    nodes = planned(0, nproc, memory="bind").memory_nodes
    assert got["error"].startswith(f"memory='bind': set_mempolicy: Operation not permitted (bind {nodes})")
    assert "bind_fallback=True tries 'preferred', then binds CPUs alone" in got["error"]
    assert (got["rung"], got["policy"], got["kernel"]) == ("preferred", "preferred", "preferred")
    assert got["warnings"] == ["set_affinity: memory='bind' was refused by the kernel; bind_fallback: memory "
                               f"preferred on node(s) {nodes}"]


@TWO_CPUS
def test_workers_topo_launch_bound_keep_their_binding(tmp_path):
    """`topo launch --bind_core=True` binds each worker and says so in TOPO_BINDING; the worker's
    own set_affinity then keeps that binding instead of planning within it."""
    script = tmp_path / "worker.py"
    script.write_text(textwrap.dedent("""
        import json, os, sys, warnings
        from topo.launcher.affinity import bind_process
        rank = int(os.environ["LOCAL_RANK"])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = bind_process(rank)
        with open(os.path.join(sys.argv[1], f"rank_{rank}.json"), "w") as fh:
            json.dump({"cpus": sorted(result.cpus), "kept": result.kept, "binding": os.environ["TOPO_BINDING"],
                       "warnings": [str(w.message) for w in caught if 'hides every GPU' not in str(w.message)]}, fh)
    """))
    env = hide_gpus({k: v for k, v in os.environ.items() if k != "TOPO_BINDING"})
    env["PATH"] = path_with_python()  # `python` = this one
    env["PYTHONPATH"] = str(ROOT)
    result = subprocess.run([sys.executable, "-m", "topo", "launch", "--worker_num=2", "--local_worker_num=2",
                             "--join=True", "--no-scheduler", "--bind_core=True", f"--log_dir={tmp_path / 'logs'}",
                             str(script), str(tmp_path)], env=env, cwd=tmp_path, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    for rank, cpus in enumerate(bind_core_cpus(2)):
        got = json.loads((tmp_path / f"rank_{rank}.json").read_text())
        assert got["kept"] and got["cpus"] == cpus and got["binding"].startswith(f"cpus={cpus_text(cpus)}")
        assert got["warnings"] == [f"set_affinity: keeping the binding the launcher applied "
                                   f"(TOPO_BINDING={got['binding']!r}); unset TOPO_BINDING to plan again"]
