"""Findings for the report tests, built by hand in the seed's shape (SGLang #22819).

`seed_like()` is a reference-engine finding: r02 (prefix_len 64 == page size) diverges with
three variants, a cancelled bystander, and (by default) a triage matrix in which only
--disable-radix-cache cures it. `hostile=True` puts markup and quotes (or `hostile_text`)
wherever a finding holds free text, to check that reports escape them. `loaded_run` is a run history of a finding's
scenario, as a campaign's histories.jsonl holds them. `page_boundary` and `found_on` make a real
finding instead: the planted page-boundary-prefix fault triggered on a running reference engine,
judged by servefuzz's own pipeline (the repro tests replay it).
"""

from __future__ import annotations

from servefuzz.anomaly import Anomaly, Divergence, FlipSide, Oracle, Variant, Verdict
from servefuzz.finding import Confirmation, Finding, Triage, TriageOutcome
from servefuzz.history import ChoiceRecord, RequestRecord, RunHistory, Status
from servefuzz.server_facts import TargetInfo
from servefuzz.workload import PromptBuilder, RequestSpec, Scenario

PAGE_BOUNDARY_FAULT = ["--fault", "page-boundary-prefix"]


def page_boundary(*, streamed: tuple[str, ...] = ()) -> Scenario:
    """A long prompt keeps the engine busy while three requests sharing exactly one page (64
    tokens) arrive together: the later ones read the first's page before it is written.
    `streamed`: the ids sent as streams."""
    b = PromptBuilder(0, range(3, 1024))
    busy = RequestSpec("r00", 0.0, b.prompt(None, 0, 600), 16)
    burst = [RequestSpec(f"r{i:02d}", 5.0, b.prompt("p0", 64, 72 + i), 16, "p0", 64, stream=f"r{i:02d}" in streamed)
             for i in (1, 2, 3)]
    return Scenario(0, (busy, *burst), {"page_size": 64})


async def found_on(url: str, scenario: Scenario) -> Finding:
    """`scenario` executed on the reference engine at `url` and judged: the finding it makes."""
    from servefuzz.oracles.judge import judge
    from servefuzz.runner import Runner
    from servefuzz.targets import make_target
    from servefuzz.trial import execute

    async with Runner(make_target("reference", url)) as runner:
        done = await execute(runner, scenario, runs=2, with_alone=True)
        verdict = judge(done.loaded, done.alone)
        assert runner.info is not None and verdict.anomalies, "the scenario must trigger the fault"
        return Finding(0, scenario.seed, scenario, runner.info, verdict.anomalies)

HOSTILE = "<script>alert(1)</script>|`x```'''\"\"\"\n#"


def seed_like(*, triage: bool = True, hostile: bool = False, hostile_text: str = HOSTILE) -> Finding:
    b = PromptBuilder(7, range(3, 1024))
    victim = "r02" + (hostile_text if hostile else "")
    specs = (
        RequestSpec("r01", 0.0, b.prompt(None, 0, 128), 32),
        RequestSpec(victim, 45.0, b.prompt("p0", 64, 256), 32, "p0", 64),
        RequestSpec("r03", 109.0, b.prompt(None, 0, 64), 32),
        RequestSpec("r04", 385.0, b.prompt("p0", 64, 300), 32, "p0", 64, stream=True),
        RequestSpec("r05", 400.0, b.prompt(None, 0, 90), 32, cancel_after_ms=30.0),
    )
    # Hostile text leads, so that it survives the 36-character previews of outputs.
    text = (lambda s: hostile_text + s) if hostile else (lambda s: s)
    variants = (
        Variant(0, (812, 17, 9), text(" u7892_1146 u7892_1086"), 7, tuple(range(7)), "load"),
        Variant(0, (813, 17, 9), " u7892_1446 u7892_144", 2, (7, 8), "load"),
        Variant(0, (813, 18, 9), " u7892_1446 u7892_1144", 1, (9,), "load"),
    )
    flip = Divergence(
        victim, 0,
        FlipSide(0, "load", 0, 812, -0.05, -4.2), FlipSide(7, "load", 0, 813, -0.03, -3.9),
        Verdict.CORRUPTION, text("flip at token 0: margin 4.1500 > threshold 0.0040 -> corruption"),
        margin=4.15, threshold=0.004, noise_p99=0.001, noise_tokens=320, noise_outputs=10,
    )
    anomaly = Anomaly(Oracle.REPLAY, Verdict.CORRUPTION, victim, f"{victim}: 3 variants over 10 runs",
                      variants=variants, divergences=(flip,))
    target = TargetInfo(
        "reference", "http://127.0.0.1:30000", version=text("0.1.0"),
        server_args={"page_size": 64, "chunked_prefill_size": 2048, "max_total_tokens": 131072,
                     "disable_radix_cache": False, "disable_overlap_schedule": False, "disable_cuda_graph": False,
                     "enable_deterministic_inference": False, "served_model_name": text("servefuzz-reference")},
        faults=("page-boundary-prefix",),
    )
    matrix = None
    if triage:
        matrix = Triage(
            baseline=TriageOutcome("baseline", reproduced=5, attempts=5),
            variants=(
                TriageOutcome(text("no-radix"), ("--disable-radix-cache",), component="radix cache", attempts=5),
                TriageOutcome("no-overlap", ("--disable-overlap-schedule",), component="overlap scheduler",
                              reproduced=5, attempts=5),
                TriageOutcome("deterministic", ("--enable-deterministic-inference",), reproduced=4, attempts=5),
                TriageOutcome("no-cuda-graph", ("--disable-cuda-graph",), error="server did not start"),
            ),
        )
    stable = tuple(s.id for s in specs if s.id != victim)
    return Finding(
        iteration=3330, seed=2142180798, scenario=Scenario(2142180798, specs, {"page_size": 64}), target=target,
        anomalies=(anomaly,), confirmation=Confirmation(10, 10, {victim: variants}, (victim,), stable),
        triage=matrix,
    )


def loaded_run(finding: Finding, run: int, shift_ms: float = 0.0) -> RunHistory:
    """A loaded run of `finding`'s scenario (offsets shifted: then it is another scenario's)."""
    records = tuple(
        RequestRecord(s.id, run, "load", Status.OK, s.offset_ms + shift_ms, sent_ms=s.offset_ms + shift_ms + 0.2,
                      end_ms=s.offset_ms + shift_ms + 300.0, choices=(ChoiceRecord(0, (1, 2)),))
        for s in finding.scenario.requests
    )
    return RunHistory(run, "load", records)
