"""Confirm: replay a finding N times, say how often it comes back and with which outputs.

The reproduction test is the campaign's (`campaign.confirmation_of`): a replay reproduces a
divergence when one of the finding's flagged requests again answers something other than its
answer alone on a flushed cache; it reproduces a liveness finding (crash, hang, 5xx, malformed)
when the replay shows that same failure again. Shrink and triage ask the same question of other
scenarios and other servers, so they call `reproduce` too.

    with Replayer(Launch.reference(finding.target)) as bench:     # or Replayer.at(engine, url)
        rep = bench.reproduce(finding.scenario, Expectation.of(finding), runs=10)
    rep.rate, rep.flaky         # ('7/10', False)

A finding that no longer reproduces (0/N) is kept and marked flaky, never dropped. `Launch`
describes a server to start for the replays: the embedded reference engine exactly as the
finding recorded it (its planted faults included), a real engine from `servefuzz.engines`, or a
user's command line with `{port}`. A command is only ever taken from the user's own command
line, never from a finding file.
"""

from __future__ import annotations

import asyncio
import dataclasses
import shlex
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from servefuzz import engines
from servefuzz.anomaly import Anomaly, Verdict, worst
from servefuzz.campaign import Judgement, confirmation_of, execute, judge
from servefuzz.errors import LaunchError, TargetError, UsageError
from servefuzz.finding import Confirmation, Finding, TargetInfo
from servefuzz.history import RequestRecord, RunHistory
from servefuzz.launcher import ServerProcess, reference_argv
from servefuzz.oracles import liveness
from servefuzz.runner import RunConfig, Runner
from servefuzz.targets import make_target
from servefuzz.workload import RequestSpec, Scenario

__all__ = [
    "DEFAULT_RUNS",
    "PRESETS",
    "REFERENCE_FLAGS",
    "Expectation",
    "Reproduction",
    "Launch",
    "Replayer",
    "reference_flags",
    "reproduce",
    "confirmed",
    "render_confirmation",
]

DEFAULT_RUNS = 10
PRESETS = ("reference", "vllm-cpu", "llama-server")

# The reference engine's flags as its /server_info names them (`--page-size` is `page_size`). The
# fuzzer does not import the engine, a program apart; a test keeps this list equal to its flags.
REFERENCE_FLAGS = (
    "page_size",
    "max_total_tokens",
    "chunked_prefill_size",
    "max_running_requests",
    "context_length",
    "model_seed",
    "served_model_name",
    "disable_radix_cache",
    "disable_overlap_schedule",
    "disable_cuda_graph",
    "enable_deterministic_inference",
)


@dataclass(frozen=True)
class Expectation:
    """What counts as a finding coming back: its verdict and the anomalies that flag requests.

    For a divergence the flagged requests are the finding's expected-diverging ones; for a
    liveness failure, any request showing that failure again will do.
    """

    verdict: Verdict
    anomalies: tuple[Anomaly, ...]

    @classmethod
    def of(cls, finding: Finding) -> Expectation:
        if not finding.verdict.is_divergence:
            return cls(finding.verdict, tuple(a for a in finding.anomalies if a.verdict is finding.verdict))
        expected = set(finding.expected_diverging)
        return cls(finding.verdict, tuple(a for a in finding.anomalies if a.request_id in expected))

    @property
    def flagged(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(a.request_id for a in self.anomalies))

    def within(self, scenario: Scenario) -> Expectation:
        """The part of the expectation about requests `scenario` still has."""
        present = {r.id for r in scenario.requests}
        return dataclasses.replace(self, anomalies=tuple(a for a in self.anomalies if a.request_id in present))

    def renamed(self, new_ids: Mapping[str, str]) -> Expectation:
        """The same expectation after requests were renamed (shrink records lineage in ids)."""
        return dataclasses.replace(
            self,
            anomalies=tuple(dataclasses.replace(a, request_id=new_ids.get(a.request_id, a.request_id)) for a in self.anomalies),
        )


