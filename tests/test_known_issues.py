"""The known-issue catalogue: complete, valid, tied to the fault zoo; and `match` ranks the
right upstream issue first for the right reasons (engine or planted fault, verdict, trigger
features, cures seen in the triage matrix)."""

from __future__ import annotations

import dataclasses
import doctest
import json
from pathlib import Path

import pytest

from servefuzz import known_issues
from servefuzz.anomaly import Anomaly, Oracle, Verdict
from servefuzz.finding import (
    Finding,
    Triage,
    TriageOutcome,
    load_finding,
    write_finding,
)
from servefuzz.known_issues import (
    FEATURES,
    REFERENCE_FAULTS,
    load_catalogue,
    match,
    parse_catalogue,
    trigger_features,
)
from servefuzz.reference.faults import FAULTS
from servefuzz.server_facts import TargetInfo
from servefuzz.workload import PromptBuilder, RequestSpec, Scenario

# The issue's list: every one must be in the catalogue.
REQUIRED = [
    "sglang#22819", "sglang#26380", "sglang#17850", "sglang#24361", "sglang#22291", "sglang#23020",
    "sglang#38140", "sglang#38319", "sglang#24853", "sglang#35938", "sglang#21614",
    "vllm#37076", "vllm#39146", "vllm#50702", "vllm#23138", "llama.cpp#7052", "llama.cpp#27148",
]
SGLANG_ARGS = {"page_size": 64, "disable_radix_cache": False, "disable_overlap_schedule": False,
               "disable_cuda_graph": False, "chunked_prefill_size": 8192, "max_total_tokens": 500_000}


def finding(
    engine: str = "sglang",
    *,
    prefix_len: int = 64,
    verdict: Verdict = Verdict.CORRUPTION,
    faults: tuple[str, ...] = (),
    args: dict[str, object] | None = None,
    triage: Triage | None = None,
    extra: tuple[RequestSpec, ...] = (),
) -> Finding:
    b = PromptBuilder(3, range(3, 1000))
    specs = (
        RequestSpec("r01", 0.0, b.prompt("p0", prefix_len, prefix_len + 40) if prefix_len else b.prompt(None, 0, 80), 8,
                    "p0" if prefix_len else None, prefix_len),
        RequestSpec("r02", 2.0, b.prompt("p0", prefix_len, prefix_len + 10) if prefix_len else b.prompt(None, 0, 50), 8,
                    "p0" if prefix_len else None, prefix_len),
        *extra,
    )
    target = TargetInfo(engine, "http://127.0.0.1:1", server_args=SGLANG_ARGS if args is None else args, faults=faults)
    anomaly = Anomaly(Oracle.REPLAY, verdict, "r02", "r02 diverged")
    return Finding(1, 3, Scenario(3, specs), target, (anomaly,), triage=triage)


def ids(matches: list[known_issues.Match]) -> list[str]:
    return [m.issue.id for m in matches]


def test_the_catalogue_holds_the_issues_listed_and_is_valid() -> None:
    issues = load_catalogue()
    assert len(issues) >= 17
    assert set(REQUIRED) <= {i.id for i in issues}
    for i in issues:
        host = {"sglang": "sgl-project/sglang", "vllm": "vllm-project/vllm", "llamacpp": "ggml-org/llama.cpp"}[i.engine]
        number = i.id.split("#")[1]
        assert i.link.startswith(f"https://github.com/{host}/") and i.link.rsplit("/", 1)[1] == number, i.id
        assert i.trigger and i.symptom and i.status and i.versions and i.component, i.id
    # Where the notes say "not verified", the entry says so.
    assert "not verified" in next(i for i in issues if i.id == "sglang#21614").caveats.lower()


