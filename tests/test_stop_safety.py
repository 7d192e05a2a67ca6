"""`topo stop` against forged and hostile records: it signals only processes provably the job's
(TOPO_JOB_ID in their environment and, for a recorded pid, the recorded start time), never a
session, and reads the record bounded, without following a link or blocking."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from topo.launcher import stop as stopmod
from topo.errors import UsageError
from topo.launcher.files import RECORD_LIMIT
from processes import alive, wait_for

JOB_ID = os.urandom(8).hex()  # its own: tests running beside this one carry theirs
SCHEMA = "topo.launch/2"


def topo_stop(logs: Path, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "topo", "stop", *flags, str(logs)], capture_output=True,
                          text=True, timeout=60)


def write_record(logs: Path, processes: list[dict] | None = None, **fields) -> Path:
    logs.mkdir(exist_ok=True)
    record = {"schema": SCHEMA, "job_id": JOB_ID, "launcher_pid": None, "launcher_create_time": None,
              "join": False, "grace_period": 1, "log_dir": str(logs), "processes": processes, **fields}
    path = logs / "launch.json"
    path.write_text(json.dumps(record))
    return path


def entry(proc: subprocess.Popen, name: str = "rank 0") -> dict:
    return {"name": name, "pid": proc.pid, "create_time": psutil.Process(proc.pid).create_time()}


@pytest.fixture
def spawn():
    started = []

    def start(argv, **kwargs):
        proc = subprocess.Popen(argv, **kwargs)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


# ------------------------------------------------------------------ forged records signal nothing
def test_a_forged_record_naming_a_real_process_with_its_start_time_signals_nothing(tmp_path, spawn):
    bystander = spawn(["sleep", "60"])
    logs = tmp_path / "logs"
    # the launcher named is this test's own process, following the job (join): it must not be asked either
    write_record(logs, [entry(bystander)], join=True, launcher_pid=os.getpid(),
                 launcher_create_time=psutil.Process().create_time())
    s = topo_stop(logs)
    assert s.returncode == 1, s.stderr
    assert s.stderr == (f"topo stop: rank 0 (pid {bystander.pid}) started when the job's process did but does not "
                        f"carry TOPO_JOB_ID={JOB_ID} in its environment: left alone, it is "
                        "not provably the job's\n")
    assert bystander.poll() is None


def test_the_session_of_a_job_process_is_not_signalled(tmp_path, spawn):
    """A process of the job shares its session with one that does not carry the job id: only the
    job's process is signalled."""
    out = tmp_path / "other.pid"
    member = spawn(["sh", "-c", f'env -u TOPO_JOB_ID sleep 60 & echo $! > "{out}"; exec sleep 60'],
                   start_new_session=True, env={**os.environ, "TOPO_JOB_ID": JOB_ID})
    assert wait_for(lambda: out.exists() and out.read_text().strip())
    other = int(out.read_text())
    try:
        assert os.getsid(other) == os.getsid(member.pid)
        logs = tmp_path / "logs"
        # both exec'd: until `env` runs sleep, the forked shell still carries the job id
        assert wait_for(lambda: psutil.Process(member.pid).name() == "sleep" and psutil.Process(other).name() == "sleep")
        write_record(logs, [entry(member)])
        s = topo_stop(logs)
        assert s.returncode == 0, s.stderr
        assert s.stderr == f"topo stop: stopped rank 0 (pid {member.pid}): SIGTERM\n"
        assert member.wait(5) == -signal.SIGTERM
        assert alive(other)
    finally:
        os.kill(other, signal.SIGKILL)


def test_a_process_carrying_the_job_id_is_stopped_and_a_record_of_the_wrong_start_is_not_used(tmp_path, spawn):
    carrier = spawn(["sleep", "60"], env={**os.environ, "TOPO_JOB_ID": JOB_ID})
    bystander = spawn(["sleep", "60"])
    logs = tmp_path / "logs"
    # the bystander's pid recorded with another start time: a pid the kernel has reused
    write_record(logs, [{"name": "rank 0", "pid": bystander.pid, "create_time": 1.0}])
    s = topo_stop(logs)
    assert s.returncode == 0, s.stderr
    assert f"stopped a process the job started (pid {carrier.pid}): SIGTERM" in s.stderr
    assert f"already exited: rank 0 (pid {bystander.pid})" in s.stderr
    assert carrier.wait(5) == -signal.SIGTERM and bystander.poll() is None


