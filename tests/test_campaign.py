"""The campaign's pure parts: judging histories and measuring how a finding held up."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "oracles"))

from histbuild import flip, rec, run, scored  # noqa: E402

from servefuzz.anomaly import Verdict  # noqa: E402
from servefuzz.campaign import confirmation_of, derive_seed, judge  # noqa: E402

GOOD = scored([10, 11, 12, 13])
BAD = flip(GOOD, 1, chosen=99, lp_chosen=-0.01, other=11, lp_other=-6.0, tail=[7, 7])


def test_a_deterministic_wrong_answer_under_load_is_caught_by_isolation_alone() -> None:
    # Both loaded runs agree with each other (replay sees nothing), but not with the request alone.
    loaded = [run(i, rec("r02", i, BAD), rec("r01", i, GOOD)) for i in range(2)]
    alone = {"r02": [rec("r02", 0, GOOD, label="alone")], "r01": [rec("r01", 0, GOOD, label="alone")]}
    j = judge(loaded, alone)
    assert [(a.oracle.value, a.request_id, a.verdict) for a in j.anomalies] == [
        ("isolation", "r02", Verdict.CORRUPTION)
    ]


def test_clean_histories_give_no_anomaly() -> None:
    loaded = [run(i, rec("r01", i, GOOD), rec("r02", i, GOOD)) for i in range(3)]
    assert judge(loaded, {"r01": [rec("r01", 0, GOOD, label="alone")]}).anomalies == ()


def test_confirmation_counts_replays_that_differ_from_the_alone_reference() -> None:
    first = [run(i, rec("r02", i, BAD), rec("r01", i, GOOD)) for i in range(2)]
    alone = {"r02": [rec("r02", 0, GOOD, label="alone")]}
    j = judge(first, alone)
    replays = [run(2 + i, rec("r02", 2 + i, BAD if i % 2 == 0 else GOOD), rec("r01", 2 + i, GOOD)) for i in range(5)]
    c = confirmation_of(j, [*first, *replays], replays, alone)
    assert c.rate == "3/5"
    assert c.expected == ("r02",) and c.stable == ("r01",)
    counts = {v.token_ids: v.count for v in c.variants["r02"]}
    assert counts == {BAD.token_ids: 5, GOOD.token_ids: 3}  # 2 + 3 under load, 2 + 1 with alone


def test_a_finding_that_stops_reproducing_is_kept_with_rate_zero() -> None:
    first = [run(i, rec("r02", i, BAD)) for i in range(2)]
    alone = {"r02": [rec("r02", 0, GOOD, label="alone")]}
    replays = [run(2 + i, rec("r02", 2 + i, GOOD)) for i in range(3)]
    c = confirmation_of(judge(first, alone), [*first, *replays], replays, alone)
    assert c.rate == "0/3" and c.expected == ("r02",)


def test_iteration_seeds_are_stable_and_distinct() -> None:
    seeds = [derive_seed(0, i) for i in range(100)]
    assert len(set(seeds)) == 100
    assert derive_seed(0, 3) == derive_seed(0, 3) and derive_seed(1, 3) != derive_seed(0, 3)
