"""topo.set_affinity on this machine, in real processes: what each rank gets, which threads move,
the memory policy as the kernel reports it, and the errors (one line, nothing applied)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

import topo
from topo.launcher import affinity
from topo.launcher.affinity import AffinityError
from topo.cpuset import CpuSet

from livehost import NO_GPUS, cpus_text, hide_gpus, path_with_python, planned, planned_cpus

ALLOWED = sorted(os.sched_getaffinity(0))
TWO_CPUS = pytest.mark.skipif(len(ALLOWED) < 2, reason="needs two allowed CPUs")


@pytest.fixture(autouse=True)
def no_gpus(monkeypatch):
    """The view these tests pin, in this process and the ones it starts: no GPU visible, so that
    the processes of a job share the allowed CPUs on any host (livehost)."""
    for name, value in NO_GPUS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)


def run(code: str, **env) -> dict:
    """Run `code` in a fresh interpreter, no GPU visible; it prints one JSON object as its last line."""
    full_env = hide_gpus({k: v for k, v in os.environ.items() if k != "TOPO_ROOT"})
    full_env.update(env)
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=full_env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@TWO_CPUS
def test_two_ranks_get_disjoint_cpus_that_cover_the_allowed_ones():
    code = """
        import json, os, topo
        cpus = topo.set_affinity(int(os.environ["LOCAL_RANK"]))
        print(json.dumps({"returned": sorted(cpus), "now": sorted(os.sched_getaffinity(0))}))
    """
    ranks = [run(code, LOCAL_RANK=str(r), LOCAL_WORLD_SIZE="2") for r in range(2)]
    for r in ranks:
        assert r["returned"] == r["now"] and r["now"]
    assert not set(ranks[0]["now"]) & set(ranks[1]["now"])
    # no GPU is visible: the ranks split the allowed CPUs, lower rank first
    assert sorted(ranks[0]["now"] + ranks[1]["now"]) == ALLOWED
    assert ranks[0]["now"][0] == ALLOWED[0]


@TWO_CPUS
def test_threads_started_before_move_and_threads_with_their_own_affinity_stay():
    result = run(f"""
        import json, os, threading, topo
        first = {ALLOWED[0]}
        ready, done, ids = threading.Barrier(3), threading.Event(), {{}}

        def plain():                      # a library's thread, started at import time
            ids["plain"] = threading.get_native_id(); ready.wait(); done.wait()

        def pinned():                     # a thread that chose its own CPUs
            os.sched_setaffinity(0, {{first}})
            ids["pinned"] = threading.get_native_id(); ready.wait(); done.wait()

        threads = [threading.Thread(target=plain, daemon=True), threading.Thread(target=pinned, daemon=True)]
        for t in threads:
            t.start()
        ready.wait(timeout=60)
        try:
            cpus = topo.set_affinity(1, 2)
            later = {{}}
            t = threading.Thread(target=lambda: later.update(cpus=sorted(os.sched_getaffinity(0))))
            t.start(); t.join()
            out = {{name: sorted(os.sched_getaffinity(tid)) for name, tid in ids.items()}}
        finally:
            done.set()
        print(json.dumps({{"main": sorted(cpus), "later": later["cpus"], **out}}))
    """)
    assert result["main"] and ALLOWED[0] not in result["main"]  # rank 1 of 2: not the first CPU
    assert result["plain"] == result["main"]
    assert result["later"] == result["main"]
    assert result["pinned"] == [ALLOWED[0]]


POLICY_CODE = """
    import json, topo
    from topo import syscalls
    topo.set_affinity(0, {nproc}, mode="node", memory={memory!r})
    policy, nodes = syscalls.get_mempolicy()
    with open("/proc/thread-self/numa_maps") as f:
        maps = f.readline().split()[1]
    print(json.dumps({{"policy": policy, "nodes": nodes.to_list(), "numa_maps": maps}}))
