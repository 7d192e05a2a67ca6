"""A group of processes started together and stopped together: start, pids, signal with a grace
period, reap, and nothing left behind.

It knows nothing about msrun or torchrun: a caller hands it `ProcessSpec`s (argv, environment, log
file, binding) and gets processes. How each process is contained:

- it starts its own session (`start_new_session`), so it and whatever it forks are found by the
  session id, and a signal reaches its children too, not only the process we started;
- with `die_with_launcher`, the child asks the kernel for SIGKILL when the launcher dies
  (PR_SET_PDEATHSIG, set before exec and kept across the numactl / taskset exec), so even a
  SIGKILLed launcher leaves no process of its own behind. The signal follows the *thread* that
  forked the child: the group must be started and kept by one long-lived thread. util-linux's
  `setpriv --pdeathsig KILL --` in front of the argv sets it when installed: the child is then
  spawned with vfork, while a Python function between fork and exec (the fallback, and what a
  directly applied binding needs anyway) makes every spawn wait for a full fork of the launcher
  and for the child to be scheduled, about 15 ms per process on a loaded 2-CPU machine. Unlike
  the fallback, setpriv cannot check that the launcher did not die in the instant before it asked;
- with `adopt_orphans`, the launcher is a child subreaper (PR_SET_CHILD_SUBREAPER): a grandchild
  that daemonises out of its session is re-parented to the launcher instead of init, and is
  stopped with the rest;
- every child carries `JOB_ID_VAR` in its environment, which its own children inherit: `topo stop`
  finds a detached job's daemons by it after the launcher is gone (the process-tree marker Jenkins'
  ProcessTreeKiller uses; no cgroup needed).

A binding whose tool (numactl, taskset) is missing is applied in the child between fork and exec
with the same system calls (sched_setaffinity, set_mempolicy). A refusal is written to the
process's log in numactl's words and the child exits 1, so it is detected like numactl's own.
"""

from __future__ import annotations

import ctypes
import functools
import os
import re
import resource
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Mapping, Sequence

from topo.launcher.binding import UNBOUND, Binding
from topo import syscalls
from topo.binding import BINDING_VAR
from topo.cpuset import CpuSet
from topo.launcher.files import open_log
from topo.errors import TopoError
from topo.syscalls import prctl

JOB_ID_VAR = "TOPO_JOB_ID"
INHERIT = "<inherit>"  # ProcessSpec.stderr_path: the launcher's own stderr, while stdout goes to log_path
POLL_INTERVAL = 0.005  # s, while stopping: how often the group is re-scanned
_PR_SET_CHILD_SUBREAPER, _PR_GET_CHILD_SUBREAPER = 36, 37
# descriptors the launcher needs at once: 3 standard streams, a log file being opened, the exec
# error pipe of subprocess, one log being tailed, launch.json, and room for Python itself
FDS_NEEDED = 16


class LaunchError(TopoError):
    """The job could not be started as asked (a binding refused or not taking, a child that cannot exec)."""


@dataclass(frozen=True)
class ProcessSpec:
    """One process to start.

    `argv` is what msrun would run (binding prefix included); the process actually execs
    `exec_argv`, which drops the prefix when the binding is applied directly."""

    name: str  # "rank 0", "scheduler", "local rank 3"
    argv: tuple[str, ...]
    env: Mapping[str, str]  # added to / replacing the group's base environment
    log_path: str | None  # stdout and stderr go here; None: the launcher's own
    binding: Binding = UNBOUND
    direct: Binding | None = None  # the binding, applied with system calls in the child (its tool is missing)
    role: str = "worker"
    rank: int | None = None  # global rank, when known
    local_rank: int | None = None
    tail: bool = False  # the log is copied to the console under --join
    stderr_path: str | None = None  # stderr's own file; None: with stdout; INHERIT: the launcher's stderr
    tail_prefix: str | None = None  # before each tailed line; None: "[<name>] "

    @property
    def command(self) -> tuple[str, ...]:
        """argv without the binding prefix: what runs in the end."""
        return self.argv[len(self.binding.prefix):]

    @property
    def exec_argv(self) -> tuple[str, ...]:
        return self.command if self.direct is not None else self.argv

    def full_env(self, base: Mapping[str, str]) -> dict[str, str]:
        env = dict(base)
        env.update(self.env)
        return env


