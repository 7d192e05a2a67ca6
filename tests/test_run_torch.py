"""topo run with real PyTorch: gloo all-reduce on bound workers, two topo run nodes forming one job,
the workers' environment next to real torchrun's, and @record's error file as the root cause."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from topo.launcher.procgroup import JOB_ID_VAR

torch = pytest.importorskip("torch", reason="torch is not importable (the test extra installs torch==2.13.0)")

SCRIPTS = Path(__file__).parent / "scripts"
ALLREDUCE = str(SCRIPTS / "torch_allreduce.py")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def topo_run(*args, timeout=180, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "topo", "run", *args], capture_output=True, text=True,
                          timeout=timeout, **kwargs)


def results(out: Path) -> dict[int, dict]:
    return {int(f.stem.split("_")[1]): json.loads(f.read_text()) for f in out.glob("rank_*.json")}


def test_gloo_allreduce_on_exclusive_bindings(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    logs = tmp_path / "logs"
    r = topo_run("--standalone", "--nproc-per-node=2", "--numa-binding=exclusive", f"--log-dir={logs}",
                 ALLREDUCE, str(out))
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


def test_two_topo_runs_form_one_four_rank_job(tmp_path):
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


@pytest.mark.parametrize("flags", [
    # static: the default address, a given port and run id; one worker (no OMP_NUM_THREADS)
    ["--nnodes=1", "--nproc_per_node=1", "--master-port={port}", "--rdzv-id=abc"],
    # torchrun's local rendezvous: localhost, a free port, a new run id; two workers share the node
    ["--standalone", "--nproc-per-node=2", "--role=trainer", "--max-restarts=1"],
    # every worker is local rank 0 and sees its own GPU only; the signals a Slurm job adds
    ["--standalone", "--nproc_per_node=2", "--virtual-local-rank", "--signals-to-handle=SIGTERM,SIGUSR1"],
])
def test_workers_get_torchruns_environment(tmp_path, flags):
    envs = {}
    for launcher in ("torchrun", "topo"):
        out = tmp_path / launcher
        out.mkdir()
        argv = [f.format(port=free_port()) for f in flags]
        command = ([sys.executable, "-m", "torch.distributed.run"] if launcher == "torchrun"
                   else [sys.executable, "-m", "topo", "run"])
        # run_worker.py names its file by RANK (envdump.py's LOCAL_RANK is 0 for every virtual local rank)
        r = subprocess.run([*command, *argv, str(SCRIPTS / "run_worker.py"), str(out), "ok"], capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        envs[launcher] = {p.stem: json.loads(p.read_text())["env"] for p in out.glob("*.json")}
    assert len(envs["torchrun"]) == (2 if "--standalone" in flags else 1)
    assert sorted(envs["topo"]) == sorted(envs["torchrun"])
    for worker, theirs in envs["torchrun"].items():
        ours = envs["topo"][worker]
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
        if "--standalone" in flags:
            assert len(ours["TORCHELASTIC_RUN_ID"]) == len(theirs["TORCHELASTIC_RUN_ID"]) == 36
        else:
            assert ours["TORCHELASTIC_RUN_ID"] == theirs["TORCHELASTIC_RUN_ID"]


def test_record_error_file_is_the_root_cause(tmp_path):
    r = topo_run("--nproc-per-node=2", str(SCRIPTS / "torch_record_fail.py"))
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"\n{SCRIPTS / 'torch_record_fail.py'} FAILED\n" in r.stderr  # torchrun's title: the script as given
    report = r.stderr.split("Root Cause (first observed failure):")[1]
    assert "rank      : 1 (local_rank: 1)" in report
    assert re.search(r"error_file: /\S+/attempt_0/1/error\.json", report)
    assert "traceback : Traceback (most recent call last):" in report
    assert 'raise ValueError("boom on rank 1")' in report and "ValueError: boom on rank 1" in report


def test_every_torchrun_flag_and_default():
    """Each option string of torchrun's own parser is an option of topo run, and topo run's
    defaults for them are torchrun's."""
    from torch.distributed.run import get_args_parser

    from topo.launcher.torchrun_flags import DEFAULT_SHUTDOWN_TIMEOUT, TORCHRUN_DEFAULTS
    from topo.cli.run import run as run_command

    ours = {opt for p in run_command.params for opt in (*p.opts, *p.secondary_opts)}
    parser = get_args_parser()
    actions = [a for a in parser._actions if a.option_strings and a.dest != "help"]
    missing = {opt for a in actions for opt in a.option_strings} - ours
    assert not missing, missing
    for a in actions:
        if a.dest == "shutdown_timeout":
            assert a.default is None and DEFAULT_SHUTDOWN_TIMEOUT == 30.0  # torchrun: the variable, else 30
        elif a.dest in ("duplicate_stdout_filters", "duplicate_stderr_filters"):
            assert a.default == [] and TORCHRUN_DEFAULTS[a.dest] == ""
        elif a.dest == "check_env" or a.default is None and a.dest not in TORCHRUN_DEFAULTS:
            continue
        else:
            assert TORCHRUN_DEFAULTS[a.dest] == a.default, a.dest
