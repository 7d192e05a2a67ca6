"""`topo ps`: a fake /proc and /sys tree for every verdict, and real processes on this machine."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import psutil
import pytest
from click.testing import CliRunner

from topo.cli import main
from topo.cpuset import CpuSet
from topo.model import Device
from topo.launcher import ps as psmod
from livehost import path_with_python
from processes import wait_for
from topo.synthetic import synthetic

# 2 packages, a NUMA node each (CPUs 0-3 and 4-7), one GPU per node: gpu 0 at 0000:10:00.0 on
# node 0, gpu 1 at 0000:11:00.0 on node 1.
TOPOLOGY = synthetic("pack:2 numa:1 core:2 pu:2", gpus_per_numa=1)


def stat_line(pid: int, name: str, state: str, cpu: int, ticks: int = 100) -> str:
    fields = ["0"] * 50
    fields[0], fields[19], fields[36] = state, str(ticks), str(cpu)  # fields 3, 22 and 39 of proc(5)
    return f"{pid} ({name}) {' '.join(fields)}\n"


def fake_process(root: Path, pid: int, *, allowed: str, threads: list[tuple[str, int]], numa_maps: str = "",
                 fds: list[str] = (), name: str = "python", mems: str = "0-1") -> None:
    """A process below root/proc: status, stat, numa_maps, one task per (state, cpu) and fd links."""
    d = root / "proc" / str(pid)
    (d / "fd").mkdir(parents=True)
    (d / "stat").write_text(stat_line(pid, name, threads[0][0], threads[0][1]))
    (d / "status").write_text(f"Name:\t{name}\nCpus_allowed_list:\t{allowed}\nMems_allowed_list:\t{mems}\n")
    (d / "numa_maps").write_text(numa_maps)
    for i, (state, cpu) in enumerate(threads):
        t = d / "task" / str(pid + i)
        t.mkdir(parents=True)
        (t / "stat").write_text(stat_line(pid + i, f"{name}-{i}", state, cpu))
    for i, target in enumerate(fds):
        os.symlink(target, d / "fd" / str(i + 3))


def maps(*pairs: tuple[str, str]) -> str:
    return "".join(f"7f00000{i:05x} {policy} anon=1 dirty=1 {counts} kernelpagesize_kB=4\n"
                   for i, (policy, counts) in enumerate(pairs))


@pytest.fixture
def root(tmp_path):
    r = tmp_path / "root"
    info = r / "proc" / "driver" / "nvidia" / "gpus" / "0000:11:00.0"
    info.mkdir(parents=True)
    (info / "information").write_text("Model:\t\tFake\nDevice Minor:\t\t 0\nBus Location:\t 0000:11:00.0\n")
    (r / "sys").mkdir()
    return r


def inspect(root: Path, pids, **kwargs):
    return {v.pid: v for v in psmod.inspect(list(pids), root=str(root), topology=TOPOLOGY, **kwargs)}


def test_pages_remote_from_the_device_and_the_device_found_by_its_minor_number(root):
    # /dev/nvidia0 is minor 0, which the driver says is the GPU at 0000:11:00.0: NVML index 1, node 1
    fake_process(root, 100, allowed="4-7", threads=[("S", 4), ("S", 5)],
                 numa_maps=maps(("bind:1", "N0=900"), ("bind:1", "N1=100")), fds=["/dev/nvidia0", "/dev/nvidiactl"])
    v = inspect(root, [100])[100]
    assert [(d.path, d.index, d.busid, d.numa_node) for d in v.devices] == [("/dev/nvidia0", 1, "0000:11:00.0", 1)]
    assert v.memory_policy == "bind:1" and v.pages_by_node == {0: 900, 1: 100}
    assert str(v.local_nodes) == "1" and v.local_from == "device" and v.remote_fraction == pytest.approx(0.9)
    assert v.problems == ("90% of its resident pages (3.5 MiB) are on node(s) 0, not local to its device (node(s) 1)",)


def test_without_a_device_local_means_the_nodes_of_its_allowed_cpus(root):
    fake_process(root, 100, allowed="0-3", threads=[("S", 1)],
                 numa_maps=maps(("default", "N0=95"), ("interleave:0-1", "N1=5")))
    v = inspect(root, [100])[100]
    assert v.devices == () and str(v.local_nodes) == "0" and v.local_from == "allowed CPUs"
    assert v.remote_fraction == pytest.approx(0.05) and v.problems == ()  # under REMOTE_WARN
    assert v.memory_policy == "default" and v.other_policies == {"interleave:0-1": 1}


def test_threads_outside_allowed_cpus_shared_cpus_and_too_many_runnable(root):
    fake_process(root, 100, allowed="0", threads=[("R", 0), ("R", 0), ("S", 3)], numa_maps=maps(("default", "N0=1")))
    fake_process(root, 200, allowed="0-1", threads=[("R", 0)], numa_maps=maps(("default", "N0=1")))
    views = inspect(root, [100, 200])
    assert views[100].problems == (
        "1 thread(s) last ran outside its allowed CPUs 0: 102 on CPU 3",
        "its running threads share CPU(s) 0 with running threads of pid 200",
        "its allowed CPUs overlap those of pid 200 on CPU(s) 0",
        "2 threads ready to run on 1 allowed CPU(s)",
    )
    assert views[100].running == 2 and str(views[100].last_cpus) == "0,3"


def test_overlaps_are_one_line_per_process_naming_the_others(root):
    """1,000 processes sharing CPUs give one overlap line each (not one per pair): the pids
    they share with, the first 8 and how many more."""
    views = [psmod.ProcessView(pid, cpus_allowed=CpuSet.parse("0-3" if pid < 1990 else "3-5"),
                               threads=(psmod.Thread(pid, "t", "R", pid % 2),)) for pid in range(1000, 2000)]
    views.append(psmod.ProcessView(5000, cpus_allowed=CpuSet.parse("6-7"), threads=(psmod.Thread(5000, "t", "R", 6),)))
    judged = {v.pid: v for v in psmod.judge(views, {n.os_index: n.cpuset for n in TOPOLOGY.numa_nodes})}
    assert judged[1000].problems == (
        "its running threads share CPU(s) 0 with running threads of pids 1002, 1004, 1006, 1008, 1010, 1012, "
        "1014, 1016 and 491 more",
        "its allowed CPUs overlap those of pids 1001, 1002, 1003, 1004, 1005, 1006, 1007, 1008 and 991 more on "
        "CPU(s) 0-3")
    assert judged[1995].problems[-1] == ("its allowed CPUs overlap those of pids 1000, 1001, 1002, 1003, 1004, "
                                         "1005, 1006, 1007 and 991 more on CPU(s) 3-5")
    assert judged[5000].problems == ()
    assert len(psmod.as_text(list(judged.values())).splitlines()) < 10 * len(judged)


def test_huge_pages_count_as_the_base_pages_they_hold(root):
    fake_process(root, 100, allowed="0-7", threads=[("S", 0)],
                 numa_maps="7f0000000000 default anon=1 N1=2 kernelpagesize_kB=2048\n"
                           "7f0000400000 default anon=1 N0=24 kernelpagesize_kB=4\n")
    v = inspect(root, [100])[100]
    assert v.pages_by_node == {0: 24, 1: 2 * 2048 // psmod.BASE_PAGE_KB}


def test_other_device_files(root):
    drm = root / "sys" / "class" / "drm" / "renderD128"
    drm.mkdir(parents=True)
    os.symlink("../../../devices/pci0000:00/0000:10:00.0", drm / "device")
    fake_process(root, 100, allowed="0-3", threads=[("S", 0)], numa_maps=maps(("default", "N0=1")),
                 fds=["/dev/dri/renderD128", "/dev/davinci3", "/dev/accel/accel0", "/dev/null", "/dev/nvidia-uvm"])
    v = inspect(root, [100])[100]
    assert [(d.path, d.kind, d.index, d.busid, d.numa_node) for d in v.devices] == [
        ("/dev/dri/renderD128", "gpu", 0, "0000:10:00.0", 0), ("/dev/davinci3", "npu", 3, None, None),
        ("/dev/accel/accel0", "accel", 0, None, None)]


def test_amd_and_gaudi_device_files(root):
    # ROCm opens /dev/kfd and one render node per GPU it uses; Gaudi /dev/accel/accelN (or /dev/hlN
    # before the driver moved to the accel class); each names its PCI function through its class link
    gaudi = Device("accel", "habana", 5, "0000:20:00.0", 1, CpuSet.parse("4-7"))
    topology = dataclasses.replace(TOPOLOGY, devices=TOPOLOGY.devices + (gaudi,))
    for cls, name, bus in (("drm", "renderD129", "0000:11:00.0"), ("accel", "accel2", "0000:20:00.0"),
                           ("habanalabs", "hl2", "0000:20:00.0")):
        (root / "sys" / "class" / cls / name).mkdir(parents=True)
        os.symlink(f"../../../devices/pci0000:00/{bus}", root / "sys" / "class" / cls / name / "device")
    fake_process(root, 100, allowed="4-7", threads=[("S", 4)], fds=["/dev/kfd", "/dev/dri/renderD129"])
    fake_process(root, 200, allowed="4-7", threads=[("S", 4)], fds=["/dev/kfd"])
    fake_process(root, 300, allowed="4-7", threads=[("S", 4)], fds=["/dev/accel/accel2", "/dev/accel/accel_controlD2"])
    fake_process(root, 400, allowed="4-7", threads=[("S", 4)], fds=["/dev/hl2", "/dev/hl_controlD2"])
    views = {v.pid: v for v in psmod.inspect([100, 200, 300, 400], root=str(root), topology=topology)}
    found = {pid: [(d.path, d.kind, d.index, d.busid, d.numa_node) for d in v.devices] for pid, v in views.items()}
    assert found == {100: [("/dev/dri/renderD129", "gpu", 1, "0000:11:00.0", 1)],
                     200: [("/dev/kfd", "gpu", None, None, None)],
                     300: [("/dev/accel/accel2", "accel", 5, "0000:20:00.0", 1)],
                     400: [("/dev/hl2", "accel", 5, "0000:20:00.0", 1)]}
    assert psmod.accelerator_pids(str(root)) == ([100, 200, 300, 400], 0)
    assert "accel 5 (/dev/hl2, 0000:20:00.0, node 1)" in psmod.as_text([views[400]])


def test_processes_that_cannot_be_read_are_reported_as_such(root):
    fake_process(root, 100, allowed="0", threads=[("Z", 0)])
    views = inspect(root, [100, 101])
    assert views[100].error == "exited (a zombie)" and views[101].error == "exited (no such process)"
    text = psmod.as_text(list(views.values()))
    assert "pid 101: exited (no such process)" in text
    assert json.loads(json.dumps(psmod.as_json(list(views.values()), [])))["processes"][1] == {
        "pid": 101, "label": None, "error": "exited (no such process)"}


def test_numa_maps_another_user_keeps_to_itself(root, monkeypatch):
    from topo import binding

    fake_process(root, 100, allowed="0-3", threads=[("S", 0)], numa_maps=maps(("default", "N0=1")))
    read = binding.read_bounded

    def denied(path, limit):
        if path.endswith("/numa_maps"):
            raise PermissionError(13, "Permission denied", path)  # as for another user's process (root reads it anyway)
        return read(path, limit)

    monkeypatch.setattr(binding, "read_bounded", denied)
    v = inspect(root, [100])[100]
    assert v.error is None and str(v.cpus_allowed) == "0-3" and v.pages_by_node == {} and v.remote_fraction is None
    assert v.numa_maps == "unreadable: permission denied (another user's process; run as root)"
    assert "resident: numa_maps unreadable: permission denied" in psmod.as_text([v])


def test_numa_maps_past_the_limit_is_cut_and_said(root, monkeypatch):
    fake_process(root, 100, allowed="0", threads=[("S", 0)], numa_maps=maps(*[("default", "N0=1")] * 100))
    monkeypatch.setattr("topo.binding.NUMA_MAPS_LIMIT", 1000)
    v = inspect(root, [100])[100]
    assert v.numa_maps == "cut at 1000 bytes: partial counts" and 0 < v.pages_by_node[0] < 100
    assert "(cut at 1000 bytes: partial counts)" in psmod.as_text([v])


def test_accelerator_processes_are_found_by_their_device_files(root):
    fake_process(root, 100, allowed="0", threads=[("S", 0)], fds=["/dev/nvidia0"])
    fake_process(root, 200, allowed="0", threads=[("S", 0)], fds=["/dev/null", "/dev/nvidiactl"])
    fake_process(root, 300, allowed="0", threads=[("S", 0)])
    assert psmod.accelerator_pids(str(root)) == ([100], 0)
    assert psmod.accelerator_pids(str(root), {300: {"0000:10:00.0"}}) == ([100, 300], 0)


def test_nvml_process_lists(monkeypatch):
    class Proc:
        def __init__(self, pid):
            self.pid = pid

    fake = types.SimpleNamespace(
        nvmlInit=lambda: None, nvmlShutdown=lambda: None, nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetPciInfo=lambda h: types.SimpleNamespace(busId=[b"00000000:10:00.0", "00000000:11:00.0"][h]),
        nvmlDeviceGetComputeRunningProcesses=lambda h: [Proc(7)] if h == 0 else [Proc(8)],
        nvmlDeviceGetGraphicsRunningProcesses=lambda h: [Proc(7)])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert psmod.nvml_processes() == {7: {"0000:10:00.0", "0000:11:00.0"}, 8: {"0000:11:00.0"}}

    def refuse():
        raise RuntimeError("NVML Shared Library Not Found")

    monkeypatch.setattr(fake, "nvmlInit", refuse)
    assert psmod.nvml_processes() == {}


def test_a_gpu_named_only_by_nvml(root):
    fake_process(root, 100, allowed="0-3", threads=[("S", 0)], numa_maps=maps(("default", "N0=1")))
    v = inspect(root, [100], nvml={100: {"0000:11:00.0"}})[100]
    assert [(d.path, d.index, d.numa_node) for d in v.devices] == [("nvml", 1, 1)]
    assert v.remote_fraction == 1.0


# ------------------------------------------------------------------ real processes
def topo_ps(*args):
    return subprocess.run([sys.executable, "-m", "topo", "ps", *args], capture_output=True, text=True, timeout=60)


TOUCH = "import sys, time; a = bytearray(64 << 20); a[::4096] = b'x' * len(a[::4096]); print('ready', flush=True); time.sleep(60)"


@pytest.fixture
def toucher():
    """A python child with 64 MiB touched, allowed only the first CPU this process may use."""
    cpu = min(os.sched_getaffinity(0))
    proc = subprocess.Popen([sys.executable, "-c", TOUCH], stdout=subprocess.PIPE, text=True,
                            preexec_fn=lambda: os.sched_setaffinity(0, {cpu}))
    try:
        assert proc.stdout.readline() == "ready\n"
        yield proc, cpu
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.skipif(not os.path.exists("/proc/self/numa_maps"), reason="kernel without NUMA (no numa_maps)")
def test_a_real_process_that_touched_memory(toucher):
    proc, cpu = toucher
    r = topo_ps("--json", str(proc.pid))
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["schema"] == "topo.ps/1"
    (p,) = data["processes"]
    assert p["pid"] == proc.pid and p["cpus_allowed"] == str(cpu) and p["error"] is None
    assert sum(p["pages_by_node"].values()) * p["page_kb"] >= 64 << 10
    assert p["memory_policy"] == "default" and p["devices"] == [] and 0 <= p["remote_fraction"] <= 1
    assert all(t["cpu"] == cpu for t in p["threads"])
    r = topo_ps("--threads", str(proc.pid))
    name = os.path.basename(sys.executable)[:15]  # the kernel's comm: the file exec'd, 15 characters at most
    assert r.returncode == 0 and f"pid {proc.pid} {name}" in r.stdout and f"CPUs allowed {cpu} (1)" in r.stdout
    assert f"thread {proc.pid} {name}: S on CPU {cpu}" in r.stdout


def test_pids_that_do_not_exist_and_bad_arguments():
    dead = subprocess.Popen(["true"])
    dead.wait()
    r = topo_ps(str(dead.pid))
    assert r.returncode == 1 and r.stdout == f"pid {dead.pid}: exited (no such process)\n", r
    r = topo_ps(str(os.getpid()), str(dead.pid))
    assert r.returncode == 0 and "exited (no such process)" in r.stdout
    for bad in ("abc", "0", "-5", "99999999"):
        r = topo_ps("--", bad)
        assert r.returncode == 2 and r.stderr.startswith("topo: error: PID ") and r.stderr.count("\n") == 1, r.stderr
    r = topo_ps("--job", "logs", "1")
    assert r.returncode == 2 and "give PIDs or --job LOG_DIR, not both" in r.stderr


def test_job_lists_the_processes_proven_the_jobs(tmp_path):
    job_id = os.urandom(8).hex()  # its own: tests running beside this one carry theirs
    member = subprocess.Popen(["sleep", "60"], env={**os.environ, "TOPO_JOB_ID": job_id})
    bystander = subprocess.Popen(["sleep", "60"])
    try:
        logs = tmp_path / "logs"
        logs.mkdir()
        started = {p.pid: psutil.Process(p.pid).create_time() for p in (member, bystander)}
        (logs / "launch.json").write_text(json.dumps({
            "schema": "topo.launch/2", "job_id": job_id, "launcher_pid": None, "join": False, "log_dir": str(logs),
            "processes": [{"name": "rank 0", "pid": member.pid, "create_time": started[member.pid]},
                          {"name": "rank 1", "pid": bystander.pid, "create_time": started[bystander.pid]}]}))
        r = topo_ps("--job", str(logs), "--json")
        assert r.returncode == 0, r.stderr
        data = json.loads(r.stdout)
        assert [(p["pid"], p["label"]) for p in data["processes"]] == [(member.pid, "rank 0")]
        assert data["notes"] == [f"rank 1 (pid {bystander.pid}) still runs but is not provably the job's "
                                 f"(no TOPO_JOB_ID={job_id} in its environment): not shown"]
        member.kill()
        member.wait()
        r = topo_ps("--job", str(logs))
        assert r.returncode == 0 and f"the job recorded in {logs / 'launch.json'} is not running" in r.stderr
    finally:
        for p in (member, bystander):
            p.kill()
            p.wait()


def test_job_of_another_user_says_it_cannot_read_the_environment(tmp_path, monkeypatch):
    """As another user, the job's environment is unreadable, not missing: said so, and not "not running"."""
    member = subprocess.Popen(["sleep", "60"], env={**os.environ, "TOPO_JOB_ID": "0123456789abcdef"})
    try:
        logs = tmp_path / "logs"
        logs.mkdir()
        (logs / "launch.json").write_text(json.dumps({
            "schema": "topo.launch/2", "job_id": "0123456789abcdef", "join": False,
            "processes": [{"name": "rank 0", "pid": member.pid, "create_time": psutil.Process(member.pid).create_time()},
                          {"name": "rank 1", "pid": member.pid + 1_000_000, "create_time": None}]}))

        def denied(self):
            raise psutil.AccessDenied(self.pid)

        monkeypatch.setattr(psutil.Process, "environ", denied)
        r = CliRunner().invoke(main, ["ps", "--job", str(logs), "--json"])
        assert r.exit_code == 0, r.output
        assert json.loads(r.stdout)["notes"] == [
            f"rank 1 (pid {member.pid + 1_000_000}) has exited",
            f"rank 0 (pid {member.pid}) still runs, but its environment cannot be read (another user's process): "
            "not shown; run topo ps as the job's user or as root"]
    finally:
        member.kill()
        member.wait()


