"""Triage: which part of the server a finding lives in, found by relaunching it under flag variants.

    $ servefuzz triage findings/finding_00003_123_min.json --launch reference
    variant                            rate   cured  component
    baseline                           10/10
    --disable-radix-cache              0/10   yes    radix cache
    --disable-overlap-schedule         10/10         overlap scheduler
    ...

Each row is a fresh server: first the baseline exactly as launched, then one per variant of
the engine's matrix (`MATRICES`, data: flags to add, flags to drop, environment, adapter options
and the component a cure implicates). The finding is replayed under each with confirmation's
test (`trial.reproduce`); a variant under which it never comes back, while the baseline still
shows it, is a cure. The baseline gets `runs` replays, more (up to 4x) while the finding has
not shown at all; so that a cure is not luck, a variant gets `runs` replays or more: enough that
a finding as frequent as on the baseline would show at least once with 99% probability (at most
4x `runs`). Rows share the machine when run in parallel, which shifts timing: timing-sensitive
findings triage most faithfully one row at a time. A variant that would change nothing (the baseline already runs that way)
is reported, not run. Variants run one after another, or `--parallel N` at a time.

The finding with its `Triage` (and the known upstream issues it matches, from
`servefuzz.known_issues`) is written beside the original as `<name>_triaged.json`, replacing an
earlier triage of it; the original file is never touched.

`servefuzz triage` (in `servefuzz.cli`) reports rows as they finish and the matrix at the end.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servefuzz import known_issues
from servefuzz.anomaly import Verdict
from servefuzz.errors import ServefuzzError, TargetError, UsageError
from servefuzz.finding import Finding, Triage, TriageOutcome
from servefuzz.launcher import Launch
from servefuzz.oracles.judge import Expectation
from servefuzz.trial import DEFAULT_RUNS, Replayer

__all__ = [
    "FlagVariant",
    "MATRICES",
    "matrix_for",
    "run_row",
    "runs_for_cure",
    "triage",
    "triaged_name",
    "render_matrix",
]

# A cure is claimed when the chance that a baseline-frequent finding missed every replay by luck
# is at most this; variants get at most this many times --runs replays to get there.
_LUCK = 0.01
_MAX_RUNS_FACTOR = 4


@dataclass(frozen=True)
class FlagVariant:
    """One way of relaunching a server: argv tokens to add (a flag already there gets the new
    value), switches to drop, environment to set, adapter options, and the component a cure
    by this variant implicates.

    >>> v = FlagVariant("-np 1", "parallel slots", add=("-np", "1"), drop=("--cont-batching",))
    >>> v.apply_argv(["llama-server", "-np", "8", "--cont-batching", "--port", "{port}"])
    ['llama-server', '--port', '{port}', '-np', '1']
    """

    name: str
    component: str
    add: tuple[str, ...] = ()
    drop: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    target_opts: Mapping[str, Any] = field(default_factory=dict)

    def apply_argv(self, argv: Sequence[str]) -> list[str]:
        replaced = [flag for flag, _ in _pairs(self.add)]
        return _without(argv, {*replaced, *self.drop}) + list(self.add)

    def changes(self, launch: Launch) -> bool:
        """Whether relaunching `launch` with this variant changes anything at all."""
        present = _pairs(launch.argv)
        return (
            any(pair not in present for pair in _pairs(self.add))
            or any(flag in dict(present) for flag in self.drop)
            or any(launch.env.get(k) != v for k, v in self.env.items())
            or any(launch.target_opts.get(k) != v for k, v in self.target_opts.items())
        )

    def apply(self, launch: Launch) -> Launch:
        return launch.with_changes(self.apply_argv(launch.argv), self.env, self.target_opts)

    @property
    def flags(self) -> tuple[str, ...]:
        """What the triage row records as this variant's flags (known issues match on them)."""
        return self.add + tuple(f"{k}={v}" for k, v in self.target_opts.items())


def _is_flag(token: str) -> bool:
    # "-1" is a value (--chunked-prefill-size -1); "-np" and "--page-size" are flags.
    return token.startswith("-") and not token.lstrip("-").replace(".", "", 1).isdigit()


def _pairs(argv: Sequence[str]) -> list[tuple[str, str | None]]:
    """(flag, value or None) for each flag of an argv; `--flag=value` counts as the pair."""
    out: list[tuple[str, str | None]] = []
    for i, token in enumerate(argv):
        if not _is_flag(token):
            continue
        if "=" in token:
            flag, _, value = token.partition("=")
            out.append((flag, value))
        else:
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            out.append((token, nxt if nxt is not None and not _is_flag(nxt) else None))
    return out