# Titles as each thread gives them upstream (read 2026-12-03 in the public issue index): a title
# the catalogue makes up for an issue is a title its maintainers will not find.
UPSTREAM_TITLES = {
    "vllm#38606": "[Bug]: KV block corruption under rapid LoRA adapter alternation",
    "vllm#48421": "[Bugfix][LoRA] Skip no-LoRA tokens (index -1) in CPU torch bgmv ops",
    "vllm#49656": "[Bugfix][CPU] Fix LoRA no-op row aliasing in PunicaWrapperCPU",
    "vllm#10097": "[V1][BugFix] Fix Generator construction in greedy + seed case",
    "vllm#49118": ("[Bug]: OffloadingConnector — aborting a queued (never-scheduled) request kills the engine with "
                   "AssertionError in _build_store_jobs"),
    "llama.cpp#27624": "server: clear stale state when reusing LRU-selected slots",
    "llama.cpp#28707": "server : honor --lora-init-without-apply and empty lora lists",
    "sglang#22518": "[Bug] SGLang embedding server deadlocks after first full batch",
    "llama.cpp#27148": ("server: RAM-backed prompt cache (--cache-ram/--cache-idle-slots) restores content from an "
                        "unrelated conversation into a fresh slot under concurrent load"),
}


def test_the_issues_servefuzz_s_findings_cite_carry_their_upstream_titles() -> None:
    by_id = {i.id: i for i in load_catalogue()}
    for issue_id, title in UPSTREAM_TITLES.items():
        assert by_id[issue_id].title == title, issue_id
    # The two PRs that fix the CPU LoRA rows each match the vLLM CPU LoRA finding, both fixed in 0.33.0.
    lora = load_finding(Path(__file__).parents[1] / "docs/findings/vllm-cpu-lora-base-rows/finding_min_triaged.json")
    found = [m.issue.id for m in known_issues.match(lora)]
    assert {"vllm#48421", "vllm#49656"} <= set(found), found
    assert by_id["vllm#49656"].fixed_in == by_id["vllm#48421"].fixed_in == "0.33.0"


def test_every_planted_fault_names_an_upstream_cousin() -> None:
    assert set(REFERENCE_FAULTS) == set(FAULTS)
    covered = {f for i in load_catalogue() for f in i.upstream_for_faults}
    assert covered == set(FAULTS)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"features": ["prefix=page-aligned", "telepathy"]}, "unknown feature 'telepathy'"),
        ({"engine": "tgi"}, "unknown engine 'tgi'"),
        ({"link": "http://example.com/1"}, "is not a GitHub address"),
        ({"upstream_for_faults": ["gremlin"]}, "unknown fault 'gremlin'"),
        ({"colour": "red"}, "unexpected keyword argument 'colour'"),
    ],
)
def test_a_bad_entry_is_refused_naming_the_issue(change: dict[str, object], message: str) -> None:
    text = (Path(known_issues.__file__).parent / "data" / "known_issues.json").read_text(encoding="utf-8")
    data = json.loads(text)
    data["issues"][0].update(change)
    with pytest.raises(ValueError, match="sglang#22819") as e:
        parse_catalogue(data)
    assert message in str(e.value)
    data = json.loads(text)
    data["issues"].append(data["issues"][0])
    with pytest.raises(ValueError, match="listed twice: sglang#22819"):
        parse_catalogue(data)


def test_a_reference_finding_matches_the_issue_its_planted_fault_models() -> None:
    f = finding("reference", faults=("page-boundary-prefix",))
    matches = match(f)
    assert ids(matches) == ["sglang#22819"]
    assert ids(match(finding())) == ["sglang#22819"]  # on SGLang itself: the page-aligned prefix
    reasons = matches[0].reasons
    assert reasons[0] == "the planted fault page-boundary-prefix is the reference engine's model of sglang#22819"
    assert "the diverging request r02's prefix_len 64 is a multiple of the page size 64" in reasons
    # No fault, no cousin: a clean reference engine's finding matches nothing.
    assert match(finding("reference")) == []


def test_numeric_drift_matches_only_the_benign_entries() -> None:
    f = finding("reference", verdict=Verdict.NUMERIC_DRIFT, faults=("batch-variant-numerics", "page-boundary-prefix"))
    assert set(ids(match(f))) == {"vllm#23138", "llama.cpp#7052"}
    # And a confident flip never matches them.
    f = finding("reference", faults=("batch-variant-numerics",))
    assert match(f) == []
    f = finding("vllm", verdict=Verdict.NUMERIC_DRIFT, args={"enable_prefix_caching": True})
    assert ids(match(f)) == ["vllm#23138"]


