"""topo run with real PyTorch: gloo all-reduce on bound workers, two topo run nodes forming one job,
@record's error file as the root cause, and torchrun parity: the flags, defaults and workers'
environment of the torchrun of this interpreter's torch, and of each other torch the environment
variable TOPO_TEST_TORCH_VENVS names (venvs, separated by ':', each with torch and this checkout
of topo installed; .ci/run makes them)."""

from __future__ import annotations

import functools
import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from livehost import NO_GPUS, needs_gloo
from topo.launcher.procgroup import JOB_ID_VAR

SCRIPTS = Path(__file__).parent / "scripts"
ALLREDUCE = str(SCRIPTS / "torch_allreduce.py")
REPO = Path(__file__).resolve().parent.parent
TORCH_VENVS = "TOPO_TEST_TORCH_VENVS"


@functools.cache
def torch_of(python: str) -> tuple[int, int] | str:
    """(major, minor) of the torch `python` imports, or why it cannot run these tests."""
    probe = "import torch, topo; print(torch.__version__); print(topo.__file__)"
    try:
        r = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=120)
    except OSError as exc:
        return f"{python}: {exc.strerror}"
    if r.returncode != 0:
        return f"{python} cannot import torch and topo: {(r.stderr.strip().splitlines() or ['?'])[-1]}"
    version, where = r.stdout.split()[-2:]
    if not Path(where).resolve().is_relative_to(REPO):
        return f"{python} imports topo from {where}, not this checkout: pip install --no-deps -e {REPO} there"
    return tuple(int(p) for p in version.split("+")[0].split(".")[:2])


def _pythons():
    """This interpreter, then each venv of TOPO_TEST_TORCH_VENVS (a skip with the reason if none)."""
    params = [pytest.param(sys.executable, id="this-python")]
    venvs = [v for v in os.environ.get(TORCH_VENVS, "").split(os.pathsep) if v.strip()]
    params += [pytest.param(os.path.join(v, "bin", "python"), id=os.path.basename(v.rstrip("/"))) for v in venvs]
    if not venvs:
        params.append(pytest.param(None, id="other-torch", marks=pytest.mark.skip(
            reason=f"{TORCH_VENVS} names no venv with another torch release (.ci/run makes them)")))
    return params


def torch_python(python: str) -> tuple[int, int]:
    """The torch release of `python`, or skip the test with the reason it cannot run there."""
    got = torch_of(python)
    if isinstance(got, str):
        pytest.skip(got)
    return got


def needs_torch():
    return pytest.importorskip("torch", reason="torch is not importable (the test extra installs it)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def topo_run(*args, timeout=180, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "topo", "run", *args], capture_output=True, text=True,
                          timeout=timeout, **kwargs)


def results(out: Path) -> dict[int, dict]:
    return {int(f.stem.split("_")[1]): json.loads(f.read_text()) for f in out.glob("rank_*.json")}


@needs_gloo
def test_gloo_allreduce_on_exclusive_bindings(tmp_path):
    needs_torch()
    out = tmp_path / "out"
    out.mkdir()
    logs = tmp_path / "logs"
    r = topo_run("--standalone", "--nproc-per-node=2", "--numa-binding=exclusive", f"--log-dir={logs}",
                 ALLREDUCE, str(out), env={**os.environ, **NO_GPUS})  # a CPU job on any host
    assert r.returncode == 0, r.stdout + r.stderr
    got = results(out)
    assert sorted(got) == [0, 1]
    for rank, res in got.items():
        assert res["world_size"] == 2
        assert res["result"] == [3.0, 6.0, 9.0, 12.0]  # [1,2,3,4] * 1 + [1,2,3,4] * 2
        assert res["threads"] == len(res["affinity"])  # OMP_NUM_THREADS = the CPUs it is bound to
    assert not set(got[0]["affinity"]) & set(got[1]["affinity"])  # exclusive: no CPU shared
    (record,) = logs.glob("*/attempt_0/launch.json")
    processes = json.loads(record.read_text())["processes"]
    for p in processes:
        assert p["status"].startswith("verified"), p
        assert p["observed"]["cpus"] == p["binding"]["cpus"]
        rank = p["rank"]
        assert p["binding"]["cpus"] == _cpulist(got[rank]["affinity"])
        assert f"rank {rank}: CPUs {p['binding']['cpus']}, memory not bound (verified" in r.stderr  # exclusive leaves memory alone