def _without(argv: Sequence[str], flags: set[str]) -> list[str]:
    """`argv` without the given flags, each with its value when one follows it."""
    out: list[str] = []
    skip = False
    for i, token in enumerate(argv):
        if skip:
            skip = False
        elif _is_flag(token) and token.partition("=")[0] in flags:
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            skip = "=" not in token and nxt is not None and not _is_flag(nxt)
        else:
            out.append(token)
    return out


def _v(name: str, component: str, *, add: tuple[str, ...] | None = None, **kw: Any) -> FlagVariant:
    """A variant named by its flags (`"--page-size 1"` adds exactly that) unless told otherwise."""
    return FlagVariant(name, component, add=tuple(name.split()) if add is None else add, **kw)


# Per engine (dialect), the variants and what a cure by each implicates: the bisection plan of
# the SGLang survey, the flags that cured the upstream reports, and each engine's own switches.
MATRICES: Mapping[str, tuple[FlagVariant, ...]] = {
    "sglang": (
        _v("--disable-radix-cache", "radix cache (prefix reuse)"),
        _v("SGLANG_RADIX_DISABLE_REUSE=1", "prefix reuse, radix code paths kept", add=(),
           env={"SGLANG_RADIX_DISABLE_REUSE": "1"}),
        _v("--disable-overlap-schedule", "overlap scheduler"),
        _v("--disable-cuda-graph", "CUDA-graph decode (padding)"),
        _v("--attention-backend triton", "attention backend kernels"),
        _v("--chunked-prefill-size -1", "chunked prefill"),
        _v("--page-size 1", "paged KV (page size)"),
        _v("--max-running-requests 1", "continuous batching (concurrency)"),
        _v("--enable-deterministic-inference", "batch-variant numerics"),
    ),
    "vllm": (
        _v("--no-enable-prefix-caching", "prefix caching", drop=("--enable-prefix-caching",)),
        _v("--enforce-eager", "CUDA graphs / torch.compile"),
        _v("--max-num-seqs 1", "continuous batching (concurrency)"),
        _v("--no-enable-chunked-prefill", "chunked prefill", drop=("--enable-chunked-prefill",)),
        _v("VLLM_BATCH_INVARIANT=1", "batch-variant numerics", add=(), env={"VLLM_BATCH_INVARIANT": "1"}),
    ),
    "llamacpp": (
        _v("-np 1", "parallel slots (batching)", drop=("--parallel",)),
        _v("cache_prompt: false", "prompt cache (slot reuse)", add=(), target_opts={"cache_prompt": False}),
        _v("--no-cont-batching", "continuous batching", drop=("--cont-batching", "-cb")),
    ),
    # The reference engine's own flags; each planted fault's cure is among them.
    "reference": (
        _v("--disable-radix-cache", "radix cache (prefix reuse)"),
        _v("--disable-overlap-schedule", "overlap scheduler"),
        _v("--disable-cuda-graph", "CUDA-graph decode (padding)"),
        _v("--chunked-prefill-size -1", "chunked prefill"),
        _v("--page-size 1", "paged KV (page size)"),
        _v("--max-running-requests 1", "continuous batching (concurrency)"),
        _v("--max-total-tokens 131072", "KV pool size (eviction)"),
        _v("--enable-deterministic-inference", "batch-variant numerics"),
    ),
}


def matrix_for(engine: str) -> tuple[FlagVariant, ...]:
    """The variants for `engine`'s dialect; `openai` servers get none (flags unknown)."""
    return MATRICES.get(engine, ())


def run_row(
    finding: Finding,
    launch: Launch,
    variant: FlagVariant | None,
    *,
    runs: int,
    stop: Callable[[int, int], bool] | None = None,
    log_dir: Path | None = None,
) -> TriageOutcome:
    """Replay `finding` up to `runs` times (`stop` as in `trial.reproduce`) on a fresh server
    launched with `variant` (None: the baseline)."""
    name = "baseline" if variant is None else variant.name
    row = TriageOutcome(name) if variant is None else TriageOutcome(
        name, flags=variant.flags, env=variant.env, component=variant.component
    )
    if variant is not None and not variant.changes(launch):
        return dataclasses.replace(row, error="no change: the baseline already runs this way")
    relaunch = launch if variant is None else variant.apply(launch)
    log = None if log_dir is None else log_dir / f"server-{_slug(name)}.log"
    try:
        with Replayer(relaunch, log_path=log) as bench:
            rep = bench.reproduce(finding.scenario, Expectation.of(finding), runs, stop=stop)
    except ServefuzzError as e:
        return dataclasses.replace(row, error=str(e))
    error = None
    if rep.lost is not None and finding.verdict is not Verdict.CRASH:
        error = f"the server went away under this variant: {rep.lost}"
    return dataclasses.replace(row, reproduced=rep.reproduced, attempts=rep.attempts, error=error)


