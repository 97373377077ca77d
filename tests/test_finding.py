"""The finding file: round trip, atomic store, one-line errors, redaction, signature."""

from __future__ import annotations

import dataclasses
import doctest
import json
import os
import tempfile
from pathlib import Path

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servefuzz import finding
from servefuzz.anomaly import Anomaly, Divergence, FlipSide, Oracle, Variant, Verdict
from servefuzz.errors import DiskFullError, FindingError
from servefuzz.finding import (
    SCHEMA_VERSION,
    Confirmation,
    Finding,
    finding_schema,
    load_finding,
    write_finding,
)
from servefuzz.server_facts import TargetInfo
from servefuzz.workload import RequestSpec, Scenario

PAGE = 64


def spec(rid: str, prefix_len: int = 0, n: int = 1, cancel: float | None = None) -> RequestSpec:
    prompt = tuple(range(3, 3 + max(prefix_len, 1) + 8))
    return RequestSpec(rid, 0.0, prompt, 8, prefix_name="p0" if prefix_len else None, prefix_len=prefix_len, n=n, cancel_after_ms=cancel)


def corruption(rid: str = "r02") -> Anomaly:
    side_a = FlipSide(0, "load", 0, 812, -0.05, -3.0)
    side_b = FlipSide(1, "load", 0, 455, -0.02, -4.0)
    d = Divergence(rid, 1, side_a, side_b, Verdict.CORRUPTION, "flip at token 1: ... -> corruption", 3.98, False, 0.001)
    v = (Variant(0, (7, 812), " u7892_1146", 6, (0, 2)), Variant(0, (7, 455), " u7892_1446", 4, (1, 3)))
    return Anomaly(Oracle.REPLAY, Verdict.CORRUPTION, rid, f"{rid}: 2 variants", v, (d,), {"runs": 10})


def make(iteration: int = 3330, seed: int = 2142180798, prefix_len: int = PAGE, **kw: object) -> Finding:
    sc = Scenario(seed, (spec("r01"), spec("r02", prefix_len), spec("r03")), meta={"strategy": "page-boundary"})
    target = TargetInfo("sglang", "http://127.0.0.1:30000", "0.5.10.post1", {"page_size": PAGE, "disable_radix_cache": False})
    return Finding(iteration, seed, sc, target, kw.pop("anomalies", (corruption(),)), **kw)  # type: ignore[arg-type]


def test_round_trip_and_name(tmp_path: Path) -> None:
    conf = Confirmation(10, 10, {"r02": corruption().variants}, ("r02",), ("r01", "r03"))
    f = make(confirmation=conf, notes=("found by the page-boundary strategy",))
    path = write_finding(tmp_path, f)
    assert path == tmp_path / "finding_03330_2142180798.json"
    back = load_finding(path)
    assert back == f
    data = json.loads(path.read_text())
    assert data["schema_version"] == SCHEMA_VERSION
    assert data["confirmation"]["rate"] == "10/10"
    assert data["verdict"] == "corruption" and data["verdict_reason"].startswith("flip at token 1")
    assert data["signature"] == "sglang:replay:corruption:prefix=page-aligned"


def test_atomic_write_leaves_no_temp_and_never_replaces_a_different_finding(tmp_path: Path) -> None:
    first = write_finding(tmp_path, make())
    before = first.read_bytes()
    assert write_finding(tmp_path, make()) == first  # the same finding again (new created_at): kept
    other = make(anomalies=(corruption("r03"),))
    with pytest.raises(FindingError, match="a different finding already has this name"):
        write_finding(tmp_path, other)
    assert first.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [first.name]


def test_failed_write_leaves_nothing_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    earlier = make(iteration=1)
    kept = write_finding(tmp_path, earlier)

    def disk_full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)  # fault injection: the disk fills mid-write
    # The machine's state, not a bad finding: its own error and exit code (errors.Exit.DISK).
    with pytest.raises(DiskFullError, match=r"no space left on the device writing .*finding_00002_\d+\.json \("):
        write_finding(tmp_path, make(iteration=2))
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == [kept.name]
    assert load_finding(kept) == earlier


