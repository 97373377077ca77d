"""Own a server process: start it on a free port, wait until healthy, capture logs, stop it.

    >>> with ServerProcess.reference(["--fault", "page-boundary-prefix"]) as srv:  # doctest: +SKIP
    ...     print(srv.base_url)
    http://127.0.0.1:40123

The process runs in its own session (process group), so stopping it ends the server and any
workers it forked, and nothing else: we signal only the group we created, found by our child's
PID. Logs go to a file (a temp file unless given) so a crash can be reported with its tail.
On Linux the server also gets SIGTERM when servefuzz itself dies (even by `kill -9`), so a
killed campaign leaves no server behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import dataclasses
import functools
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from servefuzz import durable, engine_files, engines, presets
from servefuzz.engines.reference import PAIR_FLAGS, PAIR_PRESET, relaunch_argv
from servefuzz.engines.request import NAMES, VERSIONED, LaunchRequest
from servefuzz.engines.spec import EngineSource
from servefuzz.errors import LaunchError, UsageError
from servefuzz.server_facts import TargetInfo, redact_argv

__all__ = [
    "PRESETS", "VERSIONED_PRESETS", "Launch", "LaunchRequest", "ServerProcess", "free_port", "group_alive",
    "reference_argv", "reference_flags",
]

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
# Loaded here, in the parent: the child between fork and exec should not be loading libraries.
_LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True) if sys.platform == "linux" else None


def _die_with_parent(parent: int) -> None:
    """Runs in the child before exec: SIGTERM when the parent goes, however it goes.

    The kernel sends it when the thread that forked the child exits; servefuzz forks from the
    main thread or from an executor thread that lives until its event loop closes, after the
    server was stopped. If the parent died before the call, nobody would send it: exit now.
    """
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _taken(port: int | None) -> bool:
    """Whether some process listens on `port` now (False where /proc cannot say); asked once
    our own server has gone, so any listener is another's."""
    return port is not None and bool(_listening_inodes(port))


def _listening_inodes(port: int) -> set[str]:
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as fh:
            for row in list(fh)[1:]:
                cols = row.split()
                if cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                    inodes.add(f"socket:[{cols[9]}]")
    return inodes


def _listens(pgid: int, port: int | None) -> bool | None:
    """Whether a process of group `pgid` holds the listening TCP socket on 127.0.0.1:`port`
    (read from /proc on Linux); None where that cannot be read (another system, no /proc).

    >>> _listens(os.getpgid(0), None) is None
    True
    """
    if port is None:
        return None
    try:
        inodes = _listening_inodes(port)
        if not inodes:
            return False
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                if os.getpgid(int(pid)) != pgid:
                    continue
                if any(os.readlink(f"/proc/{pid}/fd/{fd}") in inodes for fd in os.listdir(f"/proc/{pid}/fd")):
                    return True
            except OSError:
                continue  # gone, or not ours to read
        return False
    except OSError:
        return None


def group_alive(pgid: int) -> bool:
    """Whether a live process is left in process group `pgid`.

    A worker orphaned by its leader's death is reparented to init, which may be slow to reap
    it; a zombie is not alive, so on Linux the group's members are read from /proc and zombies
    do not count.
    """
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    proc = Path("/proc")
    if not proc.is_dir():
        return True
    for stat in proc.glob("[0-9]*/stat"):
        try:
            # pid (comm) state ppid pgrp ...: comm may hold spaces, so split after its ')'.
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue  # it ended while we looked
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def reference_argv(flags: Sequence[str] = ()) -> list[str]:
    """Command line of the embedded reference engine, with `{port}` left to fill in."""
    return [sys.executable, "-m", "servefuzz.reference", "--host", "127.0.0.1", "--port", "{port}", *flags]


TRACEBACK_LINES = 400  # a crash's traceback is kept whole up to this many lines (vLLM's: ~60)


