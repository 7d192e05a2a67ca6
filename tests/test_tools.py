"""Tool outputs (`lscpu`, `npu-smi`, `nvidia-smi`) are read bounded: a tool that floods is stopped
at TOOL_OUTPUT_LIMIT with one error naming it, never buffered whole (issue 17: 3 GB)."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

from topo.errors import ProbeError
from topo.fsroot import TOOL_OUTPUT_LIMIT
from topo.probes import npusmi
from topo.probes.tools import run_tool


def fake_tool(tmp_path: Path, name: str, body: str) -> Path:
    """An executable Python script (this interpreter), named by its absolute path: no PATH is set."""
    path = tmp_path / name
    path.write_text(f"#!{sys.executable}\nimport sys\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


FLOOD = "while True:\n    sys.{stream}.buffer.write(b'x' * 65536)"


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_a_flooding_tool_is_stopped_at_the_bound(tmp_path, stream):
    tool = fake_tool(tmp_path, "npu-smi", FLOOD.format(stream=stream))
    with pytest.raises(ProbeError) as caught:
        run_tool([str(tool), "info"], timeout=300)
    message = str(caught.value)
    assert message == (f"'{tool} info' wrote more than {TOOL_OUTPUT_LIMIT >> 20} MiB, more than that tool "
                       "ever writes; stopped it")


def test_npu_smi_flood_becomes_the_probe_status(tmp_path):
    tool = fake_tool(tmp_path, "npu-smi", FLOOD.format(stream="stdout"))
    report = npusmi.probe_npusmi(str(tool))
    assert report.status.startswith("error: ") and f"'{tool} info' wrote more than 4 MiB" in report.status


def test_output_up_to_the_bound_is_read_whole(tmp_path):
    tool = fake_tool(tmp_path, "lscpu", f"sys.stdout.write('a' * {TOOL_OUTPUT_LIMIT - 2} + '\\r\\n')")
    text = run_tool([str(tool)])
    assert len(text) == TOOL_OUTPUT_LIMIT - 1 and text.endswith("a\n")  # universal newlines, as before


def test_failure_names_the_tool_and_its_first_error_line(tmp_path):
    tool = fake_tool(tmp_path, "nvidia-smi", "sys.stderr.write('NVIDIA-SMI has failed\\nmore\\n'); sys.exit(9)")
    with pytest.raises(ProbeError, match=r"'.*nvidia-smi topo -m' failed \(exit 9\): NVIDIA-SMI has failed\Z"):
        run_tool([str(tool), "topo", "-m"])


def test_a_tool_that_never_ends_times_out(tmp_path):
    tool = fake_tool(tmp_path, "lscpu", "import time\ntime.sleep(600)")
    with pytest.raises(ProbeError, match=r"'.*lscpu' timed out after 0.5s"):
        run_tool([str(tool)], timeout=0.5)


def test_terminal_escapes_are_dropped_from_tool_output(tmp_path):
    # driver 580's nvidia-smi underlines the header of `topo -m` (ESC[4m ... ESC[0m) even when piped
    from samples import sample

    captured = sample("nvidia/topo-m_h200-1gpu_driver580-escape-codes.txt")
    assert "\x1b[4m" in captured
    tool = fake_tool(tmp_path, "nvidia-smi", f"sys.stdout.write({captured!r} + '\\x1b]0;title\\x07\\x1b(B')")
    text = run_tool([str(tool), "topo", "-m"])
    assert "\x1b" not in text
    assert text.splitlines()[:2] == ["\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID", "GPU0\t X \t0-15\t0\t\tN/A"]
