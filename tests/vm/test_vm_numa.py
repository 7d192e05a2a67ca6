"""topo on real multi-NUMA kernels: Debian's kernel booted under QEMU (vmharness.py) runs
vm_guest.py, which runs this checkout's topo there and records what topo said beside what the
guest kernel says (sysfs, `numactl -H`, `lstopo-no-graphics`, /proc/<pid>/status, numa_maps).
Each test judges one record. One boot per machine shape serves all of its tests.

`python -m pytest -m vm` runs only these. Skipped, with the reason, where qemu, a kernel image
with its modules or a static busybox is missing.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import vmharness
from processes import cpulist as cpus

pytestmark = [pytest.mark.vm, pytest.mark.skipif(vmharness.missing() is not None, reason=str(vmharness.missing()))]

REPO = Path(__file__).resolve().parents[2]
MODES = ["node", "socket", "exclusive", "core-complex", "all", "single", "single-unique",
         "unique-interleaved", "unique-contiguous", "msrun-auto"]
# modes that never give two processes the same CPU
UNIQUE = {"exclusive", "single-unique", "unique-interleaved", "unique-contiguous", "msrun-auto"}
# a boot of numa2 runs ~60 checks, each starting Python several times under TCG
BOOT_TIMEOUT = 900
_BOOTS: dict[str, vmharness.Boot] = {}


def boot_of(name: str) -> vmharness.Boot:
    if name not in _BOOTS:
        machine = vmharness.MACHINES[name]
        _BOOTS[name] = vmharness.boot(machine, vmharness.guest_job(machine, REPO, sys.executable),
                                      timeout=BOOT_TIMEOUT, keep=(REPO, Path(sys.prefix)))
    return _BOOTS[name]


def record(machine: str, name: str) -> dict:
    """The record `name` from the boot of `machine`; a missing or failed one fails the test."""
    boot = boot_of(machine)
    if name not in boot.results:
        why = "timed out" if boot.timed_out else ("finished" if boot.finished else "did not finish")
        pytest.fail(f"no record {name!r} from {machine} (boot {why}); console tail:\n{boot.console[-3000:]}")
    rec = boot.results[name]
    assert "error" not in rec, rec["error"]
    return rec


def mask(text: str) -> set[int]:
    """An hwloc XML bitmap ("0x0000000f" or "0x...,0x...") as a set of bit numbers."""
    value = int(text.replace(",0x", "").replace("0x", "") or "0", 16)
    return {i for i in range(value.bit_length()) if value >> i & 1}


def ok(run: dict) -> None:
    assert run["rc"] == 0, f"{run['argv']} exited {run['rc']}:\n{run['stdout'][-2000:]}\n{run['stderr'][-2000:]}"


def kernel_nodes(machine: str) -> dict[int, dict]:
    return {int(k): v for k, v in record(machine, "truth")["sysfs"]["nodes"].items()}


def cpu_nodes(machine: str) -> dict[int, set[int]]:
    return {n: cpus(v["cpulist"]) for n, v in kernel_nodes(machine).items() if v["cpulist"]}


def node_of(machine: str, cpu_set: set[int]) -> int | None:
    """The one NUMA node holding all of `cpu_set`, else None."""
    homes = [n for n, c in cpu_nodes(machine).items() if cpu_set <= c]
    return homes[0] if len(homes) == 1 else None


def assert_pages_on(worker: dict, node: int | set[int], policy: str | None = None) -> None:
    """The worker's touched buffer is (at least 90%) on `node`, under `policy` when given."""
    mapping = worker["mapping"]
    assert mapping is not None, worker
    if policy is not None:
        assert mapping["policy"] == policy, worker
    nodes = {node} if isinstance(node, int) else node
    total = sum(mapping["pages"].values())
    on = sum(v for k, v in mapping["pages"].items() if int(k) in nodes)
    assert total > 0 and on >= 0.9 * total, f"pages {mapping['pages']} not on node(s) {sorted(nodes)}: {worker}"