@dataclass
class Process:
    """A started process and what is known about it."""

    spec: ProcessSpec
    popen: subprocess.Popen
    direct: Binding | None
    argv: tuple[str, ...]  # what was exec'd, after the shim
    shim: tuple[str, ...] = ()  # setpriv --pdeathsig KILL --, exec'd first
    create_time: float | None = None  # psutil's, for telling a reused pid apart
    observed: object = None  # launcher.verify.Observed, once read
    status: str = ""  # "verified", "not bound", ...
    applied: Binding | None = None  # what the check found applied (None: as the spec asked)

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def binding(self) -> Binding:
        return self.spec.binding


@dataclass
class ProcessGroup:
    """Start `specs` in order; stop them all with one deadline; reap what they leave."""

    specs: Sequence[ProcessSpec]
    base_env: Mapping[str, str]
    job_id: str
    inherit_stdin: bool = False  # --join=True: workers share our stdin (pdb)
    die_with_launcher: bool = False
    adopt_orphans: bool = False
    bind_fallback: bool = False  # a refused memory policy walks the ladder in the child (bind, preferred, CPUs alone)
    processes: list[Process] = field(default_factory=list)
    _subreaper_before: int | None = None
    _shim: tuple[str, ...] | None = None
    _children_before: frozenset[int] = frozenset()

    # ---------------------------------------------------------------- start
    def start(self, on_start: Callable[[Process], None] | None = None) -> None:
        """Start every spec in order. On any failure, stop what was started and raise."""
        if self.adopt_orphans:
            self._become_subreaper()
        try:
            for spec in self.specs:
                proc = self.start_one(spec)
                self.processes.append(proc)
                if on_start is not None:
                    on_start(proc)
        except BaseException:
            self.stop(signal.SIGTERM, 1.0)
            raise

    def start_one(self, spec: ProcessSpec, *, direct: Binding | None = ..., argv=None,
                  log_mode: str = "w") -> Process:
        """Start one process; `direct`/`argv` override the spec's (a restart with less binding)."""
        direct = spec.direct if direct is ... else direct
        argv = tuple(argv) if argv is not None else (spec.command if direct is not None else spec.argv)
        env = spec.full_env(self.base_env)
        env[JOB_ID_VAR] = self.job_id
        bound = direct if direct is not None else (spec.binding if argv[:len(spec.binding.prefix)] == spec.binding.prefix
                                                   else UNBOUND)
        if direct is not None and self.bind_fallback:
            bound = held_binding(direct)  # the child walks the same ladder: TOPO_BINDING tells what holds
        if bound.is_bound:
            env[BINDING_VAR] = bound.env_value()  # what set_affinity keeps (planners.binding)
        shim: tuple[str, ...] = ()
        if self.die_with_launcher and direct is None:
            shim = self._death_shim()
        setup = _child_setup(os.getpid() if self.die_with_launcher and not shim else None, direct, self.bind_fallback)
        log = err = None
        try:
            log = open_log(spec.log_path, log_mode) if spec.log_path else None
            err = open_log(spec.stderr_path, log_mode) if spec.stderr_path not in (None, INHERIT) else None
        except OSError as exc:
            if log is not None:
                log.close()
            raise LaunchError(f"cannot open the log of {spec.name}, {exc.filename}: {exc.strerror}; "
                              "remove it or give another log directory") from None
        stderr = err if err is not None else (subprocess.STDOUT if log and spec.stderr_path is None else None)
        try:
            popen = subprocess.Popen(
                (*shim, *argv), env=env, stdout=log, stderr=stderr,
                stdin=None if self.inherit_stdin else subprocess.DEVNULL,
                start_new_session=True, close_fds=True, preexec_fn=setup,
            )
        except OSError as exc:
            raise LaunchError(f"cannot start {argv[0]!r}, {spec.name}: {exc.strerror or exc}; "
                              "check --python and PATH") from None
        finally:
            for fh in (log, err):
                if fh is not None:
                    fh.close()
        return Process(spec, popen, direct, argv, shim)

    def _death_shim(self) -> tuple[str, ...]:
        """`setpriv --pdeathsig KILL --` when this system's setpriv has the option, else ()."""
        if self._shim is None:
            setpriv = shutil.which("setpriv", path=self.base_env.get("PATH", os.defpath))
            self._shim = (setpriv, "--pdeathsig", "KILL", "--") if setpriv and has_pdeathsig(setpriv) else ()
        return self._shim

    def replace(self, index: int, proc: Process) -> None:
        self.processes[index] = proc

    # ---------------------------------------------------------------- state
    def pids(self) -> list[int]:
        return [p.pid for p in self.processes]

    def poll(self) -> list[int | None]:
        return [p.popen.poll() for p in self.processes]

    def job_pids(self) -> set[int]:
        """Every live process of the job: our children's sessions, plus orphans re-parented to us."""
        import psutil  # ~12 ms to import: only when a process of the job may still be alive

        sessions = set(self.pids())
        me = os.getpid() if self._subreaper_before is not None else None
        found = set()
        for proc in psutil.process_iter(["ppid", "status"]):
            info = proc.info
            if info["status"] == psutil.STATUS_ZOMBIE or info["ppid"] is None:
                continue
            pid = proc.pid
            if info["ppid"] == me and pid not in self._children_before:
                found.add(pid)
                continue
            try:
                if os.getsid(pid) in sessions:
                    found.add(pid)
            except OSError:
                continue
        return found

    def alive(self) -> set[int]:
        self.poll()  # reap finished children so they stop looking alive
        self._reap_orphans()
        if self._nothing_left():
            return set()
        return self.job_pids()

    def _nothing_left(self) -> bool:
        """True when no process of the job can exist, known without scanning /proc: every child
        we started has exited, and, as subreaper, we have no child at all (every descendant that
        lost its parent would have been re-parented to us)."""
        if self._subreaper_before is None or self._children_before:
            return False
        if any(code is None for code in self.poll()):
            return False
        try:
            os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return True
        return False

    # ---------------------------------------------------------------- stop
    def signal(self, sig: int, pids: set[int] | None = None) -> None:
        for pid in self.job_pids() if pids is None else pids:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def stop(self, sig: int, grace: float, *, tick: Callable[[], None] | None = None,
             force: Callable[[], bool] = lambda: False, say: Callable[[str], None] | None = None) -> None:
        """Send `sig` to every process of the job (sessions, re-parented orphans), wait up to
        `grace` seconds for all of them, then SIGKILL what is left. One deadline for all.
        `tick` runs on every poll (log tailing), `force()` cuts the grace period short."""
        deadline = time.monotonic() + grace
        alive = self.alive()
        signaled: set[int] = set()
        while alive and time.monotonic() < deadline and not force():
            # each process once; a daemon shows up only after its parent died and it was
            # re-parented to us, a child forked meanwhile on the next scan
            self.signal(sig, alive - signaled)
            signaled |= alive
            if tick is not None:
                tick()
            time.sleep(POLL_INTERVAL)
            alive = self.alive()
        if alive:
            names = [p.name for p in self.processes if p.popen.poll() is None]
            if names and say is not None:
                say(f"{', '.join(names)} still running after {grace:g} s; sending SIGKILL")
            give_up = time.monotonic() + 10
            while alive and time.monotonic() < give_up:
                self.signal(signal.SIGKILL, alive)
                time.sleep(POLL_INTERVAL)
                alive = self.alive()
        for p in self.processes:
            try:
                p.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:  # unkillable (D state); nothing more we can do
                if say is not None:
                    say(f"{p.name} (pid {p.pid}) did not die after SIGKILL")
        self._reap_orphans()

    def close(self) -> None:
        """Stop being a subreaper (the launcher may be a library call in a longer program)."""
        if self._subreaper_before == 0:
            prctl(_PR_SET_CHILD_SUBREAPER, 0)
        self._subreaper_before = None

    # ---------------------------------------------------------------- subreaper
    def _become_subreaper(self) -> None:
        self._children_before = frozenset(_children())
        value = ctypes.c_int(0)
        try:
            prctl(_PR_GET_CHILD_SUBREAPER, ctypes.addressof(value))
            prctl(_PR_SET_CHILD_SUBREAPER, 1)
        except (OSError, TopoError):  # not Linux: sessions alone must do
            return
        self._subreaper_before = value.value

    def _reap_orphans(self) -> None:
        """waitpid() the re-parented grandchildren (Popen reaps only its own)."""
        if self._subreaper_before is None:
            return
        ours = set(self.pids()) | self._children_before
        while True:
            try:
                info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return
            if info is None or info.si_pid in ours:
                return  # nothing exited, or one of ours that Popen reaps itself
            try:
                os.waitpid(info.si_pid, os.WNOHANG)
            except ChildProcessError:
                return


