"""topo launch with real processes: msrun's environment contract, verified bindings, failures,
signals and orphans. The bind tables name CPUs 0 and 1 of NUMA node 0; numactl and taskset installed."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from livehost import bind_core_cpus, cpus_text, hide_gpus, path_with_python
from processes import alive, wait_for
from topo import discover

SCRIPTS = Path(__file__).parent / "scripts"
ENVDUMP = str(SCRIPTS / "envdump.py")
JOB = str(SCRIPTS / "job.py")
GRACE = 1.0

needs_two_cpus = pytest.mark.skipif(not {0, 1} <= os.sched_getaffinity(0), reason="needs CPUs 0 and 1")
needs_numactl = pytest.mark.skipif(shutil.which("numactl") is None, reason="numactl not installed")


# The environment the launcher is started with; `added` compares the children's with it. The
# workers run `python` from PATH, as msrun does: this interpreter comes first.
BASE_ENV = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
BASE_ENV["PATH"] = path_with_python()


def topo_launch(args, *, cwd, timeout=60, input=None, env=None):
    return subprocess.run([sys.executable, "-m", "topo", "launch", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, input=input, env=env or BASE_ENV)


def start_launch(args, *, cwd, env=None):
    return subprocess.Popen([sys.executable, "-m", "topo", "launch", *args], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env or BASE_ENV)


def job_pids(log_dir: Path, out_dir: Path) -> list[int]:
    """Every pid the job had: its processes (launch.json) and the grandchildren they reported."""
    pids = [p["pid"] for p in json.loads((log_dir / "launch.json").read_text())["processes"]]
    for f in out_dir.glob("*child_*"):
        pids.append(int(f.read_text()))
    for f in out_dir.glob("daemon_*"):
        pids.append(int(f.read_text()))
    return pids


@pytest.fixture
def dirs(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    return tmp_path, out, tmp_path / "logs"


def dumps(out: Path) -> dict:
    return {f.stem: json.loads(f.read_text()) for f in out.glob("*.json")}


def added(record: dict) -> dict:
    """The variables the launcher added or changed, compared with the test's own environment."""
    return {k: v for k, v in record["env"].items() if BASE_ENV.get(k) != v}


# ------------------------------------------------------------------ msrun's environment contract
def test_single_node_env_contract(dirs):
    cwd, out, logs = dirs
    r = topo_launch(["--worker_num=2", "--local_worker_num=2", "--master_port=29611", "--join=True",
                     "--cluster_time_out=30", f"--log_dir={logs}", ENVDUMP, str(out), "--foo", "bar"], cwd=cwd)
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("all 2 workers exited successfully") == 1  # issue 18: said once, not twice
    d = dumps(out)
    assert set(d) == {"scheduler", "worker_0", "worker_1"}
    cluster = {"MS_SCHED_HOST": "127.0.0.1", "MS_SCHED_PORT": "29611", "MS_TOPO_TIMEOUT": "30",
               "MS_WORKER_NUM": "2", "RANK_SIZE": "2"}
    threads = {} if "OMP_NUM_THREADS" in BASE_ENV else {"OMP_NUM_THREADS": "1"}
    unbuffered = {} if "PYTHONUNBUFFERED" in BASE_ENV else {"PYTHONUNBUFFERED": "1"}
    job = {"TOPO_JOB_ID": json.loads((logs / "launch.json").read_text())["job_id"]}  # finds its daemons
    assert added(d["scheduler"]) == {**cluster, **threads, **job, "MS_ROLE": "MS_SCHED", "RANK_ID": "0"}
    for i in (0, 1):
        assert added(d[f"worker_{i}"]) == {
            **cluster, **threads, **unbuffered, **job, "MS_ROLE": "MS_WORKER", "RANK_ID": str(i),
            "MS_NODE_ID": str(i),
            "DEVICE_ID": str(i), "RANK": str(i), "LOCAL_RANK": str(i), "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2",
            "GROUP_RANK": "0", "GROUP_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29611"}
    for record in d.values():
        assert record["argv"] == [str(out), "--foo", "bar"]
        assert record["orig_argv"] == ["python", ENVDUMP, str(out), "--foo", "bar"]  # msrun's argv
        assert record["sid"] == record["pid"]  # own session: killpg reaches everything it starts
    assert sorted(p.name for p in logs.iterdir()) == ["launch.json", "scheduler.log", "worker_0.log", "worker_1.log"]
    assert oct(logs.stat().st_mode & 0o777) == "0o700"
    assert "[envdump] worker_1" in (logs / "worker_1.log").read_text()
    assert "[rank 0] [envdump] worker_0" in r.stdout and "[rank 1] [envdump] worker_1" in r.stdout
    assert "scheduler" not in r.stdout  # the scheduler's log is never tailed, as msrun


