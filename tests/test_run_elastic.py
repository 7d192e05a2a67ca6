"""topo run on torch's own rendezvous and agent, with real processes on this machine: two launchers
forming one c10d job without node ranks (one of them late), an elastic 1:2 job of one node, a
worker killed mid-run under --max-restarts=1. Each checks the exit codes, the gloo all-reduce, and
that every worker runs bound as topo planned its local rank (the dry run's plan, read back from the
worker itself and from topo's /proc check). And a failure's report under the agent."""

from __future__ import annotations

import functools
import json
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from livehost import needs_gloo

pytest.importorskip("torch", reason="torch is not importable: topo run refuses these forms without it")

ALLREDUCE = str(Path(__file__).parent / "scripts" / "torch_allreduce.py")
TIMEOUT = 240


@functools.cache
def nproc() -> int:
    """Workers per node: 2, or fewer on a machine with fewer accelerators (one process each)."""
    from topo.discovery import discover
    from topo.visible import visible_devices

    devices = visible_devices(discover())
    return min(2, len(devices)) if devices else 2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def c10d(port: int, *flags: str) -> list[str]:
    return ["--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=t1", f"--nproc-per-node={nproc()}",
            "--numa-binding=exclusive", *flags]


def start(flags: list[str], out: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "topo", "run", *flags, ALLREDUCE, str(out), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(*nodes: subprocess.Popen) -> list[str]:
    """Each node's stderr, once all exited 0."""
    try:
        outputs = [p.communicate(timeout=TIMEOUT) for p in nodes]
    finally:
        for p in nodes:
            p.kill()
    for p, (stdout, stderr) in zip(nodes, outputs):
        assert p.returncode == 0, stdout + stderr
    return [stderr for _, stderr in outputs]


def planned(flags: list[str]) -> dict[int, str]:
    """Each local rank's CPUs as topo run plans them (its dry run)."""
    r = subprocess.run([sys.executable, "-m", "topo", "run", "--dry-run", *flags, ALLREDUCE, "out"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    cpus = dict(re.findall(r"^local rank (\d+): binding: CPUs (\S+),", r.stdout, re.M))
    assert len(cpus) == nproc(), r.stdout
    return {int(rank): text for rank, text in cpus.items()}


def check(out: Path, stderrs: list[str], world: int, plan: dict[int, str], attempt: int = 0) -> None:
    """The all-reduce of a job of `world` ranks, each worker on its local rank's planned CPUs, and
    topo's /proc check saying so."""
    from topo.cpuset import CpuSet

    got = {int(f.stem.split("_")[1]): json.loads(f.read_text()) for f in out.glob("rank_*.json")}
    assert sorted(got) == list(range(world)), got
    total = sum(range(1, world + 1))
    report = "".join(stderrs)
    for rank, res in got.items():
        assert (res["world_size"], res["attempt"]) == (world, attempt)
        assert res["result"] == [total * x for x in (1.0, 2.0, 3.0, 4.0)]
        cpus = plan[res["local_rank"]]
        assert str(CpuSet(res["affinity"])) == cpus, (rank, res)
        assert res["threads"] == len(res["affinity"])  # OMP_NUM_THREADS: the CPUs it is bound to
        assert (f"topo run: rank {rank} (local rank {res['local_rank']}, attempt {attempt}): CPUs {cpus}, "
                "memory not bound (verified)") in report, report


@needs_gloo
def test_two_launchers_form_one_c10d_job_without_node_ranks_one_late(tmp_path):
    """--nnodes=2 and no --node-rank: torch's c10d rendezvous orders the nodes; the second starts
    4 s after the first, which waits for it."""
    port = free_port()
    flags = c10d(port, "--nnodes=2")
    first = start(flags, tmp_path)
    time.sleep(4)
    second = start(flags, tmp_path)
    stderrs = finish(first, second)
    assert all("torch 2." in s and "rendezvous and agent run this job (--rdzv-backend=c10d with --nnodes=2)" in s
               for s in stderrs), stderrs
    check(tmp_path, stderrs, 2 * nproc(), planned(flags))


@needs_gloo
def test_elastic_one_to_two_nodes_runs_with_one(tmp_path):
    flags = c10d(free_port(), "--nnodes=1:2", "--rdzv-conf=last_call_timeout=1")
    check(tmp_path, finish(start(flags, tmp_path)), nproc(), planned(flags))


@needs_gloo
def test_a_worker_killed_mid_run_restarts_the_group(tmp_path):
    flags = c10d(free_port(), "--nnodes=1", "--rdzv-conf=join_timeout=60", "--max-restarts=1")
    stderrs = finish(start(flags, tmp_path, "kill-once"))
    check(tmp_path, stderrs, nproc(), planned(flags), attempt=1)


def test_a_failure_under_torchs_agent_is_reported_as_on_topos_plan(tmp_path):
    """@record's error file, written where torch's agent put it, is the root cause; the exit code
    is the failing worker's."""
    script = str(Path(__file__).parent / "scripts" / "torch_record_fail.py")
    r = subprocess.run([sys.executable, "-m", "topo", "run", "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:"
                        f"{free_port()}", "--rdzv-conf=join_timeout=60", "--nproc-per-node=2", script],
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 1, r.stdout + r.stderr
    report = r.stderr.split("Root Cause (first observed failure):")[1]
    assert "rank      : 1 (local_rank: 1)" in report and "ValueError: boom on rank 1" in report
    assert re.search(r"error_file: /\S+/attempt_0/1/error\.json", report)
    assert "topo run: rank 1 (local rank 1) failed with exit code 1; logs and error files under " in r.stderr