def test_a_finished_job_is_said_to_be_not_running_and_nothing_is_signalled(tmp_path, spawn):
    done = spawn(["true"], env={**os.environ, "TOPO_JOB_ID": JOB_ID})
    record = entry(done) if done.poll() is None else {"name": "rank 0", "pid": done.pid, "create_time": 1.0}
    done.wait()
    bystander = spawn(["sleep", "60"])
    logs = tmp_path / "logs"
    path = write_record(logs, [record, {"name": "rank 1", "pid": bystander.pid, "create_time": None}])
    s = topo_stop(logs)
    assert s.returncode == 0, s.stderr
    assert s.stderr == (f"topo stop: the job recorded in {path} is not running: its 2 recorded process(es) have "
                        "exited and no process carries its id; nothing signalled\n")
    assert bystander.poll() is None


def test_a_record_listing_one_live_pid_many_times_is_refused_before_any_proof(tmp_path, spawn, monkeypatch):
    bystander = spawn(["sleep", "60"])
    logs = tmp_path / "logs"
    path = write_record(logs, [{"name": "rank 0", "pid": bystander.pid, "create_time": None}] * 65_536)
    proofs = []
    monkeypatch.setattr(stopmod, "prove", lambda *a, **k: proofs.append(a) or ("gone", None))
    with pytest.raises(UsageError, match=f"bad job record, {path}: pid {bystander.pid} is listed twice"):
        stopmod.stop_job(str(logs))
    assert proofs == [] and bystander.poll() is None


def test_each_recorded_pid_is_proven_once_while_the_job_stops(tmp_path, spawn, monkeypatch):
    """The recorded processes are proven once; the wait for the job's end only rescans for new ones."""
    carrier = spawn(["sh", "-c", "trap '' TERM; sleep 60"], env={**os.environ, "TOPO_JOB_ID": JOB_ID})
    others = [spawn(["sleep", "60"]) for _ in range(3)]
    logs = tmp_path / "logs"
    write_record(logs, [entry(p, f"rank {i}") for i, p in enumerate(others)], grace_period=0.3)
    proven = []
    real = stopmod.prove
    monkeypatch.setattr(stopmod, "prove", lambda pid, *a, **k: proven.append(pid) or real(pid, *a, **k))
    report = stopmod.stop_job(str(logs))
    assert report.exit_code == 1 and len(report.unproven) == 3  # the bystanders, left alone
    assert sorted(proven.count(p.pid) for p in others) == [1, 1, 1], proven
    assert carrier.wait(10) == -signal.SIGKILL and all(p.poll() is None for p in others)


def test_a_process_whose_environment_cannot_be_read_is_named_so_and_left_alone(tmp_path, spawn, monkeypatch):
    member = spawn(["sleep", "60"], env={**os.environ, "TOPO_JOB_ID": JOB_ID})
    logs = tmp_path / "logs"
    write_record(logs, [entry(member)])

    def denied(self):
        raise psutil.AccessDenied(self.pid)

    monkeypatch.setattr(psutil.Process, "environ", denied)
    said = []
    report = stopmod.stop_job(str(logs), say=said.append)
    assert report.exit_code == 1 and said == [
        f"rank 0 (pid {member.pid}) still runs, but its environment cannot be read (another user's process): "
        "left alone; run topo stop as the job's user or as root"]
    assert member.poll() is None


# ------------------------------------------------------------------ hostile record files
def one_line_refusal(s: subprocess.CompletedProcess, words: str) -> None:
    assert s.returncode == 2 and s.stderr.count("\n") == 1, s.stderr
    assert s.stderr.startswith("topo: error: ") and words in s.stderr, s.stderr
    assert "Traceback" not in s.stderr