"""


@pytest.mark.parametrize("memory, policy, numa_maps", [
    ("bind", "bind", "bind:{node}"),
    ("preferred", "preferred", "prefer:{node}"),
    ("local", "local", "local"),
])
def test_memory_policy_as_the_kernel_reports_it(memory, policy, numa_maps):
    # rank 0 of one process per NUMA node: one node's CPUs and memory
    nproc = len(topo.discover("/").cpu_nodes())
    node = planned(0, nproc, mode="node", memory="bind").memory_nodes
    assert node.weight() == 1
    result = run(POLICY_CODE.format(memory=memory, nproc=nproc))
    assert result["policy"] == policy
    assert result["nodes"] == ("" if memory == "local" else str(node))
    assert result["numa_maps"] == numa_maps.format(node=node)


def test_memory_none_leaves_the_policy_alone():
    result = run(POLICY_CODE.format(memory=None, nproc=1))
    assert result == {"policy": "default", "nodes": "", "numa_maps": "default"}


def test_gpu_affinity_enum_members_and_dashes_are_accepted():
    """gpu_affinity's Mode/Scope/Multithreading are enums whose value is the string."""
    result = run("""
        import enum, json, topo

        class Mode(enum.Enum):
            UNIQUE_INTERLEAVED = "unique_interleaved"

        class Multithreading(enum.Enum):
            SINGLE_LOGICAL = "single_logical"

        a = topo.set_affinity(0, 1, mode=Mode.UNIQUE_INTERLEAVED, multithreading=Multithreading.SINGLE_LOGICAL)
        b = topo.set_affinity(0, 1, mode="unique-interleaved", scope="NODE", multithreading="single-logical")
        print(json.dumps([sorted(a), sorted(b)]))
    """)
    assert result[0] == result[1] and result[0]


# ---- in this process: errors before anything is applied -------------------------------------


@pytest.fixture
def untouched(monkeypatch):
    """Fail the test if set_affinity changes this process's CPUs or memory policy."""
    from topo import syscalls

    calls = []
    monkeypatch.setattr(os, "sched_setaffinity", lambda *a: calls.append(("sched_setaffinity", a)))
    monkeypatch.setattr(syscalls, "set_mempolicy", lambda *a: calls.append(("set_mempolicy", a)))
    yield calls
    assert calls == []


@pytest.mark.parametrize("kwargs, message", [
    ({"device_id": 2, "nproc_per_node": 2}, "device_id=2 should be smaller than nproc_per_node=2"),
    ({"device_id": -1}, "device_id must be a local index, a GPU-/MIG- UUID (nvidia-smi -L), a bare UUID, or a "
                        "PCI bus id such as 0000:3b:00.0; got -1"),
    ({"device_id": 1.0}, "device_id must be a local index, a GPU-/MIG- UUID"),
    ({"device_id": ""}, "device_id '' is not a device: give a local index, a GPU-/MIG- UUID"),
    ({"device_id": "3b:00.0"}, "device '3b:00.0': no accelerator at PCI bus id 0000:3b:00.0"),
    ({"device_id": "rank0"}, "device 'rank0' is not a device name: give a local index, a GPU-/MIG- UUID"),
    ({"device_id": 0, "nproc_per_node": 0}, "nproc_per_node must be a positive number of processes; got 0"),
    # bounded before anything is allocated (a MemoryError and an OverflowError once)
    ({"device_id": 0, "nproc_per_node": 2**62}, "nproc_per_node=4611686018427387904 is more than 65536, the most"),
    ({"device_id": 0, "nproc_per_node": 2**70}, "nproc_per_node=1180591620717411303424 is more than 65536"),
    ({"device_id": 2**62}, "device_id=4611686018427387904 is past 65535, the largest local device index"),
    ({"device_id": "9" * 5000}, "is past 65535, the largest local device index"),
    ({"device_id": 0, "threads": "some"}, "threads must be one of 'shared', 'all'; got 'some'"),
    ({"device_id": 0, "mode": "fastest"}, "unknown mode 'fastest'; choose one of msrun-auto, node"),
    ({"device_id": 0, "mode": 3}, "mode must be a string such as 'unique_contiguous'; got 3"),
    ({"device_id": 0, "scope": "rack"}, "scope must be one of node, socket; got 'rack'"),
    ({"device_id": 0, "multithreading": "half"}, "multithreading must be one of all-logical, single-logical"),
    ({"device_id": 0, "memory": "interleave"}, "memory must be None, 'local', 'bind', 'preferred'; got 'interleave'"),
    ({"device_id": 0, "nproc_per_node": 1, "min_physical_cores": 4096},
     "fewer than min_physical_cores=4096: without accelerators the allowed cores are split among the job's 1 "
     "process; start fewer processes"),
    ({"device_id": 0, "nproc_per_node": 4096, "mode": "single-unique"}, "single-unique needs one physical core"),
])
def test_errors_say_what_and_apply_nothing(untouched, kwargs, message):
    with pytest.raises(AffinityError) as err:
        topo.set_affinity(**kwargs)
    assert message in str(err.value)
    assert "\n" not in str(err.value)
    assert isinstance(err.value, topo.TopoError)


