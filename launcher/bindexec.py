"""Bind this process, then exec a command: the prefix `launcher.spawn.bound_argv` puts before a
child's argv (affinity and memory policy survive exec). It imports only topo's syscalls and binding
record: it runs before each child's own interpreter.

    python -m topo.launcher.bindexec [--bind-fallback] [--env=NAME=VALUE...] cpus=0-3 memory=bind:0 -- COMMAND...
    python -m topo.launcher.bindexec --local-rank=R --rank=0 cpus=0-3 --rank=1 cpus=4-7 -- COMMAND...

The binding is written as TOPO_BINDING is; the command gets TOPO_BINDING set to what held. In the
second form (one argv for every worker, R filled in by torch's agent) rank R takes the options after
its `--rank=R`. Exit status as a shell's: 1 refused, 2 malformed, 126 not executable, 127 not found."""

from __future__ import annotations

import errno
import os
import sys

from topo import syscalls
from topo.binding import BINDING_VAR, Binding
from topo.errors import ParseError, TopoError

USAGE = ("usage: python -m topo.launcher.bindexec [--bind-fallback] [--env=NAME=VALUE...] [cpus=LIST] "
         "[memory=POLICY:NODES] -- COMMAND [ARG...]")


def parse(args: list[str]) -> tuple[Binding, bool, dict[str, str], list[str]]:
    """(binding, fallback, environment additions, command) from the command line."""
    if "--" not in args:
        raise ParseError(f"no '--' before the command; {USAGE}")
    options, command = _for_local_rank(args[:args.index("--")]), args[args.index("--") + 1:]
    if not command:
        raise ParseError(f"no command after '--'; {USAGE}")
    env, words = {}, []
    for option in options:
        if option.startswith("--env="):
            name, sep, value = option.removeprefix("--env=").partition("=")
            if not sep or not name.isidentifier():
                raise ParseError(f"{option[:80]!r} is not --env=NAME=VALUE")
            env[name] = value
        elif option != "--bind-fallback":
            words.append(option)
    return Binding.from_env(" ".join(words)), "--bind-fallback" in options, env, command


def _for_local_rank(options: list[str]) -> list[str]:
    """`--local-rank=R [COMMON...] --rank=0 OPTIONS... --rank=1 OPTIONS...` as local rank R's
    `COMMON... OPTIONS...`; any other options as they are."""
    if not options or not options[0].startswith("--local-rank="):
        return options
    mine, kept, current, found = _rank(options[0]), [], None, False
    for option in options[1:]:
        if option.startswith("--rank="):
            current = _rank(option)
            found = found or current == mine
        elif current in (None, mine):  # the common options come first
            kept.append(option)
    if not found:
        raise ParseError(f"{options[0]}: no --rank={mine} gives this local rank its binding")
    return kept


def _rank(option: str) -> int:
    text = option.partition("=")[2]
    if not (text.isascii() and text.isdigit() and len(text) <= 9):
        raise ParseError(f"{option[:40]!r} is not a local rank")
    return int(text)


def main(args: list[str]) -> int:
    try:
        binding, fallback, additions, command = parse(args)
        held = syscalls.apply(binding, fallback=fallback)
    except TopoError as exc:
        print(f"topo: error: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, ParseError) else 1
    if held != binding:
        print(f"topo: the kernel refused the memory policy of {binding.describe()}; --bind-fallback: "
              f"{held.describe()}", file=sys.stderr)
    env = {**os.environ, **additions, BINDING_VAR: held.env_value()}
    if not held.is_bound:
        del env[BINDING_VAR]
    try:
        os.execvpe(command[0], command, env)
    except OSError as exc:
        print(f"topo: error: {command[0]}: {exc.strerror}", file=sys.stderr)
        return 127 if exc.errno == errno.ENOENT else 126
    return 1  # not reached: execvpe returns only by raising


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
