"""Processes started and stopped together, nothing left behind. Each starts its own session and
carries JOB_ID_VAR, which its children inherit (`topo stop` finds a detached job's daemons by it).
With `join`, each child gets SIGKILL when the launcher's thread dies (PR_SET_PDEATHSIG) and the
launcher is a child subreaper, so a daemonising grandchild is stopped with the rest. A binding by
system calls is applied between fork and exec; a refusal goes to the log and the child exits 1."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import resource
import signal
import subprocess
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from topo import syscalls
from topo.binding import BINDING_VAR, Binding, Observed
from topo.errors import TopoError
from topo.launcher.binding import UNBOUND
from topo.launcher.files import JOB_ID_VAR, open_log
from topo.syscalls import prctl

INHERIT = "<inherit>"  # ProcessSpec.stderr_path: the launcher's own stderr, while stdout goes to log_path
POLL_INTERVAL = 0.005  # s: a trivial job's end is noticed, and a stopping one re-scanned, within this (msrun: 1 s)
_PR_SET_CHILD_SUBREAPER, _PR_GET_CHILD_SUBREAPER = 36, 37
# descriptors the launcher needs at once: 3 standard streams, a log being opened, subprocess's exec
# error pipe, a log being tailed, launch.json, and room for Python itself
FDS_NEEDED = 16


class LaunchError(TopoError):
    """The job could not be started as asked (a binding refused or not taking, a child that cannot exec)."""


@dataclass(frozen=True)
class ProcessSpec:
    """One process to start: `argv` is what msrun would run, the binding's prefix included."""

    name: str  # "rank 0", "scheduler", "local rank 3"
    argv: tuple[str, ...]
    env: Mapping[str, str]  # added to / replacing the group's base environment
    log_path: str | None  # stdout and stderr go here; None: the launcher's own
    binding: Binding = UNBOUND
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


def exec_argv(spec: ProcessSpec, binding: Binding) -> tuple[str, ...]:
    """`spec`'s command through `binding`'s tool, or alone when applied by system calls (or unbound)."""
    return (*binding.prefix, *spec.command) if binding.prefix and not binding.direct else spec.command


@dataclass
class Process:
    """A started process and what is known about it."""

    spec: ProcessSpec
    popen: subprocess.Popen
    binding: Binding  # what this start applies: the spec's, or less of it after --bind-fallback
    argv: tuple[str, ...]  # what was exec'd
    log_start: int = 0  # where this start's output begins in the log (a restart appends)
    create_time: float | None = None  # psutil's, for telling a reused pid apart
    observed: Observed | None = None  # once read
    status: str = ""  # "verified", "not bound", ...

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def name(self) -> str:
        return self.spec.name