def test_a_fifo_record_is_refused_without_waiting(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    os.mkfifo(logs / "launch.json")
    one_line_refusal(topo_stop(logs), "is not a regular file")


def test_a_record_linked_to_dev_zero_is_refused(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    os.symlink("/dev/zero", logs / "launch.json")
    one_line_refusal(topo_stop(logs), "is a symbolic link")


def test_a_record_larger_than_the_limit_is_refused_by_its_size(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    with open(logs / "launch.json", "wb") as fh:
        fh.truncate(RECORD_LIMIT + 1)  # sparse: costs no disk
    one_line_refusal(topo_stop(logs), f"more than the {RECORD_LIMIT} a record can be")


def test_a_record_of_empty_lists_is_refused_before_it_is_decoded(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    # 15 MiB (under the limit) of empty lists decodes to some 400 MB of Python lists (a process peak of 397 MB, measured)
    (logs / "launch.json").write_text("[" + ",".join(["[]"] * 5_000_000) + "]")
    one_line_refusal(topo_stop(logs), "more than 1048576 arrays and objects")


@pytest.mark.parametrize("change, words", [
    ({"job_id": None}, "job_id None is not a job id topo writes"),
    ({"job_id": "x"}, "job_id 'x' is not a job id topo writes"),
    ({"job_id": "0123456789abcdef=x"}, "is not a job id topo writes"),
    ({"join": "yes"}, "join 'yes' is not true or false"),
    ({"launcher_pid": 0}, "launcher_pid 0 is not a process id"),
    ({"processes": [{"name": "\x1b[2J", "pid": 5, "create_time": None}]}, "is not printable text"),
    ({"processes": [{"name": "rank 0", "create_time": None}]}, "pid None is not a process id"),
], ids=["no-job-id", "short-job-id", "job-id-with-equals", "join-text", "launcher-pid-0", "name-escape", "no-pid"])
def test_record_fields_of_the_wrong_type_are_refused(tmp_path, change, words):
    logs = tmp_path / "logs"
    fields = {"processes": [{"name": "rank 0", "pid": 5, "create_time": None}], **change}
    path = write_record(logs, **fields)
    s = topo_stop(logs)
    one_line_refusal(s, f"bad job record, {path}: ")
    assert words in s.stderr


def test_a_deeply_nested_record_is_one_line(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "launch.json").write_text("[" * 200_000 + "]" * 200_000)
    one_line_refusal(topo_stop(logs), "unreadable job record")


# ------------------------------------------------------------------ the proof, on a fake /proc
def fake_proc(root: Path, pid: int, *, ticks: int, state: str = "S", environ: bytes = b"", btime: int = 1000) -> None:
    root.mkdir(exist_ok=True)
    (root / "stat").write_text(f"cpu  1 2 3\nbtime {btime}\n")
    d = root / str(pid)
    d.mkdir(parents=True)
    fields = ["0"] * 50
    fields[0], fields[1], fields[19] = state, "1", str(ticks)  # fields 3, 4 and 22 of proc(5)
    (d / "stat").write_text(f"{pid} (a name) with) spaces) {' '.join(fields)}\n")
    (d / "environ").write_bytes(environ)


def test_prove_on_a_fake_proc(tmp_path, monkeypatch):
    proc = tmp_path / "proc"
    monkeypatch.setattr(psutil, "PROCFS_PATH", str(proc))
    monkeypatch.setattr(stopmod, "_pidfd", lambda pid: -1)  # the fake pids are no processes of this machine
    fake_proc(proc, 10, ticks=500, environ=b"A=1\0TOPO_JOB_ID=" + JOB_ID.encode() + b"\0")
    fake_proc(proc, 11, ticks=500, environ=b"TOPO_JOB_ID=other\0")
    fake_proc(proc, 12, ticks=500, state="Z", environ=b"TOPO_JOB_ID=" + JOB_ID.encode())
    started = 1000 + 500 / os.sysconf("SC_CLK_TCK")

    def verdict(pid, recorded):
        return stopmod.prove(pid, JOB_ID, recorded, name="r")[0]

    assert verdict(10, started) == "job" and verdict(10, None) == "job"
    assert verdict(10, started + 1) == "gone"  # another start: the pid was reused
    assert verdict(11, started) == "unproven" and verdict(11, None) == "gone"
    assert verdict(12, started) == "gone"  # a zombie has exited
    assert verdict(13, started) == "gone"
    os.chmod(proc / "11" / "environ", 0)
    if os.geteuid() != 0:  # root reads it anyway
        assert verdict(11, started) == "unproven"