def test_drift_under_batch_invariance_is_a_contract_violation_of_the_batch_invariance_family_and_only_there() -> None:
    """vllm#51902 and #47069 `require` the batch-invariant mode: the same drift without it is numerics."""
    plain = finding("vllm", verdict=Verdict.NUMERIC_DRIFT, args={"enable_prefix_caching": True})
    assert not {"vllm#51902", "vllm#47069"} & set(ids(match(plain)))
    invariant = dataclasses.replace(plain, target=dataclasses.replace(plain.target, env={"VLLM_BATCH_INVARIANT": "1"}))
    assert invariant.verdict is Verdict.CONTRACT_VIOLATION
    found = match(invariant)
    assert set(ids(found)) == {"vllm#51902", "vllm#47069"}  # the family, no corruption bug, not the benign #23138
    assert "the server ran with VLLM_BATCH_INVARIANT=1" in found[0].reasons
    assert any(r.startswith("verdict contract-violation matches") for r in found[0].reasons)


def test_a_stored_sglang_fa3_deterministic_finding_matches_the_deterministic_radix_family() -> None:
    """SGLang 0.5.17 on the H200, FA3 under --enable-deterministic-inference, warm vs cold
    (shared/evidence/sglang-gpu-fa3-deterministic): the seed bug's thread, the cold-vs-warm
    report, and the deterministic-mode KV issue; never a corruption-only entry."""
    stored = load_finding(Path(__file__).parent / "reports/data/sglang-fa3-deterministic-warm.json")
    assert stored.verdict is Verdict.CONTRACT_VIOLATION
    assert set(ids(match(stored))) == {"sglang#22819", "sglang#34683", "sglang#35938"}
    # The same flip with the mode off is numeric drift: no family member is specific enough then
    # (#34683, filed in default mode, lists drift, but a shared prefix is too common a trigger).
    args = {**stored.target.server_args, "enable_deterministic_inference": False}
    drift = dataclasses.replace(stored, target=dataclasses.replace(stored.target, server_args=args), anomalies=tuple(
        dataclasses.replace(a, verdict=Verdict.NUMERIC_DRIFT, promise=None) for a in stored.anomalies))
    assert drift.verdict is Verdict.NUMERIC_DRIFT
    assert match(drift) == []


def test_the_triage_matrix_decides_between_sglang_issues() -> None:
    def outcome(name: str, flag: str, reproduced: int) -> TriageOutcome:
        return TriageOutcome(name, (flag,), reproduced=reproduced, attempts=5)

    radix_cures = Triage(
        TriageOutcome("baseline", reproduced=5, attempts=5),
        (outcome("no-radix", "--disable-radix-cache", 0), outcome("no-overlap", "--disable-overlap-schedule", 5),
         outcome("det", "--enable-deterministic-inference", 4)),
    )
    matches = match(finding(triage=radix_cures))
    assert ids(matches)[0] == "sglang#22819"
    top = matches[0]
    assert "cured by --disable-radix-cache, as sglang#22819 is" in top.reasons
    assert "still reproduces with --enable-deterministic-inference (4/5), as sglang#22819 does" in top.reasons
    assert ids(matches) == ["sglang#22819", "sglang#24175"]  # both cured by --disable-radix-cache
    # The overlap race is out: its cure was tried and did not cure. Without the matrix it was a
    # weak candidate; with it, the reason against is on record when it still qualifies.
    assert "sglang#26380" not in ids(matches)

    overlap_cures = Triage(
        TriageOutcome("baseline", reproduced=5, attempts=5),
        (outcome("no-radix", "--disable-radix-cache", 5), outcome("no-overlap", "--disable-overlap-schedule", 0)),
    )
    matches = match(finding(prefix_len=0, triage=overlap_cures))
    assert ids(matches) == ["sglang#21614", "sglang#26380", "sglang#22518", "sglang#18744"]  # all cured by it
    assert "still reproduces with --disable-radix-cache (5/5), as sglang#21614 does" in matches[0].reasons
    assert "sglang#22819" not in ids(matches)  # its cure was tried and did not cure: pushed out
    assert "cured by --disable-overlap-schedule, as sglang#26380 is" in next(
        m for m in matches if m.issue.id == "sglang#26380"
    ).reasons


