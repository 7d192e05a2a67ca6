"""A real PyTorch job under topo launch: gloo all-reduce across 2 workers, each bound to its CPUs."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from livehost import bind_core_cpus, cpus_text, hide_gpus, needs_gloo, path_with_python

torch = pytest.importorskip("torch", reason="torch is not importable (the test extra installs it)")

SCRIPT = str(Path(__file__).parent / "scripts" / "torch_allreduce.py")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(not {0, 1} <= os.sched_getaffinity(0), reason="needs CPUs 0 and 1")
@needs_gloo
def test_gloo_allreduce_with_bound_workers(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    # no GPU visible: the workers split the allowed CPUs; `python` is this interpreter
    env = {**hide_gpus(os.environ), "PATH": path_with_python()}
    r = subprocess.run(
        [sys.executable, "-m", "topo", "launch", "--worker_num=2", "--local_worker_num=2", "--join=True",
         "--no-scheduler", f"--master_port={free_port()}", f"--log_dir={tmp_path / 'logs'}", "--bind_core=True",
         SCRIPT, str(out)],
        capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    results = {int(f.stem.split("_")[1]): json.loads(f.read_text()) for f in out.glob("rank_*.json")}
    assert sorted(results) == [0, 1]
    cpus = bind_core_cpus(2)
    for rank, res in results.items():
        assert res["world_size"] == 2
        assert res["result"] == [3.0, 6.0, 9.0, 12.0]  # [1,2,3,4] * 1 + [1,2,3,4] * 2
        assert res["affinity"] == cpus[rank]
        assert res["threads"] == len(cpus[rank])  # OMP_NUM_THREADS = the CPUs it is bound to
        assert f"rank {rank}: CPUs {cpus_text(cpus[rank])}, memory not bound (verified" in r.stderr  # taskset or directly
        assert f"[rank {rank}] rank {rank}: [3.0, 6.0, 9.0, 12.0]" in r.stdout