def test_a_uuid_prefix_no_gpu_has_is_refused(untouched):
    # the GPUs have UUIDs where NVML runs (topo show --json lists them)
    uuids = [d.uuid for d in topo.discover("/").devices if d.kind == "gpu" and d.uuid]
    with pytest.raises(AffinityError) as err:
        topo.set_affinity("GPU-zz")
    why = "no GPU UUID starts with 'GPU-zz'" if uuids else "names 'GPU-zz' but the topology has no GPU UUIDs"
    assert str(err.value).startswith("device 'GPU-zz'") and why in str(err.value) and "\n" not in str(err.value)


def test_error_names_the_parameter_not_the_command_line_flag(untouched):
    with pytest.raises(AffinityError) as err:
        topo.set_affinity(0, 1, min_physical_cores=4096)
    assert "lower min_physical_cores" in str(err.value) and "--" not in str(err.value)


def test_device_count_from_local_world_size(untouched, monkeypatch):
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "3")
    with pytest.raises(AffinityError, match=r"device_id=3 should be smaller than nproc_per_node=3 "
                                            r"\(from LOCAL_WORLD_SIZE\)"):
        topo.set_affinity(3)
    for bad in ("two", "\u00b2", "\u0661", "9" * 5000):  # SUPERSCRIPT TWO, ARABIC-INDIC ONE: int() misreads them
        monkeypatch.setenv("LOCAL_WORLD_SIZE", bad)
        with pytest.raises(AffinityError, match=f"LOCAL_WORLD_SIZE='{bad[:20]}.*' is not a positive number"):
            topo.set_affinity(0)


def test_refused_memory_policy_leaves_the_cpus_alone(monkeypatch):
    """A container without CAP_SYS_NICE: set_mempolicy fails with EPERM before any CPU moves."""
    from topo import syscalls

    def refuse(policy, nodes=CpuSet()):
        raise syscalls.SyscallError("set_mempolicy", 1, f"{policy} {nodes}")

    moved = []
    monkeypatch.setattr(syscalls, "set_mempolicy", refuse)
    monkeypatch.setattr(os, "sched_setaffinity", lambda *a: moved.append(a))
    with pytest.raises(AffinityError) as err:
        topo.set_affinity(0, 1, mode="node", memory="bind")
    assert str(err.value).startswith("memory='bind': set_mempolicy: Operation not permitted (bind ")
    assert "bind_fallback=True tries 'preferred', then binds CPUs alone" in str(err.value)
    assert "pass memory=None to bind CPUs only" in str(err.value)
    assert moved == []


