"""Run inside the VM (chrooted in the host's tree, as root): `vm_guest.py MACHINE`.

Runs topo from this checkout (`python -m topo`, PYTHONPATH set by the job) against the guest
kernel, and prints one `TOPOVM-RESULT <json>` line per check: what topo said beside what the kernel
says (sysfs, `numactl -H`, `lstopo-no-graphics`, /proc/<pid>/status, numa_maps). The tests on the
host (test_vm_numa.py) judge the records; a check that raised is recorded with its error.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "vm_worker.py")
REMOTE = os.path.join(HERE, "vm_remote.py")
PY = sys.executable
MODES = ["node", "socket", "exclusive", "core-complex", "all", "single", "single-unique",
         "unique-interleaved", "unique-contiguous", "msrun-auto"]
HIDDEN = ("numactl", "taskset")
PRINT = threading.Lock()  # one record per line, whichever thread of parallel() prints it


def emit(name, **data):
    line = json.dumps({"name": name, **data}, separators=(",", ":"))
    with PRINT:
        print("TOPOVM-RESULT " + line, flush=True)


def run_check(name, fn):
    """Run one check and print its record, or the exception it raised."""
    start = time.monotonic()
    try:
        data = fn()
    except Exception:
        data = {"error": traceback.format_exc()}
    emit(name, elapsed=round(time.monotonic() - start, 2), **data)


def parallel(checks, workers=2):
    """Run independent (name, function) checks two at a time: the guest has 4 CPUs, the host 2."""
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(lambda c: run_check(*c), checks))


def sh(argv, *, timeout=240, **kw):
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)
    return {"argv": argv, "rc": p.returncode, "stdout": p.stdout, "stderr": p.stderr}


def topo(*args, **kw):
    return sh([PY, "-m", "topo", *args], **kw)


def read(path):
    with open(path) as fh:
        return fh.read().strip()


def sysfs_truth():
    nodes = {}
    base = "/sys/devices/system/node"
    for entry in sorted(os.listdir(base)):
        if entry.startswith("node") and entry[4:].isdigit():
            d = os.path.join(base, entry)
            meminfo = read(os.path.join(d, "meminfo"))
            total_kb = next(int(line.split()[-2]) for line in meminfo.splitlines() if "MemTotal" in line)
            nodes[entry[4:]] = {"cpulist": read(os.path.join(d, "cpulist")), "mem_total_kb": total_kb,
                                "distance": [int(x) for x in read(os.path.join(d, "distance")).split()]}
    pci = {}
    for dev in sorted(os.listdir("/sys/bus/pci/devices")):
        d = os.path.join("/sys/bus/pci/devices", dev)
        pci[dev] = {"class": read(os.path.join(d, "class")), "numa_node": int(read(os.path.join(d, "numa_node"))),
                    "local_cpulist": read(os.path.join(d, "local_cpulist"))}
    return {"nodes": nodes, "pci": pci, "online": read("/sys/devices/system/cpu/online")}


def worker_records(out):
    return {name: json.load(open(os.path.join(out, name))) for name in sorted(os.listdir(out)) if name.endswith(".json")}


def launch(*flags):
    out = tempfile.mkdtemp(prefix="out-")
    logs = tempfile.mkdtemp(prefix="logs-")
    r = topo("launch", "--worker_num=2", "--local_worker_num=2", "--join=True", "--no-scheduler",
             f"--log_dir={logs}", *flags, WORKER, out)
    record = json.load(open(os.path.join(logs, "launch.json"))) if os.path.exists(os.path.join(logs, "launch.json")) else None
    return {"run": r, "launch": record, "workers": worker_records(out)}


def run_mode(mode, *extra, nproc=2):
    out = tempfile.mkdtemp(prefix="out-")
    r = topo("run", "--standalone", f"--nproc-per-node={nproc}", f"--numa-binding={mode}", *extra, WORKER, out)
    return {"run": r, "workers": worker_records(out)}


def plan_file(*args):
    path = os.path.join(tempfile.mkdtemp(prefix="plan-"), "bind.json")  # topo plan -o refuses an existing file
    r = topo("plan", "--devices", "none", *args, "-o", path)
    assert r["rc"] == 0, r
    return path, json.load(open(path))


def hide_tools():
    """Over-mount /usr/bin with a tmpfs directory of links to everything in it but numactl and
    taskset (merged /usr: /bin is /usr/bin), so nothing on any PATH finds them."""
    real, fake = "/tmp/usrbin-real", "/tmp/usrbin"
    os.makedirs(real, exist_ok=True)
    os.makedirs(fake, exist_ok=True)
    subprocess.run(["mount", "--bind", "/usr/bin", real], check=True)
    for name in os.listdir(real):
        if name not in HIDDEN:
            os.symlink(os.path.join(real, name), os.path.join(fake, name))
    subprocess.run(["mount", "--bind", fake, "/usr/bin"], check=True)


def unhide_tools():
    subprocess.run(["/tmp/usrbin-real/umount", "/usr/bin"], check=True)
    subprocess.run(["umount", "/tmp/usrbin-real"], check=True)


SET_AFFINITY = """
import json, os, sys, topo
kwargs = json.loads(sys.argv[1])
cpus = topo.set_affinity(kwargs.pop("device_id"), kwargs.pop("nproc_per_node"), **kwargs)
print(json.dumps(sorted(cpus)), flush=True)
os.execv(sys.executable, [sys.executable, sys.argv[2], sys.argv[3]])  # policy and CPUs survive exec
"""


def set_affinity(**kwargs):
    out = tempfile.mkdtemp(prefix="out-")
    r = sh([PY, "-c", SET_AFFINITY, json.dumps(kwargs), WORKER, out])
    return {"kwargs": kwargs, "run": r, "workers": worker_records(out)}


def wait_for(path, timeout=120):
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear")
        time.sleep(0.05)
    return read(path)


def ps_remote():
    """`topo ps` on a process running on node 1's CPUs whose 64 MiB were first touched on node 0,
    before and after it calls set_affinity(..., migrate=True)."""
    out = tempfile.mkdtemp(prefix="remote-")
    proc = subprocess.Popen([PY, REMOTE, out, "0", "1"])
    try:
        before = wait_for(os.path.join(out, "ready"))
        r = topo("ps", "--json", str(proc.pid))
        # then the process binds itself to its node, moving the pages it touched
        with open(os.path.join(out, "do-0"), "w") as fh:
            fh.write("import topo\n"
                     "topo.set_affinity(0, 1, mode='node', memory='bind', migrate=True)\n")
        after = wait_for(os.path.join(out, "done-0"))
        r2 = topo("ps", "--json", str(proc.pid))
        return {"pid": proc.pid, "pages": before, "run": r, "ps": json.loads(r["stdout"]) if r["rc"] == 0 else None,
                "migrated_pages": after, "run_migrated": r2,
                "ps_migrated": json.loads(r2["stdout"]) if r2["rc"] == 0 else None}
    finally:
        with open(os.path.join(out, "stop"), "w"):
            pass
        proc.wait(timeout=60)


def in_cgroup_argv(argv):
    """argv, run from inside the child cgroup /sys/fs/cgroup/topovm."""
    return ["sh", "-c", 'echo $$ > /sys/fs/cgroup/topovm/cgroup.procs && exec "$@"', "sh", *argv]


def truth():
    return {"sysfs": sysfs_truth(), "numactl": sh(["numactl", "-H"]),
            "lstopo": sh(["lstopo-no-graphics", "--of", "xml", "-"])}


def show(wrap=lambda argv: argv):
    r = sh(wrap([PY, "-m", "topo", "show", "--json"]))
    return {"run": r, "json": json.loads(r["stdout"]) if r["rc"] == 0 else None}


def plan(mode, nproc, wrap=lambda argv: argv):
    r = sh(wrap([PY, "-m", "topo", "plan", "--mode", mode, "--devices", "none", "--nproc-per-node", str(nproc)]))
    return {"run": r, "plan": json.loads(r["stdout"]) if r["rc"] == 0 else None}


def membind_pages():
    """The guest itself: 64 MiB touched under `numactl --membind 1`."""
    out = tempfile.mkdtemp(prefix="out-")
    r = sh(["numactl", "--membind", "1", PY, WORKER, out, "64"])
    return {"run": r, "workers": worker_records(out)}


def bind(plan_path, plan_json):
    out = tempfile.mkdtemp(prefix="out-")
    r = topo("bind", "--bind-file", plan_path, "--local-rank", "1", "--", PY, WORKER, out)
    return {"run": r, "workers": worker_records(out), "plan": plan_json}


def tools_hidden():
    return {"which": {t: shutil.which(t) for t in HIDDEN},
            "exists": {t: os.path.exists(f"/usr/bin/{t}") for t in HIDDEN},
            "shell": sh(["sh", "-c", "command -v numactl taskset"])}


def make_cgroup():
    """A child cgroup with node 0's CPUs and memory only."""
    with open("/sys/fs/cgroup/cgroup.subtree_control", "w") as fh:
        fh.write("+cpuset")
    os.makedirs("/sys/fs/cgroup/topovm", exist_ok=True)
    with open("/sys/fs/cgroup/topovm/cpuset.cpus", "w") as fh:
        fh.write("0-1")
    with open("/sys/fs/cgroup/topovm/cpuset.mems", "w") as fh:
        fh.write("0")