def test_second_of_two_nodes_env_contract(dirs):
    cwd, out, logs = dirs
    r = topo_launch(["--worker_num=4", "--local_worker_num=2", "--node_rank=1", "--join=True",
                     f"--log_dir={logs}", ENVDUMP, str(out)], cwd=cwd)
    assert r.returncode == 0, r.stderr
    d = dumps(out)
    assert set(d) == {"worker_2", "worker_3"}  # node 1 starts no scheduler
    for rank, local in ((2, 0), (3, 1)):
        env = added(d[f"worker_{rank}"])
        assert {k: env[k] for k in ("MS_ROLE", "RANK_ID", "MS_NODE_ID", "DEVICE_ID", "RANK", "LOCAL_RANK",
                                    "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                                    "MS_WORKER_NUM", "RANK_SIZE")} == {
            "MS_ROLE": "MS_WORKER", "RANK_ID": str(rank), "MS_NODE_ID": str(rank), "DEVICE_ID": str(local),
            "RANK": str(rank), "LOCAL_RANK": str(local), "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2",
            "GROUP_RANK": "1", "GROUP_WORLD_SIZE": "2", "MS_WORKER_NUM": "4", "RANK_SIZE": "4"}
    assert sorted(p.name for p in logs.glob("*.log")) == ["worker_2.log", "worker_3.log"]


def test_children_do_not_inherit_each_others_variables(dirs):
    cwd, out, logs = dirs
    env = {**BASE_ENV, "RANK_ID": "9", "MSRUN_CPU_LIST": "[5]", "LOCAL_RANK": "4"}
    r = topo_launch(["--worker_num=2", "--local_worker_num=1", "--join=True", f"--log_dir={logs}",
                     ENVDUMP, str(out)], cwd=cwd, env=env)
    assert r.returncode == 0, r.stderr
    worker = dumps(out)["worker_0"]["env"]  # named by LOCAL_RANK: no rank is known without --node_rank
    assert "RANK_ID" not in worker and "MSRUN_CPU_LIST" not in worker and "RANK" not in worker
    assert worker["LOCAL_RANK"] == "0"


# ------------------------------------------------------------------ bindings, checked in /proc
@needs_two_cpus
@needs_numactl
def test_unified_json_bindings_are_verified(dirs):
    cwd, out, logs = dirs
    bind = cwd / "bind.json"
    bind.write_text(json.dumps({
        "bind_config": {"bind_cpu_mode": "cpu", "bind_memory_mode": "numa"},
        "bind_cpu": {"scheduler": {"main": "0"}, "device0": {"main": "1"}, "device1": {"main": "0"}},
        "bind_memory": {"device0": 0, "device1": 0}}))
    r = topo_launch(["--worker_num=2", "--local_worker_num=2", "--join=True", f"--log_dir={logs}",
                     f"--bind_numa={bind}", ENVDUMP, str(out), "--linger"], cwd=cwd)
    assert r.returncode == 0, r.stderr
    d = dumps(out)
    assert (d["scheduler"]["affinity"], d["scheduler"]["memory_policy"]) == ([0], "default")
    assert (d["worker_0"]["affinity"], d["worker_0"]["memory_policy"]) == ([1], "bind:0")
    assert (d["worker_1"]["affinity"], d["worker_1"]["memory_policy"]) == ([0], "bind:0")
    assert "scheduler: CPUs 0, memory not bound (verified)" in r.stderr
    # what was applied, for set_affinity to keep (only the parts that were bound)
    assert [d[k]["env"].get("TOPO_BINDING") for k in ("scheduler", "worker_0", "worker_1")] == [
        "cpus=0", "cpus=1 memory=bind:0", "cpus=0 memory=bind:0"]
    assert "rank 0: CPUs 1, memory bound to node 0 (verified)" in r.stderr
    assert "rank 1: CPUs 0, memory bound to node 0 (verified)" in r.stderr
    launched = json.loads((logs / "launch.json").read_text())["processes"]
    assert launched[1]["argv"][:5] == ["numactl", "--membind", "0", "--physcpubind", "1"]
    assert launched[1]["observed"] == {"cpus": "1", "mems_allowed": "0", "memory_policy": "bind",
                                       "policy_nodes": "0"}
    assert d["worker_1"]["env"]["MSRUN_BIND_FILE"] == str(bind)


@needs_two_cpus
def test_bind_core_true_splits_cpus(dirs):
    cwd, out, logs = dirs
    # no GPU visible: the workers split the allowed CPUs, as msrun-auto plans a job without devices
    r = topo_launch(["--worker_num=2", "--local_worker_num=2", "--join=True", "--no-scheduler",
                     f"--log_dir={logs}", "--bind_core=True", ENVDUMP, str(out), "--linger"], cwd=cwd,
                    env=hide_gpus(BASE_ENV))
    assert r.returncode == 0, r.stderr
    d = dumps(out)
    cpus = bind_core_cpus(2)
    assert [d[f"worker_{i}"]["affinity"] for i in (0, 1)] == cpus
    assert [d[f"worker_{i}"]["env"]["MSRUN_CPU_LIST"] for i in (0, 1)] == [str(c) for c in cpus]
    assert f"rank 1: CPUs {cpus_text(cpus[1])}, memory not bound (verified" in r.stderr  # by taskset, or directly


@needs_numactl
def test_refused_memory_binding_is_reported_with_the_fix(dirs, tmp_path):
    """A container without CAP_SYS_NICE: numactl fails in set_mempolicy (simulated by a numactl
    that says so and exits 1)."""
    cwd, out, logs = dirs
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "numactl").write_text("#!/bin/sh\necho 'set_mempolicy: Operation not permitted' >&2\nexit 1\n")
    (fake / "numactl").chmod(0o755)
    env = {**BASE_ENV, "PATH": f"{fake}:{BASE_ENV['PATH']}"}
    args = ["--worker_num=1", "--local_worker_num=1", "--join=True", "--no-scheduler", f"--log_dir={logs}",
            '--bind_numa={"device0": ["0"]}', ENVDUMP, str(out), "--linger"]
    r = topo_launch(args, cwd=cwd, env=env)
    assert r.returncode == 1
    assert "rank 0: numactl refused the binding (set_mempolicy: Operation not permitted)" in r.stderr
    assert "drop the memory binding" in r.stderr and "--bind-fallback" in r.stderr
    assert not list(out.iterdir())  # the job never ran

    r = topo_launch(["--bind-fallback", *args], cwd=cwd, env=env)
    assert r.returncode == 0, r.stderr
    # started again with the same binding set by system calls, down the ladder (bind, preferred, CPUs
    # alone) where the kernel refuses; here it accepts bind (only the stand-in numactl refused)
    assert "starting it again with the policy ladder" in r.stderr and "rerun with --bind-fallback" not in r.stderr
    node0 = cpus_text(set(discover("/").numa_node(0).cpuset) & os.sched_getaffinity(0))
    assert f"rank 0: CPUs {node0}, memory bound to node 0 (verified, applied directly: numactl was refused)" in r.stderr
    assert dumps(out)["worker_0"]["memory_policy"] == "bind:0"