@TWO_CPUS
def test_shared_cpus_come_with_advice_on_omp_num_threads(monkeypatch):
    """Never oversubscribed by default: ranks that share CPUs are told how many threads to run."""
    from topo.launcher.affinity import bind_process

    monkeypatch.setattr(os, "sched_setaffinity", lambda *a: None)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("TOPO_BINDING", raising=False)
    nproc = 2 * len(topo.discover("/").cpu_nodes())  # two processes per NUMA node
    cpus = planned_cpus(1, nproc, mode="node")
    share = sum(1 for r in range(nproc) if set(planned_cpus(r, nproc, mode="node")) & set(cpus))
    n = max(1, len(cpus) // share)
    with pytest.warns(UserWarning, match=rf"^set_affinity: CPUs {cpus_text(cpus)} are shared by {share} of the "
                                         rf"job's processes: set OMP_NUM_THREADS={n} \(or torch.set_num_threads"
                                         rf"\({n}\)\) so that they do not run more threads than CPUs$"):
        assert bind_process(1, nproc, mode="node").omp_threads == n
    assert bind_process(0, nproc).omp_threads is None  # unique CPUs: nothing to divide
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert bind_process(1, nproc, mode="node").omp_threads is None  # the user's choice stands


def test_numbers_too_long_to_print_are_refused_in_one_line(untouched):
    with pytest.raises(AffinityError, match=r"^device_id=a number of 16610 bits is past 65535"):
        topo.set_affinity(10**5000)
    with pytest.raises(AffinityError, match=r"^nproc_per_node=a number of 16610 bits is more than 65536"):
        topo.set_affinity(0, 10**5000)


def test_machine_is_discovered_once_per_process(monkeypatch):
    calls = []
    real = affinity.discover
    monkeypatch.setattr(affinity, "discover", lambda *a, **k: calls.append(a) or real(*a, **k))
    affinity.this_machine.cache_clear()
    monkeypatch.setattr(os, "sched_setaffinity", lambda *a: None)
    try:
        first = topo.set_affinity(0, 1)
        second = topo.set_affinity(0, 1, mode="node")
    finally:
        affinity.this_machine.cache_clear()
    assert calls == [("/",)]  # this machine, whatever TOPO_ROOT says
    assert first == second == os.sched_getaffinity(0)


def test_from_topo_import_set_affinity():
    from topo import set_affinity

    assert set_affinity is affinity.set_affinity
    assert topo.AffinityError is affinity.AffinityError
    assert "set_affinity" in topo.__all__ and "AffinityError" in topo.__all__


def test_refused_cpus_restore_the_memory_policy(monkeypatch):
    from topo import syscalls

    calls = []
    monkeypatch.setattr(syscalls, "get_mempolicy", lambda: ("default", CpuSet()))
    monkeypatch.setattr(syscalls, "set_mempolicy", lambda *a: calls.append(a))

    def refuse(pid, cpus):
        raise OSError(22, "Invalid argument")

    monkeypatch.setattr(os, "sched_setaffinity", refuse)
    with pytest.raises(AffinityError, match=r"sched_setaffinity to CPUs .*: Invalid argument: the kernel refused"):
        topo.set_affinity(0, 1, mode="node", memory="bind")
    nodes = planned(0, 1, mode="node", memory="bind").memory_nodes
    assert calls == [("bind", nodes), ("default", CpuSet())]


def test_preferred_on_several_nodes_uses_preferred_many_or_the_first_node(monkeypatch):
    """MPOL_PREFERRED keeps one node; Linux 5.15+ prefers several with MPOL_PREFERRED_MANY, and an
    older kernel's EINVAL falls back to the first node."""
    from topo import syscalls
    from topo.binding import Binding

    two = Binding(None, CpuSet([0, 1]), "preferred")
    calls = []
    monkeypatch.setattr(syscalls, "get_mempolicy", lambda: ("default", CpuSet()))
    monkeypatch.setattr(syscalls, "set_mempolicy", lambda *a: calls.append(a))
    assert syscalls.apply(two) == two
    assert calls == [("preferred-many", CpuSet([0, 1]))]

    def old_kernel(policy, nodes=CpuSet()):
        calls.append((policy, nodes))
        if policy == "preferred-many":
            raise syscalls.SyscallError("set_mempolicy", 22)

    calls.clear()
    monkeypatch.setattr(syscalls, "set_mempolicy", old_kernel)
    assert syscalls.apply(two) == two
    assert calls == [("preferred-many", CpuSet([0, 1])), ("preferred", CpuSet([0, 1]))]


@TWO_CPUS
def test_workers_of_topo_launch_bind_themselves(tmp_path):
    """`topo launch` sets LOCAL_RANK and LOCAL_WORLD_SIZE; each worker's set_affinity(LOCAL_RANK)
    then takes its own share of the CPUs, with no binding asked of the launcher."""
    script = tmp_path / "worker.py"
    script.write_text(textwrap.dedent("""
        import json, os, sys, topo
        rank = int(os.environ["LOCAL_RANK"])
        cpus = topo.set_affinity(rank)
        with open(os.path.join(sys.argv[1], f"rank_{rank}.json"), "w") as fh:
            json.dump(sorted(cpus), fh)
    """))
    env = hide_gpus(os.environ)
    env["PATH"] = path_with_python()  # `python` = this one
    result = subprocess.run([sys.executable, "-m", "topo", "launch", "--worker_num=2", "--local_worker_num=2",
                             "--join=True", "--no-scheduler", f"--log_dir={tmp_path / 'logs'}", str(script),
                             str(tmp_path)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    ranks = [json.loads((tmp_path / f"rank_{r}.json").read_text()) for r in range(2)]
    assert ranks[0] and ranks[1] and not set(ranks[0]) & set(ranks[1])
    assert sorted(ranks[0] + ranks[1]) == ALLOWED
