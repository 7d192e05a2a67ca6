"""Running the tools some probes read (`lscpu`, `npu-smi`, `nvidia-smi`) with one timeout, locale, output
bound and one-line failure; or answering from the outputs a `topo capture` stored."""

from __future__ import annotations

import os
import re
import shutil
import time
from typing import Callable

from topo.archive import TOOLS, TOOLS_DIR
from topo.errors import ProbeError
from topo.fsroot import TOOL_OUTPUT_LIMIT, FsRoot

TIMEOUT = 10.0  # seconds, as msrun's execute_command gives npu-smi


class ToolNotFound(ProbeError):
    """The tool is not on PATH."""


def run_tool(argv: list[str], timeout: float | None = None) -> str:
    """The tool's stdout, run with LC_ALL=C (the parsers read English keys and '.' decimals). ProbeError
    naming the command when it is missing, cannot run, times out, writes more than TOOL_OUTPUT_LIMIT
    bytes to stdout or stderr (stopped then) or exits non-zero (with its first stderr, else stdout, line)."""
    shown = " ".join(argv)
    timeout = TIMEOUT if timeout is None else timeout
    if shutil.which(argv[0]) is None:  # before importing subprocess, which most runs never need
        raise ToolNotFound(f"{argv[0]} not found on PATH")
    import subprocess
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=dict(os.environ, LC_ALL="C"))
    except FileNotFoundError:
        raise ToolNotFound(f"{argv[0]} not found on PATH") from None
    except PermissionError:
        raise ProbeError(f"permission denied to execute {argv[0]}") from None
    except OSError as exc:
        raise ProbeError(f"cannot run '{shown}': {exc.strerror}") from None
    with proc:
        try:
            deadline = time.monotonic() + timeout
            out, err = _read_bounded(proc, deadline, shown)
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise ProbeError(f"'{shown}' timed out after {timeout:g}s") from None
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    if proc.returncode != 0:
        lines = (err or out).strip().splitlines()
        raise ProbeError(f"'{shown}' failed (exit {proc.returncode})" + (f": {lines[0][:120]}" if lines else ""))
    return out


def _read_bounded(proc, deadline: float, shown: str) -> tuple[str, str]:
    """stdout and stderr as text, each at most TOOL_OUTPUT_LIMIT bytes, by the deadline (else TimeoutExpired)."""
    import selectors  # as subprocess, imported only when a tool runs
    import subprocess
    chunks: dict[int, list[bytes]] = {proc.stdout.fileno(): [], proc.stderr.fileno(): []}
    sizes = dict.fromkeys(chunks, 0)  # a running total: a tool writing a byte at a time costs linear time
    with selectors.DefaultSelector() as selector:
        for fd in chunks:
            selector.register(fd, selectors.EVENT_READ)
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(proc.args, left)
            for key, _ in selector.select(left):
                data = os.read(key.fd, 1 << 16)
                if not data:
                    selector.unregister(key.fd)
                    continue
                chunks[key.fd].append(data)
                sizes[key.fd] += len(data)
                if sizes[key.fd] > TOOL_OUTPUT_LIMIT:
                    raise ProbeError(f"'{shown}' wrote more than {TOOL_OUTPUT_LIMIT >> 20} MiB, more than that "
                                     "tool ever writes; stopped it")
    return tuple(_newlines(b"".join(chunks[f.fileno()]).decode("utf-8", "replace")) for f in (proc.stdout, proc.stderr))


# Terminal escape sequences (CSI, OSC, ESC ( B ...): driver 580's nvidia-smi underlines `topo -m`'s header
# with them even when stdout is not a terminal.
_ESCAPES = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[ -/]*[0-~])")


def _newlines(text: str) -> str:
    """A tool's output as its parsers read it: "\\n" line ends, no terminal escape sequences."""
    return _ESCAPES.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))


def stored_runner(fs: FsRoot, tool: str) -> Callable[[list[str]], str] | None:
    """A stand-in for run_tool answering `tool`'s commands from the outputs a capture stored below `fs`
    (None when it stored none); a command it did not store fails as a missing tool would."""
    stored = {tuple(argv): f"/{TOOLS_DIR}/{name}" for name, argv in TOOLS.items() if argv[0] == tool}
    if not any(fs.exists(path) for path in stored.values()):
        return None

    def runner(argv: list[str], timeout: float | None = None) -> str:
        text = fs.read(stored[tuple(argv)]) if tuple(argv) in stored else None
        if text is None:
            raise ToolNotFound(f"'{' '.join(argv)}': not in the capture")
        return _newlines(text)
    return runner