def _cpulist(cpus: list[int]) -> str:
    from topo.cpuset import CpuSet

    return str(CpuSet(cpus))


@needs_gloo
def test_two_topo_runs_form_one_four_rank_job(tmp_path):
    needs_torch()
    out = tmp_path / "out"
    out.mkdir()
    port = free_port()
    nodes = [subprocess.Popen(
        [sys.executable, "-m", "topo", "run", "--nnodes=2", f"--node-rank={node}", "--nproc-per-node=2",
         "--master-addr=127.0.0.1", f"--master-port={port}", ALLREDUCE, str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for node in (0, 1)]
    try:
        outputs = [p.communicate(timeout=240) for p in nodes]
    finally:
        for p in nodes:
            p.kill()
    for p, (stdout, stderr) in zip(nodes, outputs):
        assert p.returncode == 0, stdout + stderr
    got = results(out)
    assert sorted(got) == [0, 1, 2, 3]
    for res in got.values():
        assert res["world_size"] == 4
        assert res["result"] == [10.0, 20.0, 30.0, 40.0]  # (1 + 2 + 3 + 4) * [1, 2, 3, 4]


# variables whose values are the run's own: ports, the run id, and paths that contain them
PER_RUN = {"MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_ERROR_FILE"}
TOPO_PLAN, TORCH_AGENT = "topo's plan", "torch's agent"


@pytest.mark.parametrize("python", _pythons())
@pytest.mark.parametrize("since, runner, flags", [
    # static: the default address, a given port and run id; one worker (no OMP_NUM_THREADS)
    ((2, 9), TOPO_PLAN, ["--nnodes=1", "--nproc_per_node=1", "--master-port={port}", "--rdzv-id=abc"]),
    # torchrun's local rendezvous: localhost, a free port, a new run id; two workers share the node
    ((2, 9), TOPO_PLAN, ["--standalone", "--nproc-per-node=2", "--role=trainer", "--max-restarts=1"]),
    # one node, no port: a local rendezvous from torch 2.12, 127.0.0.1:29500 before
    ((2, 9), TOPO_PLAN, ["--nproc-per-node=2"]),
    # every worker is local rank 0 and sees its own GPU only; the signals a Slurm job adds
    ((2, 10), TOPO_PLAN, ["--standalone", "--nproc_per_node=2", "--virtual-local-rank",
                          "--signals-to-handle=SIGTERM,SIGUSR1"]),
    # c10d with rendezvous options: torch's own agent starts the workers
    ((2, 9), TORCH_AGENT, ["--nnodes=1", "--nproc-per-node=2", "--rdzv-backend=c10d",
                           "--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-conf=join_timeout=60"]),
])
def test_workers_get_torchruns_environment(tmp_path, python, since, runner, flags):
    if torch_python(python) < since:
        pytest.skip(f"torchrun {'.'.join(map(str, torch_of(python)))} has not all of {flags}")
    envs = {}
    for launcher in ("torchrun", "topo"):
        out = tmp_path / launcher
        out.mkdir()
        argv = [f.format(port=free_port()) for f in flags]
        command = [python, "-m", "torch.distributed.run" if launcher == "torchrun" else "topo"]
        command += [] if launcher == "torchrun" else ["run"]
        # run_worker.py names its file by RANK (envdump.py's LOCAL_RANK is 0 for every virtual local rank)
        r = subprocess.run([*command, *argv, str(SCRIPTS / "run_worker.py"), str(out), "ok"], capture_output=True,
                           text=True, timeout=120, env={k: v for k, v in os.environ.items() if k != "PYTHON_EXEC"})
        assert r.returncode == 0, r.stdout + r.stderr
        if launcher == "topo":
            assert ("rendezvous and agent run this job" in r.stderr) == (runner == TORCH_AGENT), r.stderr
        envs[launcher] = {p.stem: json.loads(p.read_text())["env"] for p in out.glob("*.json")}
    assert len(envs["torchrun"]) == (2 if "2" in "".join(flags) else 1)
    assert sorted(envs["topo"]) == sorted(envs["torchrun"])
    for worker, theirs in envs["torchrun"].items():
        ours = envs["topo"][worker]
        if runner == TORCH_AGENT:  # the same agent made both: not one variable differs
            assert {k: v for k, v in ours.items() if k not in PER_RUN} == \
                   {k: v for k, v in theirs.items() if k not in PER_RUN}
            continue
        # topo's job marker (`topo stop` finds a job's processes by it) is the one extra variable
        assert set(ours) - set(theirs) == {JOB_ID_VAR}, worker
        assert set(theirs) - set(ours) == set(), worker
        different = {k for k in theirs if theirs[k] != ours[k]} - PER_RUN
        # no store runs inside topo, so workers must not look for one (gloo would wait forever)
        assert different == {"TORCHELASTIC_USE_AGENT_STORE"}, {k: (theirs[k], ours[k]) for k in different}
        assert (theirs["TORCHELASTIC_USE_AGENT_STORE"], ours["TORCHELASTIC_USE_AGENT_STORE"]) == ("True", "False")
        for env in (theirs, ours):
            # one node: the local rank directory is the RANK (LOCAL_RANK is 0 with --virtual-local-rank)
            pattern = rf".*/{re.escape(env['TORCHELASTIC_RUN_ID'])}_[^/]+/attempt_0/{env['RANK']}/error\.json"
            assert re.fullmatch(pattern, env["TORCHELASTIC_ERROR_FILE"]), env["TORCHELASTIC_ERROR_FILE"]
        assert (ours["MASTER_ADDR"], len(ours["TORCHELASTIC_RUN_ID"])) == \
               (theirs["MASTER_ADDR"], len(theirs["TORCHELASTIC_RUN_ID"]))
        if len(theirs["TORCHELASTIC_RUN_ID"]) != 36:  # not a fresh UUID: the id given, or "none"
            assert ours["TORCHELASTIC_RUN_ID"] == theirs["TORCHELASTIC_RUN_ID"]
        if theirs["MASTER_PORT"] == "29500":  # torchrun's default port, not a free one
            assert ours["MASTER_PORT"] == "29500"


def test_record_error_file_is_the_root_cause(tmp_path):
    needs_torch()
    r = topo_run("--nproc-per-node=2", str(SCRIPTS / "torch_record_fail.py"))
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"\n{SCRIPTS / 'torch_record_fail.py'} FAILED\n" in r.stderr  # torchrun's title: the script as given
    report = r.stderr.split("Root Cause (first observed failure):")[1]
    assert "rank      : 1 (local_rank: 1)" in report
    assert re.search(r"error_file: /\S+/attempt_0/1/error\.json", report)
    assert "traceback : Traceback (most recent call last):" in report
    assert 'raise ValueError("boom on rank 1")' in report and "ValueError: boom on rank 1" in report


@pytest.mark.parametrize("python", _pythons())
def test_every_torchrun_flag_and_default(python):
    """Each option string of the torchrun parser of `python`'s torch is an option of topo run, and
    topo run's defaults for them, read there, are that torchrun's."""
    torch_python(python)
    r = subprocess.run([python, str(SCRIPTS / "torchrun_flags_check.py")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.splitlines()[-1])
    assert (got["missing"], got["defaults"]) == ([], {}), got
