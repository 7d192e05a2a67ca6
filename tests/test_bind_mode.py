"""`topo bind --mode`: each rank plans its node from its launcher's local rank and process count
(launcher.localrank), with no shared file. The variables of each launcher and their one-line
errors; then real jobs: torchrun --no-python and Open MPI's mpirun in front of topo bind, a gloo
all-reduce, and every worker on the CPUs set_affinity's planner gives its local rank here."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from livehost import needs_gloo

from topo.launcher.localrank import local_rank_and_size
from topo.errors import UsageError

ALLREDUCE = str(Path(__file__).parent / "scripts" / "torch_allreduce.py")


@pytest.mark.parametrize("environ, expected", [
    ({"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4"}, (1, 4, "LOCAL_RANK=1, LOCAL_WORLD_SIZE=4")),  # torchrun, accelerate
    ({"LOCAL_RANK": "1", "LOCAL_SIZE": "2"}, (1, 2, "LOCAL_RANK=1, LOCAL_SIZE=2")),  # deepspeed
    ({"OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"},
     (0, 2, "OMPI_COMM_WORLD_LOCAL_RANK=0, OMPI_COMM_WORLD_LOCAL_SIZE=2")),
    ({"MPI_LOCALRANKID": "3", "MPI_LOCALNRANKS": "8"}, (3, 8, "MPI_LOCALRANKID=3, MPI_LOCALNRANKS=8")),
    ({"PMIX_LOCAL_RANK": "2", "PMIX_LOCAL_SIZE": "3"}, (2, 3, "PMIX_LOCAL_RANK=2, PMIX_LOCAL_SIZE=3")),
    # Slurm: the step's tasks on this node ("2(x3),4": nodes 0-2 run 2, node 3 runs 4), else the job's
    ({"SLURM_LOCALID": "3", "SLURM_STEP_TASKS_PER_NODE": "2(x3),4", "SLURM_NODEID": "3"},
     (3, 4, "SLURM_LOCALID=3, SLURM_STEP_TASKS_PER_NODE=4")),
    ({"SLURM_LOCALID": "1", "SLURM_TASKS_PER_NODE": "2(x2)", "SLURM_NODEID": "1"},
     (1, 2, "SLURM_LOCALID=1, SLURM_TASKS_PER_NODE=2")),
    ({"SLURM_LOCALID": "0", "SLURM_NTASKS_PER_NODE": "8"}, (0, 8, "SLURM_LOCALID=0, SLURM_NTASKS_PER_NODE=8")),
    # the innermost launcher wins: torchrun started by srun, mpirun inside an allocation
    ({"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "SLURM_LOCALID": "0", "SLURM_NTASKS_PER_NODE": "1"},
     (1, 2, "LOCAL_RANK=1, LOCAL_WORLD_SIZE=2")),
    ({"OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "SLURM_LOCALID": "0",
      "SLURM_NTASKS_PER_NODE": "1"}, (1, 2, "OMPI_COMM_WORLD_LOCAL_RANK=1, OMPI_COMM_WORLD_LOCAL_SIZE=2")),
])
def test_each_launchers_variables(environ, expected):
    assert local_rank_and_size(environ) == expected


@pytest.mark.parametrize("environ, words", [
    ({}, "no launcher variable gives this process's local rank (LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK, "
         "MPI_LOCALRANKID, PMIX_LOCAL_RANK, SLURM_LOCALID): run topo bind under a launcher, or pass --local-rank "
         "and --nproc-per-node"),
    ({"LOCAL_RANK": "0"}, "LOCAL_RANK is set but not LOCAL_WORLD_SIZE or LOCAL_SIZE, so the node's process count is "
                          "unknown: start the job with a launcher that sets both"),
    ({"MPI_LOCALRANKID": "2", "MPI_LOCALNRANKS": "2"},
     "local rank 2 is not below the node's 2 processes (MPI_LOCALRANKID=2, MPI_LOCALNRANKS=2): fix the launcher's "
     "variables or pass --local-rank and --nproc-per-node"),
    ({"OMPI_COMM_WORLD_LOCAL_RANK": "\u0661", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"},
     "OMPI_COMM_WORLD_LOCAL_RANK='\u0661' is not a number from 0 to 65536"),
    ({"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "0"}, "LOCAL_WORLD_SIZE='0' is not a number from 1 to 65536"),
    ({"SLURM_LOCALID": "0", "SLURM_TASKS_PER_NODE": "2", "SLURM_NODEID": "1"},
     "SLURM_TASKS_PER_NODE='2' gives no task count for node SLURM_NODEID='1'"),
])
def test_a_missing_or_inconsistent_variable_is_named(environ, words):
    with pytest.raises(UsageError) as error:
        local_rank_and_size(environ)
    assert str(error.value).startswith(words) and "\n" not in str(error.value), str(error.value)


def test_given_values_win():
    assert local_rank_and_size({"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"}, 1, 3)[:2] == (1, 3)
    with pytest.raises(UsageError, match="--local-rank=1 without a launcher's process count: pass --nproc-per-node"):
        local_rank_and_size({}, 1)


def topo_bind(*args, env):
    return subprocess.run([sys.executable, "-m", "topo", "bind", *args], capture_output=True, text=True, env=env,
                          timeout=60)


def without_launchers() -> dict[str, str]:
    from topo.launcher.localrank import LAUNCHERS

    names = {rank for _, rank, _ in LAUNCHERS} | {size for _, _, sizes in LAUNCHERS for size in sizes}
    return {k: v for k, v in os.environ.items() if k not in names and not k.startswith(("OMPI_", "PMIX_"))}


def test_without_a_launcher_it_says_what_to_pass():
    r = topo_bind("--mode", "exclusive", "--", "true", env=without_launchers())
    assert r.returncode == 2 and r.stderr.startswith("topo: error: no launcher variable gives this process's local "
                                                     "rank"), r.stderr
    assert len(r.stderr.splitlines()) == 1
    both = topo_bind("--mode", "exclusive", "--bind-file", "x.json", "--", "true", env=without_launchers())
    assert both.returncode == 2 and "give one of them" in both.stderr


def test_an_mpirun_binding_asked_for_is_refused():
    env = {**without_launchers(), "OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "1",
           "OMPI_MCA_orte_bound_at_launch": "1", "OMPI_MCA_hwloc_base_binding_policy": "core"}
    r = topo_bind("--mode", "node", "--", "true", env=env)
    assert r.returncode == 2 and r.stderr == ("topo: error: mpirun --bind-to core bound this rank already "
                                              "(OMPI_MCA_hwloc_base_binding_policy): give mpirun --bind-to none "
                                              "and let topo bind place it\n"), r.stderr


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_job(out: Path, nproc: int) -> None:
    """The all-reduce of `nproc` ranks, each on the CPUs the exclusive plan gives its local rank here."""
    from topo.cpuset import CpuSet
    from topo.discovery import discover
    from topo.launcher.affinity import plan_affinity

    topology = discover()
    got = {int(f.stem.split("_")[1]): json.loads(f.read_text()) for f in out.glob("rank_*.json")}
    assert sorted(got) == list(range(nproc)), got
    for rank, res in got.items():
        assert res["result"] == [sum(range(1, nproc + 1)) * x for x in (1.0, 2.0, 3.0, 4.0)]
        planned = plan_affinity(topology, res["local_rank"], nproc, mode="exclusive", env=os.environ)
        assert CpuSet(res["affinity"]) == planned.cpus, (rank, res, str(planned.cpus))
        assert res["threads"] == len(res["affinity"])  # OMP_NUM_THREADS: its CPUs, shared with no other rank


def local_processes() -> int:
    """2, or fewer on a machine with fewer accelerators (set_affinity plans one process each)."""
    from topo.discovery import discover
    from topo.visible import visible_devices

    devices = visible_devices(discover())
    return min(2, len(devices)) if devices else 2


@needs_gloo
def test_torchrun_no_python_topo_bind_mode(tmp_path):
    pytest.importorskip("torch", reason="torch is not importable")
    n = local_processes()
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={n}",
                        "--no-python", sys.executable, "-m", "topo", "bind", "--mode", "exclusive", "--",
                        sys.executable, ALLREDUCE, str(tmp_path)], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    check_job(tmp_path, n)


@needs_gloo
def test_mpirun_topo_bind_mode(tmp_path):
    pytest.importorskip("torch", reason="torch is not importable")
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        pytest.skip("mpirun is not installed (Debian: apt-get install openmpi-bin)")
    version = subprocess.run([mpirun, "--version"], capture_output=True, text=True, timeout=30).stdout
    if "Open MPI" not in version:
        pytest.skip(f"mpirun is not Open MPI's: {version.strip()[:60]}")
    # as root, Open MPI wants both variables; its default binding (a core per rank) is left to topo bind.
    # It refuses to start even one local rank where ssh and rsh are missing (GPU images) unless its
    # remote-shell agent names a program that exists; one host needs none, so `false` serves.
    env = {**without_launchers(), "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_plm_rsh_agent": "false"}
    n = local_processes()
    r = subprocess.run([mpirun, "-np", str(n), "-x", "MASTER_ADDR=127.0.0.1", "-x", f"MASTER_PORT={free_port()}",
                        sys.executable, "-m", "topo", "bind", "--mode", "exclusive", "--", sys.executable, ALLREDUCE,
                        str(tmp_path)], capture_output=True, text=True, timeout=180, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    check_job(tmp_path, n)
