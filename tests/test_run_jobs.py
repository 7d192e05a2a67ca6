"""topo run starting real worker processes (no torch): restarts, exit codes, streams, signals."""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from processes import alive, wait_for

WORKER = str(Path(__file__).parent / "scripts" / "run_worker.py")


def topo_run(*args, timeout=60, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "topo", "run", *args], capture_output=True, text=True,
                          timeout=timeout, **kwargs)


def records(out: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")}


def test_a_worker_that_fails_once_is_restarted_with_its_group(tmp_path):
    r = topo_run("--nproc-per-node=2", "--max-restarts=2", f"--log-dir={tmp_path / 'logs'}",
                 WORKER, str(tmp_path), "fail-once")
    assert r.returncode == 0, r.stderr
    seen = records(tmp_path)
    assert sorted(seen) == ["rank0_attempt0", "rank0_attempt1", "rank1_attempt0", "rank1_attempt1"]
    for rank in (0, 1):
        first, second = seen[f"rank{rank}_attempt0"], seen[f"rank{rank}_attempt1"]
        assert first["pid"] != second["pid"]  # the whole group was started again
        assert second["env"]["TORCHELASTIC_RESTART_COUNT"] == "1"
        assert second["env"]["TORCHELASTIC_MAX_RESTARTS"] == "2"
        assert second["env"]["MASTER_PORT"] == first["env"]["MASTER_PORT"]
        assert second["env"]["TORCHELASTIC_ERROR_FILE"].endswith(f"/attempt_1/{rank}/error.json")
    assert "worker group failed (rank 1: exit code 3); restarting it, 2 of 2 restarts left" in r.stderr


def test_the_last_failure_is_reported_with_its_rank_and_code(tmp_path):
    r = topo_run("--nproc-per-node=2", "--max-restarts=1", WORKER, str(tmp_path), "fail")
    assert r.returncode == 3, r.stderr
    assert {"rank1_attempt0", "rank1_attempt1"} <= set(records(tmp_path))
    assert "Root Cause (first observed failure):" in r.stderr
    root = r.stderr.split("Root Cause (first observed failure):")[1]
    assert "rank      : 1 (local_rank: 1)" in root and "exitcode  : 3" in root
    assert "rank 1 (local rank 1) failed with exit code 3 on attempt 1" in r.stderr
    # the run directory is kept for the error files and named in the report
    kept = r.stderr.rsplit("error files under ", 1)[1].strip()
    assert os.path.isdir(os.path.join(kept, "attempt_1", "1"))


def test_a_successful_run_leaves_no_temporary_directory(tmp_path):
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp")}
    (tmp_path / "tmp").mkdir()
    r = topo_run("--nproc-per-node=2", WORKER, str(tmp_path), "ok", env=env)
    assert r.returncode == 0, r.stderr
    assert os.listdir(tmp_path / "tmp") == []
    assert "out of rank 0" in r.stdout and "err of rank 1" in r.stderr  # the console, as torchrun


def test_redirects_tee_and_the_ranks_filter(tmp_path):
    logs = tmp_path / "logs"
    r = topo_run("--nproc-per-node=2", f"--log-dir={logs}", "--rdzv-id=myrun", "--master-port=29517",
                 "-r", "0:3", "-t", "1:1", "--local-ranks-filter=1", WORKER, str(tmp_path), "ok")
    assert r.returncode == 0, r.stderr
    (run_dir,) = glob.glob(str(logs / "myrun_*"))
    rank0 = Path(run_dir, "attempt_0", "0")
    assert (rank0 / "stdout.log").read_text() == "out of rank 0\n"
    assert (rank0 / "stderr.log").read_text() == "err of rank 0\n"
    assert (Path(run_dir, "attempt_0", "1", "stdout.log")).read_text() == "out of rank 1\n"
    assert not Path(run_dir, "attempt_0", "1", "stderr.log").exists()
    assert "rank 0" not in r.stdout  # redirected, not tee'd, and filtered out
    assert "[default1]:out of rank 1" in r.stdout.splitlines()  # tee'd with torchrun's prefix
    assert "err of rank 1" in r.stderr  # not redirected: the console
    assert "err of rank 0" not in r.stderr
    launch = json.loads(Path(run_dir, "attempt_0", "launch.json").read_text())
    assert [p["rank"] for p in launch["processes"]] == [0, 1]


@pytest.mark.parametrize("flags, sig", [
    ([], signal.SIGTERM),
    ([], signal.SIGQUIT),  # in torchrun's default --signals-to-handle
    (["--signals-to-handle=SIGTERM,SIGUSR1"], signal.SIGUSR1),  # Slurm's pre-emption warning
])
def test_handled_signals_stop_every_worker(tmp_path, flags, sig):
    proc = subprocess.Popen([sys.executable, "-m", "topo", "run", "--nproc-per-node=2", *flags, WORKER,
                             str(tmp_path), "sleep"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while len(records(tmp_path)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    pids = [r["pid"] for r in records(tmp_path).values()]
    assert len(pids) == 2
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, err
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert f"received {sig.name}; forwarding it to every process" in err


def test_tee_prefixes_and_streams_are_torchruns(tmp_path):
    """issue 18: `-t 3` prints `[<role><local rank>]:line`, stdout.log to stdout, stderr.log to stderr."""
    r = topo_run("--nproc-per-node=2", "-t", "3", "--role=trainer", WORKER, str(tmp_path), "ok")
    assert r.returncode == 0, r.stderr
    assert {"[trainer0]:out of rank 0", "[trainer1]:out of rank 1"} <= set(r.stdout.splitlines())
    assert {"[trainer0]:err of rank 0", "[trainer1]:err of rank 1"} <= set(r.stderr.splitlines())
    assert "err of rank" not in r.stdout


def test_the_failure_report_shows_the_stream_with_the_traceback(tmp_path):
    r = topo_run("--nproc-per-node=2", "-r", "3", "--log-dir", str(tmp_path / "logs"), WORKER, str(tmp_path), "raise")
    assert r.returncode == 1, r.stderr
    report = r.stderr.split("rank 1 failed with exit code 1; last lines of ", 1)[1]
    assert report.split(":", 1)[0].endswith("/1/stderr.log")
    assert "ValueError: boom from rank 1" in report
    # a worker that dies of a Python error: where its interpreter comes from, and how to choose another
    assert "PYTHON_EXEC" in r.stderr


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 128 + signal.SIGTERM), (signal.SIGQUIT, 128 + signal.SIGQUIT),
                                       (signal.SIGINT, 1)])  # SIGINT: torchrun's uncaught SignalException
def test_a_signal_while_a_failed_attempt_stops_starts_no_restart(tmp_path, sig, code):
    """issue 17: the stop signal arrives while the failed attempt's other workers are being stopped."""
    proc = subprocess.Popen([sys.executable, "-m", "topo", "run", "--nproc-per-node=2", "--max-restarts=3",
                             WORKER, str(tmp_path), "fail-slow-stop"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not (tmp_path / "stopping0").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert (tmp_path / "stopping0").exists()  # rank 1 failed; rank 0 is being stopped
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    assert not any(name.endswith("attempt1") for name in records(tmp_path)), err
    assert f"received {sig.name} during attempt 0; no further attempt" in err
    assert "restarting it" not in err


def test_no_daemon_outlives_the_run(tmp_path):
    r = topo_run("--nproc-per-node=2", WORKER, str(tmp_path), "daemon")
    assert r.returncode == 0, r.stderr
    pids = [int((tmp_path / f"daemon{rank}.pid").read_text()) for rank in (0, 1)]
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_a_sigkilled_run_leaves_no_worker_and_topo_stop_stops_its_daemons(tmp_path):
    logs = tmp_path / "logs"
    proc = subprocess.Popen([sys.executable, "-m", "topo", "run", "--nproc-per-node=2", f"--log-dir={logs}",
                             WORKER, str(tmp_path), "daemon+sleep"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    daemon_files = [tmp_path / f"daemon{rank}.pid" for rank in (0, 1)]
    workers, daemons = [], []
    try:
        # a pid file exists before its pid is written in it
        assert wait_for(lambda: len(records(tmp_path)) == 2 and all(f.exists() and f.read_text() for f in daemon_files),
                        30)
        workers = [r["pid"] for r in records(tmp_path).values()]
        daemons = [int(f.read_text()) for f in daemon_files]
        proc.kill()
        proc.wait(10)
        assert wait_for(lambda: not any(map(alive, workers)), 1.0), [p for p in workers if alive(p)]
        # The daemons left the workers' sessions; they carry the job id, and topo stop finds the job's
        # record below the --log-dir it was given (LOG_DIR/<run id>_<random>/attempt_0/launch.json).
        s = subprocess.run([sys.executable, "-m", "topo", "stop", str(logs)], capture_output=True, text=True,
                           timeout=60)
        assert s.returncode == 0, s.stderr
        for pid in daemons:
            assert f"stopped a process the job started (pid {pid})" in s.stderr, s.stderr
        assert wait_for(lambda: not any(map(alive, daemons)), 5)
    finally:
        proc.kill()
        for pid in workers + daemons:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_topo_stop_names_the_run_directories_when_there_are_several(tmp_path):
    for run in ("a_1", "b_2"):
        (tmp_path / run / "attempt_0").mkdir(parents=True)
        (tmp_path / run / "attempt_0" / "launch.json").write_text("{}")
    s = subprocess.run([sys.executable, "-m", "topo", "stop", str(tmp_path)], capture_output=True, text=True,
                       timeout=60)
    assert s.returncode == 2 and s.stderr.count("\n") == 1, s.stderr
    assert s.stderr.startswith(f"topo: error: job records of 2 runs below {tmp_path}"), s.stderr


def test_topo_stop_takes_the_last_attempt_of_a_restarted_run(tmp_path):
    from topo.launcher.files import record_path

    for attempt in (0, 1, 2, 10):
        (tmp_path / "run_1" / f"attempt_{attempt}").mkdir(parents=True)
        (tmp_path / "run_1" / f"attempt_{attempt}" / "launch.json").write_text("{}")
    assert record_path(str(tmp_path)) == str(tmp_path / "run_1" / "attempt_10" / "launch.json")


def test_dry_run_starts_nothing(tmp_path):
    r = topo_run("--dry-run", "--nproc-per-node=2", "--master-port=29518", WORKER, str(tmp_path), "ok")
    assert r.returncode == 0, r.stderr
    assert records(tmp_path) == {}
    assert "rank 1, local rank 1:" in r.stdout and "TORCHELASTIC_USE_AGENT_STORE=False" in r.stdout