def test_a_matrix_whose_baseline_did_not_reproduce_says_nothing() -> None:
    flat = Triage(TriageOutcome("baseline", reproduced=0, attempts=5),
                  (TriageOutcome("no-radix", ("--disable-radix-cache",), attempts=5),))
    assert match(finding(triage=flat)) == match(finding())


def test_cures_match_flag_values_and_environment() -> None:
    def cured_by(flags: tuple[str, ...], env: dict[str, str]) -> Triage:
        return Triage(TriageOutcome("baseline", reproduced=10, attempts=10), (TriageOutcome("v", flags, env, attempts=3),))

    chunked = finding(triage=cured_by(("--chunked-prefill-size=-1",), {}))
    assert "cured by --chunked-prefill-size, as sglang#17850 is" in next(
        m for m in match(chunked) if m.issue.id == "sglang#17850"
    ).reasons
    triton = finding(triage=cured_by(("--attention-backend", "triton"), {}))
    assert "cured by --attention-backend triton, as sglang#24853 is" in next(
        m for m in match(triton) if m.issue.id == "sglang#24853"
    ).reasons
    fa4 = finding(triage=cured_by(("--attention-backend", "fa4"), {}))
    assert not any(r.startswith("cured by --attention-backend triton") for m in match(fa4) for r in m.reasons)
    drift = finding("vllm", verdict=Verdict.NUMERIC_DRIFT, args={}, triage=cured_by((), {"VLLM_BATCH_INVARIANT": "1"}))
    assert "cured by VLLM_BATCH_INVARIANT=1, as vllm#23138 is" in match(drift)[0].reasons


def test_trigger_features_read_the_scenario_and_the_server() -> None:
    b = PromptBuilder(5, range(3, 1000))
    long = RequestSpec("r03", 50.0, b.prompt(None, 0, 9000), 8)
    cut = RequestSpec("r04", 60.0, b.prompt(None, 0, 20), 8, cancel_after_ms=5.0)
    many = tuple(RequestSpec(f"m{i:02d}", 100.0 + i, b.prompt(None, 0, 10), 8) for i in range(32))
    f = finding(prefix_len=65, extra=(long, cut, *many), args={**SGLANG_ARGS, "max_total_tokens": 4096})
    feats = trigger_features(f)
    assert set(feats) >= {"prefix=shared", "prefix=mid-page", "burst", "concurrent", "high-concurrency", "abort",
                          "chunked-prefill", "eviction", "radix-cache", "overlap", "cuda-graph"}
    assert feats["chunked-prefill"] == "r03's prompt (9000 tokens) is longer than the chunked-prefill budget 8192"
    assert feats["abort"] == "r04 is cancelled after 5 ms"
    assert set(feats) <= set(FEATURES)
    # Args the server did not report say nothing; deterministic mode turns the overlap scheduler off.
    quiet = trigger_features(finding(args={"enable_deterministic_inference": True, "disable_overlap_schedule": False}))
    assert "deterministic" in quiet and "overlap" not in quiet and "radix-cache" not in quiet
    repeat = RequestSpec("r09", 9.0, f.scenario.by_id()["r02"].prompt_ids, 8, "p0", 65)
    assert "prefix=full" not in feats
    assert trigger_features(dataclasses.replace(f, anomalies=(Anomaly(Oracle.REPLAY, Verdict.CORRUPTION, "r09", "x"),),
                                                scenario=f.scenario.with_requests([*f.scenario.requests, repeat])))[
        "prefix=full"] == "r09's whole prompt was sent before it, by r02"


def test_matches_fit_into_a_finding_file(tmp_path: Path) -> None:
    f = finding("reference", faults=("page-boundary-prefix",))
    triage = Triage(TriageOutcome("baseline", reproduced=1, attempts=1), (), tuple(m.to_json() for m in match(f)))
    path = write_finding(tmp_path, dataclasses.replace(f, triage=triage))
    stored = load_finding(path).triage
    assert stored is not None and stored.known_issues[0]["id"] == "sglang#22819"
    assert stored.known_issues[0]["link"] == "https://github.com/sgl-project/sglang/issues/22819"