@dataclass(frozen=True)
class Reproduction:
    """What replaying one scenario showed: the confirmation (rate, variants) and its evidence."""

    confirmation: Confirmation
    judgement: Judgement
    loaded: tuple[RunHistory, ...]
    alone: Mapping[str, tuple[RequestRecord, ...]]
    lost: str | None = None

    @property
    def reproduced(self) -> int:
        return self.confirmation.reproduced

    @property
    def attempts(self) -> int:
        return self.confirmation.attempts

    @property
    def rate(self) -> str:
        return self.confirmation.rate

    @property
    def flaky(self) -> bool:
        return self.reproduced == 0

    def verdict_of(self, expect: Expectation) -> Verdict | None:
        """The worst verdict the oracles gave the flagged requests (a divergence finding), or the
        expected failure if it came back (a liveness finding)."""
        if not expect.verdict.is_divergence:
            return expect.verdict if self.reproduced else None
        flagged = set(expect.flagged)
        return worst(a.verdict for a in self.judgement.divergent if a.request_id in flagged)


async def reproduce(
    runner: Runner,
    scenario: Scenario,
    expect: Expectation,
    runs: int,
    *,
    stop: Callable[[int, int], bool] | None = None,
    alone_cache: dict[RequestSpec, RequestRecord] | None = None,
) -> Reproduction:
    """Replay `scenario` up to `runs` times under load, each on a flushed cache.

    First each flagged request runs alone on a flushed cache (its reference; `alone_cache`
    remembers references across calls, keyed by the exact spec). After each loaded run
    `stop(reproduced, done)` may end the replays early: shrink's gate stops as soon as its
    answer is certain. When the server goes away the replays end and `lost` says why.
    """
    expect = expect.within(scenario)
    specs = scenario.by_id()
    alone: dict[str, tuple[RequestRecord, ...]] = {}
    loaded: list[RunHistory] = []
    lost = None
    # A liveness finding needs no reference; a request cut on purpose has no reference output.
    refs = [specs[rid] for rid in expect.flagged if expect.verdict.is_divergence and not specs[rid].cancelled]
    try:
        for spec in refs:
            key = dataclasses.replace(spec, offset_ms=0.0)
            cached = None if alone_cache is None else alone_cache.get(key)
            if cached is None:
                cached = await runner.run_alone(spec, run=0)  # labelled 'alone', as the campaign's
                if alone_cache is not None and cached.ok:
                    alone_cache[key] = cached
            alone[spec.id] = (cached,)
    except TargetError as e:
        lost = str(e)
    for i in range(runs if lost is None else 0):
        done = await execute(runner, scenario, runs=1, with_alone=False, first_run=i)
        loaded += done.loaded
        lost = done.lost
        if lost is not None:
            break
        if stop is not None and stop(_confirm(expect, loaded, alone, None).reproduced, i + 1):
            break
    return Reproduction(
        confirmation=_confirm(expect, loaded, alone, lost),
        judgement=judge(loaded, alone),
        loaded=tuple(loaded),
        alone=alone,
        lost=lost,
    )


def _confirm(
    expect: Expectation, loaded: Sequence[RunHistory], alone: Mapping[str, Sequence[RequestRecord]], lost: str | None
) -> Confirmation:
    if expect.verdict.is_divergence:
        return confirmation_of(Judgement(expect.anomalies, ()), loaded, loaded, alone)
    # A liveness finding comes back when a run shows the same failure again; a server that
    # went away mid-replay is a crash even when no request saw it die.
    reproduced = sum(1 for h in loaded if any(a.verdict is expect.verdict for a in liveness([h])))
    if lost is not None and expect.verdict is Verdict.CRASH and not reproduced:
        reproduced = 1  # it died between runs: no request saw it, but that is the crash again
    everyone = {rec.request_id for h in loaded for rec in h.records}
    return Confirmation(
        reproduced=reproduced,
        attempts=max(len(loaded), reproduced),
        variants={},
        expected=expect.flagged,
        stable=tuple(sorted(everyone - set(expect.flagged))),
    )


