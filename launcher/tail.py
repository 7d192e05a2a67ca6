"""Copy the workers' log files to the console as they grow, each line prefixed with its process.
Each file is opened, read on from the last offset and closed (one descriptor for any number of
logs). A line without its newline is held back for one poll, then written: pdb's prompt has none.
A poll reads at most READ_LIMIT bytes of each file, so a worker that floods its log cannot make the
launcher hold it all in memory; the rest comes on the next polls."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence, TextIO

READ_LIMIT = 1 << 20


@dataclass
class _Follower:
    prefix: str
    path: str
    out: TextIO
    offset: int = 0
    pending: bytes = b""  # a partial line waiting for its newline
    pending_polls: int = 0
    at_line_start: bool = True


class LogTailer:
    def __init__(self, sources: Sequence[tuple[str, str, TextIO]]):
        """`sources`: (prefix, log path, stream) triples (torchrun: stderr.log to stderr)."""
        self.followers = [_Follower(*source) for source in sources]
        self.console_gone = False  # `topo launch ... | head` closed the pipe: the logs still have it all

    def pump(self, final: bool = False) -> None:
        """Write what the files gained since the last call; `final` reads them to their ends and
        flushes partial lines."""
        while self._poll(final) and final:
            pass

    def _poll(self, final: bool) -> bool:
        """One read of each file; whether any had more."""
        wrote, grew = {}, False
        for f in self.followers:
            try:
                with open(f.path, "rb") as fh:
                    fh.seek(f.offset)
                    data = fh.read(READ_LIMIT)
            except FileNotFoundError:
                data = b""
            f.offset += len(data)
            grew = grew or bool(data)
            if data:
                f.pending += data
                f.pending_polls = 0
            elif f.pending:
                f.pending_polls += 1
            if not f.pending:
                continue
            complete, newline, rest = f.pending.rpartition(b"\n")
            text = complete + newline
            if rest and ((final and not data) or f.pending_polls >= 1 or len(rest) >= READ_LIMIT):
                text, rest = text + rest, b""
            if text and not self.console_gone and self._write(f, text):
                wrote[id(f.out)] = f.out
            f.pending = rest
        for out in wrote.values():
            try:
                out.flush()
            except (OSError, ValueError):
                self.console_gone = True
        return grew

    def _write(self, f: _Follower, data: bytes) -> bool:
        text = data.decode("utf-8", errors="replace")
        body = text.removesuffix("\n")  # no prefix after the last newline: the next line may not come
        prefixed = (f.prefix if f.at_line_start else "") + body.replace("\n", "\n" + f.prefix) + text[len(body):]
        f.at_line_start = text.endswith("\n")
        try:
            f.out.write(prefixed)
        except (OSError, ValueError):  # a closed pipe or stream
            self.console_gone = True
            return False
        return True