def triage(
    finding: Finding,
    launch: Launch,
    *,
    runs: int = DEFAULT_RUNS,
    parallel: int = 1,
    log_dir: Path | None = None,
    on_row: Callable[[TriageOutcome], None] = lambda row: None,
) -> Triage:
    """The baseline and every variant of the launch's engine, `parallel` servers at a time,
    plus the known upstream issues the finding matches given this matrix."""
    if runs < 1 or parallel < 1:
        raise UsageError("--runs and --parallel must be at least 1")
    # A timing-sensitive finding may miss `runs` replays by bad luck; the baseline goes on (up to
    # 4x) until it has shown once, since without it no variant can be said to cure anything.
    baseline = run_row(finding, launch, None, runs=_MAX_RUNS_FACTOR * runs, log_dir=log_dir,
                       stop=lambda seen, done: done >= runs and seen > 0)
    if baseline.error is not None:
        raise TargetError(f"the baseline server could not be used: {baseline.error}")
    on_row(baseline)
    each = runs_for_cure(baseline, runs)

    def one(variant: FlagVariant) -> TriageOutcome:
        row = run_row(finding, launch, variant, runs=each, log_dir=log_dir)
        on_row(row)
        return row

    with ThreadPoolExecutor(max_workers=parallel) as pool:
        rows = tuple(pool.map(one, matrix_for(launch.engine)))
    result = Triage(baseline=baseline, variants=rows)
    matches = known_issues.match(dataclasses.replace(finding, triage=result), result)
    return dataclasses.replace(result, known_issues=tuple(m.to_json() for m in matches))


def runs_for_cure(baseline: TriageOutcome, runs: int) -> int:
    """Replays per variant: enough that a finding reproducing as often as on the baseline would
    fail to show in all of them with at most 1% probability; at least `runs`, at most 4x.

    >>> runs_for_cure(TriageOutcome("baseline", reproduced=3, attempts=10), 10)
    13
    """
    if not 0 < baseline.reproduced < baseline.attempts:
        return runs  # always reproduces (any miss is news), or never (nothing can cure it)
    p = baseline.reproduced / baseline.attempts
    needed = math.ceil(math.log(_LUCK) / math.log(1 - p))
    return min(max(runs, needed), _MAX_RUNS_FACTOR * runs)


def triaged_name(path: Path) -> str:
    """The triaged finding's file name, beside the original: `finding_00003_123_triaged.json`
    (a triaged finding triaged again keeps its name)."""
    return f"{path.stem.removesuffix('_triaged')}_triaged.json"


def render_matrix(finding: Finding, result: Triage) -> list[str]:
    """The matrix (variant, rate, cured?, component), what the cures implicate, and known issues."""
    rows = [result.baseline, *result.variants]
    width = max(len(r.name) for r in rows) + 2
    lines = [f"{'variant':<{width}} {'rate':>7}  {'cured':<5}  component"]
    for r in rows:
        rate = "-" if r.error else r.rate
        cured = "yes" if r in result.cures else ""
        tail = f"({r.error})" if r.error else r.component
        lines.append(f"{r.name:<{width}} {rate:>7}  {cured:<5}  {tail}".rstrip())
    kind = "numeric drift (benign batch numerics)" if finding.verdict is Verdict.NUMERIC_DRIFT else finding.verdict.value
    lines.append(f"verdict: {kind}")
    if result.baseline.reproduced == 0:
        lines.append("the baseline did not reproduce the finding, so no variant can be said to cure it")
    elif result.cures:
        lines.append("cured by: " + ", ".join(r.name for r in result.cures))
        lines.append("implicated: " + ", ".join(result.implicated))
    else:
        lines.append("no variant cured it")
    for m in result.known_issues:
        lines.append(f"known issue {m['id']}: {m.get('title', '')}")
        lines += [f"  + {reason}" for reason in m.get("reasons", ())]
        lines += [f"  - {reason}" for reason in m.get("against", ())]
    return lines


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in name).strip("-") or "baseline"
