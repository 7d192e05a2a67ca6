"""torchrun's error files (what a worker's `@record` writes to TORCHELASTIC_ERROR_FILE), read back
bounded, and torchrun's ChildFailedError report."""

from __future__ import annotations

import json
import socket
import time
from dataclasses import dataclass
from typing import Sequence, TextIO

from topo.binding import read_bounded
from topo.launcher.supervisor import describe_code, signal_name

NO_ERROR_FILE = "<N/A>"
ERROR_FILE_LIMIT = 4 << 20  # bytes of an error file read at most: a traceback is far smaller


@dataclass(frozen=True)
class Failure:
    """One failed worker, as torchrun's ProcessFailure reports it."""

    rank: int
    local_rank: int
    pid: int
    exitcode: int  # negative: killed by that signal
    error_file: str
    message: str  # the exception ("ValueError: boom") or a description of the exit
    traceback: str  # the worker's Python traceback from its error file, "" without one
    timestamp: int

    @property
    def signal_name(self) -> str:
        return signal_name(-self.exitcode) if self.exitcode < 0 else ""


def read_failure(*, rank: int, local_rank: int, pid: int, exitcode: int, error_file: str) -> Failure:
    """A failed worker, with the root cause its error file holds when it wrote one (torch's
    ErrorHandler format: {"message": {"message": "...", "extraInfo": {"py_callstack": "...",
    "timestamp": "..."}}}, or the older {"message": "...", "timestamp": ...})."""
    try:  # bounded, without following a link or blocking on a FIFO
        blob = read_bounded(error_file, ERROR_FILE_LIMIT + 1)
        data = json.loads(blob) if len(blob) <= ERROR_FILE_LIMIT else None
    except (OSError, ValueError, RecursionError):
        data = None
    message = traceback = ""
    timestamp = int(time.time())
    if isinstance(data, dict) and "message" in data:
        raw = data["message"]
        if isinstance(raw, dict):
            message = str(raw.get("message", ""))
            extra = raw.get("extraInfo") or {}
            traceback = str(extra.get("py_callstack", "")) if isinstance(extra, dict) else ""
            stamp = extra.get("timestamp") if isinstance(extra, dict) else None
        else:
            message, stamp = str(raw), data.get("timestamp")
        try:
            timestamp = int(stamp)
        except (TypeError, ValueError):
            pass
    else:
        error_file = NO_ERROR_FILE
    if not message:
        if exitcode < 0:
            name = signal_name(-exitcode)
            message = f"Signal {-exitcode}{f' ({name})' if name else ''} received by PID {pid}"
        else:
            message = ("no error file: decorate the script's main() with "
                       "torch.distributed.elastic.multiprocessing.errors.record to get its traceback here")
    return Failure(rank, local_rank, pid, exitcode, error_file, message, traceback, timestamp)


def format_failures(title: str, root: Failure, others: Sequence[Failure]) -> str:
    """torchrun's ChildFailedError report: the other failures, then the root cause (first observed)."""
    def block(i: int, f: Failure) -> str:
        when = time.strftime("%Y-%m-%d_%H:%M:%S", time.localtime(f.timestamp))
        sig = f" ({f.signal_name})" if f.signal_name else ""
        text = (f.traceback or f.message).rstrip("\n").replace("\n", "\n  ")
        return (f"[{i}]:\n  time      : {when}\n  host      : {socket.getfqdn()}\n"
                f"  rank      : {f.rank} (local_rank: {f.local_rank})\n"
                f"  exitcode  : {f.exitcode} (pid: {f.pid}){sig}\n  error_file: {f.error_file}\n"
                f"  traceback : {text}")

    blocks = [block(i + 1, f) for i, f in enumerate(others)]
    width = min(max([len(title)] + [len(line) for b in blocks + [block(0, root)] for line in b.split("\n")]), 60)
    return "\n".join([
        "=" * width, title, "-" * width, "Failures:", "\n".join(blocks) or "  <NO_OTHER_FAILURES>", "-" * width,
        "Root Cause (first observed failure):", block(0, root), "=" * width])


def report(err: TextIO, script: str, failures: Sequence[Failure], when: str, run_dir: str) -> None:
    """torchrun's report of the failed workers (the first the root cause), and where their logs are."""
    root = failures[0]
    print(format_failures(f"{script} FAILED", root, failures[1:]), file=err)
    print(f"topo run: rank {root.rank} (local rank {root.local_rank}) failed with {describe_code(root.exitcode)}"
          f"{when}; logs and error files under {run_dir}", file=err, flush=True)
