"""lscpu parsers on the captured outputs, and the discovery fallback when sysfs hides NUMA nodes."""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

import machines
import topo
from samples import sample
from topo.cpuset import CpuSet
from topo.errors import ParseError
from topo.probes import lscpu
from topo.cli import main as cli
from topo.cli.machine import REPLAY_ENV

KUNPENG_NODES = {n: CpuSet.range(24 * n, 24 * n + 23) for n in range(8)}
# `lscpu -p` of the same machine: 192 CPUs, 48 a socket, 24 a NUMA node.
KUNPENG_PARSABLE = "# CPU,Core,Socket,Node,,L1d,L1i,L2,L3\n" + "".join(
    f"{c},{c},{c // 48},{c // 24},,{c},{c},{c},{c // 24}\n" for c in range(192))


@pytest.mark.parametrize("path", [
    "cpu/lscpu_kunpeng920-5250-4s-8numa_atlas800tA2.txt",  # util-linux >= 2.37: "(N instances)"
    "cpu/lscpu_kunpeng920-4s-8numa_euleros-modelarts.txt",  # older: NUMA lines before Vendor ID
])
def test_summary_kunpeng_both_layouts(path):
    summary = lscpu.parse_summary(sample(path))
    assert summary.numa_nodes == KUNPENG_NODES
    assert summary.fields["Socket(s)"] == "4" and summary.fields["Model name"] == "Kunpeng-920"
    assert summary.cache_totals["L3"] == 192 << 20


def test_summary_instances_give_per_instance_size():
    summary = lscpu.parse_summary(sample("cpu/lscpu_kunpeng920-5250-4s-8numa_atlas800tA2.txt"))
    assert summary.cache_sizes == {"L1d": 64 << 10, "L1i": 64 << 10, "L2": 512 << 10, "L3": 24 << 20}
    old = lscpu.parse_summary(sample("cpu/lscpu_kunpeng920-4s-8numa_euleros-modelarts.txt"))
    assert old.cache_sizes == {}  # a total without a count: sized later from the rows' instances


def test_summary_gh200_counts_only_nodes_with_cpus():
    summary = lscpu.parse_summary(sample("cpu/lscpu_gh200-grace-1socket.txt"))
    assert sorted(summary.numa_nodes) == list(range(9))
    assert summary.cpu_nodes == {0: CpuSet.range(0, 71)}
    assert summary.cache_sizes["L3"] == 114 << 20


def test_old_per_instance_cache_size():
    summary = lscpu.parse_summary("L2 cache:            1024K\nL3 cache:  32768K\nNUMA node(s): 1\nNUMA node0 CPU(s): 0-3\n")
    assert summary.cache_sizes == {"L2": 1 << 20, "L3": 32 << 20}


def as_parsable(table: str) -> str:
    """An `lscpu -e` table (the field samples) as `lscpu -p` prints the same columns."""
    rows = [line.split() for line in table.splitlines() if line.strip()]
    return "\n".join(["# " + ",".join(rows[0])] + [",".join(row) for row in rows[1:]])


def test_table_gh200_quad_grace_large_cache_ids():
    rows = lscpu.parse_parsable(as_parsable(sample("cpu/lscpu-e_gh200-quad-grace-288cpu.txt")))
    built = lscpu.build_cpus(rows, lscpu.LscpuSummary(cache_sizes={"L3": 114 << 20}))
    assert built.online == CpuSet.range(0, 287)
    assert [n.cpuset for n in built.nodes] == [CpuSet.range(72 * s, 72 * s + 71) for s in range(4)]
    assert len(built.packages) == 4 and len(built.cores) == 288
    assert [c.cpuset for c in built.caches] == [CpuSet.range(72 * s, 72 * s + 71) for s in range(4)]


def test_table_noctua2_nps4_and_ccx():
    rows = lscpu.parse_parsable(as_parsable(sample("cpu/lscpu-e_noctua2-2x-epyc7763-nps4-8numa.txt")))
    built = lscpu.build_cpus(rows, lscpu.LscpuSummary(cache_sizes={"L3": 32 << 20}))
    assert [n.cpuset for n in built.nodes] == [CpuSet.range(16 * n, 16 * n + 15) for n in range(8)]
    assert len([c for c in built.caches if c.level == 3]) == 16


def test_table_smt_siblings_share_a_core():
    rows = lscpu.parse_parsable(as_parsable(sample("cpu/lscpu-e_noctua2-login-1x-epyc-smt-4numa.txt")))
    built = lscpu.build_cpus(rows)
    assert len(built.cores) == 64 and built.cores[0].cpuset == CpuSet([0, 64])
    assert built.caches == []  # no summary, no sizes: caches left out rather than sized 0