def confirmed(finding: Finding, rep: Reproduction) -> Finding:
    """`finding` with the confirmation `rep` measured; marked flaky when it did not come back."""
    notes = list(finding.notes)
    if rep.flaky:
        notes.append(f"flaky: reproduced in 0/{rep.attempts} replays")
    if rep.lost is not None:
        notes.append(f"replays cut short: {rep.lost}")
    return dataclasses.replace(finding, confirmation=rep.confirmation, notes=tuple(dict.fromkeys(notes)))


def render_confirmation(c: Confirmation) -> list[str]:
    """The rate and each flagged request's distinct outputs with counts, one line each."""
    lines = [f"reproduced {c.rate}" + ("  (flaky: it did not come back)" if c.reproduced == 0 else "")]
    for rid, variants in c.variants.items():
        total = sum(v.count for v in variants)
        lines.append(f"  {rid}: {len(variants)} variant{'s' if len(variants) != 1 else ''}")
        lines += [f"    {v.preview()}  ({v.count}/{total})" for v in variants]
    return lines


# -- where replays happen ------------------------------------------------------------------


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

    @classmethod
    def reference(cls, target: TargetInfo) -> Launch:
        """The embedded reference engine exactly as `target` describes it, faults included."""
        return cls("reference", tuple(reference_argv(reference_flags(target))))

    @classmethod
    def resolve(
        cls,
        spec: str,
        target: TargetInfo | None = None,
        *,
        model: Path | None = None,
        engine: str | None = None,
        reference_flags: Sequence[str] = (),
    ) -> Launch:
        """A preset name (`reference`, `vllm-cpu`, `llama-server`) or the user's command with `{port}`.

        `target`: the server a finding was made on, which the presets rebuild (its faults, dtype,
        block size, slots); None for a new campaign, which gets `reference_flags` on the
        reference engine and the presets' defaults elsewhere. A preset without `--model` serves
        the tiny models servefuzz builds into its cache. Raises UsageError for a command without
        `{port}`, a model that is not there, or an engine `scripts/setup_engines.sh` has not set up.
        """
        if spec == "reference":
            if target is not None:
                return cls.reference(target)
            return cls("reference", tuple(reference_argv(reference_flags)))
        args = {} if target is None else target.server_args
        if spec == "vllm-cpu":
            given = engines.hf_model_dir(model) if model is not None else None
            if not engines.vllm_installed():
                raise UsageError(f"vLLM CPU is not installed under {engines.cache_dir()}: run {engines.SETUP_SCRIPT}")
            hf_dir = given or engines.hf_model_dir(None)
            dtype = str(args.get("dtype") or engines.model_dtype(hf_dir))
            page = target.page_size if target is not None and target.page_size else 32
            argv = engines.vllm_argv(hf_dir, dtype, block_size=page)
            return cls("vllm", tuple(argv), engines.vllm_env(), start_timeout_s=engines.VLLM_START_TIMEOUT_S)
        if spec == "llama-server":
            gguf = engines.gguf_model(model) if model is not None else None
            if not engines.llama_server_built():
                raise UsageError(f"llama-server is not built under {engines.cache_dir()}: run {engines.SETUP_SCRIPT}")
            slots = args.get("total_slots")
            # --slot-save-path mounts the slot erase that flushes; --cache-ram 0 keeps no copy of
            # an erased prompt to restore. Erasing writes nothing there.
            extra = ["--slot-save-path", tempfile.gettempdir(), "--cache-ram", "0"]
            argv = engines.llama_server_argv(gguf or engines.gguf_model(None),
                                             slots=int(slots) if isinstance(slots, int) else 8, extra=extra)
            return cls("llamacpp", tuple(argv))
        try:
            argv = shlex.split(spec)
        except ValueError as e:
            raise UsageError(f"cannot parse the launch command: {e}") from None
        if not argv:
            raise UsageError("--launch needs a preset (reference, vllm-cpu, llama-server) or a command")
        if not any("{port}" in a for a in argv):
            raise UsageError(
                f"--launch {spec!r} is neither a preset ({', '.join(PRESETS)}) nor a command with {{port}}"
            )
        # A user's server may take long to load its model; the dialect is detected when not given.
        return cls(engine or (target.engine if target is not None else ""), tuple(argv), start_timeout_s=600.0)

    def with_changes(self, argv: Sequence[str], env: Mapping[str, str], target_opts: Mapping[str, Any]) -> Launch:
        """This launch with another command line, and more environment and adapter options."""
        return dataclasses.replace(
            self, argv=tuple(argv), env={**self.env, **env}, target_opts={**self.target_opts, **target_opts}
        )