def workers(rec: dict, count: int) -> list[dict]:
    out = [rec["workers"][f"rank{r}.json"] for r in range(count) if f"rank{r}.json" in rec["workers"]]
    assert len(out) == count, f"expected {count} worker records, got {sorted(rec['workers'])}"
    return out


@pytest.mark.parametrize("machine", ["numa2", "numa4"])
def test_boot_ran_every_check_and_powered_off(machine):
    boot = boot_of(machine)
    assert not boot.timed_out and boot.finished, boot.console[-3000:]
    assert "TOPOVM-DONE rc=0" in boot.console, boot.console[-3000:]


# --- topo show against the kernel -------------------------------------------------------------

@pytest.mark.parametrize("machine", ["numa2", "numa4"])
def test_show_nodes_cpus_memory_distances_match_sysfs(machine):
    show = record(machine, "show")
    ok(show["run"])
    topo_nodes = {n["os_index"]: n for n in show["json"]["numa_nodes"]}
    truth = kernel_nodes(machine)
    assert set(topo_nodes) == set(truth)
    order = sorted(truth)
    for n, t in truth.items():
        got = topo_nodes[n]
        assert cpus(got["cpuset"]) == cpus(t["cpulist"]), n
        assert got["local_memory"] == t["mem_total_kb"] * 1024, n
        assert got["memory_only"] == (t["cpulist"] == ""), n
        assert [got["distances"][str(m)] for m in order] == t["distance"], n
    assert cpus(show["json"]["pus"]) == cpus(record(machine, "truth")["sysfs"]["online"])


@pytest.mark.parametrize("machine", ["numa2", "numa4"])
def test_show_matches_numactl_hardware(machine):
    show = record(machine, "show")["json"]
    numactl = record(machine, "truth")["numactl"]
    ok(numactl)
    lines = numactl["stdout"].splitlines()
    listed_cpus, sizes, matrix = {}, {}, {}
    in_matrix = False
    for line in lines:
        words = line.split()
        if line.startswith("node distances"):
            in_matrix = True
        elif in_matrix and words and words[0].endswith(":"):
            matrix[int(words[0][:-1])] = [int(w) for w in words[1:]]
        elif len(words) >= 3 and words[0] == "node" and words[2] == "cpus:":
            listed_cpus[int(words[1])] = {int(w) for w in words[3:]}
        elif len(words) >= 4 and words[0] == "node" and words[2] == "size:":
            sizes[int(words[1])] = int(words[3])
    nodes = {n["os_index"]: n for n in show["numa_nodes"]}
    assert set(nodes) == set(listed_cpus) == set(matrix)
    for n, node in nodes.items():
        assert cpus(node["cpuset"]) == listed_cpus[n]
        assert node["local_memory"] >> 20 == sizes[n]  # numactl prints MemTotal in whole MB
        assert [node["distances"][str(m)] for m in sorted(nodes)] == matrix[n]


@pytest.mark.parametrize("machine", ["numa2", "numa4"])
def test_show_matches_lstopo(machine):
    show = record(machine, "show")["json"]
    lstopo = record(machine, "truth")["lstopo"]
    ok(lstopo)
    root = ET.fromstring(lstopo["stdout"])
    parent = {child: p for p in root.iter() for child in p}
    hw_nodes = {int(o.get("os_index")): o for o in root.iter("object") if o.get("type") == "NUMANode"}
    nodes = {n["os_index"]: n for n in show["numa_nodes"]}
    assert set(nodes) == set(hw_nodes)
    for n, obj in hw_nodes.items():
        assert int(obj.get("local_memory")) == nodes[n]["local_memory"], n
        # a memory-only node's cpuset in hwloc is its locality, as topo's "locality"
        assert mask(obj.get("cpuset")) == cpus(nodes[n]["locality"]), n
    dist = root.find("distances2")
    order = [int(x) for x in dist.find("indexes").text.split()]
    values = [int(x) for chunk in dist.findall("u64values") for x in chunk.text.split()]  # hwloc writes 10 a line
    for i, a in enumerate(order):
        assert [nodes[a]["distances"][str(b)] for b in order] == values[i * len(order):(i + 1) * len(order)]
    # every PCI endpoint topo classified: lstopo places it below the same CPUs and node
    devices = [d for d in show["devices"] if d["kind"] in ("nic", "nvme")]
    assert devices
    for dev in devices:
        (obj,) = [o for o in root.iter("object") if o.get("pci_busid") == dev["busid"]]
        while obj.get("cpuset") is None:
            obj = parent[obj]
        assert mask(obj.get("cpuset")) == cpus(dev["local_cpus"]), dev
        assert dev["numa_node"] in mask(obj.get("nodeset")), dev