def test_alone_it_finds_no_accelerator_process_on_a_machine_without_one():
    if any(Path("/dev").glob("nvidia[0-9]*")) or Path("/dev/dri").exists() or any(Path("/dev").glob("davinci*")):
        pytest.skip("this machine has accelerator device files")
    r = topo_ps()
    assert r.returncode == 0 and r.stdout == "" and "no process has an accelerator open" in r.stderr


def test_help_has_examples():
    r = topo_ps("--help")
    assert r.returncode == 0 and "Examples:" in r.stdout and "topo ps --job logs" in r.stdout


def test_job_of_a_real_detached_launch(tmp_path):
    """`topo ps --job` on a job `topo launch` started: its scheduler, both ranks and a daemon rank 0
    started (found by the job id it carries), in the record's order; then topo stop."""
    out, logs = tmp_path / "out", tmp_path / "logs"
    out.mkdir()
    env = {**os.environ, "PATH": path_with_python()}  # `python` is this interpreter
    script = str(Path(__file__).parent / "scripts" / "job.py")
    r = subprocess.run([sys.executable, "-m", "topo", "launch", "--worker_num=2", "--local_worker_num=2",
                        f"--log_dir={logs}", "--grace-period=1", script, str(out), "daemon@0", "ready", "sleep=60"],
                       capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    recorded = [(p["pid"], p["name"]) for p in json.loads((logs / "launch.json").read_text())["processes"]]
    try:
        assert wait_for(lambda: len(list(out.glob("ready_*"))) == 3)
        daemon = int((out / "daemon_0").read_text())
        r = topo_ps("--job", str(logs), "--json")
        assert r.returncode == 0, r.stderr
        data = json.loads(r.stdout)
        listed = [(p["pid"], p["label"]) for p in data["processes"]]
        assert listed == recorded + [(daemon, "a process the job started")], listed
        assert all(p["error"] is None and p["cpus_allowed"] for p in data["processes"])
    finally:
        s = subprocess.run([sys.executable, "-m", "topo", "stop", str(logs)], capture_output=True, text=True,
                           timeout=60)
        assert s.returncode == 0, s.stderr
