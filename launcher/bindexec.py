"""Bind this process, then exec a command: the prefix `launcher.spawn.bound_argv` puts before a
child's argv, so the command starts bound (CPU affinity and memory policy survive exec).

    python -m topo.launcher.bindexec [--bind-fallback] [--env=NAME=VALUE...] cpus=0-3 memory=bind:0 -- COMMAND...

The binding is written as TOPO_BINDING is, and the command gets TOPO_BINDING set to what held.
Exit status as a shell's: 1 when the kernel refuses the binding, 2 for a malformed one, 126 when
the command cannot be executed, 127 when it is not found. It imports only topo's syscalls and
binding record: it runs before each child's own interpreter.
"""

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
    cut = args.index("--")
    options, command = args[:cut], args[cut + 1:]
    if not command:
        raise ParseError(f"no command after '--'; {USAGE}")
    fallback = "--bind-fallback" in options
    env = {}
    for option in options:
        if option.startswith("--env="):
            name, sep, value = option.removeprefix("--env=").partition("=")
            if not sep or not name.isidentifier():
                raise ParseError(f"{option[:80]!r} is not --env=NAME=VALUE")
            env[name] = value
    binding = Binding.from_env(" ".join(o for o in options if o != "--bind-fallback" and not o.startswith("--env=")))
    return binding, fallback, env, command


def main(args: list[str]) -> int:
    try:
        binding, fallback, additions, command = parse(args)
    except ParseError as exc:
        print(f"topo: error: {exc}", file=sys.stderr)
        return 2
    try:
        held = syscalls.apply(binding, fallback=fallback)
    except TopoError as exc:
        print(f"topo: error: {exc}", file=sys.stderr)
        return 1
    if held != binding:
        print(f"topo: the kernel refused the memory policy of {binding.describe()}; --bind-fallback: "
              f"{held.describe()}", file=sys.stderr)
    env = {**os.environ, **additions}
    if held.is_bound:
        env[BINDING_VAR] = held.env_value()
    else:
        env.pop(BINDING_VAR, None)
    try:
        os.execvpe(command[0], command, env)
    except OSError as exc:
        print(f"topo: error: {command[0]}: {exc.strerror}", file=sys.stderr)
        return 127 if exc.errno == errno.ENOENT else 126
    return 1  # not reached: execvpe returns only by raising


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