def test_validation_errors_start_nothing(dirs):
    cwd, out, logs = dirs
    for args, message in (
        (['--bind_core={"device0": ["999"]}'], "--bind_core: CPU 999 of device0 is not available"),
        (["--master_port=70000"], "--master_port=70000 is outside 1-65535"),
        (["--worker_num=2", "--local_worker_num=3"], "--local_worker_num=3 exceeds --worker_num=2"),
        (["--join=yes"], "--join='yes': expected True or False"),
        (["--tail_worker_log=abc"], "'abc' is not a rank"),
    ):
        r = topo_launch([f"--log_dir={logs}", "--worker_num=1", "--local_worker_num=1", *args, ENVDUMP, str(out)],
                        cwd=cwd)
        assert r.returncode == 2, (args, r.stderr)
        assert r.stderr.count("\n") == 1 and message in r.stderr, r.stderr
    r = topo_launch([f"--log_dir={logs}", "missing.py"], cwd=cwd)
    assert (r.returncode, r.stderr.strip()) == (
        2, f"topo: error: script does not exist, 'missing.py' (relative to {cwd}): check the path")
    assert not logs.exists()


def _immutable(path: Path) -> bool:
    return shutil.which("chattr") is not None and subprocess.run(
        ["chattr", "+i", str(path)], capture_output=True).returncode == 0