def test_doctests() -> None:
    assert doctest.testmod(known_issues).failed == 0


def test_the_vllm_lora_finding_matches_both_lora_issues_by_what_its_triage_showed() -> None:
    """servefuzz's vLLM CPU LoRA finding, shrunk and triaged (docs/findings/vllm-cpu-lora-base-rows):
    still there with prefix caching and chunked prefill off, which is what a reviewer of vLLM
    #38606 saw; the punica-path issue (#50602) matches on LoRA and concurrency, and so does the
    CPU -1-index fix (#48421, the next test). Cured by prefix caching off instead, the #38606
    match would carry that against it."""
    found = load_finding(Path(__file__).parents[1] / "docs/findings/vllm-cpu-lora-base-rows/finding_min_triaged.json")
    assert found.triage is not None
    matches = {m.issue.id: m for m in match(found, found.triage)}
    assert set(matches) == {"vllm#38606", "vllm#50602", "vllm#48421", "vllm#49656"}
    assert "still reproduces with --no-enable-prefix-caching (1/1), as vllm#38606 does" in matches["vllm#38606"].reasons
    assert not matches["vllm#38606"].against

    def outcome(flag: str, reproduced: int) -> TriageOutcome:
        return TriageOutcome(flag, (flag,), reproduced=reproduced, attempts=7)

    cured = Triage(TriageOutcome("baseline", reproduced=3, attempts=3), (outcome("--no-enable-prefix-caching", 0),))
    other = {m.issue.id: m for m in match(found, cured)}
    assert "cured by --no-enable-prefix-caching, which does not cure vllm#38606" in other["vllm#38606"].against


def test_the_vllm_lora_finding_is_the_cpu_lora_index_fix_its_version_predates() -> None:
    """The same finding (vLLM CPU 0.32.0): a base-model row batched beside a LoRA row read the last
    adapter slot through its -1 LoRA index, which vLLM PR #48421 clamps and masks in the punica
    torch ops, as 0.33.0's lora_ops.py does. That entry ranks first, on the version, LoRA and the
    batch, and the two rows that did not cure the finding; on 0.33.0 it would be a regression."""
    found = load_finding(Path(__file__).parents[1] / "docs/findings/vllm-cpu-lora-base-rows/finding_min_triaged.json")
    assert found.target.version == "0.32.0"
    matches = match(found)
    first = matches[0]
    # The two PRs that fix it rank first, one way each.
    assert ids(matches) == ["vllm#48421", "vllm#49656", "vllm#38606", "vllm#50602"] and not first.against
    assert first.score == matches[1].score > matches[2].score  # one bug, two fixes: equally likely
    assert first.issue.fixed_in == "0.33.0" and first.issue.upstream_for_faults == ()  # no zoo fault models it
    for reason in ("vllm 0.32.0 predates the fix, first released in 0.33.0",
                   "1 LoRA adapter (lora-b) and 1 base-model request",
                   "still reproduces with --no-enable-prefix-caching (1/1), as vllm#48421 does",
                   "still reproduces with --no-enable-chunked-prefill (1/1), as vllm#48421 does"):
        assert reason in first.reasons
    fixed = dataclasses.replace(found, target=dataclasses.replace(found.target, version="0.33.0"))
    again = next(m for m in match(fixed) if m.issue.id == "vllm#48421")
    assert again.score == first.score - 4
    assert again.against == ("vllm 0.33.0 already has the fix (released in 0.33.0): it would be a regression",)