@pytest.mark.parametrize(("machine", "busids", "node"),
                         [("numa2", {"nic": "0000:42:01.0", "nvme": "0000:42:02.0"}, 1),
                          ("numa4", {"nvme": "0000:62:01.0"}, 2)])
def test_show_device_behind_expander_bridge(machine, busids, node):
    show = record(machine, "show")["json"]
    pci = record(machine, "truth")["sysfs"]["pci"]
    by_bus = {d["busid"]: d for d in show["devices"]}
    for kind, busid in busids.items():
        dev = by_bus[busid]
        assert dev["kind"] == kind
        assert pci[busid]["numa_node"] == node
        assert dev["numa_node"] == node
        assert cpus(dev["local_cpus"]) == cpus(pci[busid]["local_cpulist"]) == cpu_nodes(machine)[node]


def test_show_memory_only_node():
    nodes = {n["os_index"]: n for n in record("numa2", "show")["json"]["numa_nodes"]}
    assert nodes[2]["memory_only"] and nodes[2]["cpuset"] == ""
    assert kernel_nodes("numa2")[2]["cpulist"] == ""
    # nearest by distance: node 0 (20) before node 1 (22)
    assert cpus(nodes[2]["locality"]) == cpu_nodes("numa2")[0]


# --- topo plan on the live machine ------------------------------------------------------------

def check_plan(machine: str, plan: dict, mode: str, nproc: int, allowed: set[int], allowed_nodes: set[int]) -> None:
    keys = [f"device{r}" for r in range(nproc)]
    assert sorted(plan["bind_cpu"]) == sorted(keys)
    sets = {k: cpus(plan["bind_cpu"][k]["main"]) for k in keys}
    for k, s in sets.items():
        assert s and s <= allowed, (k, s, allowed)
        memory = plan["bind_memory"][k]
        assert memory in allowed_nodes, (k, memory)
        if mode == "socket":
            assert s == allowed  # one package here
        else:
            home = node_of(machine, s)
            assert home is not None, f"{k}: CPUs {s} span NUMA nodes"
            assert memory == home, (k, memory, home)
            if mode == "node":
                assert s == cpu_nodes(machine)[home] & allowed
    if mode in UNIQUE:
        flat = [c for s in sets.values() for c in s]
        assert len(flat) == len(set(flat)), sets
    if mode != "socket" and len(allowed_nodes) >= nproc:
        # one process per NUMA node while there are enough nodes
        assert len({node_of(machine, s) for s in sets.values()}) == nproc, sets


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("machine", "nproc"), [("numa2", 2), ("numa4", 4)])
def test_plan_mode_on_live_machine(machine, nproc, mode):
    rec = record(machine, f"plan:{mode}")
    ok(rec["run"])
    check_plan(machine, rec["plan"], mode, nproc, set().union(*cpu_nodes(machine).values()), set(cpu_nodes(machine)))


# --- launching: the kernel's view of each worker ----------------------------------------------

def test_numactl_membind_lands_pages_on_node_1():
    """The guest itself: 64 MiB touched under `numactl --membind 1` are on node 1."""
    rec = record("numa2", "membind-pages")
    ok(rec["run"])
    assert_pages_on(rec["workers"]["ranksolo.json"], 1, "bind:1")


