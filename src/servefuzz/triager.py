"""Triage: which part of the server a finding lives in, found by relaunching it under flag variants.

    $ servefuzz triage findings/finding_00003_123_min.json --launch reference
    variant                     rate (95% CI)                decision             component
    baseline                    10/10 (100%, 95% CI 72-100%)
    --disable-radix-cache       0/3 (0%, 95% CI 0-56%)       cured p=0.0035       radix cache
    --disable-overlap-schedule  1/1 (100%, 95% CI 21-100%)   still there p=1      overlap scheduler
    ...

Each row is a fresh server: first the baseline exactly as launched, then one per variant of
the engine's matrix (its spec's `triage`, data: flags to add, flags to drop, environment,
adapter options and the component a cure implicates). The finding is replayed under each with the one
reproduction path (`trial.reproduce`), on a fresh server (`servers.replay_fresh`). Every decision is a test from `servefuzz.stats`: the
baseline runs at least `runs` times and until the sequential test decides that it reproduces
(up to 4x); a variant is *cured* only when its 0/n is significantly below the baseline's rate
(one-sided Fisher exact test, p < 0.01, the p-value printed), *still there* when the finding
came back, and *undecided* when no number of runs up to the cap could make 0/n significant
(a baseline of 1/5 cannot vouch for any cure). Rows share the machine when run in parallel,
which shifts timing: timing-sensitive findings triage most faithfully one row at a time. A
variant that would change nothing (the baseline already runs that way) is reported, not run.
Variants run one after another, or `--parallel N` at a time (`--ray`: each row a Ray task with
its own server, on whichever node has room).

The finding with its `Triage` (and the known upstream issues it matches, from
`servefuzz.known_issues`) is written beside the original as `<name>_triaged.json`, replacing an
earlier triage of it; the original file is never touched.

`servefuzz triage` (in `servefuzz.cli`) reports rows as they finish and the matrix at the end.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Protocol

from servefuzz import known_issues, stats
from servefuzz.anomaly import Verdict
from servefuzz.engine_flags import FlagVariant, variant
from servefuzz.engines.registry import spec_of
from servefuzz.errors import ServefuzzError, TargetError, UsageError
from servefuzz.finding import Finding, Triage, TriageOutcome, derived_name
from servefuzz.launcher import Launch
from servefuzz.oracles.judge import Expectation
from servefuzz.oracles.noise import CampaignNoise
from servefuzz.servers import replay_fresh
from servefuzz.trial import DEFAULT_RUNS

__all__ = [
    "FlagVariant",
    "RowRunner",
    "matrix_for",
    "matrix_of",
    "profile_rows",
    "run_row",
    "triage",
    "triaged_name",
    "render_matrix",
]

# Rows replay at most this many times --runs to decide.
_MAX_RUNS_FACTOR = 4


def matrix_for(engine: str) -> tuple[FlagVariant, ...]:
    """The variants for `engine`'s dialect (its spec's `triage`); `openai` servers get none
    (flags unknown)."""
    return spec_of(engine).triage


def profile_rows(launch: Launch) -> tuple[FlagVariant, ...]:
    """For a launch under a feature profile: a row that takes it back to the preset's default
    (a cure there implicates the profile's feature), then the profile's own switches one at a
    time (`--cache-reuse 0`). None for a launch without a profile, or under `default`.

    >>> from servefuzz.engine_files import profile
    >>> p = profile("llama-server", "cache-reuse")
    >>> rows = profile_rows(Launch("llamacpp", ("srv", "--cache-reuse", "64"), profile=p, default_argv=("srv",)))
    >>> [(r.name, r.add, r.drop) for r in rows]
    [('no profile cache-reuse', (), ('--cache-reuse',)), ('--cache-reuse 0', ('--cache-reuse', '0'), ())]
    """
    p = launch.profile
    if p is None or not p.flags:
        return ()
    add, drop = p.undo(launch.default_argv)
    back = FlagVariant(f"no profile {p.name}", p.component, add=add, drop=drop)
    return (back, *(variant(words, component) for words, component in p.rows))


def matrix_of(launch: Launch) -> tuple[FlagVariant, ...]:
    """The rows triage relaunches `launch` under: its profile's (`profile_rows`), then its
    engine's, less those that start only on a GPU when the launch is known to compute on the CPU."""
    rows = (*profile_rows(launch), *matrix_for(launch.engine))
    return tuple(r for r in rows if not (r.gpu_only and launch.device == "cpu"))


def run_row(
    finding: Finding,
    launch: Launch,
    variant: FlagVariant | None,
    *,
    runs: int,
    stop: Callable[[int, int], bool] | None = None,
    log_dir: Path | None = None,
    noise: CampaignNoise | None = None,
) -> TriageOutcome:
    """Replay `finding` up to `runs` times (`stop` as in `trial.reproduce`) on a fresh server
    launched with `variant` (None: the baseline), its verdicts held against the campaign's
    `noise` too (`store.finding_noise`) when the finding has one."""
    name = "baseline" if variant is None else variant.name
    row = TriageOutcome(name) if variant is None else TriageOutcome(
        name, flags=variant.flags, env=variant.env, component=variant.component
    )
    if variant is not None and not variant.changes(launch):
        return dataclasses.replace(row, error="no change: the baseline already runs this way")
    relaunch = launch if variant is None else variant.apply(launch)
    log = None if log_dir is None else log_dir / f"server-{_slug(name)}.log"
    try:
        fresh = replay_fresh(relaunch, finding.scenario, Expectation.of(finding), runs, stop=stop, log_path=log,
                             noise=noise)
    except ServefuzzError as e:
        return dataclasses.replace(row, error=str(e))
    rep = fresh.reproduction
    error = None if fresh.gone is None else f"the server went away under this variant: {fresh.gone}"
    return dataclasses.replace(row, reproduced=rep.reproduced, attempts=rep.attempts, error=error)


class RowRunner(Protocol):
    """Runs one row of the matrix (`run_row`'s signature): here, or elsewhere (`servefuzz.scaleout`
    runs each row as a Ray task with its own server)."""

    def __call__(
        self,
        finding: Finding,
        launch: Launch,
        variant: FlagVariant | None,
        *,
        runs: int,
        stop: Callable[[int, int], bool] | None = None,
        log_dir: Path | None = None,
        noise: CampaignNoise | None = None,
    ) -> TriageOutcome: ...


def triage(
    finding: Finding,
    launch: Launch,
    *,
    runs: int = DEFAULT_RUNS,
    parallel: int = 1,
    log_dir: Path | None = None,
    on_row: Callable[[TriageOutcome], None] = lambda row: None,
    noise: CampaignNoise | None = None,
    run: RowRunner = run_row,
) -> Triage:
    """The baseline and every variant of the launch's engine, `parallel` servers at a time,
    plus the known upstream issues the finding matches given this matrix. `noise`: the
    campaign's noise model, which every row's replays are judged against (as `run_row`).
    `run`: where each row runs (default: a server on this machine)."""
    if runs < 1 or parallel < 1:
        raise UsageError("--runs and --parallel must be at least 1")
    # The baseline runs at least `runs` times and goes on (up to 4x) until the sequential test
    # decides that it reproduces: without a baseline that shows the finding, no variant can be
    # said to cure it, and a weak baseline makes every cure insignificant.
    baseline = run(finding, launch, None, runs=_MAX_RUNS_FACTOR * runs, log_dir=log_dir, noise=noise,
                       stop=lambda seen, done: done >= runs and stats.decide(seen, done) != stats.UNDECIDED)
    if baseline.error is not None:
        raise TargetError(f"the baseline server could not be used: {baseline.error}")
    on_row(baseline)
    test = stats.CureTest(cap=_MAX_RUNS_FACTOR * runs)
    base = baseline.interval
    # Runs per row: as many clean runs as make 0/n significant against this baseline; when no
    # number up to the cap can (a baseline that did not or barely reproduced), `runs`: the row
    # can then only say "still there" or "undecided", never "cured".
    each = max(runs, (test.runs_to_cure(base) if baseline.reproduced else None) or runs)

    def one(variant: FlagVariant) -> TriageOutcome:
        # Replays until the row is decided: a recurrence says "still there" at once.
        row = run(finding, launch, variant, runs=each, log_dir=log_dir, noise=noise,
                      stop=lambda seen, done: test.decide(stats.Rate(seen, done), base) != stats.UNDECIDED)
        on_row(row)
        return row

    with ThreadPoolExecutor(max_workers=parallel) as pool:
        rows = tuple(pool.map(one, matrix_of(launch)))
    result = Triage(baseline=baseline, variants=rows)
    matches = known_issues.match(dataclasses.replace(finding, triage=result), result)
    return dataclasses.replace(result, known_issues=tuple(m.to_json() for m in matches))


def triaged_name(path: Path) -> str:
    """The triaged finding's file name, beside the original: `finding_00003_123_triaged.json`
    (a triaged finding triaged again: `..._triaged2.json`, so that its first matrix stays)."""
    return derived_name(path, "triaged")


def render_matrix(finding: Finding, result: Triage) -> list[str]:
    """The matrix (variant, rate, cured?, component), what the cures implicate, and known issues."""
    rows = [result.baseline, *result.variants]
    width = max(len(r.name) for r in rows) + 2
    lines = [f"{'variant':<{width}} {'rate (95% CI)':<28} {'decision':<20} component"]
    for r in rows:
        rate = "-" if r.error else str(r.interval)
        if r is result.baseline or r.error:
            decided = ""
        else:
            verdict, p = result.decision(r)
            decided = verdict + ("" if p is None else f" p={p:.2g}")
        tail = f"({r.error})" if r.error else r.component
        lines.append(f"{r.name:<{width}} {rate:<28} {decided:<20} {tail}".rstrip())
    kind = "numeric drift (benign batch numerics)" if finding.verdict is Verdict.NUMERIC_DRIFT else finding.verdict.value
    lines.append(f"verdict: {kind}")
    if result.baseline.reproduced == 0:
        lines.append("the baseline did not reproduce the finding, so no variant can be said to cure it")
    elif result.cures:
        lines.append("cured by: " + ", ".join(r.name for r in result.cures)
                     + " (each significantly below the baseline, p < 0.01)")
        lines.append("implicated: " + ", ".join(result.implicated))
    else:
        undecided = [r.name for r in result.variants if result.decision(r)[0] == stats.UNDECIDED and not r.error]
        lines.append("no variant cured it significantly" + (
            f"; undecided (0 recurrences, but too few runs against this baseline to say cured): {', '.join(undecided)}"
            if undecided else ""))
    if "sgl_kernel" in finding.target.standins:
        # The stand-in sits inside the state under test (standins/sgl_kernel): say where it does.
        lines.append("stand-in: the server ran with servefuzz's sgl_kernel in place of SGLang's kernel package; "
                     "its KV-slot write and KV row move (speculative decoding and pool moves only) are checked "
                     "against SGLang's own kernels, its speculative-decoding helpers refuse to run; "
                     "calls, if any: server.log ('servefuzz stand-in') and DIR/standin_calls.jsonl")
    if "triton-interpreter" in finding.target.standins:
        lines.append("interpreter: SGLang's own paged-allocator kernels ran under Triton's interpreter (a CPU has no "
                     "Triton driver), checked against SGLang's torch version of them; at page size 1 they do not run")
    for m in result.known_issues:
        lines.append(f"known issue {m['id']}: {m.get('title', '')}")
        lines += [f"  + {reason}" for reason in m.get("reasons", ())]
        lines += [f"  - {reason}" for reason in m.get("against", ())]
    return lines


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in name).strip("-") or "baseline"
