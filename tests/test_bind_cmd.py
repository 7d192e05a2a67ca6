"""topo bind: one process's binding from a bind JSON, applied before exec (through numactl like
msrun, or with system calls when numactl is not installed)."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import shutil
import subprocess
import sys

import pytest

from topo.launcher.bindcmd import plan_bind
from topo.launcher.localrank import LAUNCHERS, local_rank
from topo.errors import UsageError
from topo.synthetic import synthetic

BIG = dataclasses.replace(synthetic("pack:2 numa:2 core:8 pu:1", gpus_per_numa=1), root="/")
BUS_ORDER = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}  # the synthetic GPUs count as different models
# what a child prints: its CPUs and its memory policy
PROBE = ("import os; print(sorted(os.sched_getaffinity(0)), open('/proc/self/numa_maps').readline().split()[1], "
         "os.environ.get('MSRUN_BIND_FILE'), os.environ.get('OMP_NUM_THREADS'))")
needs_two_cpus = pytest.mark.skipif(not {0, 1} <= os.sched_getaffinity(0), reason="needs CPUs 0 and 1")


@pytest.fixture
def bind_file(tmp_path):
    path = tmp_path / "bind.json"
    path.write_text(json.dumps({
        "bind_config": {"bind_cpu_mode": "cpu", "bind_memory_mode": "numa"},
        "bind_cpu": {"device0": {"main": "1"}, "device1": {"main": "0"}, "device2": {"main": "0-1"}},
        "bind_memory": {"device1": 0}}))
    return str(path)


def topo_bind(*args, env=None):
    base = {k: v for k, v in os.environ.items() if k not in [var for _, var, _ in LAUNCHERS] + ["OMP_NUM_THREADS"]}
    return subprocess.run([sys.executable, "-m", "topo", "bind", *args], capture_output=True, text=True,
                          timeout=60, env={**base, **(env or {})})


# ------------------------------------------------------------------ local rank
def test_local_rank_comes_from_the_innermost_launcher_variable():
    # mpirun inside an sbatch script: the batch step's SLURM_LOCALID=0 is every rank's, Open MPI's is each rank's own
    assert local_rank({"SLURM_LOCALID": "0", "OMPI_COMM_WORLD_LOCAL_RANK": "5"}) == 5
    assert local_rank({"LOCAL_RANK": "1", "SLURM_LOCALID": "2"}) == 1
    assert local_rank({"MPI_LOCALRANKID": "3"}) == 3
    assert local_rank({"LOCAL_RANK": "1"}, 4) == 4


def test_local_rank_errors():
    with pytest.raises(UsageError, match="no launcher variable gives this process's local rank \\(LOCAL_RANK, "
                                         "OMPI_COMM_WORLD_LOCAL_RANK, .*SLURM_LOCALID\\): run topo bind under a "
                                         "launcher, or pass --local-rank$"):
        local_rank({})
    for bad in ("x", "-1", "\u00b2", "\u0661", "1_0"):  # int() took the last two as 1 and 10
        with pytest.raises(UsageError, match=f"SLURM_LOCALID='{bad}' is not a number from 0 to"):
            local_rank({"SLURM_LOCALID": bad})


# ------------------------------------------------------------------ what it will exec
def test_cpu_only_binding_needs_no_numactl(bind_file):
    argv, env, binding, key = plan_bind(["app", "-v"], bind_file=bind_file, environ={**BUS_ORDER, "LOCAL_RANK": "0"},
                                        topology=BIG)
    assert (argv, str(binding.cpus), key) == (["app", "-v"], "1", "device0")
    assert env == {"MSRUN_BIND_FILE": bind_file, "MSRUN_BIND_FILE_HASH": env["MSRUN_BIND_FILE_HASH"],
                   "OMP_NUM_THREADS": "1"}


def fake_tools(tmp_path, *names):
    """A PATH holding stand-ins for `names`, so what is planned does not depend on what is installed."""
    bindir = tmp_path / "fake-bin"
    bindir.mkdir(exist_ok=True)
    for name in names:
        (bindir / name).write_text("#!/bin/sh\nexit 1\n")
        (bindir / name).chmod(0o755)
    return str(bindir)


def test_memory_binding_execs_through_numactl_like_msrun(bind_file, tmp_path):
    environ = {**BUS_ORDER, "PATH": fake_tools(tmp_path, "numactl")}
    argv, _, binding, _ = plan_bind(["app"], bind_file=bind_file, local_rank=1, environ=environ, topology=BIG)
    assert argv == ["numactl", "--membind", "0", "--physcpubind", "0", "app"]
    assert binding.applied_by == "numactl" and binding.describe() == "CPUs 0, memory bound to node 0"


def test_memory_binding_is_applied_directly_without_numactl(bind_file, tmp_path):
    environ = {**BUS_ORDER, "PATH": fake_tools(tmp_path)}
    argv, _, binding, _ = plan_bind(["app"], bind_file=bind_file, local_rank=1, environ=environ, topology=BIG)
    assert (argv, str(binding.cpus), str(binding.memory_nodes), binding.memory_policy) == (["app"], "0", "0", "bind")


def test_visible_devices_pick_the_entry(bind_file):
    _, _, binding, key = plan_bind(["app"], bind_file=bind_file, local_rank=0,
                                   environ={**BUS_ORDER, "CUDA_VISIBLE_DEVICES": "2,3"}, topology=BIG)
    assert (key, str(binding.cpus)) == ("device2", "0-1")


def test_local_rank_beyond_the_file_is_an_error(bind_file):
    """issue 17: --local-rank 3 with a 3-entry file used to run unbound with exit 0."""
    with pytest.raises(UsageError, match="the bind JSON has no device3 for local rank 3 "
                                         r"\(it has device0, device1, device2\)"):
        plan_bind(["app"], bind_file=bind_file, local_rank=3, environ=BUS_ORDER, topology=BIG)


def test_cpus_shared_with_other_ranks_divide_omp_num_threads(bind_file):
    """issue 18: device2's CPUs 0-1 each have 2 processes (CPU 0: device1 and device2, CPU 1:
    device0 and device2): 2 // 2 -> 1."""
    _, env, _, _ = plan_bind(["app"], bind_file=bind_file, local_rank=2, environ=BUS_ORDER, topology=BIG)
    assert env["OMP_NUM_THREADS"] == "1"