def test_the_sglang_salt_finding_is_the_fix_its_version_predates() -> None:
    """servefuzz's SGLang 0.5.10.post1 finding (docs/findings/sglang-cpu-salt-dropped): a salted
    request served from another salt's prefix. Two catalogue issues share its features; its
    version predates #23300's fix (0.5.11), which puts that one first. The same finding on a
    version with the fix says so against it, and a version of no known order says nothing."""
    found = load_finding(Path(__file__).parents[1] / "docs/findings/sglang-cpu-salt-dropped/finding.json")
    assert found.target.version == "0.5.10.post1" and found.page_size == 1
    first, *rest = match(found)
    assert first.issue.id == "sglang#23300" and not first.against
    assert "sglang 0.5.10.post1 predates the fix, first released in 0.5.11" in first.reasons
    assert "sglang#22819" not in ids(rest)  # a page of one token aligns every prefix: no evidence

    def on(version: str | None) -> dict[str, known_issues.Match]:
        moved = dataclasses.replace(found, target=dataclasses.replace(found.target, version=version))
        return {m.issue.id: m for m in match(moved)}

    fixed = on("0.5.23")["sglang#23300"]
    assert fixed.score == first.score - 4
    assert fixed.against == ("sglang 0.5.23 already has the fix (released in 0.5.11): it would be a regression",)
    for unordered in ("0.6.0rc1", None):
        m = on(unordered)["sglang#23300"]
        assert m.score == first.score - 2 and not any("the fix" in r for r in (*m.reasons, *m.against))


def test_the_sglang_hang_is_the_stale_batch_full_flag_and_only_with_n_above_one() -> None:
    """servefuzz's SGLang 0.5.10.post1 tiny-pool hang (docs/findings/sglang-cpu-tiny-pool-hang):
    n > 1 requests on a generation model send prefill-only prefix requests, the stale
    batch_is_full family of #22518. The same scenario with n = 1 shows no specific feature of it
    (the overlap scheduler and concurrency fit too many issues), and matches nothing."""
    found = load_finding(Path(__file__).parents[1] / "docs/findings/sglang-cpu-tiny-pool-hang/finding.json")
    first, *_ = match(found)
    assert first.issue.id == "sglang#22518" and "r02 asks for n=2 choices" in first.reasons
    single = dataclasses.replace(found, scenario=dataclasses.replace(
        found.scenario, requests=tuple(dataclasses.replace(r, n=1) for r in found.scenario.requests)))
    assert "sglang#22518" not in ids(match(single))


def test_a_fixed_in_that_is_no_release_number_is_refused() -> None:
    text = (Path(known_issues.__file__).parent / "data" / "known_issues.json").read_text(encoding="utf-8")
    data = json.loads(text)
    data["issues"][0]["fixed_in"] = "soon"
    with pytest.raises(ValueError, match="sglang#22819: fixed_in 'soon' is not a release number"):
        parse_catalogue(data)


def _with_log(finding: Finding, text: str) -> Finding:
    """`finding` whose lost server left `text` in its log, as `servers.Launched.death` keeps it."""
    lost = Anomaly(Oracle.LIVENESS, Verdict.CRASH, "r01", "the server stopped answering",
                   evidence={"exit_code": 1, "log_tail": "", "traceback": text})
    return dataclasses.replace(finding, anomalies=(*finding.anomalies, lost))


def test_a_crash_whose_server_log_names_a_known_issue_is_that_issue_and_only_by_those_words() -> None:
    """The H200's offloading crash (vLLM 0.26.0) is vllm#49118 by its own assert, the strongest
    match; the same finding with that traceback taken out, or with another assert in it, is not
    matched by the log (its other evidence may still match it, never with the log's reason)."""
    stored = load_finding(Path(__file__).parents[1] / "docs/findings/vllm-gpu-kv-offloading-crash/finding.json")
    said = "the server's log says"
    [best, *_] = match(stored)
    assert best.issue.id == "vllm#49118" and any(said in r for r in best.reasons)

    quiet = dataclasses.replace(stored, anomalies=tuple(
        dataclasses.replace(a, evidence={k: v for k, v in a.evidence.items() if k not in ("traceback", "log_tail")})
        for a in stored.anomalies))
    assert not any(said in r for m in match(quiet) for r in m.reasons)

    other = _with_log(quiet, "AssertionError: assert not req_status.transfer_jobs")
    assert not any(said in r for m in match(other) for r in m.reasons)
    # The nightly's name for the same list matches too (the issue's own traceback).
    nightly = _with_log(quiet, "    assert len(offload_keys) == len(offload_chunk_ids)\nAssertionError")
    assert any(m.issue.id == "vllm#49118" and any(said in r for r in m.reasons) for m in match(nightly))
