"""Text that came from a machine or a file (model names, device names, a loaded file's keys), made
safe to print on a terminal: printed raw, an ESC or BEL starts a terminal command, a CR overwrites
the line, and a bidi override reorders what the reader sees. `printable` escapes them as a repr
does (``\\x1b``, ``\\u202e``), and what no UTF-8 output can carry: a lone surrogate (a name that was
not UTF-8, read with surrogateescape: byte 0xff shows as ``\\xff``) and U+FFFE, U+FFFF.
"""

import re


# C0 controls, DEL, C1 controls (U+0080-U+009F), the line and paragraph separators, the
# bidirectional marks, embeddings, overrides and isolates, surrogates and the two noncharacters.
_OTHERS = "\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff\ufffe\uffff"
_UNSAFE = re.compile(f"[\x00-\x1f{_OTHERS}]")
_UNSAFE_BUT_NEWLINE = re.compile(f"[\x00-\x09\x0b-\x1f{_OTHERS}]")


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    if 0xdc80 <= code <= 0xdcff:  # a byte surrogateescape kept
        code -= 0xdc00
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str, *, lines: bool = False) -> str:
    """`text` with every control character and bidi control escaped; with `lines`, newlines are
    kept (a report of several lines), else they are escaped too (one line stays one line)."""
    pattern = _UNSAFE_BUT_NEWLINE if lines else _UNSAFE
    return pattern.sub(_escape, text)