@needs_two_cpus
def test_topo_bind_says_the_thread_count_it_chose(bind_file):
    r = topo_bind("--bind-file", bind_file, "--local-rank", "2", "--", sys.executable, "-c",
                  "import os; print(os.environ['OMP_NUM_THREADS'])")
    assert (r.returncode, r.stdout.strip()) == (0, "1"), r.stderr
    assert ("topo bind: device2: OMP_NUM_THREADS=1: its 2 CPUs are shared with other processes of the bind JSON"
            in r.stderr)


def test_bind_file_errors(tmp_path):
    with pytest.raises(UsageError, match="no bind JSON: pass --bind-file FILE"):
        plan_bind(["app"], local_rank=0, environ=BUS_ORDER, topology=BIG)
    with pytest.raises(UsageError, match="does not exist"):
        plan_bind(["app"], bind_file=str(tmp_path / "nope.json"), local_rank=0, environ=BUS_ORDER, topology=BIG)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"bind_config": {"bind_cpu_mode": "cpu"}, "bind_cpu": {"device0": {"main": "99"}}}))
    with pytest.raises(UsageError, match=r"bind_cpu\.device0\.main: CPU id 99"):
        plan_bind(["app"], bind_file=str(bad), local_rank=0, environ=BUS_ORDER, topology=BIG)


def test_bind_file_from_msrun_environment(bind_file):
    _, _, binding, _ = plan_bind(["app"], local_rank=0, environ={**BUS_ORDER, "MSRUN_BIND_FILE": bind_file}, topology=BIG)
    assert str(binding.cpus) == "1"