@dataclass
class ProcessGroup:
    """Start `specs` in order; stop them all with one deadline; reap what they leave. With `join`
    (--join=True) as the module says, and the children share our stdin (pdb)."""

    specs: Sequence[ProcessSpec]
    base_env: Mapping[str, str]
    job_id: str
    join: bool = False
    processes: list[Process] = field(default_factory=list)
    _subreaper_before: int | None = None
    _children_before: frozenset[int] = frozenset()

    def start(self, on_start: Callable[[Process], None], stopping: Callable[[], bool]) -> None:
        """Start the specs in order, none once `stopping()`; on any failure, stop what started and raise."""
        if self.join:  # as subreaper; not Linux: sessions alone must do
            if _exited_child() is not None:  # a host program's children (launch() as a library call)
                import psutil

                self._children_before = frozenset(child.pid for child in psutil.Process().children())
            value = ctypes.c_int(0)
            with contextlib.suppress(OSError, TopoError):
                prctl(_PR_GET_CHILD_SUBREAPER, ctypes.addressof(value))
                prctl(_PR_SET_CHILD_SUBREAPER, 1)
                self._subreaper_before = value.value
        try:
            for spec in self.specs:
                if stopping():
                    return
                self.processes.append(self.start_one(spec))
                on_start(self.processes[-1])
        except BaseException:
            self.stop(signal.SIGTERM, 1.0)
            raise

    def start_one(self, spec: ProcessSpec, binding: Binding | None = None, log_mode: str = "x") -> Process:
        """Start one process, bound as `binding` (default: its spec's; a restart binds less)."""
        binding = spec.binding if binding is None else binding
        argv = exec_argv(spec, binding)
        env = {**self.base_env, **spec.env, JOB_ID_VAR: self.job_id}
        if binding.is_bound:
            env[BINDING_VAR] = binding.env_value()  # what holds once it runs: set_affinity keeps it
        # a preexec function makes the spawn a full fork of the launcher, not a vfork (8 spawns on a
        # loaded 2-CPU VM: ~40 ms, not ~11): the price of a death signal armed and checked before exec
        setup = _child_setup(os.getpid() if self.join else None, binding if binding.direct else None)
        with contextlib.ExitStack() as files:
            try:
                log = files.enter_context(_open_log(spec.log_path, log_mode)) if spec.log_path else None
                err = (files.enter_context(_open_log(spec.stderr_path, log_mode))
                       if spec.stderr_path not in (None, INHERIT) else None)
            except OSError as exc:
                raise LaunchError(f"cannot open the log of {spec.name}, {exc.filename}: {exc.strerror}; "
                                  "remove it or give another log directory") from None
            log_start = log.tell() if log is not None else 0
            stderr = err if err is not None else (subprocess.STDOUT if log and spec.stderr_path is None else None)
            try:
                popen = subprocess.Popen(argv, env=env, stdout=log, stderr=stderr,
                                         stdin=None if self.join else subprocess.DEVNULL,
                                         start_new_session=True, close_fds=True, preexec_fn=setup)
            except OSError as exc:
                raise LaunchError(f"cannot start {argv[0]!r}, {spec.name}: {exc.strerror or exc}; "
                                  "check --python and PATH") from None
        return Process(spec, popen, binding, argv, log_start)

    def job_pids(self) -> set[int]:
        """Every live process of the job: our children's sessions, plus orphans re-parented to us."""
        # psutil only when a process of the job may still be alive (benchmarks/launch_bench.py, N=8: ~10 ms)
        import psutil

        sessions = {p.pid for p in self.processes}
        me = os.getpid() if self._subreaper_before is not None else None
        found = set()
        for proc in psutil.process_iter(["ppid", "status"]):
            ppid, pid = proc.info["ppid"], proc.pid
            if proc.info["status"] == psutil.STATUS_ZOMBIE or ppid is None:
                continue
            with contextlib.suppress(OSError):  # gone: no session to read
                if ppid == me and pid not in self._children_before or os.getsid(pid) in sessions:
                    found.add(pid)
        return found

    def alive(self) -> set[int]:
        codes = [p.popen.poll() for p in self.processes]  # reap finished children so they stop looking alive
        self._reap_orphans()
        # as subreaper with no child at all, once every child we started has exited, no process of
        # the job can exist (an orphaned descendant would be our child): known without scanning /proc
        if self._subreaper_before is not None and not self._children_before and None not in codes \
                and _exited_child() is None:
            return set()
        return self.job_pids()

    def signal(self, sig: int, pids: set[int]) -> None:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)

    def stop(self, sig: int, grace: float, *, tick: Callable[[], None] = lambda: None,
             force: Callable[[], bool] = lambda: False, say: Callable[[str], None] = lambda text: None) -> None:
        """Send `sig` to every process of the job, wait up to `grace` seconds (one deadline for all),
        then SIGKILL what is left. `tick` runs on every poll (log tailing); `force()` ends the grace."""
        deadline = time.monotonic() + grace
        alive = self.alive()
        signaled: set[int] = set()
        while alive and time.monotonic() < deadline and not force():
            # each process once; a re-parented daemon or a child forked meanwhile shows up on a later scan
            self.signal(sig, alive - signaled)
            signaled |= alive
            tick()
            time.sleep(POLL_INTERVAL)
            alive = self.alive()
        if alive:
            names = [p.name for p in self.processes if p.popen.poll() is None]
            if names:
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
                say(f"{p.name} (pid {p.pid}) did not die after SIGKILL")
        self._reap_orphans()

    def close(self) -> None:
        """Stop being a subreaper (the launcher may be a library call in a longer program)."""
        if self._subreaper_before == 0:
            prctl(_PR_SET_CHILD_SUBREAPER, 0)
        self._subreaper_before = None

    def _reap_orphans(self) -> None:
        """waitpid() the re-parented grandchildren (Popen reaps only its own)."""
        if self._subreaper_before is None:
            return
        ours = {p.pid for p in self.processes} | self._children_before
        while (pid := _exited_child()) and pid not in ours:  # up to one of ours: Popen reaps it
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)


def _open_log(path: str, mode: str):
    """launcher.files.open_log, or /dev/null as it is (a rank whose output is not kept)."""
    return open(os.devnull, "w") if path == os.devnull else open_log(path, mode)


def _exited_child() -> int | None:
    """An exited child's pid, left unreaped; 0 when none has exited; None when there is no child."""
    try:
        info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return None
    return 0 if info is None else info.si_pid


def check_open_file_limit() -> None:
    """Raise the soft RLIMIT_NOFILE to the hard one; LaunchError unless FDS_NEEDED more can then be opened."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        soft = hard
    in_use = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else 3
    if soft != -1 and soft - in_use < FDS_NEEDED:
        raise LaunchError(f"too few file descriptors, open-file limit {soft} with {in_use} in use: "
                          f"the launcher needs {FDS_NEEDED} more; raise it (ulimit -n)")


def _child_setup(launcher_pid: int | None, binding: Binding | None):
    """The child's pre-exec function: the death signal, then `binding` by topo.syscalls.apply. It must
    not import or load anything: all it calls is bound here."""
    if launcher_pid is None and binding is None:
        return None
    syscalls.load()
    apply, set_death_signal = syscalls.apply, functools.partial(prctl, syscalls.PR_SET_PDEATHSIG, signal.SIGKILL)

    def setup() -> None:
        if launcher_pid is not None:
            set_death_signal()
            if os.getppid() != launcher_pid:  # the launcher died before we asked
                os._exit(1)
        if binding is not None:
            try:
                apply(binding)
            except Exception as exc:  # noqa: BLE001 - raised here, its message would be lost
                os.write(2, f"topo: {exc}\n".encode())
                os._exit(1)

    return setup
