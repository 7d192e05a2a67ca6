"""Bind this process, then exec a command: the prefix `launcher.spawn.bound_argv` puts before a
child's argv, so the command starts bound (CPU affinity and memory policy survive exec).

    python -m launcher.bindexec [--bind-fallback] cpus=0-3 memory=bind:0 -- COMMAND [ARG...]

The binding is written as TOPO_BINDING is (planners.binding): `cpus=LIST`, `memory=POLICY:NODES`
or `memory=local`, only the parts to bind. The command gets TOPO_BINDING set to what held, so a
`set_affinity` inside it keeps that binding. With --bind-fallback a refused memory policy walks
syscalls.apply_memory_policy's ladder (bind, preferred, CPUs alone) and says on stderr which rung
held. Exit status as a shell's: 1 when the kernel refuses the binding, 2 for a malformed binding,
126 when the command cannot be executed, 127 when it is not found. Imports only topo.cpuset and
topo.syscalls: it runs once per child, before the child's own interpreter.
"""

from __future__ import annotations

import errno
import os
import sys

from topo import syscalls
from topo.cpuset import CpuSet
from topo.errors import ParseError, TopoError

USAGE = "usage: python -m launcher.bindexec [--bind-fallback] [cpus=LIST] [memory=POLICY:NODES] -- COMMAND [ARG...]"
BINDING_VAR = "TOPO_BINDING"  # planners.binding.BINDING_VAR, not imported: this module stays light


def parse(args: list[str]) -> tuple[CpuSet | None, str | None, CpuSet, bool, list[str]]:
    """(CPUs, memory policy, its nodes, fallback, command) from the command line."""
    if "--" not in args:
        raise ParseError(f"no '--' before the command; {USAGE}")
    cut = args.index("--")
    options, command = args[:cut], args[cut + 1:]
    if not command:
        raise ParseError(f"no command after '--'; {USAGE}")
    cpus = policy = None
    nodes, fallback = CpuSet(), False
    for option in options:
        key, sep, value = option.partition("=")
        if option == "--bind-fallback":
            fallback = True
        elif key == "cpus" and sep and cpus is None:
            cpus = CpuSet.parse(value)
            if not cpus:
                raise ParseError(f"{option!r} names no CPU")
        elif key == "memory" and sep and policy is None:
            policy, _, node_text = value.partition(":")
            if policy not in ("bind", "preferred", "local") or (policy != "local") != bool(node_text):
                raise ParseError(f"{option!r} is not memory=bind:NODES, memory=preferred:NODES or memory=local")
            nodes = CpuSet.parse(node_text) if node_text else CpuSet()
        else:
            raise ParseError(f"unexpected {option[:80]!r}; {USAGE}")
    return cpus, policy, nodes, fallback, command


def bind(cpus: CpuSet | None, policy: str | None, nodes: CpuSet, fallback: bool) -> str:
    """Apply the binding to this thread (the process before exec); return TOPO_BINDING's value for
    what held. SyscallError when the kernel refuses it and `fallback` cannot help."""
    parts = []
    if policy is not None:
        rung = syscalls.apply_memory_policy(policy, nodes, fallback=fallback, option="--bind-fallback")
        if rung != policy:
            held = f"memory preferred on {nodes}" if rung == "preferred" else "CPUs only, memory policy unchanged"
            print(f"topo: memory policy {policy} on {nodes or 'the local node'} refused; --bind-fallback: {held}",
                  file=sys.stderr)
        if rung == "local":
            parts.append("memory=local")
        elif rung in ("bind", "preferred"):
            parts.append(f"memory={rung}:{nodes}")
    if cpus is not None:
        try:
            os.sched_setaffinity(0, cpus)
        except OSError as exc:
            raise syscalls.SyscallError("sched_setaffinity", exc.errno, f"CPUs {cpus}") from None
        parts.insert(0, f"cpus={cpus}")
    return " ".join(parts)


def main(args: list[str]) -> int:
    try:
        cpus, policy, nodes, fallback, command = parse(args)
    except ParseError as exc:
        print(f"topo: error: {exc}", file=sys.stderr)
        return 2
    try:
        held = bind(cpus, policy, nodes, fallback)
    except TopoError as exc:
        print(f"topo: error: {exc}", file=sys.stderr)
        return 1
    env = dict(os.environ)
    if held:
        env[BINDING_VAR] = held
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