# ------------------------------------------------------------------ real exec
@needs_two_cpus
def test_binds_cpus_and_execs(bind_file):
    r = topo_bind("--bind-file", bind_file, "--", sys.executable, "-c", PROBE, env={"SLURM_LOCALID": "0"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"[1] default {bind_file} 1"


@needs_two_cpus
@pytest.mark.skipif(shutil.which("numactl") is None, reason="numactl not installed")
def test_binds_memory_through_numactl(bind_file):
    r = topo_bind("--bind-file", bind_file, "--local-rank", "1", "--", sys.executable, "-c", PROBE)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"[0] bind:0 {bind_file} 1"


def test_cli_errors(bind_file):
    r = topo_bind("--bind-file", bind_file, "--", sys.executable, "-c", "pass")
    assert (r.returncode, r.stderr.count("\n")) == (2, 1) and "no launcher variable gives this process's local rank" in r.stderr
    # device1 binds memory: numactl would run the command and exit 1; where numactl is not installed
    # (looked up on PATH as plan_bind does) topo applies it directly and says so first
    numactl = shutil.which("numactl", path=os.environ.get("PATH", os.defpath))
    for rank in ("0", "1"):
        r = topo_bind("--bind-file", bind_file, "--local-rank", rank, "--", "no-such-command-xyz")
        note = ("topo bind: device1: CPUs 0, memory bound to node 0 (applied directly: numactl not found)\n"
                if rank == "1" and numactl is None else "")
        assert (r.returncode, r.stderr.strip()) == (127, note + "topo: error: no-such-command-xyz: command not found")
    r = topo_bind("--bind-file", bind_file, "--local-rank", "3", "--", sys.executable, "-c", "pass")
    assert (r.returncode, r.stderr.count("\n")) == (2, 1) and "no device3 for local rank 3" in r.stderr


@needs_two_cpus
def test_bound_command_gets_topo_binding(bind_file):
    r = topo_bind("--bind-file", bind_file, "--local-rank", "0", "--", sys.executable, "-c",
                  "import os; print(os.environ['TOPO_BINDING'])", env={"TOPO_BINDING": "cpus=7"})
    assert (r.returncode, r.stdout.strip()) == (0, "cpus=1"), r.stderr


@needs_two_cpus
@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (torchrun)")
def test_under_torchrun_no_python(bind_file, tmp_path):
    script = tmp_path / "probe.py"
    script.write_text("import os, sys\n"
                      "open(os.path.join(sys.argv[1], os.environ['LOCAL_RANK']), 'w')"
                      ".write(str(sorted(os.sched_getaffinity(0))))\n")
    # torchrun and topo as this interpreter runs them, whatever PATH holds
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                        "--no-python", sys.executable, "-m", "topo", "bind",
                        "--bind-file", bind_file, "--", sys.executable, str(script), str(tmp_path)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert [(tmp_path / str(i)).read_text() for i in (0, 1)] == ["[1]", "[0]"]


# ------------------------------------------------------------------ without numactl, refused memory policy
def path_without(tmp_path, *hidden):
    """A PATH of the usual tools minus `hidden`: a directory of symlinks."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for d in os.environ.get("PATH", os.defpath).split(os.pathsep):
        if os.path.isdir(d):
            for name in os.listdir(d):
                if name not in hidden and not (bindir / name).exists() and os.access(os.path.join(d, name), os.X_OK):
                    os.symlink(os.path.join(d, name), bindir / name)
    return str(bindir)


@needs_two_cpus
@pytest.mark.skipif(not os.path.exists("/proc/self/numa_maps"), reason="kernel without NUMA")
def test_binds_memory_without_numactl(bind_file, tmp_path):
    r = topo_bind("--bind-file", bind_file, "--local-rank", "1", "--", sys.executable, "-c", PROBE,
                  env={"PATH": path_without(tmp_path, "numactl", "taskset")})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"[0] bind:0 {bind_file} 1"


class Exec(Exception):
    pass


@pytest.fixture
def no_exec(monkeypatch):
    """bind_and_exec up to the exec: what it would run, and the CPUs it set on itself."""
    calls = {}

    def execvp(program, argv):
        calls["argv"] = list(argv)
        raise Exec

    monkeypatch.setattr(os, "execvp", execvp)
    monkeypatch.setattr(os, "sched_setaffinity", lambda pid, cpus: calls.setdefault("cpus", sorted(cpus)))
    monkeypatch.setattr(os, "environ", dict(os.environ))  # the env it exports stays in the test
    return calls


def refuse(policy, nodes=None):
    import errno

    from topo.syscalls import SyscallError

    raise SyscallError("set_mempolicy", errno.EPERM, f"{policy} {nodes}")


@needs_two_cpus
@pytest.mark.parametrize("numactl", [True, False])
def test_refused_memory_policy_and_bind_fallback(bind_file, tmp_path, monkeypatch, capsys, no_exec, numactl):
    from topo.launcher.bindcmd import BindingRefused, bind_and_exec

    path = fake_tools(tmp_path, "numactl") if numactl else str(tmp_path)
    monkeypatch.setenv("PATH", f"{path}:{path_without(tmp_path, 'numactl', 'taskset')}")
    monkeypatch.setattr("topo.syscalls.set_mempolicy", refuse)
    # with numactl too the kernel is asked before the exec: numactl's own refusal would name no fix
    with pytest.raises(BindingRefused) as refused:
        bind_and_exec(["app"], bind_file=bind_file, local_rank=1)
    assert str(refused.value) == ("the kernel refused the memory binding (set_mempolicy: Operation not "
                                  "permitted (bind 0)), device1 of the bind JSON: drop the memory binding, "
                                  "grant CAP_SYS_NICE, or add --bind-fallback to try 'preferred', then the CPU "
                                  "binding alone")
    assert "argv" not in no_exec  # nothing exec'd
    no_exec.clear()
    with pytest.raises(Exec):
        bind_and_exec(["app"], bind_file=bind_file, local_rank=1, bind_fallback=True)
    assert no_exec == {"argv": ["app"], "cpus": [0]}  # CPUs kept, no numactl to be refused again
    err = capsys.readouterr().err
    assert "device1: the kernel refused memory policy bind; CPUs alone held (--bind-fallback)" in err
    assert "add --bind-fallback" not in err


def refuse_bind_only(policy, nodes=None):
    if policy == "bind":
        refuse(policy, nodes)


@needs_two_cpus
def test_bind_fallback_ladder_holds_on_preferred(bind_file, tmp_path, monkeypatch, capsys, no_exec):
    """issue 20: a refused MPOL_BIND tries MPOL_PREFERRED before giving up the memory policy."""
    from topo.launcher.bindcmd import bind_and_exec

    monkeypatch.setenv("PATH", fake_tools(tmp_path, "numactl"))
    monkeypatch.setattr("topo.syscalls.set_mempolicy", refuse_bind_only)
    with pytest.raises(Exec):
        bind_and_exec(["app"], bind_file=bind_file, local_rank=1, bind_fallback=True)
    assert no_exec == {"argv": ["app"], "cpus": [0]}  # the policy is set here; numactl would ask for bind again
    assert "device1: the kernel refused memory policy bind; preferred held (--bind-fallback)" in capsys.readouterr().err
    assert os.environ["TOPO_BINDING"] == "cpus=0 memory=preferred:0"
