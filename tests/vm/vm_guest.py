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
PY = sys.executable
MODES = ["node", "socket", "exclusive", "core-complex", "all", "single", "single-unique",
         "unique-interleaved", "unique-contiguous", "msrun-auto"]
HIDDEN = ("numactl", "taskset")


PRINT = threading.Lock()


def emit(name, **data):
    line = json.dumps({"name": name, **data}, separators=(",", ":"))
    with PRINT:
        print("TOPOVM-RESULT " + line, flush=True)


def run_check(name, fn):
    start = time.monotonic()
    try:
        data = fn()
    except Exception:
        data = {"error": traceback.format_exc()}
    emit(name, elapsed=round(time.monotonic() - start, 2), **data)


def check(name):
    """Run the decorated function now and emit its record (or the exception it raised)."""
    def run(fn):
        run_check(name, fn)
        return fn
    return run


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


def launch(*flags, env=None):
    out = tempfile.mkdtemp(prefix="out-")
    logs = tempfile.mkdtemp(prefix="logs-")
    r = topo("launch", "--worker_num=2", "--local_worker_num=2", "--join=True", "--no-scheduler",
             f"--log_dir={logs}", *flags, WORKER, out, env=env)
    record = json.load(open(os.path.join(logs, "launch.json"))) if os.path.exists(os.path.join(logs, "launch.json")) else None
    return {"run": r, "launch": record, "workers": worker_records(out)}


def run_mode(mode, *extra, nproc=2):
    out = tempfile.mkdtemp(prefix="out-")
    r = topo("run", "--standalone", f"--nproc-per-node={nproc}", f"--numa-binding={mode}", *extra, WORKER, out)
    return {"run": r, "workers": worker_records(out)}


def plan_file(*args):
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
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


def in_cgroup(argv):
    """argv run from inside the child cgroup /sys/fs/cgroup/topovm."""
    return sh(["sh", "-c", 'echo $$ > /sys/fs/cgroup/topovm/cgroup.procs && exec "$@"', "sh", *argv])


def common(nproc):
    @check("truth")
    def _():
        return {"sysfs": sysfs_truth(), "numactl": sh(["numactl", "-H"]),
                "lstopo": sh(["lstopo-no-graphics", "--of", "xml", "-"])}

    @check("show")
    def _():
        r = topo("show", "--json")
        return {"run": r, "json": json.loads(r["stdout"]) if r["rc"] == 0 else None}

    def plan(mode):
        r = topo("plan", "--mode", mode, "--devices", "none", "--nproc-per-node", str(nproc))
        return {"run": r, "plan": json.loads(r["stdout"]) if r["rc"] == 0 else None}

    parallel([(f"plan:{mode}", lambda mode=mode: plan(mode)) for mode in MODES])


def machine_numa2():
    common(2)

    @check("membind-pages")
    def _():
        out = tempfile.mkdtemp(prefix="out-")
        r = sh(["numactl", "--membind", "1", PY, WORKER, out, "64"])
        return {"run": r, "workers": worker_records(out)}

    numa_plan, numa_json = plan_file("--mode", "node", "--nproc-per-node", "2", "--memory", "numa")
    pref_plan, pref_json = plan_file("--mode", "node", "--nproc-per-node", "2", "--memory", "preferred")
    launches = [("bind_core", ["--bind_core=True"], None), ("bind_numa", ["--bind_numa=True"], None),
                ("json_numa", [f"--bind_numa={numa_plan}"], numa_json),
                ("json_preferred", [f"--bind_numa={pref_plan}"], pref_json)]

    def bind():
        out = tempfile.mkdtemp(prefix="out-")
        r = topo("bind", "--bind-file", numa_plan, "--local-rank", "1", "--", PY, WORKER, out)
        return {"run": r, "workers": worker_records(out), "plan": numa_json}

    checks = [(f"launch:{label}", lambda flags=flags, plan=plan: {**launch(*flags), "plan": plan})
              for label, flags, plan in launches]
    parallel(checks + [("bind", bind)])

    # numactl and taskset gone: the launcher and topo bind make the system calls themselves
    hide_tools()
    try:
        @check("no-numactl:hidden")
        def _():
            return {"which": {t: shutil.which(t) for t in HIDDEN},
                    "exists": {t: os.path.exists(f"/usr/bin/{t}") for t in HIDDEN},
                    "shell": sh(["sh", "-c", "command -v numactl taskset"])}

        parallel([("no-numactl:" + name, fn) for name, fn in checks] + [("no-numactl:bind", bind)])
    finally:
        unhide_tools()

    parallel([(f"run:{mode}", lambda mode=mode: run_mode(mode, "--memory", "numa")) for mode in MODES])

    parallel([(f"set_affinity:{memory}",
               lambda memory=memory: set_affinity(device_id=1, nproc_per_node=2, mode="unique_contiguous", memory=memory))
              for memory in ("local", "bind", "preferred")]
             + [("set_affinity:preferred-many",
                 lambda: set_affinity(device_id=0, nproc_per_node=1, mode="all", scope="socket", memory="preferred"))])

    # a child cgroup with node 0's CPUs and memory only
    with open("/sys/fs/cgroup/cgroup.subtree_control", "w") as fh:
        fh.write("+cpuset")
    os.makedirs("/sys/fs/cgroup/topovm", exist_ok=True)
    with open("/sys/fs/cgroup/topovm/cpuset.cpus", "w") as fh:
        fh.write("0-1")
    with open("/sys/fs/cgroup/topovm/cpuset.mems", "w") as fh:
        fh.write("0")

    @check("cgroup:show")
    def _():
        r = in_cgroup([PY, "-m", "topo", "show", "--json"])
        return {"run": r, "json": json.loads(r["stdout"]) if r["rc"] == 0 else None,
                "effective": {"cpus": read("/sys/fs/cgroup/topovm/cpuset.cpus.effective"),
                              "mems": read("/sys/fs/cgroup/topovm/cpuset.mems.effective")}}

    def cgroup_plan(mode):
        r = in_cgroup([PY, "-m", "topo", "plan", "--mode", mode, "--devices", "none", "--nproc-per-node", "2"])
        return {"run": r, "plan": json.loads(r["stdout"]) if r["rc"] == 0 else None}

    parallel([(f"cgroup:plan:{mode}", lambda mode=mode: cgroup_plan(mode)) for mode in MODES])

    @check("cgroup:run:exclusive")
    def _():
        out = tempfile.mkdtemp(prefix="out-")
        r = in_cgroup([PY, "-m", "topo", "run", "--standalone", "--nproc-per-node=2", "--numa-binding=exclusive",
                       "--memory", "numa", WORKER, out])
        return {"run": r, "workers": worker_records(out)}


def machine_numa4():
    common(4)

    @check("run:node")
    def _():
        return run_mode("node", "--memory", "numa", nproc=4)


def main():
    emit("started", python=PY, cwd=os.getcwd())
    {"numa2": machine_numa2, "numa4": machine_numa4}[sys.argv[1]]()


if __name__ == "__main__":
    main()