def _children() -> list[int]:
    """This process's children (a host program's own, when launch() is a library call); asking
    the kernel whether there are any at all spares importing psutil in the usual case."""
    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return []
    import psutil

    return [child.pid for child in psutil.Process().children()]


@functools.cache
def has_pdeathsig(setpriv: str) -> bool:
    """Whether this `setpriv` has --pdeathsig (util-linux 2.33 and later), as its --help lists its
    options; asked once per launcher."""
    try:
        shown = subprocess.run([setpriv, "--help"], capture_output=True, text=True, timeout=10,
                               stdin=subprocess.DEVNULL).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return "--pdeathsig" in shown


def raise_open_file_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit; the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    return soft


def check_open_file_limit(needed: int = FDS_NEEDED) -> None:
    """LaunchError unless the launcher can open the descriptors it needs at once (the count does
    not grow with the job: logs are opened one at a time)."""
    soft = raise_open_file_limit()
    in_use = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else 3
    if soft != -1 and soft - in_use < needed:
        raise LaunchError(f"too few file descriptors, open-file limit {soft} with {in_use} in use: "
                          f"the launcher needs {needed} more; raise it (ulimit -n)")


# what a child whose memory policy fell back writes to its log; the supervisor reads the rung back
FALLBACK_LINE = "topo: --bind-fallback: the kernel refused memory policy {asked}; held: {rung}"
_FALLBACK = re.compile(r"--bind-fallback: the kernel refused memory policy (\w+); held: (\w+)")


