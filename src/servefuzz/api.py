"""servefuzz as a library: what each command does, as functions an engine team can call from pytest.

    from servefuzz import fuzz, replay, shrink, triage, report

    result = fuzz(launch="vllm-cpu", out=tmp_path / "c", requests=500, stop_at_first=False)
    assert not [f for _, f in result.findings if f.verdict.value == "corruption"]
    for path, finding in result.findings:
        again = replay(finding, launch="vllm-cpu", runs=10)
        print(again.rate, again.confirmed)

Every function takes keyword arguments only (after the finding), raises `ServefuzzError`
subclasses for bad input and unusable targets, and prints nothing; the command line
(`servefuzz.cli`) is a thin layer over them. A finding may be given as a `Finding` or as the
path of its file; replay, shrink and triage judge a finding file in a campaign's `findings/`
against that campaign's noise model (`noise.json`), as the campaign judged it, and a `Finding`
object (no path, no campaign) against its scenario's own noise only. Servers are named the same way everywhere: `url` (a server someone else
runs) or `launch` (a preset, `reference`, `vllm-cpu`, `llama-server`, or a command with
`{port}`, which servefuzz starts, owns and stops: words, or an `engines.request.LaunchRequest`
parsed from them), with `engine_python` naming the interpreter of the user's own install of a
Python engine (vLLM, SGLang) for its preset. A bad value is one line that names the parameter
as these functions spell it (`launch=`, `engine_python=`); the command line spells it with
dashes (`--launch`, `--engine-python`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servefuzz import bisection, engine_files, engines, presets, stats
from servefuzz.bisector import bisect as bisect_versions
from servefuzz.campaign import CampaignConfig, CampaignResult, CampaignState, run_campaign, run_campaign_on
from servefuzz.covering import PairwiseCover
from servefuzz.engines.reference import ARCHS as REFERENCE_ARCHS
from servefuzz.engines.reference import SPEC as REFERENCE
from servefuzz.engines.reference import ZOO_SETTINGS
from servefuzz.engines.request import LaunchRequest
from servefuzz.errors import UsageError
from servefuzz.finding import BisectStep, Finding, TriageOutcome, load_finding
from servefuzz.history import RunHistory
from servefuzz.install import install as install_version
from servefuzz.launcher import Launch
from servefuzz.oracles.judge import Expectation
from servefuzz.oracles.noise import CampaignNoise
from servefuzz.realmodel import truth_folder
from servefuzz.replay_report import ReplayResult, replay_result
from servefuzz.reports import ReportPaths, write_report
from servefuzz.reports.coverage_page import write_coverage_page
from servefuzz.reports.issue_md import WRITEUP_NAME, load_writeup
from servefuzz.runner import RunConfig, Runner
from servefuzz.sanitize import one_line
from servefuzz.servers import LaunchedServer, Replayer, open_target
from servefuzz.shrinker import Shrunk, shrink_finding
from servefuzz.store import campaign_lock, check_campaign_dir, check_not_in_use, finding_noise, stored_config
from servefuzz.strategies import get_strategies
from servefuzz.traces import load_trace_seeds
from servefuzz.triager import triage as triage_matrix
from servefuzz.trial import DEFAULT_RUNS

__all__ = [
    "COVERAGE_PAGE",
    "EMBEDDED_FAULT",
    "EMBEDDED_TIME_S",
    "REMOTE_TIME_S",
    "FuzzOptions",
    "Shrunk",
    "embedded_banner",
    "fuzz",
    "replay",
    "shrink",
    "triage",
    "bisect",
    "report",
]

# The seed's bug class, planted so that a newcomer's first run shows a finding being made.
COVERAGE_PAGE = "coverage.html"  # written into the campaign dir at the end of a `coverage` campaign
EMBEDDED_FAULT = "page-boundary-prefix"
# The embedded default must end by itself within two minutes, start-up and confirmation included.
EMBEDDED_TIME_S = 90.0
# Against a real server, bugs hide longer; a campaign without a budget runs this long.
REMOTE_TIME_S = 600.0

@dataclass(frozen=True, kw_only=True)
class FuzzOptions:
    """Everything `servefuzz fuzz` can be told.

    The target: `url` (a server someone else runs), or `launch` (a preset or a command with
    `{port}` that servefuzz starts, serving `model`; a Python engine's preset runs the install
    whose interpreter `engine_python` names, a venv's folder or its python), or neither: the embedded reference engine
    with `faults` planted (None: the embedded default plants EMBEDDED_FAULT, a reference engine
    launched by name is clean; `--fault` applies to the reference engine only). `engine` None:
    detected from the server's answers. `seed` and
    `strategy` None mean: 0 and "mix" for a new campaign, the stored ones on `resume`. `trace`:
    a Mooncake-style JSONL trace whose windows seed the corpus.
    """

    out: Path = Path("servefuzz-out")
    url: str | None = None
    launch: str | LaunchRequest | None = None
    # The interpreter (or venv folder) of the user's own install of the `launch` preset's engine;
    # None: servefuzz's own interpreter where it imports the engine and no @VERSION is asked,
    # else the engine cache (`presets.find`).
    engine_python: Path | None = None
    model: Path | None = None
    # A feature profile of the `launch` preset (`engines.PROFILES`): its flags go on the command
    # line, its name into config.json and every finding.
    profile: str | None = None
    engine: str | None = None
    faults: tuple[str, ...] | None = None
    # The reference engine's model architecture (`engines.reference.ARCHS`: llama, qwen3-next);
    # None: llama, or what a planted fault needs (`ZOO_SETTINGS`). A preset's model of another
    # architecture is `model` (the CLI's `--model-arch` builds it).
    model_arch: str | None = None
    requests: int | None = None
    time_s: float | None = None
    seed: int | None = None
    runs: int = 2
    confirm_runs: int = 5
    strategy: str | None = None
    stop_at_first: bool | None = None  # None: yes on the embedded default, no on a real server
    resume: bool = False
    trace: Path | None = None
    slowdowns: bool = False
    # Pairwise feature coverage (`servefuzz.coverage`): steers the campaign toward pairs of
    # feature buckets it has not tried, kept in coverage.json and drawn in coverage.html. None:
    # on for the default mix, off when one strategy is named (the user asked for that workload
    # alone). On by default: in 10 minutes it tried 99% of the 507 pairs where the mix alone
    # tried 73%, and with each zoo fault's own strategy left out it found 13 of 14 (fault, seed)
    # within 5 minutes where the mix alone found 12 (docs/benchmarks.md).
    coverage: bool | None = None
    # Engine coverage (`CampaignConfig.engine_coverage`): a launched reference engine traces its
    # own code (`--coverage`), a launched vLLM or SGLang runs servefuzz's tracer in its processes
    # (`LaunchedServer(engine_coverage=...)`), and the search steers by the points they reach;
    # False: neither. None: on where its cost is small, the reference engine (0.75x its
    # requests/s), off on vLLM and SGLang (0.53x and 0.67x), where nothing has yet shown that
    # steering by it pays for half the requests (docs/benchmarks.md): `uses_engine_coverage`.
    engine_coverage: bool | None = None
    # Sent with every request (auth: `targets.auth_headers`); never written anywhere.
    headers: Mapping[str, str] = dataclasses.field(default_factory=dict, repr=False)
    # Prompts of natural text in the target's own tokens where its model has a real tokenizer
    # (`servefuzz.natural`); False: random token ids always (servefuzz's random models get them anyway).
    natural_text: bool = True
    # A request unanswered this long is a hang; None: scaled with the target's measured speed,
    # never below RunConfig.request_timeout_s (`servefuzz.pace`).
    request_timeout_s: float | None = None
    # Scale-out (`servefuzz.scaleout`, the `ray` extra): `workers` Ray actors on the cluster at
    # `ray` ("local": one started on this machine), each launching and owning its own server.
    ray: str | None = None
    workers: int = 1
    gpus_per_worker: float = 0.0

    @functools.cached_property
    def request(self) -> LaunchRequest | None:
        """`launch`, parsed once (with `engine_python`); None without one."""
        if self.launch is None:
            return None
        return LaunchRequest.of(self.launch, engine_python=self.engine_python)

    @property
    def preset(self) -> str:
        """The preset `launch` names ("" for none, or a command of the user's own)."""
        return self.request.name if self.request is not None else ""

    @property
    def embedded(self) -> bool:
        """No target named: the embedded reference engine, with its planted fault."""
        return self.url is None and self.launch is None

    def validate(self) -> None:
        """Refuse contradictory options with one line, before anything starts."""
        if self.url is not None and self.launch is not None:
            raise UsageError("give url= (a running server) or launch= (a server to start), not both")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise UsageError(f"url= must start with http:// or https://, got {self.url!r}")
        if self.engine_python is not None and self.launch is None:
            raise UsageError("engine_python= names the install of an engine servefuzz starts: give it with launch= "
                             "(a preset of a Python engine)")
        request = self.request  # parsed: a preset's version, or a command without {port}, is one line
        if self.model is not None and (request is None or request.preset is None or request.is_reference):
            raise UsageError(f"model= names the model a preset serves: give it with launch= one of {', '.join(presets.PLANS)}")
        if self.chosen_profile() is not None:
            # the preset has it (and, for spec-draft, a draft for model=), or one line
            engine_files.profile(self.preset or str(self.launch or ""), self.chosen_profile() or "", model=self.model)
        if self.faults is not None and not (self.url is None and (request is None or request.is_reference)):
            raise UsageError("--fault plants faults in the reference engine; use it without --url, or with --launch reference")
        if self.model_arch is not None:
            if not (self.url is None and (request is None or request.is_reference)):
                raise UsageError("model_arch picks the reference engine's model; a preset serves another architecture "
                                 "as its --model (the CLI's --model-arch builds it)")
            if self.model_arch not in REFERENCE_ARCHS:
                raise UsageError(f"--model-arch {self.model_arch}: the reference engine serves "
                                 f"{', '.join(REFERENCE_ARCHS)}; --launch a preset for the others")
        if self.runs < 2:
            raise UsageError("--runs must be at least 2: replay consistency compares runs")
        if self.ray is None and (self.workers != 1 or self.gpus_per_worker):
            raise UsageError("--workers and --gpus-per-worker run workers on Ray: give --ray ADDRESS (or --ray local)")
        if self.ray is not None and self.url is not None:
            raise UsageError("--ray workers launch and own their servers: give --launch (or no target), not --url")
        if self.workers < 1 or self.gpus_per_worker < 0:
            raise UsageError("--workers must be at least 1 and --gpus-per-worker at least 0")
        self.reference_flags()
        get_strategies(self.identity()[1])
        check_campaign_dir(self.out, resume=self.resume)
        check_not_in_use(self.out)

    @property
    def planted(self) -> tuple[str, ...]:
        """The zoo faults asked for ('none' included), defaults applied."""
        if self.faults is not None:
            return self.faults
        return (EMBEDDED_FAULT,) if self.embedded else ("none",)

    def reference_flags(self) -> list[str]:
        faults = [f for f in self.planted if f != "none"]
        if "none" in self.planted and faults:
            raise UsageError("--fault none cannot be combined with other faults")
        settings = [arg for f in faults for arg in ZOO_SETTINGS.get(f, ())]
        needed = {settings[i + 1] for i, arg in enumerate(settings[:-1]) if arg == "--model-arch"}
        if self.model_arch is not None and needed - {self.model_arch}:
            raise UsageError(f"--fault {', '.join(faults)} needs --model-arch {', '.join(sorted(needed))}, "
                             f"not {self.model_arch}")
        if len(needed) > 1:
            raise UsageError(f"--fault {', '.join(faults)}: these faults need different models ({', '.join(sorted(needed))})")
        arch = ["--model-arch", self.model_arch] if self.model_arch is not None and not needed else []
        traced = [REFERENCE.coverage_flag] if self.uses_engine_coverage() else []
        return [arg for f in faults for arg in ("--fault", f)] + settings + arch + traced

    def identity(self) -> tuple[int, str]:
        """The campaign's seed and strategy spec: as given, else stored (resume), else defaults."""
        stored = self._stored()
        seed = self.seed if self.seed is not None else int(stored.get("seed", 0))
        # The coverage generator is stored among the strategies but is not one to ask for: the
        # campaign adds it itself when coverage is on (`uses_coverage`).
        kept = [n for n in stored.get("strategies") or [] if n != PairwiseCover.name]
        spec = self.strategy or ",".join(kept or ["mix"])
        return seed, spec

    def chosen_profile(self) -> str | None:
        """The feature profile: as given, else (resume) the one the campaign was started under,
        so a resumed campaign goes on against the same server; a different one is refused."""
        stored = self._stored().get("target")
        before = stored.get("profile") if isinstance(stored, dict) else None
        if self.profile is not None and self.resume and before != self.profile:
            was = "no profile" if before is None else f"profile {one_line(before)[:64]}"  # the file is anyone's
            raise UsageError(f"{self.out} was started with {was}; resume it with the same --profile (or none)")
        return self.profile if self.profile is not None else before if isinstance(before, str) else None

    def uses_engine_coverage(self) -> bool:
        """Engine coverage as given; else on for the reference engine (embedded or launched) and
        off for the others (see the field)."""
        if self.engine_coverage is not None:
            return self.engine_coverage
        spec = engines.preset_spec(self.preset) if self.launch is not None else REFERENCE
        return self.url is None and spec is not None and bool(spec.coverage_flag)

    def uses_coverage(self) -> bool:
        """Coverage as given; on resume as the campaign was started; else on for the default mix
        and off when strategies are named."""
        if self.coverage is not None:
            return self.coverage
        stored = self._stored().get("strategies")
        if stored:
            return PairwiseCover.name in stored
        return self.strategy in (None, "mix")

    def _stored(self) -> dict[str, Any]:
        """The campaign dir's config.json when resuming (empty otherwise, or when unreadable)."""
        return stored_config(self.out) if self.resume else {}


def embedded_banner(opts: FuzzOptions) -> str:
    faults = [f for f in opts.planted if f != "none"]
    engine = "the embedded reference engine" + (f" ({opts.model_arch})" if opts.model_arch else "")
    if not faults:
        return f"No target given: fuzzing {engine} with no fault planted."
    return (
        f"No target given: fuzzing {engine} with the planted fault "
        f"{', '.join(faults)} (a known bug, planted on purpose so you can watch servefuzz find it). "
        "Point servefuzz at your own server with --url URL --engine ENGINE."
    )


def fuzz(
    options: FuzzOptions | None = None,
    /,
    *,
    out: str | Path = FuzzOptions.out,
    url: str | None = FuzzOptions.url,
    launch: str | LaunchRequest | None = FuzzOptions.launch,
    engine_python: str | Path | None = FuzzOptions.engine_python,
    model: str | Path | None = FuzzOptions.model,
    profile: str | None = FuzzOptions.profile,
    engine: str | None = FuzzOptions.engine,
    faults: tuple[str, ...] | None = FuzzOptions.faults,
    model_arch: str | None = FuzzOptions.model_arch,
    requests: int | None = FuzzOptions.requests,
    time_s: float | None = FuzzOptions.time_s,
    seed: int | None = FuzzOptions.seed,
    runs: int = FuzzOptions.runs,
    confirm_runs: int = FuzzOptions.confirm_runs,
    strategy: str | None = FuzzOptions.strategy,
    stop_at_first: bool | None = FuzzOptions.stop_at_first,
    resume: bool = FuzzOptions.resume,
    trace: str | Path | None = FuzzOptions.trace,
    slowdowns: bool = FuzzOptions.slowdowns,
    coverage: bool | None = FuzzOptions.coverage,
    engine_coverage: bool | None = FuzzOptions.engine_coverage,
    headers: Mapping[str, str] | None = None,
    request_timeout_s: float | None = FuzzOptions.request_timeout_s,
    natural_text: bool = FuzzOptions.natural_text,
    ray: str | None = FuzzOptions.ray,
    workers: int = FuzzOptions.workers,
    gpus_per_worker: float = FuzzOptions.gpus_per_worker,
    on_event: Callable[[CampaignState], None] | None = None,
) -> CampaignResult:
    """Run one campaign: `fuzz(out=..., launch="vllm-cpu", time_s=60)`, or `fuzz(FuzzOptions(...))`.
    The keywords are the fields of `FuzzOptions`, with its defaults (`headers` None: none sent),
    and mean what its fields mean; give either an options object or keywords, not both
    (`dataclasses.replace(options, ...)` changes one). Starts and stops the server unless `url`
    names a running one; with neither, fuzzes the embedded reference engine. `on_event` is
    called with the campaign's state after every iteration."""
    given = FuzzOptions(
        out=Path(out), url=url, launch=launch, engine_python=None if engine_python is None else Path(engine_python),
        model=None if model is None else Path(model), profile=profile,
        engine=engine, faults=faults, model_arch=model_arch, requests=requests, time_s=time_s, seed=seed, runs=runs,
        confirm_runs=confirm_runs, strategy=strategy, stop_at_first=stop_at_first, resume=resume,
        trace=None if trace is None else Path(trace), slowdowns=slowdowns, coverage=coverage,
        engine_coverage=engine_coverage, headers={} if headers is None else headers,
        request_timeout_s=request_timeout_s, natural_text=natural_text, ray=ray, workers=workers,
        gpus_per_worker=gpus_per_worker,
    )
    opts = given
    if options is not None:
        defaults = FuzzOptions()
        mixed = [f.name for f in dataclasses.fields(FuzzOptions) if getattr(given, f.name) != getattr(defaults, f.name)]
        if mixed:
            raise UsageError(f"fuzz() takes a FuzzOptions or keywords, not both (got {', '.join(mixed)} besides the "
                             "options): change the options with dataclasses.replace(options, ...)")
        opts = options
    if isinstance(opts.out, str):  # a FuzzOptions built by hand with a string for a path
        opts = dataclasses.replace(opts, out=Path(opts.out))
    opts.validate()
    seed, spec = opts.identity()
    strategies = get_strategies(spec)
    profile = opts.chosen_profile()
    aims = () if profile is None else engine_files.profile(opts.preset, profile, model=opts.model).aims
    seeds = load_trace_seeds(opts.trace) if opts.trace is not None else ()
    time_s = opts.time_s
    if time_s is None and opts.requests is None:
        time_s = EMBEDDED_TIME_S if opts.embedded else REMOTE_TIME_S
    config = CampaignConfig(
        out_dir=opts.out,
        seed=seed,
        runs=opts.runs,
        confirm_runs=opts.confirm_runs,
        time_budget_s=time_s,
        request_budget=opts.requests,
        stop_at_first=opts.embedded if opts.stop_at_first is None else opts.stop_at_first,
        performance=opts.slowdowns,
        resume=opts.resume,
        coverage=opts.uses_coverage(),
        aims=aims,
        engine_coverage=opts.uses_engine_coverage(),
    )
    events = on_event or (lambda state: None)
    # Slowdowns compare each request's latency under load with its own alone: a reference reused
    # from an earlier scenario carries an earlier moment's latency, so with them every one is sent.
    run_config = RunConfig.timing_out(opts.request_timeout_s, reuse_references=not opts.slowdowns,
                                      natural_text=opts.natural_text)

    # The server to start, found and checked (its engine, version and flags) before the campaign's
    # directory is made or locked: a bad engine leaves nothing behind.
    started = None if opts.url is not None else Launch.resolve(
        opts.request or LaunchRequest.parse("reference"), model=opts.model, engine=opts.engine,
        reference_flags=opts.reference_flags(), profile=profile)

    async def go() -> CampaignResult:
        if opts.url is not None:
            target = await open_target(opts.url, opts.engine, headers=opts.headers)
            async with Runner(target, run_config) as runner:
                return await run_campaign(runner, strategies, config, seeds=seeds, on_event=events)
        assert started is not None  # resolved above for every target but a URL
        # servefuzz started the server, so its controls may start more: the deterministic
        # control gets `launch`, and the truth control the model servefuzz built (if it is one).
        launched = dataclasses.replace(config, launch=started, truth_model=_built_model(opts.preset, opts.model))
        opts.out.mkdir(parents=True, exist_ok=True)
        if opts.ray is not None:
            from servefuzz.scaleout import ray_workers  # the optional extra: imported only when asked for

            async with ray_workers(opts.ray, opts.workers, started, opts.out, headers=opts.headers, config=run_config,
                                   gpus_per_worker=opts.gpus_per_worker) as workers:
                return await run_campaign_on(workers, strategies, launched, seeds=seeds, on_event=events)
        async with LaunchedServer(started, opts.out, headers=opts.headers, config=run_config,
                                  engine_coverage=opts.uses_engine_coverage()) as server:
            return await run_campaign(server.runner, strategies, launched, seeds=seeds, on_event=events, revival=server)

    # One campaign in a directory at a time, from before its server starts (whose log and
    # server.json live there too) to the coverage page.
    with campaign_lock(opts.out):
        result = asyncio.run(go())
        if result.coverage is not None:
            write_coverage_page(result.coverage, opts.out / COVERAGE_PAGE, title=str(opts.out), exercise=result.exercise)
    return result


def _built_model(preset: str, model: Path | None) -> Path | None:
    """The model a preset serves when servefuzz built or fetched it (the truth control computes it
    exactly: `realmodel.truth_folder` says which fetched forms it can, `engine_files.built_truth` which
    builds: `--model-arch`'s too, whose campaigns had no truth before); None for a user's model,
    which may be far too big to hold in float64, and for the reference engine, whose numerics are
    exact already."""
    if model is not None:
        return (truth_folder(model) or engine_files.built_truth(preset, model)) if preset else None
    return presets.built_model(preset)


def _finding(finding: Finding | str | Path) -> tuple[Finding, CampaignNoise | None]:
    """The finding, and the noise model of the campaign its file belongs to: a replayed finding
    is judged against the same campaign-wide threshold as when it was found, or a flip the
    campaign excused could come back as corruption (or the other way). A `Finding` object
    carries no path, so no campaign: None, and the scenario's own noise decides alone."""
    if isinstance(finding, Finding):
        return finding, None
    return load_finding(finding), finding_noise(Path(finding))


def _request(launch: str | LaunchRequest | None, engine_python: Path | None) -> LaunchRequest | None:
    """`launch` parsed once, with `engine_python`; None without a launch (one line where
    `engine_python` is given without one)."""
    if launch is None:
        if engine_python is not None:
            raise UsageError("engine_python= names the install of an engine servefuzz starts: give it with launch=")
        return None
    return LaunchRequest.of(launch, engine_python=None if engine_python is None else Path(engine_python))


def _bench(
    finding: Finding, url: str | None, launch: LaunchRequest | None, engine: str | None, model: Path | None,
    headers: Mapping[str, str] | None,
    request_timeout_s: float | None,
    noise: CampaignNoise | None,
) -> Replayer:
    """The server a finding is replayed on: one at `url`, or one servefuzz starts from `launch`."""
    if (url is None) == (launch is None):
        raise UsageError("give a server to replay on: url= (--base-url, a running server) or launch= (a preset or "
                         "command servefuzz starts), one of them")
    config = RunConfig.timing_out(request_timeout_s)
    if launch is not None:
        return Replayer(Launch.resolve(launch, finding.target, model=model, engine=engine), headers=headers,
                        config=config, noise=noise)
    assert url is not None
    return Replayer.at(engine or finding.target.engine, url, headers=headers, config=config, noise=noise)


def replay(
    finding: Finding | str | Path,
    *,
    url: str | None = None,
    launch: str | LaunchRequest | None = None,
    engine_python: Path | None = None,
    engine: str | None = None,
    model: Path | None = None,
    runs: int = DEFAULT_RUNS,
    headers: Mapping[str, str] | None = None,
    request_timeout_s: float | None = None,
) -> ReplayResult:
    """Replay a finding's scenario `runs` times (each on a flushed cache) and say whether it came
    back, by the rule the campaign confirmed it with (`oracles.judge.reproduction`); verdicts
    are held against the campaign's noise model when `finding` is a path in a campaign's
    `findings/` (not for a `Finding` object, which has no campaign)."""
    if runs < 1:
        raise UsageError("--runs must be at least 1")
    found, noise = _finding(finding)
    with _bench(found, url, _request(launch, engine_python), engine, model, headers, request_timeout_s, noise) as bench:
        rep = bench.reproduce(found.scenario, Expectation.of(found), runs)
        promise = bench.info.promise  # the replaying server's mode: its flips are held to it
    return replay_result(found, rep.confirmation, rep.judgement, promise)


def shrink(
    finding: Finding | str | Path,
    *,
    url: str | None = None,
    launch: str | LaunchRequest | None = None,
    engine_python: Path | None = None,
    engine: str | None = None,
    model: Path | None = None,
    runs: int = stats.REPRODUCTION.cap,
    budget: int | None = 300,
    confirm_runs: int = DEFAULT_RUNS,
    restart: bool = True,
    headers: Mapping[str, str] | None = None,
    request_timeout_s: float | None = None,
) -> Shrunk:
    """The smallest scenario that still shows the finding (see `servefuzz.shrinker`); `runs` caps
    the replays of the finding's own re-check and of each candidate (each stops once decided).
    A finding file's campaign noise model holds every candidate's verdict, as in `replay`."""
    found, noise = _finding(finding)
    with _bench(found, url, _request(launch, engine_python), engine, model, headers, request_timeout_s, noise) as bench:
        return shrink_finding(found, bench, runs=runs, budget=budget, confirm_runs=confirm_runs, restart=restart)


def triage(
    finding: Finding | str | Path,
    *,
    launch: str | LaunchRequest,
    engine_python: Path | None = None,
    engine: str | None = None,
    model: Path | None = None,
    runs: int = DEFAULT_RUNS,
    parallel: int = 1,
    on_row: Callable[[TriageOutcome], None] | None = None,
    ray: str | None = None,
    gpus_per_worker: float = 0.0,
) -> Finding:
    """The finding with its flag matrix attached: one fresh server per variant (see `servefuzz.triager`),
    every row judged against a finding file's campaign noise model, as in `replay`. `ray`: each
    row a Ray task with its own server on the cluster at that address ("local": one started on
    this machine), holding `gpus_per_worker` GPUs (`servefuzz.scaleout`, the `ray` extra)."""
    if ray is None and gpus_per_worker:
        raise UsageError("--gpus-per-worker runs rows on Ray: give --ray ADDRESS (or --ray local)")
    found, noise = _finding(finding)
    start = Launch.resolve(LaunchRequest.of(launch, engine_python=engine_python), found.target, model=model, engine=engine)
    rows = on_row or (lambda row: None)
    if ray is not None:
        from servefuzz.scaleout import ray_rows  # the optional extra: imported only when asked for

        with ray_rows(ray, parallel, gpus_per_row=gpus_per_worker) as run:
            result = triage_matrix(found, start, runs=runs, parallel=parallel, on_row=rows, noise=noise, run=run)
    else:
        result = triage_matrix(found, start, runs=runs, parallel=parallel, on_row=rows, noise=noise)
    return dataclasses.replace(found, triage=result)


def bisect(
    finding: Finding | str | Path,
    *,
    launch: str | LaunchRequest,
    versions: str,
    engine: str | None = None,
    model: Path | None = None,
    runs: int = stats.REPRODUCTION.cap,
    install: bool = True,
    max_versions: int | None = None,
    on_step: Callable[[BisectStep], None] | None = None,
    on_install: Callable[[str], None] | None = None,
) -> Finding:
    """The finding with its bisection attached (`Finding.bisect`): the versions `A..B` of the
    preset `launch` (a preset that takes versions, given without one), each tried on a fresh
    server and replayed by the one reproduction rule until the sequential test decides (at most
    `runs` replays), chosen by `servefuzz.bisection`. A version not in the engine cache is
    installed first (`servefuzz.install`) unless `install` is False; one that cannot be built or
    started is undecided and stepped around. `max_versions`: try at most that many (the record
    then says where the search stands). Verdicts are held against a finding file's campaign
    noise model, as in `replay`."""
    if runs < 1:
        raise UsageError("--runs must be at least 1")
    if max_versions is not None and max_versions < 2:
        raise UsageError("--max-versions must be at least 2 (the newest and the oldest come first)")
    request = LaunchRequest.of(launch)
    if request.preset is None or request.preset not in engines.PRESET_VERSIONS:
        takes = ", ".join(engines.PRESET_VERSIONS)
        raise UsageError(f"bisect launch={request.given[:80]!r}: name a preset that takes versions ({takes})")
    if request.version or request.engine_python is not None:
        raise UsageError(f"bisect launch={request.given[:80]!r}: give the preset alone; versions= (--versions) says "
                         "which versions, each from the engine cache")
    preset = request.preset
    span = bisection.span(engines.PRESET_VERSIONS[preset].ladder, versions)
    found, noise = _finding(finding)

    def launch_of(version: str) -> Launch:
        if install and not engine_files.installed(preset, version):
            install_version(request.at(version), say=on_install)
        return Launch.resolve(request.at(version), found.target, model=model, engine=engine)

    search = bisect_versions(found, span, launch_of, runs=runs, noise=noise, on_step=on_step, max_versions=max_versions)
    return dataclasses.replace(found, bisect=search.record(preset, versions))


def report(
    finding: Finding | str | Path,
    *,
    out: str | Path,
    histories: Sequence[RunHistory] | None = None,
    writeup: str | Path | None = None,
) -> ReportPaths:
    """Write repro_full.py, issue.md and report.html for the finding into `out`; issue.md takes a
    person's `writeup` (a JSON file: title, mechanism, versions, version_output, environment,
    traceback), by default `writeup.json` beside the finding file when there is one."""
    found = _finding(finding)[0]
    given = Path(writeup) if writeup is not None else None
    if given is None and isinstance(finding, str | Path) and (beside := Path(finding).with_name(WRITEUP_NAME)).is_file():
        given = beside
    return write_report(found, out, histories or (), load_writeup(given) if given is not None else None)
