"""Reading a started process's binding back from /proc (a fake /proc tree here), and the log
tailer's line handling."""

from __future__ import annotations

import io

from topo.binding import Binding, observe
from topo.launcher.tail import LogTailer
from topo.launcher.verify import changed_after_start, mismatch, refusal_in
from topo.cpuset import CpuSet


def fake_proc(tmp_path, pid, *, cpus, mems="0", numa_maps="55d0c6a00000 default file=/usr/bin/python3\n"):
    d = tmp_path / str(pid)
    d.mkdir()
    (d / "status").write_text(f"Name:\tpython3\nState:\tS (sleeping)\nCpus_allowed_list:\t{cpus}\n"
                              f"Mems_allowed_list:\t{mems}\n")
    (d / "numa_maps").write_text(numa_maps)
    return str(tmp_path)


def test_bound_process_matches(tmp_path):
    proc = fake_proc(tmp_path, 10, cpus="48-63", mems="0-3", numa_maps="7f00 bind:3 anon=1 N3=1\n")
    seen = observe(10, proc)
    assert seen.describe() == "CPUs 48-63, memory bound to node 3"
    assert mismatch(Binding(CpuSet.parse("48-63"), CpuSet.parse("3"), "bind"), seen) is None


def test_cgroup_narrowed_cpus_and_default_policy_are_mismatches(tmp_path):
    proc = fake_proc(tmp_path, 11, cpus="48-55", mems="0-3")
    seen = observe(11, proc)
    problem = mismatch(Binding(CpuSet.parse("48-63"), CpuSet.parse("3"), "bind"), seen)
    assert problem == ("asked for CPUs 48-63, runs on CPUs 48-55; "
                       "asked for memory bound to node 3, memory policy is default")
    assert seen.describe() == "CPUs 48-55, memory not bound"  # Mems_allowed is the cgroup's, not a policy


def test_narrowed_by_the_cgroup_is_not_a_change_after_start(tmp_path):
    proc = fake_proc(tmp_path, 11, cpus="48-55", mems="0-3")
    seen = observe(11, proc)
    asked = Binding(CpuSet.parse("48-63"))
    assert not changed_after_start(asked, seen, CpuSet.parse("0-55"))  # the kernel gave asked & allowed
    assert changed_after_start(asked, seen, CpuSet.parse("0-63"))  # all were allowed: the process moved


def test_gone_process_reads_as_none(tmp_path):
    assert observe(12, str(tmp_path)) is None


def test_refusal_lines():
    assert refusal_in("hello\nset_mempolicy: Operation not permitted\n") == "set_mempolicy: Operation not permitted"
    assert refusal_in("taskset: failed to set pid 5's affinity: Operation not permitted") is not None
    assert refusal_in("PermissionError: Operation not permitted: 'out.txt'") is None


def test_tailer_prefixes_lines_and_flushes_a_prompt(tmp_path):
    log = tmp_path / "w.log"
    log.write_bytes(b"")
    out = io.StringIO()
    tailer = LogTailer([("[rank 3] ", str(log), out)])
    with open(log, "ab", buffering=0) as fh:
        fh.write(b"one\ntw")
        tailer.pump()
        assert out.getvalue() == "[rank 3] one\n"  # "tw" may still get the rest of its line
        fh.write(b"o\n(Pdb) ")
        tailer.pump()
        assert out.getvalue() == "[rank 3] one\n[rank 3] two\n"
        tailer.pump()  # nothing new: the partial line is a prompt, show it
        assert out.getvalue() == "[rank 3] one\n[rank 3] two\n[rank 3] (Pdb) "
        fh.write(b"p x\nlast")
    tailer.pump(final=True)
    assert out.getvalue() == "[rank 3] one\n[rank 3] two\n[rank 3] (Pdb) p x\n[rank 3] last"


def test_a_flooded_log_is_read_a_bounded_piece_per_poll(tmp_path, monkeypatch):
    """A worker that writes faster than the console reads never makes the launcher hold its whole log;
    the last pump still copies all of it."""
    import topo.launcher.tail as tail
    monkeypatch.setattr(tail, "READ_LIMIT", 64)
    log, out = tmp_path / "flood.log", io.StringIO()
    lines = "".join(f"line {i:03}\n" for i in range(100)) + "x" * 300
    log.write_text(lines)
    tailer = LogTailer([("> ", str(log), out)])
    tailer.pump()
    assert 0 < len(out.getvalue()) <= 64 + 2 * 8 and tailer.followers[0].offset == 64
    tailer.pump(final=True)
    assert out.getvalue() == "".join(f"> line {i:03}\n" for i in range(100)) + "> " + "x" * 300



def test_the_binding_report_never_has_an_empty_part():
    """issue 18: a worker that exited quickly was reported as `memory node 0 ()`."""
    from topo.launcher.procgroup import Process, ProcessSpec
    from topo.launcher.supervisor import report

    bound = ProcessSpec("rank 0", ("taskset", "-c", "1", "python"), {}, None,
                        Binding(CpuSet.parse("1"), prefix=("taskset", "-c", "1"), applied_by="taskset"))
    assert report(Process(bound, None, bound.binding, bound.argv)) == "rank 0: CPUs 1, memory not bound (not checked)"
    quick = Process(bound, None, bound.binding, bound.argv, status="exited before it could be checked")
    assert report(quick) == "rank 0: CPUs 1, memory not bound (exited before it could be checked)"
    unbound = ProcessSpec("rank 1", ("python",), {}, None)
    assert report(Process(unbound, None, unbound.binding, unbound.argv)) == "rank 1: not bound"