@pytest.mark.parametrize("hidden", [False, True], ids=["numactl", "no-numactl"])
@pytest.mark.parametrize("label", ["bind_core", "bind_numa", "json_numa", "json_preferred"])
def test_launch(label, hidden):
    rec = record("numa2", ("no-numactl:" if hidden else "") + f"launch:{label}")
    ok(rec["run"])
    launch = rec["launch"]
    procs = {p["rank"]: p for p in launch["processes"]}
    for r, worker in enumerate(workers(rec, 2)):
        proc = procs[r]
        assert proc["status"].startswith("verified"), proc
        assert cpus(worker["cpus"]) == cpus(proc["binding"]["cpus"]) == cpus(proc["observed"]["cpus"])
        if hidden:
            assert proc["binding"]["applied"] != "prefix", proc["binding"]
            assert "applied directly" in proc["status"], proc["status"]
        home = node_of("numa2", cpus(worker["cpus"]))
        assert home == r  # rank r on node r: one per node
        if label == "bind_core":  # msrun --bind_core=True: CPUs only, the CPU split of msrun-auto
            assert worker["mapping"]["policy"] == "default"
            assert_pages_on(worker, home)  # first touch on the CPUs' own node
        elif label == "bind_numa":  # numactl --membind N --cpunodebind N
            assert cpus(worker["cpus"]) == cpu_nodes("numa2")[r]
            assert_pages_on(worker, r, f"bind:{r}")
        else:
            plan = rec["plan"]
            assert cpus(worker["cpus"]) == cpus(plan["bind_cpu"][f"device{r}"]["main"])
            memory = plan["bind_memory"][f"device{r}"]
            policy = f"bind:{memory}" if label == "json_numa" else f"prefer:{memory}"
            assert_pages_on(worker, memory, policy)


def test_numactl_and_taskset_really_hidden():
    rec = record("numa2", "no-numactl:hidden")
    assert rec["which"] == {"numactl": None, "taskset": None}
    assert rec["exists"] == {"numactl": False, "taskset": False}
    assert rec["shell"]["rc"] != 0 and rec["shell"]["stdout"] == ""


@pytest.mark.parametrize("hidden", [False, True], ids=["numactl", "no-numactl"])
def test_bind_under_a_plan(hidden):
    rec = record("numa2", "no-numactl:bind" if hidden else "bind")
    ok(rec["run"])
    worker = rec["workers"]["ranksolo.json"]
    plan = rec["plan"]
    assert cpus(worker["cpus"]) == cpus(plan["bind_cpu"]["device1"]["main"]) == cpu_nodes("numa2")[1]
    assert_pages_on(worker, plan["bind_memory"]["device1"], f"bind:{plan['bind_memory']['device1']}")