def test_bad_paths_are_refused_before_anything_is_created(dirs):
    """Log directory, log names, interpreter and script: one line, exit 2, no log directory made."""
    cwd, out, logs = dirs
    a_file = cwd / "a_file"
    a_file.write_text("")
    (cwd / "pkg").mkdir()
    cases = [
        ([f"--log_dir={a_file}"], f"log directory is not a directory, --log_dir={a_file}: give a directory path"),
        ([f"--log_dir={a_file}/sub"], f"log directory is not a directory, {a_file} in --log_dir={a_file}/sub"),
        (["--log_dir=/proc/topo-logs"], "log directory on a kernel pseudo-filesystem, --log_dir=/proc/topo-logs"),
        ([f"--log_dir={logs}", "--worker_log_name=/abs/w"], "log name leaves the log directory, "
                                                            "--worker_log_name='/abs/w'"),
        ([f"--log_dir={logs}", "--worker_log_name=../x/w"], "log name leaves the log directory"),
        ([f"--log_dir={logs}", "--python", "/nonexistent"], "interpreter does not exist, --python=/nonexistent"),
        ([f"--log_dir={logs}", "--python", "no-such-python"], "'no-such-python' is not on PATH, --python"),
    ]
    for args, message in cases:
        r = topo_launch(["--worker_num=1", "--local_worker_num=1", "--join=True", *args, ENVDUMP, str(out)], cwd=cwd)
        assert r.returncode == 2, (args, r.stderr)
        assert r.stderr.startswith("topo: error: ") and r.stderr.count("\n") == 1 and message in r.stderr, r.stderr
        assert not logs.exists() and not (cwd / "x").exists() and not list(out.iterdir())
    r = topo_launch([f"--log_dir={logs}", "pkg"], cwd=cwd)
    assert r.returncode == 2 and "script is a directory, 'pkg'" in r.stderr, r.stderr
    (logs / "worker_0.log").mkdir(parents=True)
    r = topo_launch([f"--log_dir={logs}", "--worker_num=1", "--local_worker_num=1", ENVDUMP, str(out)], cwd=cwd)
    assert r.returncode == 2 and f"log file is a directory, {logs / 'worker_0.log'}" in r.stderr, r.stderr
    assert sorted(p.name for p in logs.iterdir()) == ["worker_0.log"]  # no scheduler.log either


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting and chattr need root")
def test_read_only_and_immutable_log_directories_are_refused(dirs):
    cwd, out, logs = dirs
    ro = cwd / "ro"
    ro.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(ro)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        r = topo_launch([f"--log_dir={ro}/logs", ENVDUMP, str(out)], cwd=cwd)
        assert r.returncode == 2 and r.stderr.startswith(
            f"topo: error: log directory on a read-only filesystem, {ro} in --log_dir={ro}/logs"), r.stderr
    finally:
        subprocess.run(["umount", str(ro)])
    frozen = cwd / "frozen"
    frozen.mkdir()
    if not _immutable(frozen):
        pytest.skip("chattr +i is not supported on this filesystem")
    try:
        r = topo_launch([f"--log_dir={frozen}", ENVDUMP, str(out)], cwd=cwd)
        assert r.returncode == 2 and "log directory not writable (permissions or an immutable directory), " \
            f"--log_dir={frozen}" in r.stderr, r.stderr
    finally:
        subprocess.run(["chattr", "-i", str(frozen)])
    assert not list(out.iterdir())


# ------------------------------------------------------------------ failures, signals, orphans
def test_worker_failure_stops_the_job(dirs):
    cwd, out, logs = dirs
    start = time.monotonic()
    r = topo_launch(["--worker_num=2", "--local_worker_num=2", "--join=True", f"--log_dir={logs}",
                     f"--grace-period={GRACE}", JOB, str(out), "sleep=60@0", "sleep=60@sched",
                     "print=last words of rank 1@1", "sleep=0.3@1", "exit=3@1"], cwd=cwd, timeout=30)
    elapsed = time.monotonic() - start
    assert r.returncode == 3, r.stderr
    assert elapsed < 0.3 + GRACE + 2, elapsed  # the sleepers die on SIGTERM, no waiting for them
    assert "rank 1 (pid" in r.stderr and "exited with exit code 3" in r.stderr
    # --join tails the logs: the failed rank's output is shown once, and the report points to it
    shown = [line for line in (r.stdout + r.stderr).splitlines() if line.endswith("] last words of rank 1")
             or line.strip() == "last words of rank 1"]
    assert shown == ["[rank 1] last words of rank 1"]
    assert f"rank 1 failed with exit code 3; its output is above and in {logs}/worker_1.log" in r.stderr
    assert not any(alive(pid) for pid in job_pids(logs, out))