def traceback_of(log: str, most: int = TRACEBACK_LINES) -> str:
    """`log`'s last start (after the last `--- servefuzz` header) from its first Python
    traceback on, at most `most` lines; "" without one (tests/test_launcher.py).
    """
    lines = log.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("--- servefuzz ")]
    lines = lines[starts[-1] + 1:] if starts else lines
    first = next((i for i, line in enumerate(lines) if "Traceback (most recent call last)" in line), None)
    return "" if first is None else "\n".join(lines[first:first + most])


class ServerProcess:
    """A server started from an argv template in which `{port}` is replaced by a free port."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        port: int | None = None,
        health_path: str = "/health",
        log_path: Path | None = None,
        env: Mapping[str, str] | None = None,
        start_timeout_s: float = 60.0,
    ) -> None:
        if not argv:
            raise UsageError("empty launch command")
        self._template = list(argv)
        self._fixed_port = port
        self.health_path = health_path
        self.log_path = log_path
        self._env = dict(env) if env is not None else None
        self.start_timeout_s = start_timeout_s
        self.port: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_file: object | None = None
        self.restarts = 0

    @classmethod
    def reference(cls, flags: Sequence[str] = (), **kw: object) -> ServerProcess:
        """The embedded reference engine with the given server flags."""
        kw.setdefault("start_timeout_s", 30.0)
        return cls(reference_argv(flags), **kw)  # type: ignore[arg-type]

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        if self.port is None:
            raise LaunchError("server not started")
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    @property
    def returncode(self) -> int | None:
        """The exit status once the server has ended (negative: killed by that signal)."""
        return None if self._proc is None else self._proc.poll()

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def exit_status(self, grace_s: float) -> int | None:
        """The exit status, waiting up to `grace_s` for it; None if the server still runs.

        A server whose requests were just lost is usually on its way down, but not always
        there yet: SGLang's launcher ends its own tree a moment after its scheduler dies.
        Reading the status at once would record a crash with no exit code.
        """
        if self._proc is None:
            return None
        try:
            return self._proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            return None

    @property
    def argv(self) -> list[str]:
        port = str(self.port if self.port is not None else "{port}")
        return [a.replace("{port}", port) for a in self._template]

    def start(self) -> str:
        """Start the server and wait until its health endpoint answers 200; return its URL."""
        if self.alive:
            return self.base_url
        return self._attempt(port_retry=self._fixed_port is None)

    def _attempt(self, *, port_retry: bool) -> str:
        """One start; `port_retry`: a port found taken by another may be given up for a fresh one."""
        self.port = self._fixed_port or free_port()
        if self.log_path is None:
            fd, name = tempfile.mkstemp(prefix="servefuzz-server-", suffix=".log")
            os.close(fd)
            self.log_path = Path(name)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self._log_file = log
        # One log for every start: a header says where each begins (credentials left out).
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        with durable.reporting_full_disk(self.log_path):
            log.write(f"--- servefuzz {stamp}: {shlex.join(map(str, redact_argv(self.argv)))}\n".encode())
            log.flush()
        env = {**os.environ, **(self._env or {})}
        try:
            self._proc = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,  # own process group: stop() ends exactly what we started
                preexec_fn=functools.partial(_die_with_parent, os.getpid()),  # noqa: PLW1509 - see there
            )
        except OSError as e:
            raise LaunchError(f"cannot start {self.argv[0]}: {e.strerror or e}") from None
        try:
            self._wait_healthy()
        except LaunchError:
            # Our server could not have the port: another took it between `free_port` and the
            # bind. Once, on a fresh port (never with a port the caller fixed).
            if not port_retry or not _taken(self.port):
                raise
            self.stop()
            return self._attempt(port_retry=False)
        return self.base_url

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        url = self.base_url + self.health_path
        while time.monotonic() < deadline:
            if not self.alive:
                code = self._proc.returncode if self._proc else None
                raise LaunchError(f"server exited with code {code} before it was healthy: {self.log_tail(3)}")
            try:
                with urllib.request.urlopen(url, timeout=2) as resp:  # noqa: S310 - 127.0.0.1 only
                    # Healthy only when the answer is ours: a port free a moment ago can be taken
                    # by another server while a slow one (SGLang: a minute and more) loads, and
                    # its /health would then pass for ours (seen in the engine tests).
                    if resp.status == 200 and self._proc is not None and _listens(self._proc.pid, self.port) is not False:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            time.sleep(0.05)
        self.stop()
        raise LaunchError(f"server not healthy after {self.start_timeout_s:.0f} s: {self.log_tail(3)}")

    def restart(self) -> str:
        """Stop (if needed) and start again on a fresh port; counts restarts."""
        self.stop()
        self.restarts += 1
        return self.start()

    def stop(self, timeout_s: float = 10.0) -> int | None:
        """End the process group we started: SIGTERM, then SIGKILL. Returns the exit code.

        The group outlives its leader when workers take longer to exit (vLLM's engine core) or
        when the leader was killed alone: whatever is left of it gets SIGKILL, and stop returns
        only once the group is gone, so a restart never shares the machine with a ghost.
        """
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            self._signal_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self._signal_group(proc.pid, signal.SIGKILL)
                proc.wait(timeout=timeout_s)
        self._end_group(proc.pid, grace_s=timeout_s / 2)
        if self._log_file is not None:
            self._log_file.close()  # type: ignore[attr-defined]
            self._log_file = None
        return proc.returncode

    def _end_group(self, pgid: int, grace_s: float) -> None:
        """Give the leader's workers `grace_s` to exit after it, then SIGKILL what is left."""
        deadline = time.monotonic() + grace_s
        while group_alive(pgid):
            if time.monotonic() >= deadline:
                self._signal_group(pgid, signal.SIGKILL)
                deadline = time.monotonic() + grace_s  # killed: now only reaping is left
                while group_alive(pgid) and time.monotonic() < deadline:
                    time.sleep(0.02)
                return
            time.sleep(0.02)

    def kill(self) -> None:
        """Kill the server abruptly (SIGKILL to its group), as a crash would."""
        if self._proc is not None and self._proc.poll() is None:
            self._signal_group(self._proc.pid, signal.SIGKILL)
            self._proc.wait(timeout=10)

    @staticmethod
    def _signal_group(pid: int, sig: signal.Signals) -> None:
        # The group id equals our child's pid because of start_new_session=True.
        try:
            os.killpg(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def log_tail(self, lines: int = 20) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        text = self.log_path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
        return " | ".join(text[-lines:]) if lines <= 3 else "\n".join(text[-lines:])

    def log_traceback(self, most: int = TRACEBACK_LINES) -> str:
        """The last start's log from its first Python traceback on, at most `most` lines ("" when
        it has none): a crash report needs the decisive traceback whole, and an engine of several
        processes logs the cause first and the consequences after it."""
        if self.log_path is None or not self.log_path.exists():
            return ""
        return traceback_of(self.log_path.read_text(encoding="utf-8", errors="replace"), most)

    def __enter__(self) -> ServerProcess:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


# -- what to launch ---------------------------------------------------------------------


# The embedded reference engine, then every engine's presets (engines/presets.py), and those
# that take `@VERSION`: the launch request's tables (`engines.request`).
PRESETS = NAMES
VERSIONED_PRESETS = VERSIONED


@dataclass(frozen=True)
class Launch:
    """A server to start for replays: an argv template with `{port}`, extra environment, the
    dialect to speak to it, and options for that dialect's adapter.

    Triage derives one per flag variant (`with_changes`) and launches each on its own.
    """

    engine: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    target_opts: Mapping[str, Any] = field(default_factory=dict)
    start_timeout_s: float = 60.0
    # What the server computes on, where servefuzz knows it ("cpu" for the CPU presets; "" for a
    # user's command): engines' deterministic modes exist on some devices only.
    device: str = ""
    # The preset's feature profile (`engines.PROFILES`) this launch runs under, and the preset's
    # command line without it, which triage's drop-the-profile row goes back to.
    profile: engines.Profile | None = None
    default_argv: tuple[str, ...] = ()
    # The stand-in packages the launch puts on the server's path (`TargetInfo.standins`).
    standins: tuple[str, ...] = ()
    # The model a preset serves when --model named one (None: the tiny default, or a command of
    # the user's own); a fetched model's provenance reaches the findings from it (`TargetInfo.model`).
    model: Path | None = None
    # The engine's version as read from the engine a preset found (the cache's pin, or the user's
    # install's own), and where it was found (`EngineSource`): said in the target's facts, since a
    # server may not tell its version. "" and None for the reference engine and a user's command.
    version: str = ""
    source: EngineSource | None = None

    @classmethod
    def reference(cls, target: TargetInfo) -> Launch:
        """The embedded reference engine exactly as `target` describes it, faults included."""
        return cls("reference", tuple(reference_argv(reference_flags(target))))

    @classmethod
    def resolve(
        cls,
        request: LaunchRequest | str,
        target: TargetInfo | None = None,
        *,
        model: Path | None = None,
        engine: str | None = None,
        reference_flags: Sequence[str] = (),
        profile: str | None = None,
    ) -> Launch:
        """What `request` starts (`LaunchRequest`; words are parsed into one): a preset
        (`reference`, `vllm-cpu`, `llama-server`, `sglang-cpu[@VERSION]`, `vllm-gpu[@VERSION]`,
        `sglang-gpu[@VERSION]`) or the user's command with `{port}`. A Python engine's preset runs
        the engine `presets.find` finds: the user's install (`engine_python`), servefuzz's
        own interpreter's, or the engine cache's.

        `target`: the server a finding was made on, which the presets rebuild (its faults, dtype,
        block size, slots); None for a new campaign, which gets `reference_flags` on the
        reference engine and the presets' defaults elsewhere. A preset without `--model` serves
        the tiny models servefuzz builds into its cache. Raises UsageError for a model that is not
        there, an engine that is not installed, or a flag the user's engine lacks.

        `profile`: a feature profile of the preset (`engines.PROFILES`), for a new campaign; else
        a preset rebuilds the finding's own `target.profile`, its name looked up in servefuzz's
        table (a profile's flags never come from the finding file; an unknown name is refused).
        """
        request = LaunchRequest.of(request)
        name = profile
        if name is None and target is not None and request.name in engines.PROFILES:
            name = target.profile  # a user's own command is launched as given
        chosen = engine_files.profile(request.name or request.given, name, model=model) if name is not None else None
        if request.preset is None:
            # A user's server may take long to load its model; the dialect is detected when not given.
            return cls(engine or (target.engine if target is not None else ""), request.command, start_timeout_s=600.0)
        if request.is_reference:
            if target is not None:
                return cls.reference(target)  # a pair where the finding's server was one: its args say
            pair = request.preset == PAIR_PRESET and PAIR_FLAGS[0] not in reference_flags
            return cls("reference", tuple(reference_argv([*reference_flags, *(PAIR_FLAGS if pair else ())])))
        if model is not None:
            engine_files.served_model(request.preset, model)  # a bad --model first, before the engine is looked for
        found = presets.find(request)
        plan = presets.plan(found, target, model, chosen.flags if chosen is not None else ())
        argv = engines.with_flags(plan.argv, chosen.flags) if chosen is not None else list(plan.argv)
        env = {**plan.env, **dict(chosen.env)} if chosen is not None else dict(plan.env)
        launch = cls(plan.engine, tuple(presets.fit(found, argv, env, chosen)), env, start_timeout_s=plan.start_timeout_s,
                     device=plan.device, standins=plan.standins, model=model, version=found.version, source=found.source)
        if chosen is None:
            return launch
        return dataclasses.replace(launch, profile=chosen, default_argv=tuple(presets.fit(found, plan.argv, env)))

    def with_changes(self, argv: Sequence[str], env: Mapping[str, str], target_opts: Mapping[str, Any]) -> Launch:
        """This launch with another command line, and more environment and adapter options."""
        return dataclasses.replace(
            self, argv=tuple(argv), env={**self.env, **env}, target_opts={**self.target_opts, **target_opts}
        )


def reference_flags(target: TargetInfo) -> list[str]:
    """The reference engine's flags that rebuild the server `target` describes, faults
    included: only through the typed allow-list (`engine_flags`), so a value a hostile server
    or an edited finding planted is refused with one line, never passed on."""
    return relaunch_argv(target.server_args, target.faults)