def fallback_rung(log_text: str) -> str | None:
    """The rung of the memory-policy ladder a child's log says held ("preferred", or "none": CPUs
    alone), or None when the policy was applied as asked."""
    m = _FALLBACK.search(log_text)
    return m.group(2) if m else None


def held_binding(binding: Binding) -> Binding:
    """What the kernel keeps of `binding` down the --bind-fallback ladder (bind, preferred, CPUs
    alone), asked in a short-lived thread of the launcher: a thread's memory policy ends with it."""
    if binding.memory_policy is None:
        return binding
    rung: list[str] = []

    def probe() -> None:
        try:
            rung.append(syscalls.apply_memory_policy(binding.memory_policy, binding.memory_nodes or CpuSet(),
                                                     fallback=True))
        except TopoError:  # the child meets it too, and says why
            pass

    thread = threading.Thread(target=probe, name="topo-mempolicy-probe")
    thread.start()
    thread.join()
    if not rung or rung[0] == binding.memory_policy:
        return binding
    if rung[0] == "none":
        return binding.without_memory()
    return replace(binding, memory_policy=rung[0])


def _child_setup(launcher_pid: int | None, direct: Binding | None, bind_fallback: bool):
    """The function run in the child between fork and exec. It must not import or allocate much:
    everything it calls is bound here, in the parent."""
    if launcher_pid is None and direct is None:
        return None
    set_pdeathsig = syscalls.set_pdeathsig
    apply_memory_policy = syscalls.apply_memory_policy
    syscalls.load()  # libc and the syscall numbers, resolved before fork
    cpus = None if direct is None or direct.cpus is None else frozenset(direct.cpus)
    nodes = CpuSet() if direct is None or direct.memory_nodes is None else direct.memory_nodes

    def fail(text: str) -> None:
        os.write(2, f"topo: {text}\n".encode())
        os._exit(1)

    def setup() -> None:
        if launcher_pid is not None:
            set_pdeathsig(signal.SIGKILL)
            if os.getppid() != launcher_pid:  # the launcher died before we asked
                os._exit(1)
        if direct is None:
            return
        if cpus is not None:
            try:
                os.sched_setaffinity(0, cpus)
            except OSError as exc:
                fail(f"sched_setaffinity: {exc.strerror} (CPUs {direct.cpus})")
        if direct.memory_policy is not None:
            try:  # with --bind-fallback, a refused MPOL_BIND tries MPOL_PREFERRED, then CPUs alone
                rung = apply_memory_policy(direct.memory_policy, nodes, fallback=bind_fallback)
            except Exception as exc:  # noqa: BLE001 - anything raised here would lose its message
                fail(str(exc))
            if rung != direct.memory_policy:
                os.write(2, (FALLBACK_LINE.format(asked=direct.memory_policy, rung=rung) + "\n").encode())

    return setup