def test_sigterm_is_followed_by_sigkill_after_the_grace_period(dirs):
    cwd, out, logs = dirs
    start = time.monotonic()
    r = topo_launch(["--worker_num=2", "--local_worker_num=2", "--join=True", "--no-scheduler",
                     f"--log_dir={logs}", f"--grace-period={GRACE}", JOB, str(out), "ignore-term@0", "ready@0",
                     "sleep=60@0", "waitfor=ready_0@1", "kill=9@1"], cwd=cwd, timeout=30)
    elapsed = time.monotonic() - start
    assert r.returncode == 128 + 9, r.stderr  # killed by signal 9
    assert "exited with signal 9 (SIGKILL)" in r.stderr
    assert "rank 0 still running after 1 s; sending SIGKILL" in r.stderr
    assert GRACE <= elapsed < GRACE + 3, elapsed
    assert not any(alive(pid) for pid in job_pids(logs, out))


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signals_to_the_launcher_are_forwarded(dirs, sig, code):
    cwd, out, logs = dirs
    p = start_launch(["--worker_num=2", "--local_worker_num=2", "--join=True", f"--log_dir={logs}",
                      f"--grace-period={GRACE}", JOB, str(out), "grandchild", "daemon", "ready", "sleep=60"],
                     cwd=cwd)
    try:
        assert wait_for(lambda: len(list(out.glob("ready_*"))) == 3), "job did not start"
        p.send_signal(sig)
        _, err = p.communicate(timeout=GRACE + 5)
    finally:
        p.kill()
    assert p.returncode == code, err
    assert f"received {signal.Signals(sig).name}; forwarding it to every process" in err
    assert not any(alive(pid) for pid in job_pids(logs, out))


def test_no_orphans_after_a_successful_job(dirs):
    """Grandchildren in the worker's group and daemons in their own session are gone too."""
    cwd, out, logs = dirs
    r = topo_launch(["--worker_num=2", "--local_worker_num=2", "--join=True", f"--log_dir={logs}",
                     f"--grace-period={GRACE}", JOB, str(out), "grandchild", "daemon"], cwd=cwd, timeout=30)
    assert r.returncode == 0, r.stderr
    pids = job_pids(logs, out)
    assert len(pids) == 3 + 6
    assert not any(alive(pid) for pid in pids)


def test_join_false_returns_at_once_and_writes_launch_json(dirs):
    cwd, out, logs = dirs
    r = topo_launch(["--worker_num=2", "--local_worker_num=2", "--no-scheduler", f"--log_dir={logs}",
                     "--worker_log_name=sub/w", JOB, str(out), "sleep=30"], cwd=cwd, timeout=20)
    record = json.loads((logs / "launch.json").read_text())
    pids = [p["pid"] for p in record["processes"]]
    try:
        assert r.returncode == 0, r.stderr
        assert record["join"] is False and [p["name"] for p in record["processes"]] == ["rank 0", "rank 1"]
        assert record["processes"][1]["log"] == str(logs / "sub" / "w_1.log")  # msrun crashes on sub/
        assert all(alive(pid) for pid in pids)  # msrun's meaning: the job outlives the launcher
    finally:
        for pid in pids:
            os.killpg(pid, signal.SIGKILL)


# ------------------------------------------------------------------ console, stdin
def test_tail_shows_partial_lines_and_selected_ranks(dirs):
    cwd, out, logs = dirs
    r = topo_launch(["--worker_num=2", "--local_worker_num=2", "--join=True", "--no-scheduler",
                     "--tail_worker_log=1", f"--log_dir={logs}", JOB, str(out), "print=hello", "prompt"], cwd=cwd)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "[rank 1] hello\n[rank 1] (Pdb) "
    assert "hello" in (logs / "worker_0.log").read_text()


def test_workers_read_the_launchers_stdin(dirs):
    """What pdb needs under --join=True (msrun guide, 'Multi-Card Parallel Debugging')."""
    cwd, out, logs = dirs
    r = topo_launch(["--worker_num=1", "--local_worker_num=1", "--join=True", "--no-scheduler",
                     f"--log_dir={logs}", JOB, str(out), "readline"], cwd=cwd, input="continue\n")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "[rank 0] got: continue\n"