def reference_flags(target: TargetInfo) -> list[str]:
    """The reference engine's flags that rebuild the server `target` describes.

    >>> reference_flags(TargetInfo("reference", "http://127.0.0.1:1", faults=("overlap-war",),
    ...                 server_args={"page_size": 16, "disable_cuda_graph": True, "vocab_size": 1024}))
    ['--page-size', '16', '--disable-cuda-graph', '--fault', 'overlap-war']

    Keys that are not flags (vocabulary, version, the bind address) are left out; values go to
    the engine's own argument parser, which refuses bad ones when the server starts.
    """
    out: list[str] = []
    for key in REFERENCE_FLAGS:
        value = target.server_args.get(key)
        if value is None or value is False:
            continue
        flag = "--" + key.replace("_", "-")
        out += [flag] if value is True else [flag, str(value)]
    for fault in target.faults:
        out += ["--fault", fault]
    return out


class Replayer:
    """Replays scenarios against one server from synchronous code (shrink's gate, triage's rows).

    Either at a URL someone else runs, or on a server it launches (and restarts when it dies,
    so that a crash reproduced by one candidate does not end the search).

        with Replayer.at("reference", "http://127.0.0.1:30000") as bench:
            rep = bench.reproduce(scenario, expect, runs=5)
    """

    def __init__(
        self, launch: Launch | None = None, *, url: str | None = None, engine: str = "sglang", log_path: Path | None = None
    ) -> None:
        if (launch is None) == (url is None):
            raise UsageError("give exactly one of a launch command or a base URL")
        self.launch = launch
        self.engine = launch.engine if launch is not None else engine
        self.url = url
        # Server logs live as long as the Replayer unless the caller wants them kept.
        self._logs = tempfile.TemporaryDirectory(prefix="servefuzz-replay-") if launch and not log_path else None
        if self._logs is not None:
            log_path = Path(self._logs.name) / "server.log"
        self.server = None if launch is None else ServerProcess(
            launch.argv, env=launch.env, start_timeout_s=launch.start_timeout_s, log_path=log_path
        )
        self.alone_cache: dict[RequestSpec, RequestRecord] = {}
        self._loop: asyncio.Runner | None = None
        self._runner: Runner | None = None

    @classmethod
    def at(cls, engine: str, url: str) -> Replayer:
        if not url.startswith(("http://", "https://")):
            raise UsageError(f"--base-url must start with http:// or https://, got {url!r}")
        return cls(url=url, engine=engine)

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
        runner = Runner(make_target(self.engine, self.url, **opts), RunConfig())
        self._loop.run(runner.__aenter__())
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
        """`reproduce` on this server; a launched server that died is started again afterwards."""
        assert self._loop is not None and self._runner is not None, "use the Replayer inside `with`"
        rep = self._loop.run(reproduce(self._runner, scenario, expect, runs, stop=stop, alone_cache=self.alone_cache))
        if rep.lost is not None:
            if self.server is None:
                raise TargetError(
                    f"the server at {self.url} went away ({rep.lost}); to go on past a crash, let "
                    "servefuzz start the server (--launch) so that it can start it again"
                )
            self.restart()
        return rep

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
        self.alone_cache.clear()
        try:
            self._connect()
        except LaunchError as e:
            raise TargetError(f"the server could not be started again: {e}") from None