def one_line_error(path: Path) -> str:
    with pytest.raises(FindingError) as e:
        load_finding(path)
    msg = str(e.value)
    assert "\n" not in msg and str(path) in msg and len(msg) < 300
    assert e.value.exit_code == 2
    return msg


def test_bad_files_give_one_clear_line(tmp_path: Path) -> None:
    good = write_finding(tmp_path, make()).read_text()
    assert "no such finding file" in one_line_error(tmp_path / "missing.json")
    assert "is a directory" in one_line_error(tmp_path)

    truncated = tmp_path / "truncated.json"
    truncated.write_text(good[: len(good) // 2])
    assert "not valid JSON (truncated or damaged?)" in one_line_error(truncated)
    empty = tmp_path / "empty.json"
    empty.write_text("")
    assert "not valid JSON" in one_line_error(empty)

    history_line = tmp_path / "history.json"
    history_line.write_text('{"kind": "run", "run": 0, "label": "load", "meta": {}}')
    assert "not a servefuzz finding (no schema_version)" in one_line_error(history_line)

    data = json.loads(good)
    data["scenario"]["requests"][0]["prompt_ids"] = "1 2 3"
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps(data))
    assert "does not match the finding schema at $.scenario.requests[0].prompt_ids" in one_line_error(wrong)

    data = json.loads(good)
    data["schema_version"] = SCHEMA_VERSION + 1
    data["something_new"] = {"from": "the future"}
    newer = tmp_path / "newer.json"
    newer.write_text(json.dumps(data))
    assert "written by a newer servefuzz" in one_line_error(newer)

    data = json.loads(good)
    data["scenario"]["requests"][1]["prefix_len"] = 10_000  # valid types, impossible content
    odd = tmp_path / "odd.json"
    odd.write_text(json.dumps(data))
    assert "inconsistent finding" in one_line_error(odd)


def test_schema_enums_match_the_taxonomy() -> None:
    jsonschema.Draft202012Validator.check_schema(finding_schema())
    defs = finding_schema()["$defs"]
    assert defs["verdict"]["enum"] == [v.value for v in Verdict]
    assert defs["oracle"]["enum"] == [o.value for o in Oracle]


def test_credentials_are_redacted_everywhere(tmp_path: Path) -> None:
    target = TargetInfo(
        "vllm", "http://127.0.0.1:8000", None,
        server_args={"api_key": "sk-secret1", "max_tokens": 32, "nested": {"hf_token": "hf_secret2"},
                     "argv": ["--api-key", "sk-secret3", "--block-size", "32", "--token=secret4"]},
        env={"HF_TOKEN": "hf_secret5", "AUTHORIZATION": "Bearer secret6", "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    f = Finding(0, 1, make().scenario, target, (corruption(),))
    text = write_finding(tmp_path, f).read_text()
    assert "secret" not in text
    back = load_finding(tmp_path / f.filename).target
    assert back.server_args["max_tokens"] == 32 and back.env["OMP_NUM_THREADS"] == "1"
    assert back.server_args["argv"] == ["--api-key", "<redacted>", "--block-size", "32", "--token=<redacted>"]


def test_signature_classes_prefix_against_page_size() -> None:
    assert make(prefix_len=PAGE).signature == "sglang:replay:corruption:prefix=page-aligned"
    assert make(prefix_len=2 * PAGE).signature == make(prefix_len=PAGE).signature
    assert make(prefix_len=PAGE - 1).signature == "sglang:replay:corruption:prefix=mid-page"
    crash = Anomaly(Oracle.LIVENESS, Verdict.CRASH, "r01", "server went away")
    assert make(anomalies=(crash,)).signature == "sglang:liveness:crash:prefix=none"


def test_verdict_is_the_most_severe_and_says_why() -> None:
    drift = Anomaly(Oracle.REPLAY, Verdict.NUMERIC_DRIFT, "r01", "r01: drift")
    f = make(anomalies=(drift, corruption()))
    assert f.verdict is Verdict.CORRUPTION and f.headline.request_id == "r02"
    assert f.why == "flip at token 1: ... -> corruption"
    assert f.expected_diverging == ("r01", "r02")
    with pytest.raises(ValueError):
        make(anomalies=())


# Random findings: the whole file format must round-trip through disk and the schema.
ids = st.lists(st.integers(0, 50_000), min_size=1, max_size=5).map(tuple)
finite = st.floats(-50, 0, allow_nan=False)
requests = st.builds(
    lambda i, off, prompt, mt, n, stream, cancel: RequestSpec(f"r{i:02d}", off, prompt, mt, n=n, stream=stream, cancel_after_ms=cancel),
    st.integers(0, 99), st.floats(0, 5000, allow_nan=False), ids, st.integers(1, 64), st.integers(1, 4), st.booleans(),
    st.none() | st.floats(0, 100, allow_nan=False),
)  # fmt: skip
scenarios = st.builds(
    Scenario, st.integers(0, 2**32), st.lists(requests, min_size=1, max_size=4, unique_by=lambda r: r.id).map(tuple),
    st.dictionaries(st.sampled_from(["page_size", "strategy"]), st.integers(1, 128) | st.text(max_size=5), max_size=2),
)  # fmt: skip
sides = st.builds(FlipSide, st.integers(0, 9), st.just("load"), st.integers(0, 3), st.none() | st.integers(0, 99),
                  st.none() | finite, st.none() | finite, st.booleans())
variants = st.builds(Variant, st.integers(0, 3), ids, st.text(max_size=12), st.integers(1, 9), ids, st.sampled_from(["", "load"]))
findings = st.builds(
    Finding,
    st.integers(0, 99_999),
    st.integers(-(2**31), 2**31),
    scenarios,
    st.builds(TargetInfo, st.sampled_from(["sglang", "vllm", "reference"]), st.just("http://127.0.0.1:9"),
              st.none() | st.just("1.0"), st.dictionaries(st.sampled_from(["page_size", "tp", "api_key"]), st.integers(1, 64)),
              st.dictionaries(st.sampled_from(["A", "HF_TOKEN"]), st.text(max_size=4)),
              st.lists(st.text(max_size=8), max_size=2).map(tuple)),
    st.lists(st.builds(
        Anomaly, st.sampled_from(list(Oracle)), st.sampled_from(list(Verdict)), st.text(min_size=1, max_size=6), st.text(max_size=20),
        st.lists(variants, max_size=2).map(tuple),
        st.lists(st.builds(Divergence, st.just("r01"), st.integers(0, 50), sides, sides, st.sampled_from(list(Verdict)),
                           st.text(max_size=20),
                           st.none() | st.floats(0, 10, allow_nan=False)), max_size=2).map(tuple),
        st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5), max_size=2),
    ), min_size=1, max_size=3).map(tuple),
    st.none() | st.builds(lambda k, extra, exp: Confirmation(k, k + extra, {}, exp, ()), st.integers(0, 10), st.integers(0, 10),
                          st.lists(st.text(min_size=1, max_size=5), max_size=2).map(tuple)),
    st.lists(st.text(max_size=20), max_size=2).map(tuple),
)  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(findings)
def test_random_findings_round_trip(f: Finding) -> None:
    with tempfile.TemporaryDirectory() as d:
        assert load_finding(write_finding(d, f)) == f


def test_docstring_examples() -> None:
    result = doctest.testmod(finding)
    assert result.attempted > 0 and result.failed == 0


def test_a_triaged_finding_round_trips_and_names_its_cure(tmp_path) -> None:
    from servefuzz.finding import Triage, TriageOutcome, load_finding, write_finding

    base = make()
    triage = Triage(
        baseline=TriageOutcome("baseline", reproduced=10, attempts=10),
        variants=(
            TriageOutcome("--disable-radix-cache", ("--disable-radix-cache",), component="radix cache", attempts=3),
            TriageOutcome("--disable-cuda-graph", ("--disable-cuda-graph",), component="cuda graph", reproduced=2, attempts=3),
            TriageOutcome("--page-size 1", ("--page-size", "1"), component="paging", error="server did not start"),
        ),
        known_issues=({"id": "sglang#22819", "reasons": ["prefix_len is a page multiple"]},),
    )
    f = dataclasses.replace(base, triage=triage)
    back = load_finding(write_finding(tmp_path, f))
    assert back.triage == triage
    assert [v.name for v in back.triage.cures] == ["--disable-radix-cache"]
    assert back.triage.implicated == ("radix cache",)
    still = dataclasses.replace(triage, baseline=TriageOutcome("baseline", reproduced=0, attempts=3))
    assert still.cures == (), "nothing is cured when the baseline no longer shows the finding"


def test_token_ids_are_not_mistaken_for_secrets() -> None:
    from servefuzz.server_facts import REDACTED, TargetInfo

    t = TargetInfo("x", "http://127.0.0.1:1", server_args={"eos_token_id": 2, "hf_token": "s", "max_total_tokens": 5})
    assert t.server_args == {"eos_token_id": 2, "hf_token": REDACTED, "max_total_tokens": 5}


def test_a_finding_records_its_launch_profile_and_older_findings_load_without_one(tmp_path: Path) -> None:
    plain = make()
    profiled = dataclasses.replace(plain, target=dataclasses.replace(plain.target, profile="cache-reuse"))
    back = load_finding(write_finding(tmp_path / "p", profiled))
    assert back.target.profile == "cache-reuse" and back == profiled
    # A finding made without a profile (every finding before profiles) has no such key.
    path = write_finding(tmp_path / "o", plain)
    assert "profile" not in json.loads(path.read_text())["target"] and load_finding(path).target.profile is None
    # The name is a name: a file edited to hold a flag there is refused on load, in one line.
    data = json.loads(path.read_text())
    data["target"]["profile"] = "--host=0.0.0.0"
    path.write_text(json.dumps(data))
    with pytest.raises(FindingError) as e:
        load_finding(path)
    assert "\n" not in str(e.value)


def test_a_finding_records_each_requests_adapter_and_refuses_a_path_in_its_place(tmp_path: Path) -> None:
    plain = make()
    sc = plain.scenario
    adapted = dataclasses.replace(
        plain,
        scenario=Scenario(sc.seed, (dataclasses.replace(sc.requests[0], adapter="lora-a"), *sc.requests[1:]), sc.meta),
        target=dataclasses.replace(plain.target, adapters=("lora-a", "lora-b")),
    )
    back = load_finding(write_finding(tmp_path / "a", adapted))
    assert back == adapted and back.scenario.requests[0].adapter == "lora-a"
    assert back.target.adapters == ("lora-a", "lora-b")
    # Every finding before adapters has neither key, and loads with none.
    path = write_finding(tmp_path / "o", plain)
    data = json.loads(path.read_text())
    assert "adapters" not in data["target"] and all("adapter" not in r for r in data["scenario"]["requests"])
    # A name read from a finding is untrusted: a path (or anything past the charset) is refused.
    for bad in ("../../etc/passwd", "/tmp/x", "a b", "x" * 65):
        data["scenario"]["requests"][0]["adapter"] = bad
        path.write_text(json.dumps(data))
        with pytest.raises(FindingError) as e:
            load_finding(path)
        assert "\n" not in str(e.value)


def test_a_finding_made_by_a_preset_records_its_device_and_loads_back(tmp_path: Path) -> None:
    """`TargetInfo.device` is written by every preset launch: the schema must take it (a campaign
    of `--launch sglang-cpu` once wrote findings that `load_finding` then refused)."""
    import dataclasses

    source = Path(__file__).parents[1] / "docs/findings/sglang-cpu-salt-dropped/finding.json"
    made = load_finding(source)
    for device in ("cpu", "cuda"):
        f = dataclasses.replace(made, target=dataclasses.replace(made.target, device=device))
        path = tmp_path / f"{device}.json"
        path.write_text(json.dumps(f.to_json()), encoding="utf-8")
        assert load_finding(path).target.device == device


def _drift_finding(target: TargetInfo) -> Finding:
    sides = (FlipSide(0, "load", 0, 7, -0.69, -0.70), FlipSide(0, "alone", 0, 9, -0.69, -0.70))
    d = Divergence("r01", 1, *sides, Verdict.NUMERIC_DRIFT, "flip at token 1: margin 0.0100 -> numeric-drift",
                   margin=0.01, threshold=0.0625)
    a = Anomaly(Oracle.ISOLATION, Verdict.NUMERIC_DRIFT, "r01", "r01: numeric-drift", divergences=(d,))
    sc = Scenario(seed=1, requests=(RequestSpec("r01", 0.0, (5, 6, 7), max_tokens=4),))
    return Finding(1, 1, sc, target, (a,))


@pytest.mark.parametrize("target", [
    TargetInfo("sglang", "http://127.0.0.1:1", server_args={"enable_deterministic_inference": True}),
    TargetInfo("vllm", "http://127.0.0.1:1", env={"VLLM_BATCH_INVARIANT": "1"}),
    # A file from before a profile's variables were recorded: its profile says the mode.
    TargetInfo("vllm", "http://127.0.0.1:1", profile="batch-invariant"),
])
def test_a_near_tie_flip_under_a_promised_mode_is_a_contract_violation_on_write_and_on_load(
        target: TargetInfo, tmp_path: Path) -> None:
    f = _drift_finding(target)
    assert f.verdict is Verdict.CONTRACT_VIOLATION
    assert f.headline.promise is not None and f.headline.promise.mode == target.deterministic
    assert f.signature.split(":")[2] == "contract-violation"
    back = load_finding(write_finding(tmp_path, f))
    assert back == f and back.verdict is Verdict.CONTRACT_VIOLATION
    # A file written with the drift verdict (before the tier) is re-judged when read.
    old = f.to_json()
    old["anomalies"] = [_drift_finding(TargetInfo("sglang", "http://127.0.0.1:1")).anomalies[0].to_json()]
    (tmp_path / "old.json").write_text(json.dumps(old))
    assert load_finding(tmp_path / "old.json").verdict is Verdict.CONTRACT_VIOLATION


@pytest.mark.parametrize("target", [
    TargetInfo("sglang", "http://127.0.0.1:1"),
    TargetInfo("vllm", "http://127.0.0.1:1", profile="default"),
    TargetInfo("llamacpp", "http://127.0.0.1:1", server_args={"n_parallel": 1}),  # a control, no promise
])
def test_in_a_mode_that_promises_nothing_a_near_tie_flip_stays_numeric_drift(target: TargetInfo) -> None:
    f = _drift_finding(target)
    assert f.verdict is Verdict.NUMERIC_DRIFT and f.headline.promise is None


@pytest.mark.parametrize(("key", "value"), [("allowed", "x"), ("allowed", -1), ("threshold_ms", "soon"),
                                            ("threshold_ms", None)])
def test_a_tenancy_measurement_the_replay_reads_is_checked_when_the_file_loads(tmp_path: Path, key: str,
                                                                                value: object) -> None:
    """The reproduction rule (`tenancy.breached_in`) and repro_full.py read an isolation breach's
    `allowed` and a suspected one's `threshold_ms` back from the file: a crafted one made `report`
    and `replay` crash (exit 4) where a bad finding file is one line and exit 2."""
    from servefuzz.history import RequestRecord, RunHistory, Status
    from servefuzz.oracles.tenancy import breached_in

    def breach(evidence: dict[str, object]) -> Anomaly:
        verdict = Verdict.ISOLATION_BREACH if "allowed" in evidence else Verdict.SUSPECTED_ISOLATION_BREACH
        return Anomaly(Oracle.TENANT_ISOLATION, verdict, "r02", "r02: cached tokens of another salt", evidence=evidence)

    good: dict[str, object] = {"allowed": 0} if key == "allowed" else {"twin": "r03", "threshold_ms": 5.0}
    path = write_finding(tmp_path, make(anomalies=(breach({**good, key: value}),)))
    with pytest.raises(FindingError, match=key):
        load_finding(path)
    # The control: the measurement as the oracle writes it loads, and the replay's rule reads it.
    kept = load_finding(write_finding(tmp_path / "good", make(anomalies=(breach(good),))))
    run = RunHistory(0, "load", (RequestRecord("r02", 0, "load", Status.OK, 0.0, cached_tokens=64),))
    assert breached_in(kept.headline, run) is (key == "allowed")