def cgroup_show():
    return {**show(in_cgroup_argv), "effective": {"cpus": read("/sys/fs/cgroup/topovm/cpuset.cpus.effective"),
                                                  "mems": read("/sys/fs/cgroup/topovm/cpuset.mems.effective")}}


def cgroup_run():
    out = tempfile.mkdtemp(prefix="out-")
    r = sh(in_cgroup_argv([PY, "-m", "topo", "run", "--standalone", "--nproc-per-node=2",
                           "--numa-binding=exclusive", "--memory", "numa", WORKER, out]))
    return {"run": r, "workers": worker_records(out)}


def machine_numa2():
    """2 CPU nodes, a memory-only node, devices on node 1: every check."""
    run_check("truth", truth)
    run_check("show", show)
    parallel([(f"plan:{mode}", lambda mode=mode: plan(mode, 2)) for mode in MODES])
    run_check("membind-pages", membind_pages)

    numa_plan = plan_file("--mode", "node", "--nproc-per-node", "2", "--memory", "numa")
    pref_plan = plan_file("--mode", "node", "--nproc-per-node", "2", "--memory", "preferred")
    launches = [("launch:bind_core", lambda: {**launch("--bind_core=True"), "plan": None}),
                ("launch:bind_numa", lambda: {**launch("--bind_numa=True"), "plan": None}),
                ("launch:json_numa", lambda: {**launch(f"--bind_numa={numa_plan[0]}"), "plan": numa_plan[1]}),
                ("launch:json_preferred", lambda: {**launch(f"--bind_numa={pref_plan[0]}"), "plan": pref_plan[1]}),
                ("bind", lambda: bind(*numa_plan))]
    parallel(launches)
    # numactl and taskset gone: the launcher and topo bind make the system calls themselves
    hide_tools()
    try:
        run_check("no-numactl:hidden", tools_hidden)
        parallel([("no-numactl:" + name, fn) for name, fn in launches])
    finally:
        unhide_tools()

    parallel([(f"run:{mode}", lambda mode=mode: run_mode(mode, "--memory", "numa")) for mode in MODES])
    run_check("ps:remote", ps_remote)
    parallel([(f"set_affinity:{memory}",
               lambda memory=memory: set_affinity(device_id=1, nproc_per_node=2, mode="unique_contiguous", memory=memory))
              for memory in ("local", "bind", "preferred")]
             + [("set_affinity:preferred-many",  # all CPUs, so both nodes: MPOL_PREFERRED_MANY
                 lambda: set_affinity(device_id=0, nproc_per_node=1, mode="all", scope="socket", memory="preferred"))])

    make_cgroup()
    run_check("cgroup:show", cgroup_show)
    parallel([(f"cgroup:plan:{mode}", lambda mode=mode: plan(mode, 2, in_cgroup_argv)) for mode in MODES])
    run_check("cgroup:run:exclusive", cgroup_run)


def machine_numa4():
    """4 one-CPU nodes with asymmetric distances, an NVMe drive on node 2: discovery and planning."""
    run_check("truth", truth)
    run_check("show", show)
    parallel([(f"plan:{mode}", lambda mode=mode: plan(mode, 4)) for mode in MODES])
    run_check("run:node", lambda: run_mode("node", "--memory", "numa", nproc=4))


def main():
    emit("started", python=PY, cwd=os.getcwd())
    {"numa2": machine_numa2, "numa4": machine_numa4}[sys.argv[1]]()


if __name__ == "__main__":
    main()
