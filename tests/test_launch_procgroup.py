"""The launcher's process group with real processes: nothing outlives a SIGKILLed launcher, a low
open-file limit, `topo stop` on a detached job, and binding applied with system calls when
numactl / taskset are not on PATH."""

from __future__ import annotations

import errno
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from livehost import cpus_text, path_with_python
from processes import alive, wait_for
from topo.cpuset import CpuSet

SCRIPTS = Path(__file__).parent / "scripts"
ENVDUMP = str(SCRIPTS / "envdump.py")
JOB = str(SCRIPTS / "job.py")
TRIVIAL = "import sys; sys.exit(0)\n"
JOB_ID = os.urandom(8).hex()  # hand-written records' job id: tests running beside these carry their own

needs_two_cpus = pytest.mark.skipif(not {0, 1} <= os.sched_getaffinity(0), reason="needs CPUs 0 and 1")
needs_numa_maps = pytest.mark.skipif(not os.path.exists("/proc/self/numa_maps"), reason="kernel without NUMA")

# `python` on PATH is this interpreter, as the workers run it
ENV = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "OMP_NUM_THREADS")}
ENV["PATH"] = path_with_python()


def topo(*args, cwd, env=None, timeout=60):
    return subprocess.run([sys.executable, "-m", "topo", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env or ENV)


def recorded_pids(logs: Path) -> list[int]:
    return [p["pid"] for p in json.loads((logs / "launch.json").read_text())["processes"]]


def reported_pids(out: Path) -> list[int]:
    return [int(f.read_text()) for f in out.iterdir() if f.name.startswith(("grandchild_", "daemon_"))]


@pytest.fixture
def dirs(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    return tmp_path, out, tmp_path / "logs"


def bin_without(tmp_path: Path, *hidden: str) -> str:
    """A PATH of the usual tools minus `hidden` (numactl, taskset): a directory of symlinks."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    os.symlink(sys.executable, bindir / "python")
    for d in os.environ.get("PATH", os.defpath).split(os.pathsep):
        if not os.path.isdir(d):
            continue
        for name in os.listdir(d):
            target = os.path.join(d, name)
            if name in hidden or (bindir / name).exists() or not os.access(target, os.X_OK):
                continue
            os.symlink(target, bindir / name)
    return str(bindir)


# ------------------------------------------------------------------ no orphans, even when SIGKILLed
@needs_two_cpus
def test_sigkilled_launcher_takes_every_process_with_it(dirs):
    """PR_SET_PDEATHSIG is set in each child between fork and exec, so it holds through taskset's
    exec too."""
    cwd, out, logs = dirs
    launcher = subprocess.Popen(
        [sys.executable, "-m", "topo", "launch", "--worker_num=2", "--local_worker_num=2", "--join=True",
         f"--log_dir={logs}", '--bind_core={"device0": ["0"], "device1": ["1"]}', JOB, str(out), "ready",
         "sleep=60"], cwd=cwd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # the record is rewritten as processes start: it may list the third after the third is ready
        assert wait_for(lambda: len(list(out.glob("ready_*"))) == 3 and (logs / "launch.json").exists()
                        and len(recorded_pids(logs)) == 3)
        pids = recorded_pids(logs)
        assert all(alive(pid) for pid in pids)
        launcher.send_signal(signal.SIGKILL)
        launcher.wait(10)
        assert wait_for(lambda: not any(alive(pid) for pid in pids), timeout=1.0), \
            [pid for pid in pids if alive(pid)]
    finally:
        launcher.kill()
        for pid in recorded_pids(logs) if (logs / "launch.json").exists() else ():
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_64_workers_under_an_open_file_limit_of_40(dirs):
    cwd, out, logs = dirs
    (cwd / "trivial.py").write_text(TRIVIAL)
    command = (f"ulimit -n 40 && exec {sys.executable} -m topo launch --worker_num=64 --local_worker_num=64 "
               f"--join=True --no-scheduler --log_dir={logs} trivial.py")
    r = subprocess.run(["bash", "-c", command], cwd=cwd, env=ENV, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "all 64 workers exited successfully" in r.stderr
    assert len(list(logs.glob("worker_*.log"))) == 64
    assert not any(alive(pid) for pid in recorded_pids(logs))


def test_an_open_file_limit_too_low_for_the_launcher_starts_nothing(dirs):
    cwd, out, logs = dirs
    command = (f"ulimit -n 12 && exec {sys.executable} -m topo launch --worker_num=2 --local_worker_num=2 "
               f"--join=True --log_dir={logs} {JOB} {out} ready")
    r = subprocess.run(["bash", "-c", command], cwd=cwd, env=ENV, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stderr
    assert r.stderr.startswith("topo: error: too few file descriptors, open-file limit 12") \
        and r.stderr.count("\n") == 1, r.stderr
    assert not logs.exists() and not list(out.iterdir())


# ------------------------------------------------------------------ detached jobs and topo stop
def test_detached_job_is_stopped_by_topo_stop_daemons_included(dirs):
    cwd, out, logs = dirs
    r = topo("launch", "--worker_num=2", "--local_worker_num=2", f"--log_dir={logs}", "--grace-period=1",
             JOB, str(out), "daemon@0", "grandchild@1", "ignore-term@1", "ready", "sleep=60", cwd=cwd)
    assert r.returncode == 0, r.stderr
    record = logs / "launch.json"
    assert f"the job is recorded in {record}; stop it with: topo stop {logs}" in r.stderr
    pids = recorded_pids(logs)
    try:
        assert wait_for(lambda: len(list(out.glob("ready_*"))) == 3)
        every = pids + reported_pids(out)
        assert len(every) == 5 and all(alive(pid) for pid in every)
        start = time.monotonic()
        s = topo("stop", str(logs), cwd=cwd)
        assert s.returncode == 0, s.stderr
        assert time.monotonic() - start < 10
        for name, pid in zip(("scheduler", "rank 0", "rank 1"), pids):
            assert f"topo stop: stopped {name} (pid {pid}): SIG" in s.stderr, s.stderr
        assert f"stopped rank 1 (pid {pids[2]}): SIGKILL" in s.stderr  # it ignores SIGTERM
        assert "still running after 1 s; sending SIGKILL" in s.stderr
        daemon = int((out / "daemon_0").read_text())
        assert f"stopped a process the job started (pid {daemon}): SIGTERM" in s.stderr
        assert wait_for(lambda: not any(alive(pid) for pid in every), timeout=5)
        again = topo("stop", str(logs), cwd=cwd)
        assert again.returncode == 0 and again.stderr == (
            f"topo stop: the job recorded in {record} is not running: its 3 recorded process(es) have exited and "
            "no process carries its id; nothing signalled\n"), again.stderr
    finally:
        for pid in pids + reported_pids(out):
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_topo_stop_never_signals_a_reused_pid(dirs):
    cwd, out, logs = dirs
    bystander = subprocess.Popen(["sleep", "60"])
    try:
        logs.mkdir()
        (logs / "launch.json").write_text(json.dumps({
            "schema": "topo.launch/2", "job_id": JOB_ID, "launcher_pid": 1, "launcher_create_time": 1.0,
            "join": False, "grace_period": 1, "log_dir": str(logs),
            "processes": [{"name": "rank 0", "pid": bystander.pid, "create_time": 1.0}]}))
        s = topo("stop", str(logs), cwd=cwd)
        assert s.returncode == 0, s.stderr
        assert "is not running" in s.stderr and "nothing signalled" in s.stderr, s.stderr
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


def test_topo_stop_asks_a_joined_launcher_to_stop_its_job(dirs):
    cwd, out, logs = dirs
    launcher = subprocess.Popen(
        [sys.executable, "-m", "topo", "launch", "--worker_num=2", "--local_worker_num=2", "--join=True",
         "--grace-period=1", f"--log_dir={logs}", JOB, str(out), "daemon@0", "ready", "sleep=60"], cwd=cwd, env=ENV,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: len(list(out.glob("ready_*"))) == 3 and (logs / "launch.json").exists())
        every = recorded_pids(logs) + reported_pids(out)
        s = topo("stop", str(logs), cwd=cwd)
        assert s.returncode == 0, s.stderr
        assert f"the launcher (pid {launcher.pid}) is following the job: sending it SIGTERM" in s.stderr
        assert launcher.wait(10) == 143
        assert "received SIGTERM; forwarding it to every process" in launcher.stderr.read()
        assert not any(alive(pid) for pid in every)
    finally:
        launcher.kill()
        launcher.wait()


def test_a_record_without_start_times_is_matched_by_job_id(dirs):
    """A --join job's record has no start times in its first second: a pid that does not carry
    the job's id is not the job's."""
    cwd, out, logs = dirs
    bystander = subprocess.Popen(["sleep", "60"])
    try:
        logs.mkdir()
        (logs / "launch.json").write_text(json.dumps({
            "schema": "topo.launch/2", "job_id": JOB_ID, "launcher_pid": os.getpid(),
            "launcher_create_time": None, "join": True, "grace_period": 1, "log_dir": str(logs),
            "processes": [{"name": "rank 0", "pid": bystander.pid, "create_time": None}]}))
        s = topo("stop", str(logs), cwd=cwd)
        assert s.returncode == 0, s.stderr
        assert "is not running" in s.stderr and "launcher" not in s.stderr, s.stderr
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


def test_topo_stop_errors_are_one_line(dirs):
    cwd, out, logs = dirs
    s = topo("stop", str(logs), cwd=cwd)
    assert s.returncode == 2 and s.stderr == (
        f"topo: error: no job record, {logs / 'launch.json'} does not exist: give the --log_dir of a job "
        "started by topo launch or topo run\n")
    (cwd / "a-file").write_text("")
    s = topo("stop", str(cwd / "a-file"), cwd=cwd)
    assert s.returncode == 2 and s.stderr == (
        f"topo: error: no job record, {cwd / 'a-file'} is not a directory: give the --log_dir of a job "
        "started by topo launch or topo run\n")
    logs.mkdir()
    (logs / "launch.json").write_text('{"schema": "other"}')
    s = topo("stop", str(logs), cwd=cwd)
    assert s.returncode == 2 and s.stderr.count("\n") == 1 and "not a job record of this topo" in s.stderr


NAN, INF = float("nan"), float("inf")  # json.dumps writes NaN and Infinity, json.load reads them back


@pytest.mark.parametrize("change, words", [
    ({"grace_period": INF}, "grace_period inf is not a number of seconds from 0 to 604800; "
                            "give topo stop --grace-period SECONDS"),
    ({"grace_period": NAN}, "grace_period nan is not a number of seconds"),
    ({"grace_period": 1e300}, "grace_period 1e+300 is not a number of seconds"),
    ({"grace_period": "10"}, "grace_period '10' is not a number of seconds"),
    ({"create_time": NAN}, "create_time nan is not a start time in seconds since the epoch"),
    ({"pid": -1}, "pid -1 is not a process id from 1 to 4194304"),
    ({"pid": True}, "pid True is not a process id"),
    ({"launcher_create_time": NAN}, "launcher_create_time nan is not a start time"),
    ({"processes": ["rank 0"]}, "a process entry is 'rank 0', not an object"),
], ids=["grace-inf", "grace-nan", "grace-huge", "grace-text", "start-nan", "pid-negative", "pid-bool",
        "launcher-start-nan", "entry-text"])
def test_topo_stop_refuses_a_record_it_cannot_trust_before_signalling(dirs, change, words):
    """A hand-edited launch.json: Infinity as grace period would make topo stop wait forever, a NaN
    start time matches every process, -1 reaches kill(). One line naming the file; nothing signalled."""
    import psutil

    cwd, out, logs = dirs
    # it carries the job id, as the job's processes do: only the record's faults keep it from a signal
    bystander = subprocess.Popen(["sleep", "60"], env={**os.environ, "TOPO_JOB_ID": JOB_ID})
    try:
        logs.mkdir()
        entry = {"name": "rank 0", "pid": bystander.pid, "create_time": psutil.Process(bystander.pid).create_time()}
        record = {"schema": "topo.launch/2", "job_id": JOB_ID, "launcher_pid": 1,
                  "launcher_create_time": psutil.Process(1).create_time(), "join": False, "grace_period": 1,
                  "log_dir": str(logs), "processes": [entry]}
        for key, value in change.items():
            (entry if key in ("pid", "create_time") else record)[key] = value
        (logs / "launch.json").write_text(json.dumps(record))
        s = topo("stop", str(logs), cwd=cwd, timeout=20)
        fix = "give topo stop --grace-period SECONDS" if "grace_period" in change else "stop the processes by hand"
        assert s.returncode == 2 and s.stderr.count("\n") == 1, s.stderr
        assert s.stderr.startswith(f"topo: error: bad job record, {logs / 'launch.json'}: {words}"), s.stderr
        assert s.stderr.endswith(f"; {fix}\n"), s.stderr
        assert bystander.poll() is None
        if "grace_period" in change:  # the record's grace period is not needed when one is given
            s = topo("stop", "--grace-period=1", str(logs), cwd=cwd, timeout=20)
            assert s.returncode == 0 and f"stopped rank 0 (pid {bystander.pid}): SIGTERM" in s.stderr, s.stderr
            assert bystander.wait(5) == -signal.SIGTERM
    finally:
        bystander.kill()
        bystander.wait()


# ------------------------------------------------------------------ binding without numactl / taskset
UNIFIED = {"bind_config": {"bind_cpu_mode": "cpu", "bind_memory_mode": "numa"},
           "bind_cpu": {"scheduler": {"main": "0"}, "device0": {"main": "1"}, "device1": {"main": "0"}},
           "bind_memory": {"device0": 0, "device1": 0}}


@needs_two_cpus
@needs_numa_maps
def test_bindings_are_applied_directly_without_numactl_and_taskset(dirs, tmp_path):
    cwd, out, logs = dirs
    bind = cwd / "bind.json"
    bind.write_text(json.dumps(UNIFIED))
    env = {**ENV, "PATH": bin_without(tmp_path, "numactl", "taskset")}
    args = ["--worker_num=2", "--local_worker_num=2", "--join=True", f"--log_dir={logs}", f"--bind_numa={bind}",
            ENVDUMP, str(out), "--linger"]
    dry = topo("launch", "--dry-run", *args, cwd=cwd, env=env)
    assert dry.returncode == 0, dry.stderr
    # the argv msrun would run, and what happens instead
    assert f"rank 0, DEVICE_ID=0: numactl --membind 0 --physcpubind 1 python {ENVDUMP} {out} --linger" in dry.stdout
    assert (f"  binding: CPUs 1, memory bound to node 0 (applied directly: numactl not found; runs python {ENVDUMP} {out} "
            "--linger)" in dry.stdout.splitlines())
    r = topo("launch", *args, cwd=cwd, env=env)
    assert r.returncode == 0, r.stderr
    assert "scheduler: CPUs 0, memory not bound (verified, applied directly: taskset not found)" in r.stderr
    assert "rank 0: CPUs 1, memory bound to node 0 (verified, applied directly: numactl not found)" in r.stderr
    assert "rank 1: CPUs 0, memory bound to node 0 (verified, applied directly: numactl not found)" in r.stderr
    d = {f.stem: json.loads(f.read_text()) for f in out.glob("*.json")}
    assert (d["scheduler"]["affinity"], d["scheduler"]["memory_policy"]) == ([0], "default")
    assert (d["worker_0"]["affinity"], d["worker_0"]["memory_policy"]) == ([1], "bind:0")
    assert (d["worker_1"]["affinity"], d["worker_1"]["memory_policy"]) == ([0], "bind:0")
    assert d["worker_0"]["orig_argv"] == ["python", ENVDUMP, str(out), "--linger"]
    launched = json.loads((logs / "launch.json").read_text())["processes"]
    assert launched[1]["argv"] == ["python", ENVDUMP, str(out), "--linger"]
    assert launched[1]["binding"]["applied"] == "directly"


@needs_two_cpus
@needs_numa_maps
@pytest.mark.parametrize("numactl", [True, False], ids=["numactl", "direct"])
def test_preferred_memory_policy(dirs, tmp_path, numactl):
    cwd, out, logs = dirs
    if numactl and shutil.which("numactl") is None:
        pytest.skip("numactl not installed")
    bind = cwd / "bind.json"
    bind.write_text(json.dumps({"bind_config": {"bind_cpu_mode": "cpu", "bind_memory_mode": "none"},
                                "bind_cpu": {"device0": {"main": "1"}}, "bind_memory": {"device0": 0},
                                "topo": {"memory_policy": "preferred"}}))
    env = ENV if numactl else {**ENV, "PATH": bin_without(tmp_path, "numactl", "taskset")}
    r = topo("launch", "--worker_num=1", "--local_worker_num=1", "--join=True", "--no-scheduler", f"--log_dir={logs}",
             f"--bind_numa={bind}", ENVDUMP, str(out), "--linger", cwd=cwd, env=env)
    assert r.returncode == 0, r.stderr
    how = "verified" if numactl else "verified, applied directly: numactl not found"
    assert f"rank 0: CPUs 1, memory preferred on node 0 ({how})" in r.stderr
    record = json.loads((out / "worker_0.json").read_text())
    assert (record["affinity"], record["memory_policy"]) == ([1], "prefer:0")


def _refuse_mempolicy(policy, nodes=None):
    from topo.syscalls import SyscallError

    raise SyscallError("set_mempolicy", errno.EPERM, f"{policy} {nodes}")


@needs_numa_maps
def test_refused_memory_policy_without_numactl(dirs, tmp_path, monkeypatch):
    """set_mempolicy refused (a container without CAP_SYS_NICE): the child inherits the refusing
    stand-in through fork, exactly where it would call the kernel."""
    from topo.launcher import LaunchConfig, launch
    from topo.launcher.procgroup import LaunchError

    cwd, out, logs = dirs
    monkeypatch.setattr("topo.syscalls.set_mempolicy", _refuse_mempolicy)
    environ = {**ENV, "PATH": bin_without(tmp_path, "numactl", "taskset")}
    config = dict(script=ENVDUMP, script_args=(str(out),), worker_num=1, local_worker_num=1, join=True,
                  scheduler=False, log_dir=str(logs), bind_numa='{"device0": ["0"]}', grace_period=1)
    messages = io.StringIO()
    with pytest.raises(LaunchError) as refused:
        launch(LaunchConfig.from_flags(**config), environ=environ, out=io.StringIO(), err=messages)
    assert str(refused.value).startswith("rank 0: the kernel refused the binding (topo: set_mempolicy: Operation "
                                         "not permitted (bind 0): the kernel refused memory policy 'bind'")
    assert "); drop the memory binding" in str(refused.value)
    assert "rerun with --bind-fallback to keep only the CPU binding" in str(refused.value)
    assert not list(out.iterdir())

    messages = io.StringIO()
    result = launch(LaunchConfig.from_flags(**config, bind_fallback=True), environ=environ, out=io.StringIO(), err=messages)
    assert result.exit_code == 0, messages.getvalue()
    record = json.loads((out / "worker_0.json").read_text())
    assert record["memory_policy"] == "default" and record["affinity"] == sorted(os.sched_getaffinity(0))
    assert (f"rank 0: CPUs {cpus_text(os.sched_getaffinity(0))}, memory not bound "
            "(verified, applied directly: numactl not found; memory policy bind refused, CPUs alone held "
            "(--bind-fallback))" in messages.getvalue()), messages.getvalue()
    assert "rerun with --bind-fallback" not in messages.getvalue()
    assert record["env"]["TOPO_BINDING"] == f"cpus={CpuSet(record['affinity'])}"  # what held, not what was asked