PARSABLE_NEW = """\
# The following is the parsable format, which can be fed to other
# programs. Each different item in every column has an unique ID
# starting usually from zero.
# CPU,Core,Socket,Node,,L1d,L1i,L2,L3
0,0,0,0,,0,0,0,0
1,1,0,0,,1,1,1,0
2,2,1,1,,2,2,2,1
3,3,1,1,,3,3,3,1
4,0,0,0,,0,0,0,0
5,1,0,0,,1,1,1,0
6,2,1,1,,2,2,2,1
7,3,1,1,,3,3,3,1
"""

PARSABLE_OLD = """\
# CPU,Core,Socket,Node,L1d:L1i:L2:L3
0,0,0,,0:0:0:0
1,1,0,,1:1:1:0
"""


def test_parsable_both_cache_layouts():
    rows = lscpu.parse_parsable(PARSABLE_NEW)
    assert rows[4] == lscpu.CpuRow(4, 0, 0, 0, (("L1d", 0), ("L1i", 0), ("L2", 0), ("L3", 0)))
    old = lscpu.parse_parsable(PARSABLE_OLD)
    assert old[1].node is None and dict(old[1].caches) == {"L1d": 1, "L1i": 1, "L2": 1, "L3": 0}


def test_parse_errors_name_the_line():
    with pytest.raises(ParseError, match="no '# CPU,Core,...' header"):
        lscpu.parse_parsable("0,0,0,0\n")
    with pytest.raises(ParseError, match="cannot read line 'x,0,0,0'"):
        lscpu.parse_parsable("# CPU,Core,Socket,Node\nx,0,0,0\n")


def test_generated_kunpeng_matches_its_lscpu():
    """The Atlas 800 generator agrees with the host's captured lscpu (cross-check of tests/machines.py)."""
    m = machines.kunpeng_ascend(machines.ATLAS800_910B3_BUSIDS, "x")
    nodes = {}
    for c in range(m.ncpus):
        nodes.setdefault(m.cpu(c)[2], []).append(c)
    summary = lscpu.parse_summary(sample("cpu/lscpu_kunpeng920-5250-4s-8numa_atlas800tA2.txt"))
    assert {n: CpuSet(cs) for n, cs in nodes.items()} == summary.cpu_nodes


@pytest.fixture
def hidden_numa_root(tmp_path):
    """The generated Atlas 800 host as a container sees it: no /sys/devices/system/node."""
    root = machines.build(machines.kunpeng_ascend(machines.ATLAS800_910B3_BUSIDS, "c"), tmp_path / "c")
    shutil.rmtree(root / "sys/devices/system/node")
    return root


@pytest.fixture
def fake_lscpu(monkeypatch):
    """This machine's lscpu answers as the Atlas 800's: `lscpu -p` and plain `lscpu`."""
    outputs = {tuple(lscpu.PARSABLE_ARGS): KUNPENG_PARSABLE,
               ("lscpu",): sample("cpu/lscpu_kunpeng920-5250-4s-8numa_atlas800tA2.txt")}
    monkeypatch.setattr(lscpu, "run_tool", lambda args, timeout=None: outputs[tuple(args)])


def test_discovery_falls_back_to_lscpu(hidden_numa_root, fake_lscpu):
    t = topo.discover(hidden_numa_root, probes=(), live_probes=True)
    assert [n.cpuset for n in t.numa_nodes] == list(KUNPENG_NODES.values())
    assert t.probes["lscpu"] == "ok (8 NUMA nodes)"
    # the NPUs' sysfs numa_node now names a real node
    assert {d.numa_node for d in t.devices if d.kind == "npu"} == {0, 2, 4, 6}
    t.check()


