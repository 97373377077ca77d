"""Crafted finding files are refused with one line before anything runs (a FIFO without
blocking, integers past 4,300 digits, deep nesting, NaN and Infinity, out-of-range offsets, an
empty scenario); whatever loads renders; and credentials are redacted in every form."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servefuzz.anomaly import Anomaly, Divergence, FlipSide, Oracle, Variant, Verdict
from servefuzz.errors import FindingError, ServefuzzError
from servefuzz.finding import (
    MAX_FINDING_BYTES,
    Confirmation,
    Finding,
    load_finding,
    write_finding,
)
from servefuzz.known_issues import match
from servefuzz.reports.html import report_html
from servefuzz.reports.issue_md import issue_markdown
from servefuzz.reports.repro import repro_script
from servefuzz.server_facts import REDACTED, TargetInfo, public_url, redact_argv, redact_text
from servefuzz.workload import RequestSpec, Scenario


def finding() -> Finding:
    sc = Scenario(11, (
        RequestSpec("r01", 0.0, (3, 4, 5, 6), 4, "p0", 2),
        RequestSpec("r02", 2.5, (3, 4, 7), 4, "p0", 2, n=2, stream=True, cancel_after_ms=50.0),
    ))  # fmt: skip
    d = Divergence("r01", 1, FlipSide(0, "load", 0, 8, -0.1, -3.0), FlipSide(1, "load", 0, 9, -0.2, -2.5),
                   Verdict.CORRUPTION, "flip", 2.5, False, 0.01)
    a = Anomaly(Oracle.REPLAY, Verdict.CORRUPTION, "r01", "r01: 2 variants",
                (Variant(0, (8,), "a", 1, (0,)), Variant(0, (9,), "b", 1, (1,))), (d,), {"runs": 2})
    target = TargetInfo("reference", "http://127.0.0.1:30000", "1", {"page_size": 2, "chunked_prefill_size": 2},
                        faults=("overlap-war",))
    return Finding(4, 11, sc, target, (a,), Confirmation(2, 2, {"r01": a.variants}, ("r01",), ("r02",)))


@pytest.fixture
def good(tmp_path: Path) -> Path:
    return write_finding(tmp_path, finding())


def refused(path: Path, says: str) -> str:
    with pytest.raises(FindingError) as e:
        load_finding(path)
    message = str(e.value)
    assert says in message and "\n" not in message, message
    return message


# --- not a regular file ---------------------------------------------------------------------------


@pytest.mark.timeout(20)
def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "finding.json"
    os.mkfifo(fifo)
    refused(fifo, "not a regular file (a pipe, socket or device)")


def test_a_device_a_directory_and_a_missing_file_are_one_line(tmp_path: Path) -> None:
    refused(Path("/dev/null"), "not a regular file")
    refused(tmp_path, "is a directory")
    refused(tmp_path / "nope.json", "no such finding file")


@pytest.mark.timeout(20)
def test_a_symlink_to_a_fifo_is_refused_too(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    (tmp_path / "link.json").symlink_to(fifo)
    refused(tmp_path / "link.json", "not a regular file")


def test_a_file_larger_than_any_finding_is_not_read(tmp_path: Path) -> None:
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate(MAX_FINDING_BYTES + 1)  # sparse: nothing is written, nothing may be read
    refused(big, "larger than any finding")


# --- JSON that Python's parser turns into tracebacks -------------------------------------------------


def edited(good: Path, old: str, new: str) -> Path:
    text = good.read_text()
    assert old in text, old
    good.write_text(text.replace(old, new, 1))
    return good


def test_an_integer_past_4300_digits_is_one_line(good: Path) -> None:
    refused(edited(good, '"seed": 11', '"seed": 1' + "0" * 5000), "Exceeds the limit (4300 digits)")


def test_nesting_past_the_recursion_limit_is_one_line(good: Path) -> None:
    refused(edited(good, '"notes": []', '"notes": ' + "[" * 100_000 + "]" * 100_000), "nested too deeply")


def test_nesting_deeper_than_a_finding_is_one_line(good: Path) -> None:
    refused(edited(good, '"notes": []', '"notes": ' + "[" * 200 + "]" * 200), "nested deeper than 48 levels")


@pytest.mark.parametrize(
    ("value", "says"),
    [("NaN", "NaN is not a number a finding may hold"), ("Infinity", "Infinity is not a number"),
     ("-Infinity", "-Infinity is not a number"), ("1e999", "the number 1e999 is out of range")],
)
def test_offsets_must_be_finite(good: Path, value: str, says: str) -> None:
    refused(edited(good, '"offset_ms": 2.5', f'"offset_ms": {value}'), says)


@pytest.mark.parametrize(
    ("old", "new", "where"),
    [
        ('"offset_ms": 2.5', '"offset_ms": -1', "offset_ms"),
        ('"offset_ms": 2.5', '"offset_ms": 1e12', "offset_ms"),
        ('"cancel_after_ms": 50.0', '"cancel_after_ms": -5', "cancel_after_ms"),
        ('"cancel_after_ms": 50.0', '"cancel_after_ms": 9e9', "cancel_after_ms"),
        ('"max_tokens": 4', '"max_tokens": 0', "max_tokens"),
        ('"max_tokens": 4', '"max_tokens": 100000000', "max_tokens"),
        ('"n": 2', '"n": 0', "n"),
        ('"n": 2', '"n": 100000', "n"),
        ('"seed": 11', '"seed": 1' + "0" * 40, "seed"),
        ('"rate": "2/2"', '"rate": "1' + "0" * 30 + '/2"', "rate"),
    ],
)
def test_values_out_of_range_are_refused(good: Path, old: str, new: str, where: str) -> None:
    message = refused(edited(good, old, new), "does not match the finding schema at $.")
    assert where in message


def test_a_negative_token_id_and_an_empty_scenario_are_refused(good: Path) -> None:
    data = json.loads(good.read_text())
    data["scenario"]["requests"][0]["prompt_ids"][0] = -1
    good.write_text(json.dumps(data))
    refused(good, "prompt_ids[0]")
    data["scenario"]["requests"] = []
    good.write_text(json.dumps(data))
    refused(good, "$.scenario.requests: [] should be non-empty")


def test_the_known_issue_matcher_survives_an_empty_scenario() -> None:
    f = finding()
    empty = Finding(f.iteration, f.seed, Scenario(1, ()), f.target, f.anomalies)
    assert isinstance(match(empty), list)


# --- property: any mutation of a finding loads into something sane, or is one line ------------------


hostile_values = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(), st.text(max_size=12),
    st.sampled_from(["NaN", "--host=0.0.0.0", "\x1b[2J", "[/oops]", "", "1/0", "a/b"]),
    st.lists(st.integers(-5, 5), max_size=3), st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
)


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += paths(v, (*prefix, i))
    return out


BASE = finding().to_json()
ALL_PATHS = [p for p in paths(BASE) if p]


@st.composite
def mutated(draw: st.DrawFn) -> str:
    data = copy.deepcopy(BASE)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(ALL_PATHS))
        node = data
        try:
            for key in path[:-1]:
                node = node[key]
            if draw(st.booleans()) and isinstance(node, dict):
                node.pop(path[-1], None)
            else:
                node[path[-1]] = draw(hostile_values)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation removed or replaced the way there
    text = json.dumps(data, allow_nan=True)
    if draw(st.integers(0, 9)) == 0:
        text = text[: draw(st.integers(0, len(text)))]  # a torn file
    return text


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=mutated())
def test_any_mutated_finding_loads_sanely_or_is_one_line(tmp_path: Path, text: str) -> None:
    path = tmp_path / "finding.json"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        f = load_finding(path)
    except FindingError as e:
        assert "\n" not in str(e)
        return
    assert f.scenario.requests
    for r in f.scenario.requests:
        assert math.isfinite(r.offset_ms) and 0 <= r.offset_ms <= 3_600_000
        assert r.cancel_after_ms is None or 0 <= r.cancel_after_ms <= 3_600_000
        assert 1 <= r.max_tokens <= 1_000_000 and 1 <= r.n <= 1024
    # Whatever loads, every report renders (repro_full.py may refuse a dialect it cannot speak: one line).
    matches = match(f)
    issue_markdown(f, matches)
    report_html(f, matches)
    try:
        repro_script(f)
    except ServefuzzError as e:
        assert "\n" not in str(e)


# --- credentials, in every form ---------------------------------------------------------------------


def test_argv_secrets_are_redacted_in_every_form() -> None:
    argv = ["serve", "--api-key", "s1", "--api-key=s2", "--key", "s3", "--token", "s4", "--password=s5",
            "HF_TOKEN=s6", "OPENAI_API_KEY=s7", "GITHUB_TOKEN=s8", "MY_KEY=s9", "CLIENT_SECRET_ID=s10",
            "--header", "Authorization: Bearer s11", "-H", "X-Custom: s12", "--header=X-Other: s13",
            "http://user:s14@host:1/v1", "--url=https://u:s15@h", "--port", "80", "MAX_TOKENS=8", "--max-tokens", "8"]
    out = redact_argv(argv)
    assert not any(f"s{i}" in str(w) for w in out for i in range(1, 16)), out
    assert out[-5:] == argv[-5:]  # what is not a credential stays as it was
    assert out[out.index("--header") + 1] == f"Authorization: {REDACTED}"


def test_text_secrets_are_redacted_and_ids_are_not() -> None:
    text = ("HF_TOKEN=s1 OPENAI_API_KEY='s2' --api-key s3 --key=s4 Authorization: Bearer s5 "
            "x-api-key: s6 fetching http://bob:s7@host/x client_secret: s8 eos_token_id=2 max_tokens=8 tokenizer=t")
    out = redact_text(text)
    assert not any(f"s{i}" in out for i in range(1, 9)), out
    assert "eos_token_id=2" in out and "max_tokens=8" in out and "tokenizer=t" in out


def test_a_stored_url_has_no_credentials(tmp_path: Path) -> None:
    assert public_url("http://a:b@127.0.0.1:1/p?key=k1&token=k2&n=1") == "http://127.0.0.1:1/p?key=<redacted>&token=<redacted>&n=1"
    f = finding()
    target = TargetInfo("sglang", "http://alice:pw-secret@127.0.0.1:30000", auth=True,
                        server_args={"argv": ["--api-key", "pw-secret"]}, env={"HF_TOKEN": "pw-secret"})
    text = write_finding(tmp_path, Finding(1, 2, f.scenario, target, f.anomalies)).read_text()
    assert "pw-secret" not in text and "alice" not in text
    back = load_finding(tmp_path / "finding_00001_2.json").target
    assert back.auth is True and back.base_url == "http://127.0.0.1:30000"


@pytest.mark.parametrize(
    ("temperature", "seed", "where"),
    [(-0.5, 1, "temperature"), (1e6, 1, "temperature"), (0.7, -1, "seed"), (0.7, 2**40, "seed"), (0.7, 1.5, "seed")],
)
def test_sampling_fields_out_of_range_are_refused(good: Path, temperature: float, seed: float, where: str) -> None:
    data = json.loads(good.read_text())
    data["scenario"]["requests"][0] |= {"temperature": temperature, "seed": seed}
    good.write_text(json.dumps(data))
    assert where in refused(good, "does not match the finding schema at $.")


def test_a_seeded_sampled_request_survives_the_finding_file(tmp_path: Path) -> None:
    f = finding()
    sampled = dataclasses.replace(f.scenario.requests[0], temperature=0.9, seed=7)
    f = dataclasses.replace(f, scenario=f.scenario.with_requests([sampled, *f.scenario.requests[1:]]))
    back = load_finding(write_finding(tmp_path, f)).scenario.by_id()["r01"]
    assert (back.temperature, back.seed) == (0.9, 7)


@pytest.mark.parametrize("choices", [["a\"; rm -rf ~"], ["$(id)"], ["x" * 65], [], ["a"] * 17, ["a", "a"], "ab"])
def test_a_hostile_choice_constraint_is_refused(good: Path, choices: object) -> None:
    # A finding's choices go into a GBNF grammar, a regex and JSON: only letters, digits and
    # spaces, bounded in size and count, ever load.
    data = json.loads(good.read_text())
    data["scenario"]["requests"][0] |= {"choices": choices, "ignore_eos": False}
    good.write_text(json.dumps(data))
    assert "choices" in refused(good, "does not match the finding schema at $.")


def test_a_constrained_request_survives_the_finding_file(tmp_path: Path) -> None:
    f = finding()
    bound = dataclasses.replace(f.scenario.requests[0], ignore_eos=False, choices=(" w5 w7", " w9"))
    f = dataclasses.replace(f, scenario=f.scenario.with_requests([bound, *f.scenario.requests[1:]]))
    assert load_finding(write_finding(tmp_path, f)).scenario.by_id()["r01"].choices == (" w5 w7", " w9")