@pytest.mark.parametrize("mode", MODES)
def test_run_numa_binding(mode):
    rec = record("numa2", f"run:{mode}")
    ok(rec["run"])
    plan = record("numa2", f"plan:{mode}")["plan"]
    planned = [cpus(plan["bind_cpu"][f"device{r}"]["main"]) for r in range(2)]
    for r, worker in enumerate(workers(rec, 2)):
        expected = planned[r]
        assert cpus(worker["cpus"]) == expected, (r, worker)
        omp = int(worker["env"]["OMP_NUM_THREADS"])
        # one thread per CPU, the CPUs shared out among the ranks bound to the same set
        assert omp == max(1, len(expected) // planned.count(expected)), (r, worker)
        memory = plan["bind_memory"][f"device{r}"]
        assert_pages_on(worker, memory, f"bind:{memory}")
    assert rec["run"]["stderr"].count("(verified)") == 2, rec["run"]["stderr"]


def test_run_node_on_four_nodes():
    rec = record("numa4", "run:node")
    ok(rec["run"])
    for r, worker in enumerate(workers(rec, 4)):
        assert cpus(worker["cpus"]) == cpu_nodes("numa4")[r]
        assert_pages_on(worker, r, f"bind:{r}")


# --- topo.set_affinity ------------------------------------------------------------------------

@pytest.mark.parametrize(("memory", "policy"), [("local", "local"), ("bind", "bind:1"), ("preferred", "prefer:1")])
def test_set_affinity_memory(memory, policy):
    rec = record("numa2", f"set_affinity:{memory}")
    ok(rec["run"])
    worker = rec["workers"]["ranksolo.json"]
    returned = set(int(c) for c in rec["run"]["stdout"].strip("[]\n ").split(","))
    # device 1 of 2 on a machine without accelerators: node 1's CPUs
    assert returned == cpus(worker["cpus"]) == cpu_nodes("numa2")[1]
    assert_pages_on(worker, 1, policy)


def test_set_affinity_preferred_many_nodes():
    """`all` at socket scope spans nodes 0 and 1: MPOL_PREFERRED_MANY with both."""
    rec = record("numa2", "set_affinity:preferred-many")
    ok(rec["run"])
    worker = rec["workers"]["ranksolo.json"]
    assert cpus(worker["cpus"]) == cpu_nodes("numa2")[0] | cpu_nodes("numa2")[1]
    assert_pages_on(worker, {0, 1}, "prefer (many):0-1")


# --- a cgroup that leaves out node 1 ----------------------------------------------------------

def test_cgroup_show_sees_only_node_0():
    rec = record("numa2", "cgroup:show")
    ok(rec["run"])
    assert rec["effective"] == {"cpus": "0-1", "mems": "0"}
    assert cpus(rec["json"]["allowed_pus"]) == {0, 1}
    assert rec["json"]["allowed_numa_nodes"] in ("0", [0])


@pytest.mark.parametrize("mode", MODES)
def test_cgroup_plan_stays_in_allowed_part(mode):
    rec = record("numa2", f"cgroup:plan:{mode}")
    ok(rec["run"])
    check_plan("numa2", rec["plan"], mode, 2, {0, 1}, {0})


def test_cgroup_run_stays_in_allowed_part():
    rec = record("numa2", "cgroup:run:exclusive")
    ok(rec["run"])
    got = [cpus(w["cpus"]) for w in workers(rec, 2)]
    assert got[0] | got[1] == {0, 1} and not got[0] & got[1]
    for worker in workers(rec, 2):
        assert_pages_on(worker, 0, "bind:0")


# --- topo ps ----------------------------------------------------------------------------------

def test_ps_sees_remote_memory():
    """A process on node 1's CPUs whose memory was first touched on node 0: topo ps says nearly
    all of its pages are remote, as numa_maps counts them."""
    rec = record("numa2", "ps:remote")
    ok(rec["run"])
    assert "N0=16384" in rec["pages"].split(), rec["pages"]  # 64 MiB of 4 KiB pages on node 0
    (proc,) = rec["ps"]["processes"]
    assert proc["pid"] == rec["pid"]
    assert cpus(proc["cpus_allowed"]) == cpu_nodes("numa2")[1]
    assert proc["local_nodes"] == "1" and proc["local_from"] == "allowed CPUs"
    assert proc["remote_fraction"] > 0.8, proc
    pages = {int(k): v for k, v in proc["pages_by_node"].items()}
    assert pages.get(0, 0) >= 16384


def test_set_affinity_migrate_moves_the_pages_home():
    """The same process then calls set_affinity(0, 1, mode="node", memory="bind", migrate=True):
    its pages move to node 1, and topo ps says they are local."""
    rec = record("numa2", "ps:remote")
    ok(rec["run_migrated"])
    counts = dict(f[1:].split("=") for f in rec["migrated_pages"].split())
    assert int(counts.get("1", 0)) >= 0.9 * 16384 and int(counts.get("0", 0)) <= 0.1 * 16384, counts
    (proc,) = rec["ps_migrated"]["processes"]
    assert proc["memory_policy"].startswith("bind"), proc["memory_policy"]
    assert proc["remote_fraction"] < 0.2, proc