def test_the_replay_variable_is_read_by_the_command_line_not_by_discover(hidden_numa_root, fake_lscpu,
                                                                          monkeypatch):
    monkeypatch.setenv(REPLAY_ENV, "1")
    assert topo.discover(hidden_numa_root, probes=()).probes["lscpu"] == "off: not this system"
    result = CliRunner().invoke(cli, ["show", "--root", str(hidden_numa_root), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["source"]["probes"]["lscpu"] == "ok (8 NUMA nodes)"


def test_no_lscpu_fallback_on_a_captured_root(hidden_numa_root):
    t = topo.discover(hidden_numa_root, probes=())
    assert len(t.numa_nodes) == 1 and t.probes["lscpu"] == "off: not this system"


def test_captured_lscpu_outputs_are_read_on_a_captured_root(hidden_numa_root, monkeypatch):
    # `topo capture` stores lscpu's outputs; a captured root answers from them, never from this
    # machine's lscpu.
    (hidden_numa_root / "topo-capture").mkdir()
    (hidden_numa_root / "topo-capture/lscpu-parsable.txt").write_text(KUNPENG_PARSABLE)
    (hidden_numa_root / "topo-capture/lscpu.txt").write_text(
        sample("cpu/lscpu_kunpeng920-5250-4s-8numa_atlas800tA2.txt"))
    monkeypatch.setattr(lscpu, "run_tool", None)  # running lscpu here would fail the test
    t = topo.discover(hidden_numa_root, probes=())
    assert [n.cpuset for n in t.numa_nodes] == list(KUNPENG_NODES.values())
    assert t.probes["lscpu"] == "ok (8 NUMA nodes)"


def test_lscpu_failure_keeps_sysfs_view(hidden_numa_root, monkeypatch):
    def broken(args, timeout=None):
        raise topo.ProbeError("'lscpu -p=CPU,CORE,SOCKET,NODE,CACHE' timed out after 10s")

    monkeypatch.setattr(lscpu, "run_tool", broken)
    t = topo.discover(hidden_numa_root, probes=(), live_probes=True)
    assert len(t.numa_nodes) == 1
    assert t.probes["lscpu"] == "unavailable: 'lscpu -p=CPU,CORE,SOCKET,NODE,CACHE' timed out after 10s"


def test_live_lscpu_runs():
    """The real lscpu of this machine parses (util-linux is installed in CI)."""
    if shutil.which("lscpu") is None:
        pytest.skip("no lscpu")
    built = lscpu.probe_lscpu()
    assert built.online and built.cores


@pytest.mark.parametrize("odd", ["\u00b2", "\u0661", "\uff11", "1_0", "9" * 5000])
def test_odd_digits_in_tables_name_the_line(odd):
    """Digits other than ASCII ones ("²" was a ValueError traceback, "١" read as 1) and numbers past
    MAX_ID: one ParseError naming lscpu and the line, in each of the CPU, CORE and cache columns."""
    table = as_parsable(sample("cpu/lscpu-e_noctua2-2x-epyc7763-nps4-8numa.txt"))
    line = table.splitlines()[2]  # CPU,NODE,SOCKET,CORE,L1d:L1i:L2:L3,...: 1,0,0,1,1:1:1:0,...
    for column, value in ((0, odd), (3, odd), (4, f"1:{odd}:1:0")):
        cells = line.split(",")
        cells[column] = value
        bad = ",".join(cells)
        with pytest.raises(ParseError) as caught:
            lscpu.parse_parsable(table.replace(line, bad))
        assert str(caught.value).startswith(f"lscpu -p: cannot read line '{bad.strip()[:20]}")
    parsable = PARSABLE_NEW.replace("1,1,0,0,,1,1,1,0", f"1,1,0,0,,1,{odd},1,0")
    with pytest.raises(ParseError, match="lscpu -p: cannot read line '1,1,0,0,,1,"):
        lscpu.parse_parsable(parsable)
    with pytest.raises(ParseError, match="lscpu -p: cannot read line"):
        lscpu.parse_parsable(PARSABLE_NEW.replace("\n1,1,0,0", f"\n{odd},1,0,0"))


@pytest.mark.parametrize("odd", ["\u00b2", "\u0661", "1_0", "99999999999"])
def test_odd_digits_in_the_summary(odd):
    text = sample("cpu/lscpu_kunpeng920-5250-4s-8numa_atlas800tA2.txt")
    with pytest.raises(ParseError, match="lscpu: NUMA node"):
        lscpu.parse_summary(text.replace("NUMA node1 CPU(s)", f"NUMA node{odd} CPU(s)"))
    with pytest.raises(ParseError, match=r"lscpu: NUMA node\(s\): expected a count up to 1024"):
        lscpu.parse_summary(text.replace("NUMA node(s):                    8", f"NUMA node(s): {odd}"))
    # cache sizes are a bonus: an unreadable size or instance count leaves that cache unsized
    summary = lscpu.parse_summary(text.replace("(8 instances)", f"({odd} instances)")
                                  .replace("96 MiB", f"9{odd} MiB" if not odd.isdigit() else "96 MiB"))
    assert summary.numa_nodes == KUNPENG_NODES
    assert "L3" not in summary.cache_sizes and ("L2" not in summary.cache_sizes or odd.isdigit())
    assert summary.cache_sizes["L1d"] == 64 << 10


def test_cache_sizes_stay_finite():
    """A size float() would make infinite, "1.2.3" (a ValueError) or 0 instances is skipped, not a traceback."""
    for size in ("9" * 400 + "K", "9" * 400 + " MiB (1 instance)", "1.2.3 MiB", "1 MiB (0 instances)"):
        summary = lscpu.parse_summary(f"L3 cache: {size}\nNUMA node(s): 1\nNUMA node0 CPU(s): 0-3\n")
        assert summary.cache_sizes == {} and summary.cache_totals == {}
        assert summary.numa_nodes == {0: CpuSet.range(0, 3)}