def test_dry_run_prints_msrun_argv_and_starts_nothing(dirs):
    cwd, out, logs = dirs
    bind = cwd / "bind.json"
    bind.write_text(json.dumps({"bind_config": {"bind_cpu_mode": "cpu", "bind_memory_mode": "numa"},
                                "bind_cpu": {"device0": {"main": "1"}, "device1": {"main": "0"}},
                                "bind_memory": {"device0": 0, "device1": 0}}))
    r = topo_launch(["--worker-num=2", "--local-worker-num=2", "--dry-run", "--python", "python",
                     f"--log-dir={logs}", f"--bind-numa={bind}", JOB, str(out), "--worker_num=3", "-h"], cwd=cwd)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    # everything after SCRIPT is the script's, flags that look like ours included
    assert f"rank 0, DEVICE_ID=0: numactl --membind 0 --physcpubind 1 python {JOB} {out} --worker_num=3 -h" in lines
    assert f"rank 1, DEVICE_ID=1: numactl --membind 0 --physcpubind 0 python {JOB} {out} --worker_num=3 -h" in lines
    assert f"scheduler: python {JOB} {out} --worker_num=3 -h" in lines
    # msrun's argv above whether numactl is installed or not; without it, this line says so
    assert any(line.startswith("  binding: CPUs 1, memory bound to node 0") for line in lines)
    assert any(line.startswith("  env: DEVICE_ID=1 GROUP_RANK=0") and "MSRUN_BIND_FILE=" in line for line in lines)
    assert not logs.exists() and not list(out.iterdir())


def test_library_api_without_the_cli(dirs):
    import io

    from topo.launcher import LaunchConfig, launch

    cwd, out, logs = dirs
    console, messages = io.StringIO(), io.StringIO()
    config = LaunchConfig.from_flags(JOB, (str(out), "print=from the API@0", "ready@0", "sleep=60@0", "waitfor=ready_0@1",
                                "exit=4@1"), worker_num=2, local_worker_num=2,
                          join=True, scheduler=False, log_dir=str(logs), grace_period=GRACE, python=sys.executable)
    result = launch(config, out=console, err=messages)
    assert result.exit_code == 4 and result.failed == "rank 1 exited with exit code 4"
    assert [p.spec.name for p in result.processes] == ["rank 0", "rank 1"]
    assert "[rank 0] from the API\n" in console.getvalue()
    assert "rank 1 failed with exit code 4" in messages.getvalue()
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # handlers put back
    dry = launch(LaunchConfig.from_flags(JOB, (str(out),), worker_num=1, local_worker_num=1, dry_run=True,
                                         python=sys.executable), out=console)
    assert dry.exit_code == 0 and dry.processes == () and len(dry.plan.processes) == 2


def test_daemons_of_a_failed_job_get_sigterm_too(dirs):
    """A daemon (own session) becomes ours only when its worker dies; it must still get SIGTERM,
    not wait out the grace period for SIGKILL."""
    cwd, out, logs = dirs
    start = time.monotonic()
    r = topo_launch(["--worker_num=2", "--local_worker_num=2", "--join=True", "--no-scheduler",
                     f"--log_dir={logs}", "--grace-period=5", JOB, str(out), "daemon@0", "ready@0", "sleep=60@0",
                     "waitfor=ready_0@1", "exit=3@1"], cwd=cwd, timeout=30)
    assert r.returncode == 3, r.stderr
    assert time.monotonic() - start < 4, "something waited for the 5 s grace period"
    assert "sending SIGKILL" not in r.stderr
    assert not any(alive(pid) for pid in job_pids(logs, out))


def test_pdb_breakpoint_is_driven_from_the_launchers_stdin(dirs):
    cwd, out, logs = dirs
    script = cwd / "debug_me.py"
    script.write_text("import os\nx = 41\nif os.environ['RANK'] == '1':\n    breakpoint()\nprint('done', x)\n")
    r = topo_launch(["--worker_num=2", "--local_worker_num=2", "--join=True", "--no-scheduler",
                     f"--log_dir={logs}", str(script)], cwd=cwd, input="p x + 1\nc\n")
    assert r.returncode == 0, r.stderr
    assert "[rank 1] (Pdb) 42\n" in r.stdout
    assert "[rank 0] done 41\n" in r.stdout and "done 41\n" in (logs / "worker_1.log").read_text()
