"""What the launcher writes and where (issue 17): no link followed, no second job in a running
job's log directory, a log directory on tmpfs, bounds checked before work, a worker that moves
itself, Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from topo.launcher.files import open_log, write_record
from topo.launcher.files import check_not_running
from topo.launcher.files import SCHEMA
from topo.launcher.job import check_log_dir
from livehost import path_with_python
from processes import wait_for
from topo.errors import UsageError

SCRIPTS = Path(__file__).parent / "scripts"
JOB = str(SCRIPTS / "job.py")
ENV = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "OMP_NUM_THREADS")}
ENV["PATH"] = path_with_python()  # `python` on PATH is this interpreter, as the workers run it
needs_two_cpus = pytest.mark.skipif(not {0, 1} <= os.sched_getaffinity(0), reason="needs CPUs 0 and 1")


def topo(*args, cwd, timeout=60):
    return subprocess.run([sys.executable, "-m", "topo", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=ENV)


# ------------------------------------------------------------------ links
def test_a_log_named_by_a_planted_link_is_refused(tmp_path):
    target = tmp_path / "precious"
    target.write_text("keep me\n")
    (tmp_path / "worker_0.log").symlink_to(target)
    with pytest.raises(FileExistsError):  # a log is created, never opened where something is
        open_log(str(tmp_path / "worker_0.log"))
    with pytest.raises(OSError, match="symbolic link"):  # a restart's append
        open_log(str(tmp_path / "worker_0.log"), "a")
    assert target.read_text() == "keep me\n"


def test_launch_refuses_a_planted_worker_log_link(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    target = tmp_path / "precious"
    target.write_text("keep me\n")
    (logs / "worker_0.log").symlink_to(target)
    r = topo("launch", "--worker_num=1", "--local_worker_num=1", "--join=True", "--no-scheduler",
             f"--log_dir={logs}", JOB, str(tmp_path), cwd=tmp_path)
    assert r.returncode == 2 and f"log file is a symbolic link, {logs / 'worker_0.log'}: " in r.stderr, r.stderr
    assert target.read_text() == "keep me\n"
    assert not (logs / "launch.json").exists()  # nothing started


def test_the_record_is_written_through_no_planted_link(tmp_path):
    target = tmp_path / "precious"
    target.write_text("keep me\n")
    (tmp_path / "launch.json.tmp").symlink_to(target)
    (tmp_path / "launch.json").symlink_to(target)
    write_record(str(tmp_path / "launch.json"), "{}\n")
    assert target.read_text() == "keep me\n"
    assert not (tmp_path / "launch.json").is_symlink() and (tmp_path / "launch.json").read_text() == "{}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["launch.json", "launch.json.tmp", "precious"]


# ------------------------------------------------------------------ one job per log directory
def test_a_second_job_in_a_running_jobs_log_dir_is_refused(tmp_path):
    logs = tmp_path / "logs"
    first = topo("launch", "--worker_num=1", "--local_worker_num=1", "--no-scheduler", f"--log_dir={logs}",
                 JOB, str(tmp_path), "sleep=60", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    record = (logs / "launch.json").read_text()
    try:
        second = topo("launch", "--worker_num=1", "--local_worker_num=1", "--no-scheduler", f"--log_dir={logs}",
                      JOB, str(tmp_path), cwd=tmp_path)
        assert second.returncode == 2, second.stderr
        assert second.stderr.count("\n") == 1 and f"stop it first with `topo stop {logs}`" in second.stderr
        assert (logs / "launch.json").read_text() == record  # the first job's record is intact
    finally:
        topo("stop", str(logs), cwd=tmp_path)


def test_a_record_naming_a_live_process_of_its_job_blocks_the_dir(tmp_path):
    job_id = "0123456789abcdef"
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                             env={**os.environ, "TOPO_JOB_ID": job_id})
    # Popen returns at the exec, a moment before the kernel shows the new environment in /proc
    assert wait_for(lambda: Path(f"/proc/{child.pid}/environ").read_bytes())
    try:
        (tmp_path / "launch.json").write_text(json.dumps({"schema": SCHEMA, "job_id": job_id, "processes": [{"pid": child.pid}]}))
        with pytest.raises(UsageError, match=f"pid {child.pid}.*topo stop logs"):
            check_not_running(str(tmp_path), "logs")
    finally:
        child.kill()
        child.wait()
    check_not_running(str(tmp_path), "logs")  # gone: the directory is free again


def test_a_finished_jobs_log_dir_is_reused(tmp_path):
    (tmp_path / "launch.json").write_text(json.dumps({"schema": SCHEMA, "job_id": "0123456789abcdef",
                                                          "processes": [{"pid": 1}]}))
    check_not_running(str(tmp_path), ".")  # pid 1 does not carry the job's id


# ------------------------------------------------------------------ filesystems and bounds
def test_a_log_dir_on_tmpfs_is_accepted_and_proc_refused():
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm on this machine")
    check_log_dir("/dev/shm/topo-logs-test", "--log_dir")
    with pytest.raises(UsageError, match="pseudo-filesystem"):
        check_log_dir("/proc/topo-logs", "--log_dir")


@pytest.mark.parametrize("args, line", [
    (["launch", "--worker_num=2147483647", "--local_worker_num=2147483647", "--dry-run"],
     "topo: error: --local_worker_num=2147483647 is more than 65536 processes on one node: start fewer"),
    (["run", "--nproc-per-node", "2147483647", "--dry-run"],
     "topo: error: --nproc-per-node=2147483647 is more than 65536 processes on one node: start fewer"),
])
def test_process_counts_have_a_bound_checked_first(tmp_path, args, line):
    r = topo(*args, JOB, cwd=tmp_path)
    assert (r.returncode, r.stderr.strip(), r.stdout) == (2, line, "")


# ------------------------------------------------------------------ after the start
@needs_two_cpus
def test_a_worker_that_moves_itself_is_reported_and_left_running(tmp_path):
    r = topo("launch", "--worker_num=1", "--local_worker_num=1", "--join=True", "--no-scheduler",
             f"--log_dir={tmp_path / 'logs'}", '--bind_core={"device0": ["0-1"]}', JOB, str(tmp_path),
             "affinity=0", "sleep=2", cwd=tmp_path)
    # checked before the script moved (verified) or after (reported as changed): never stopped for it
    assert r.returncode == 0, r.stderr
    assert "did not take" not in r.stderr
    assert ("rank 0: bound to CPUs 0-1, memory not bound; it now runs with CPUs 0, memory not bound: changed "
            "after start") in r.stderr or "rank 0: CPUs 0-1, memory not bound (verified)" in r.stderr


def test_ctrl_c_returns_promptly_as_msrun(tmp_path):
    """msrun: Ctrl-C and the job is gone at once; here SIGINT is forwarded, then SIGKILL after 1 s
    even with a long --grace-period (a worker ignoring SIGINT would otherwise hold it 600 s)."""
    proc = subprocess.Popen([sys.executable, "-m", "topo", "launch", "--worker_num=1", "--local_worker_num=1",
                             "--join=True", "--no-scheduler", "--grace-period=600", f"--log_dir={tmp_path / 'logs'}",
                             JOB, str(tmp_path), "ignore-int", "ready", "sleep=300"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    assert wait_for(lambda: (tmp_path / "ready_0").exists(), 30)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "received SIGINT; forwarding it to every process (SIGKILL after 1 s)" in err
