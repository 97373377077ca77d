"""Trials: run a scenario against a server, and replay it until a finding shows or does not.

This is the one path by which servefuzz exercises a server. The campaign executes each new
scenario with `execute` and judges it with `servefuzz.oracles.judge`; every later question
("does this finding come back?") goes through `reproduce`, whoever asks it: the campaign's
confirmation, `servefuzz replay`, shrink's gate and triage's rows. `reproduce` decides with
`oracles.reproduction`, the same rule the standalone `repro.py` carries.

    async with Runner(target) as runner:
        done = await execute(runner, scenario, runs=2, with_alone=True)
        rep = await reproduce(runner, scenario, Expectation.of(finding), runs=10)
    rep.rate, rep.flaky                       # ('7/10', False)

Synchronous callers (shrink, triage) hold a server through a `Replayer`, which can also start
the server itself from a `Launch` and start it again for a fresh state; `fuzz --launch` holds
its server through a `LaunchedServer`, which the campaign restarts after a crash.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import aiohttp

from servefuzz import durable
from servefuzz.anomaly import Verdict, worst
from servefuzz.engines.registry import spec_of
from servefuzz.errors import LaunchError, TargetError, UsageError
from servefuzz.feedback import metric_deltas
from servefuzz.finding import Confirmation, Finding
from servefuzz.history import RequestRecord, RunHistory, Status
from servefuzz.launcher import Launch, ServerProcess
from servefuzz.oracles.controls import (
    CONTENT_SWAP,
    DETERMINISTIC,
    FRESH_SERVER,
    ControlResult,
    OwnContinuation,
    deviant_outputs,
    deviating_runs,
    leak_span,
    read_control,
    runs_to_refute,
    swap_content,
)
from servefuzz.oracles.judge import Expectation, Judgement, judge, reproduction
from servefuzz.oracles.noise import CampaignNoise
from servefuzz.runner import DeadlinePassed, RunConfig, Runner
from servefuzz.server_facts import TargetInfo, redact_argv, redact_text
from servefuzz.targets import Target, detect_engine, make_target
from servefuzz.workload import RequestSpec, Scenario

__all__ = [
    "DEFAULT_RUNS",
    "FORCED_ROUNDS",
    "Control",
    "Executed",
    "Reproduction",
    "Replayer",
    "LaunchedServer",
    "execute",
    "probe_targets",
    "reproduce",
    "confirmed",
    "content_swap",
    "deterministic_control",
    "deterministic_launch",
    "fresh_server_control",
    "own_continuation",
    "suspects",
    "open_target",
]

DEFAULT_RUNS = 10
_DEFAULT_CONFIG = RunConfig()  # frozen: one instance serves every default


# -- one execution -------------------------------------------------------------------------


@dataclass
class Executed:
    """The histories of one scenario's execution, as far as it got.

    Filled in place, so that when the target goes away mid-way (`lost` says why), or the
    runner's deadline cuts it short (`cut` says why: the campaign's time budget), everything
    recorded before that is still here to be judged and kept.
    """

    loaded: list[RunHistory] = field(default_factory=list)
    alone: dict[str, list[RequestRecord]] = field(default_factory=dict)
    cache: list[RequestRecord] = field(default_factory=list)
    lost: str | None = None
    # The target is lost because it stopped answering, alive (`stopped_answering`), not dead:
    # its requests hung and a lone 1-token request did too. `lost` says so.
    wedged: bool = False
    cut: str | None = None
    sent: int = 0  # requests on the wire, probes' priming requests included
    # Requests whose alone reference is the answer of an earlier, identical one (`Runner.reference`):
    # not sent for this scenario, and said so in its history.
    reused: list[str] = field(default_factory=list)
    scenario: Scenario | None = None  # what ran: its prompts are the leak oracle's sources too

    @property
    def requests(self) -> int:
        return self.sent

    def judge(self, *, performance: bool = False, campaign: CampaignNoise | None = None) -> Judgement:
        return judge(self.loaded, self.alone, cache=self.cache, performance=performance, campaign=campaign,
                     scenario=self.scenario)


async def _metrics(runner: Runner) -> dict[str, float]:
    try:
        return await runner.metrics()
    except TargetError:
        return {}  # no metrics is no feedback, not a lost target: the next run will tell


async def _probe(runner: Runner, spec: RequestSpec, run: int, done: Executed) -> None:
    """The cache-state probes of one request: warm (again, no flush) and primed (flush, bare
    prefix alone, then the request)."""
    done.cache.append(await runner.run_alone(spec, run=run, label="warm", flush=False))
    done.sent += 1
    bare = dataclasses.replace(spec, id=f"{spec.id}~prefix", prompt_ids=spec.prompt_ids[: spec.prefix_len],
                               max_tokens=1, n=1, stream=False)
    await runner.run_alone(bare, run=run, label="prime")
    done.sent += 1
    done.cache.append(await runner.run_alone(spec, run=run, label="primed", flush=False))
    done.sent += 1


# What `stopped_answering` sends: one token out of four in, base model, greedy, nothing else in flight.
ALIVE_PROBE_ID = "~alive"


async def stopped_answering(runner: Runner, scenario: Scenario, run: RunHistory) -> str | None:
    """Why the server is to be taken as lost after `run`, in which requests hung; None when it
    still answers. Sends one request.

    A request that hangs on its own is a finding. A server that then answers nothing at all is
    wedged (SGLang 0.5.10.post1's scheduler, docs/findings/sglang-cpu-tiny-pool-hang): every
    later run on it would hang as a consequence of the first, not as a reproduction of it, and
    a campaign would spend the rest of its budget on it. So after a run with a timed-out request
    one lone 1-token request is sent, without a flush (a wedged SGLang refuses flushes); when it
    gets no answer within the request timeout either, the target is lost, as a dead one is: a
    launched server is started again, and replays go on on the fresh one.
    """
    first = scenario.requests[0]
    probe = RequestSpec(ALIVE_PROBE_ID, 0.0, first.prompt_ids[:4], 1)
    record = await runner.run_alone(probe, run=run.run, label="alive", flush=False)
    if record.status is not Status.TIMEOUT:
        return None
    return (f"the server stopped answering: after requests of run {run.run} hung, a lone 1-token request got no "
            f"answer within {runner.config.request_timeout_s:g} s either")


def probe_targets(scenario: Scenario, count: int) -> list[RequestSpec]:
    """Which requests the cache-state probes visit: those with a shared prefix and a suffix,
    not cancelled, first in scenario order."""
    fit = [r for r in scenario.requests if r.prefix_len and r.suffix_len and not r.cancelled]
    return fit[:count]


async def execute(
    runner: Runner,
    scenario: Scenario,
    *,
    runs: int,
    with_alone: bool,
    first_run: int = 0,
    probes: Sequence[RequestSpec] = (),
) -> Executed:
    """Run `scenario` `runs` times under load (flushed before each; counter deltas of
    `/metrics` in each run's `meta["metrics"]`), then the cache-state `probes` (warm: in the
    state the last loaded run left; primed: flushed, the bare prefix alone, then the request),
    then, if asked, each request alone on a flushed cache (its isolation reference and cold
    state; `Runner.reference`, which reuses one taken for the same request before). Requests
    cancelled on purpose have no alone reference. At the runner's deadline
    (`Runner.stop_at`) it stops where it is: `cut` says why."""
    done = Executed(scenario=scenario)
    try:
        for i in range(runs):
            await runner.flush()
            before = await _metrics(runner)
            h = await runner.run(scenario, run=first_run + i, label="load")
            done.loaded.append(h)  # kept even when the deadline takes the metrics after it
            done.sent += scenario.total_requests
            delta = metric_deltas(before, await _metrics(runner))
            done.loaded[-1] = dataclasses.replace(h, meta={**h.meta, "metrics": delta})
            if any(r.status is Status.TIMEOUT for r in h.records):
                done.sent += 1  # the probe
                if (why := await stopped_answering(runner, scenario, h)) is not None:
                    done.lost, done.wedged = why, True
                    return done
        # Probed in the state the last loaded run left (warm: no flush), then primed: every
        # execution, first or replay, probes the same state, so what a replay re-checks is
        # what the first execution saw.
        for spec in probes:
            await _probe(runner, spec, first_run + runs - 1, done)
        if with_alone:
            for spec in scenario.requests:
                if not spec.cancelled:
                    record, sent = await runner.reference(spec)  # an earlier one of the same request, reused
                    done.alone[spec.id] = [record]
                    if sent:
                        done.sent += 1
                    else:
                        done.reused.append(spec.id)
    except TargetError as e:
        done.lost = str(e)
    except DeadlinePassed as e:
        done.cut = str(e)
    return done


# -- reproduction --------------------------------------------------------------------------


@dataclass(frozen=True)
class Reproduction:
    """What replaying one scenario showed: the confirmation (rate, variants) and its evidence."""

    confirmation: Confirmation
    judgement: Judgement
    loaded: tuple[RunHistory, ...]
    alone: Mapping[str, tuple[RequestRecord, ...]]
    cache: tuple[RequestRecord, ...] = ()
    lost: str | None = None
    sent: int = 0
    # Why the runner's deadline ended the replays early (the campaign's time budget): the rate
    # then counts only the runs that were not cut, and a campaign keeps its finding unconfirmed.
    cut: str | None = None

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
        expected failure if it came back (a liveness finding); for any other finding (an
        isolation breach, a slowdown), the worst its own oracles gave the flagged requests."""
        if expect.about_failure:
            return expect.verdict if self.reproduced else None
        flagged = set(expect.flagged)
        if expect.verdict.is_divergence:
            return worst(a.verdict for a in self.judgement.anomalies if a.request_id in flagged and a.verdict.is_divergence)
        oracles = {a.oracle for a in expect.anomalies}
        return worst(a.verdict for a in self.judgement.anomalies if a.request_id in flagged and a.oracle in oracles)


async def reproduce(
    runner: Runner,
    scenario: Scenario,
    expect: Expectation,
    runs: int,
    *,
    stop: Callable[[int, int], bool] | None = None,
    alone: Mapping[str, Sequence[RequestRecord]] | None = None,
    memo: dict[RequestSpec, RequestRecord] | None = None,
    first_run: int = 0,
    noise: CampaignNoise | None = None,
    references: int = 1,
) -> Reproduction:
    """Replay `scenario` up to `runs` times under load, each on a flushed cache, and say how
    often `expect` came back (`oracles.reproduction`).

    Each flagged request's reference is its answer alone on a flushed cache: taken from `alone`
    when the caller has one (the campaign's first execution), else measured first (`memo`
    remembers references across calls, keyed by the exact spec). Requests with a cache-state
    anomaly are probed warm and primed after every loaded run. After each run `stop(reproduced,
    done)` may end the replays early. When the server goes away the replays end and `lost`
    says why; at the runner's deadline they end too, and `cut` says why (a cut run is left
    out). `noise`: the campaign's noise model (`store.read_noise`), which the judgement's
    verdicts are held against too (the rate does not depend on it). `references` > 1: that many
    fresh alone references per flagged request (alone#0, alone#1, ...), whatever `alone` holds;
    the reference is their majority (`oracles.vote` names the odd runs).
    """
    expect = expect.within(scenario)
    specs = scenario.by_id()
    refs: dict[str, tuple[RequestRecord, ...]] = {k: tuple(v) for k, v in (alone or {}).items()}
    probes = [specs[rid] for rid in expect.probed]
    loaded: list[RunHistory] = []
    cache: list[RequestRecord] = []
    lost: str | None = None
    cut: str | None = None
    sent = 0
    # A liveness finding needs no reference; a request cut on purpose has no reference output.
    wanted = [] if expect.about_failure else [specs[rid] for rid in expect.flagged if not specs[rid].cancelled]
    try:
        for spec in wanted if references > 1 else ():
            fresh = []
            for k in range(references):
                fresh.append(await runner.run_alone(spec, run=k))  # each on a flushed cache
                sent += 1
            refs[spec.id] = tuple(fresh)
        for spec in wanted:
            if refs.get(spec.id):
                continue
            key = dataclasses.replace(spec, offset_ms=0.0)
            record = None if memo is None else memo.get(key)
            if record is None:
                record = await runner.run_alone(spec, run=0)  # labelled 'alone', as the campaign's
                sent += 1
                if memo is not None and record.ok:
                    memo[key] = record
            refs[spec.id] = (record,)
    except TargetError as e:
        lost = str(e)
    except DeadlinePassed as e:
        cut = str(e)
    for i in range(runs if lost is None and cut is None else 0):
        step = await execute(runner, scenario, runs=1, with_alone=False, first_run=first_run + i, probes=probes)
        if step.cut is not None:
            # The deadline cut this run (or its probes): what it shows is ours, not the server's.
            cut = step.cut
            sent += step.sent
            break
        loaded += step.loaded
        cache += step.cache
        sent += step.sent
        lost = step.lost
        if lost is not None:
            break
        if stop is not None and stop(reproduction(expect, loaded, refs, cache=cache).reproduced, i + 1):
            break
    return Reproduction(
        confirmation=reproduction(expect, loaded, refs, cache=cache, lost=lost),
        judgement=judge(loaded, refs, cache=cache, campaign=noise, scenario=scenario),
        loaded=tuple(loaded),
        alone=refs,
        cache=tuple(cache),
        lost=lost,
        sent=sent,
        cut=cut,
    )


# -- controls ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Control:
    """One control's replays and what they showed, victim by victim (`oracles.controls`)."""

    results: tuple[ControlResult, ...]
    reproduction: Reproduction

    @property
    def sent(self) -> int:
        return self.reproduction.sent

    @property
    def lost(self) -> str | None:
        return self.reproduction.lost

    @property
    def cut(self) -> str | None:
        return self.reproduction.cut


def suspects(expect: Expectation) -> tuple[str, ...]:
    """The requests whose confident flip no control has backed yet: what controls are run for."""
    return tuple(dict.fromkeys(a.request_id for a in expect.anomalies if a.verdict is Verdict.SUSPECTED_CORRUPTION))


async def content_swap(
    runner: Runner,
    scenario: Scenario,
    expect: Expectation,
    runs: int,
    *,
    original: Sequence[RunHistory],
    alone: Mapping[str, Sequence[RequestRecord]] | None = None,
    memo: dict[RequestSpec, RequestRecord] | None = None,
    first_run: int = 0,
    victim: str | None = None,
    noise: CampaignNoise | None = None,
) -> Control:
    """The content-swap control for one suspect (`victim`, default: the one that deviated most
    often in `original`): replay
    `scenario` with every other request given other tokens of the same shape
    (`oracles.controls.swap_content`), through `reproduce`, and read the victim's deviations
    there against those in the `original` replays.

    One victim at a time: two suspects that share a prefix can corrupt each other, so keeping
    both would keep the dependency the swap is there to remove. `alone`: the victim's reference
    (its prompt is not changed, so the original one holds); without it `reproduce` measures it.
    `runs` is a floor: given `alone`, the control runs as often as `runs_to_refute` asks for the
    victim's original rate, so that a rarely reproduced flip can still be backed."""
    # The suspect that deviated most often in the original replays: a flip seen once in the first
    # execution and never again has nothing for a control to take away.
    victim = victim or max(suspects(expect), key=lambda rid: deviating_runs(rid, original, alone or {})[0],
                           default=None)
    if victim is None:
        raise ValueError("the content-swap control needs a suspected corruption to control")
    if alone is not None:
        # Enough runs that the deviation's absence there can back the flip at its original rate.
        runs = max(runs, runs_to_refute(*deviating_runs(victim, original, alone)))
    vocab = runner.info.vocab_size if runner.info is not None else None
    swapped = swap_content(scenario, [victim], vocab)
    only = dataclasses.replace(expect, anomalies=tuple(a for a in expect.anomalies if a.request_id == victim))
    rep = await reproduce(runner, swapped, only, runs, alone=alone, memo=memo, first_run=first_run, noise=noise)
    wrong = deviant_outputs(victim, original, rep.alone)  # the same wrong answers, or the swap changed them
    result = read_control(CONTENT_SWAP, victim, original=deviating_runs(victim, original, rep.alone),
                          control=deviating_runs(victim, rep.loaded, rep.alone, among=wrong))
    return Control((result,), rep)


# The forced check on an engine re-forces the victim's deviant output at each near-tie it meets
# (a tie flips either way, and the next prefill then follows the other branch); a real leak shows
# a clear miss within a round or two, and an attractor run sits on few ties. Past this many
# rounds the check says nothing, and the candidate backs only what it would unchecked.
FORCED_ROUNDS = 6


async def own_continuation(
    runner: Runner, spec: RequestSpec, leak: ControlResult, tolerance: float, *, run: int
) -> tuple[OwnContinuation | None, int]:
    """The forced check of a candidate leak on the engine (`oracles.controls.OwnContinuation`),
    and the requests it sent: the victim's prompt with its deviant output up to the first
    matched token forced, alone on a flushed cache, greedy for the rest of the match. Every
    matched token it writes again is the victim's own; at a token it does not, the deviant token
    is the victim's own only when it sits within `tolerance` (the flip's noise threshold) of
    the engine's choice there, and then it is forced too and the check goes on. None: nothing to
    say (a sampled or constrained request, whose forced prompt would not be its own state; an
    answer that failed or came back short; ties past FORCED_ROUNDS)."""
    span = leak_span(leak)
    if span is None or spec.temperature > 0 or spec.choices is not None:
        return None, 0
    output = tuple(int(t) for t in leak.evidence["output"])
    start, end = span
    t, own, sent = start, 0, 0
    for _ in range(FORCED_ROUNDS):
        forced = dataclasses.replace(spec, id=f"{spec.id}~forced", prompt_ids=(*spec.prompt_ids, *output[:t]),
                                     max_tokens=end - t, n=1, ignore_eos=True, cancel_after_ms=None)
        record = await runner.run_alone(forced, run=run)
        sent += 1
        if not record.ok or not record.choices:
            return None, sent
        c = record.choices[0]
        j = 0
        while t < end and j < len(c.token_ids) and c.token_ids[j] == output[t]:
            own, t, j = own + 1, t + 1, j + 1
        if t >= end:
            return OwnContinuation("engine", end - start, own, tolerance), sent
        if j >= len(c.token_ids) or j >= len(c.top_logprobs):
            return None, sent
        top = dict(c.top_logprobs[j])
        best = max(top.values(), default=None)
        if best is None:
            return None, sent
        mine = top.get(output[t])
        if mine is None:
            bound = best - min(top.values())  # the deviant token is below the whole top-k
            if bound > tolerance:
                return OwnContinuation("engine", end - start, own, tolerance, first_other=t), sent
            return None, sent
        if best - mine > tolerance:
            return OwnContinuation("engine", end - start, own, tolerance, first_other=t, gap=best - mine), sent
        own, t = own + 1, t + 1  # a near-tie: the victim's own context might write it; force it
    return None, sent


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
    return _on_new_server(DETERMINISTIC, det, scenario, expect, runs, original)


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


def _on_new_server(
    name: str, launch: Launch, scenario: Scenario, expect: Expectation, runs: int, original: Reproduction
) -> Control:
    """Replay `scenario` on a server started from `launch` and read each suspect's deviations
    there against those in the `original` replays (the controls that need their own server)."""
    victims = suspects(expect) or expect.flagged
    with Replayer(launch) as bench:
        rep = bench.reproduce(scenario, expect, runs)
    results = tuple(
        read_control(name, rid, original=deviating_runs(rid, original.loaded, original.alone),
                     control=deviating_runs(rid, rep.loaded, rep.alone))
        for rid in victims
    )
    return Control(results, rep)


def confirmed(finding: Finding, rep: Reproduction) -> Finding:
    """`finding` with the confirmation `rep` measured; marked flaky when it did not come back."""
    notes = list(finding.notes)
    if rep.flaky:
        notes.append(f"flaky: reproduced in 0/{rep.attempts} replays")
    if rep.lost is not None:
        notes.append(f"replays cut short: {rep.lost}")
    return dataclasses.replace(finding, confirmation=rep.confirmation, notes=tuple(dict.fromkeys(notes)))


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
    computes on, or that servefuzz put stand-ins on its path: servefuzz says these in the runner's
    target info, so a campaign's
    config.json, its findings and a shrunk finding record them (and replay rebuilds the profile
    by name)."""
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
        self, launch: Launch, out: Path, *, headers: Mapping[str, str] | None = None, config: RunConfig = _DEFAULT_CONFIG
    ) -> None:
        self.launch = launch
        self.out = out
        self.headers = dict(headers or {})
        self.config = config
        self.engine = launch.engine or None  # a user's command may leave it to detection
        # A stand-in logs every call of its helpers there (standins/sgl_kernel): the record of
        # whether a campaign's path ran through servefuzz's code rather than the engine's.
        env = {**launch.env, "SERVEFUZZ_STANDIN_LOG": str(out / STANDIN_LOG)} if launch.standins else launch.env
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
        # Starting takes seconds (vLLM: tens of them); a thread keeps the event loop free.
        url = await asyncio.to_thread(self.process.restart if again else self.process.start)
        self._write_state()
        target = await open_target(url, self.engine, headers=self.headers, **self.launch.target_opts)
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
