"""A real MindSpore job under `topo launch`, with topo and MindSpore installed apart.

MindSpore lives in its own venv (TOPO_TEST_MINDSPORE_VENV, default ~/.cache/topo-ci/ms-venv;
`.ci/run` creates it with mindspore==2.10.0), whose bin/ is first on PATH as after `source
venv/bin/activate`; topo runs from this test's interpreter, which has no MindSpore. Like msrun,
`topo launch` starts `python` from PATH, so the scheduler and both workers run the venv's
interpreter. Two workers all-reduce a tensor on CPU with MindSpore's own collectives, each bound
to its CPUs by --bind_core=True. Takes 15-30 s.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from livehost import NO_GPUS

VENV = Path(os.environ.get("TOPO_TEST_MINDSPORE_VENV") or Path.home() / ".cache" / "topo-ci" / "ms-venv")
VENV_PYTHON = VENV / "bin" / "python"
SCRIPT = Path(__file__).parent / "scripts" / "mindspore_allreduce.py"


def _mindspore_missing() -> str | None:
    if not VENV_PYTHON.exists():
        return f"no MindSpore venv at {VENV} (set TOPO_TEST_MINDSPORE_VENV, or run .ci/run to create it)"
    probe = subprocess.run([str(VENV_PYTHON), "-c", "import mindspore"], capture_output=True, text=True,
                           timeout=300)
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["?"])[-1]
        return f"mindspore does not import in {VENV}: {last}"
    return None


@pytest.fixture(scope="module")
def mindspore_venv():
    reason = _mindspore_missing()
    if reason:
        pytest.skip(reason)
    return VENV


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_mindspore_allreduce_under_topo_launch_from_a_separate_install(mindspore_venv, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PATH"] = f"{mindspore_venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
    env.update(NO_GPUS)  # a CPU job on any host: --bind_core=True splits the allowed CPUs between the workers
    # the situation the launcher must handle: the job's python has no topo, topo's python no MindSpore
    no_topo = subprocess.run(["python", "-c", "import topo"], env=env, cwd=tmp_path, capture_output=True,
                             timeout=120)
    assert no_topo.returncode != 0, f"{mindspore_venv} has topo installed: the test needs it apart"
    assert Path(sys.prefix).resolve() != mindspore_venv.resolve()

    out = tmp_path / "out"
    out.mkdir()
    cpus = sorted(os.sched_getaffinity(0))
    bind = ["--bind_core=True"] if len(cpus) >= 2 else []
    result = subprocess.run(
        [sys.executable, "-m", "topo", "launch", "--worker_num=2", "--local_worker_num=2",
         f"--master_port={_free_port()}", f"--log_dir={tmp_path / 'logs'}", "--join=True",
         "--cluster_time_out=300", *bind, str(SCRIPT), str(out)],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    ranks = [json.loads((out / f"rank_{r}.json").read_text()) for r in range(2)]
    for r, got in enumerate(ranks):
        assert got["rank"] == r and got["world_size"] == 2
        assert got["result"] == [3.0, 6.0, 9.0, 12.0]  # [1, 2, 3, 4] * 1 + [1, 2, 3, 4] * 2
        assert Path(got["executable"]).parent == mindspore_venv / "bin"  # `python` from PATH, as msrun
    if bind:
        assert not set(ranks[0]["affinity"]) & set(ranks[1]["affinity"])
        assert "rank 0: CPUs" in result.stderr + result.stdout and "(verified" in result.stderr + result.stdout
    assert "all 2 workers exited successfully" in result.stderr + result.stdout
