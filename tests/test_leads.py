"""Leads: a confident flip that no replay showed again is where the search looks next.

The corpus and the schedule are pure state, so these run without a server; the measure of what
leads find on a real engine is bench/realbugs.py (docs/benchmarks.md, the RAM prompt cache).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from servefuzz.anomaly import Anomaly, Divergence, FlipSide, Oracle, Verdict
from servefuzz.confirm import glimpsed
from servefuzz.corpus import LEAD_MUTATIONS, Corpus, CorpusEntry, Lead, Schedule
from servefuzz.finding import Confirmation, Finding
from servefuzz.server_facts import TargetInfo
from servefuzz.store import Progress, load_entries
from servefuzz.workload import RequestSpec, Scenario

SIG = "llamacpp:replay:corruption:abort,prefix=none"


def _scenario(seed: int) -> Scenario:
    return Scenario(seed, (RequestSpec("r01", 0.0, (5, 6, seed), 4), RequestSpec("r02", 1.0, (7, 8), 4)))


def _corpus(n: int = 3) -> Corpus:
    c = Corpus()
    for i in range(n):
        c.consider(_scenario(i), frozenset({f"f{i}"}), origin="random", iteration=i, flagged=False)
    return c


def _flip(verdict: Verdict) -> Anomaly:
    side = FlipSide(0, "load", 0, 423, -1.97, -2.12)
    d = Divergence("r13", 0, side, FlipSide(1, "load", 0, 344, -2.22, -2.24), verdict,
                   "flip at token 0: ...", 0.1436, False, 0.001)
    return Anomaly(Oracle.REPLAY, verdict, "r13", "r13: 2 variants over 2 runs", divergences=(d,))


def _finding(verdict: Verdict, reproduced: int, attempts: int = 15) -> Finding:
    conf = Confirmation(reproduced, attempts, {}, ("r13",), ())
    return Finding(67, 1, _scenario(9), TargetInfo("llamacpp", "http://127.0.0.1:1"), (_flip(verdict),),
                   confirmation=conf)


def test_a_glimpse_is_a_confident_flip_no_replay_showed_again() -> None:
    assert glimpsed(_finding(Verdict.SUSPECTED_CORRUPTION, 0))
    assert glimpsed(_finding(Verdict.CORRUPTION, 0))  # the truth backed its one deviant run
    assert not glimpsed(_finding(Verdict.SUSPECTED_CORRUPTION, 1))  # it came back: a finding, not a lead
    assert not glimpsed(_finding(Verdict.NUMERIC_DRIFT, 0))  # a near-tie: a clean engine's numerics
    unconfirmed = Finding(67, 1, _scenario(9), TargetInfo("llamacpp", "http://127.0.0.1:1"),
                          (_flip(Verdict.SUSPECTED_CORRUPTION),))
    assert not glimpsed(unconfirmed)  # cut by the budget before a replay: nothing was tried


def test_a_leads_mutations_come_first_after_the_first_round_then_the_schedule_goes_on() -> None:
    corpus = _corpus()
    schedule = Schedule(("a", "b"))
    lead = corpus.follow(_scenario(1), frozenset({"f1"}), signature=SIG, origin="random", iteration=5)
    assert lead is not None and lead.id == 1 and lead.lead == Lead(SIG, LEAD_MUTATIONS)
    rng = random.Random(0)
    # The first round is not cut short: its turns are the strategies'.
    assert [schedule.next(rng, i, corpus) for i in range(2)] == [("generate", "a"), ("generate", "b")]
    picks = [schedule.next(rng, 2 + i, corpus) for i in range(LEAD_MUTATIONS)]
    assert all(kind == "mutate" and isinstance(e, CorpusEntry) and e.id == 1 for kind, e in picks), picks
    # Followed for LEAD_MUTATIONS picks, then the schedule mixes as before: generations come back.
    after = [schedule.next(rng, 50 + i, corpus)[0] for i in range(40)]
    assert corpus.leading() is None and "generate" in after


def test_a_lead_not_in_the_corpus_is_kept_and_the_corpus_learns_nothing_new_from_it() -> None:
    corpus = _corpus()
    seen = set(corpus.seen)
    lead = corpus.follow(_scenario(7), frozenset({"f0"}), signature=SIG, origin="mutate:0", iteration=9)
    assert lead is not None and lead.id == 3 and lead.new == frozenset() and lead.flagged
    assert corpus.seen == seen and corpus.leading() == lead


def test_one_lead_at_a_time_and_each_signature_once() -> None:
    corpus = _corpus()
    assert corpus.follow(_scenario(0), frozenset(), signature=SIG, origin="random", iteration=3) is not None
    # Another glimpse while the first is followed is not queued: the search would do nothing else.
    assert corpus.follow(_scenario(2), frozenset(), signature="other", origin="random", iteration=4) is None
    for _ in range(LEAD_MUTATIONS):
        assert corpus.lead_pick() is not None
    assert corpus.lead_pick() is None
    # The same signature glimpsed again (a mutant of the lead, say) is not followed twice.
    assert corpus.follow(_scenario(2), frozenset(), signature=SIG, origin="mutate:0", iteration=20) is None
    assert corpus.follow(_scenario(2), frozenset(), signature="other", origin="random", iteration=21) is not None


def test_a_blackbox_schedule_never_follows_a_lead() -> None:
    corpus = _corpus()
    corpus.follow(_scenario(1), frozenset(), signature=SIG, origin="random", iteration=5)
    schedule = Schedule(("a", "b"), mutate_share=0.0)
    rng = random.Random(1)
    assert {schedule.next(rng, 5 + i, corpus)[0] for i in range(20)} == {"generate"}


def test_a_lead_and_how_far_it_was_followed_survive_a_resume() -> None:
    corpus = _corpus()
    lead = corpus.follow(_scenario(1), frozenset(), signature=SIG, origin="random", iteration=5)
    assert lead is not None
    for _ in range(4):
        corpus.lead_pick()
    # What the campaign writes and reads back: each entry's file, and the pick counts in progress.json.
    progress = Progress.from_json(Progress(picks=dict(corpus.picks)).to_json())
    again = Corpus([CorpusEntry.from_json(e.to_json()) for e in corpus.entries], progress.picks)
    resumed = again.leading()
    assert resumed is not None and resumed.lead == Lead(SIG, LEAD_MUTATIONS) and again.picks[resumed.id] == 4
    assert sum(again.lead_pick() is not None for _ in range(LEAD_MUTATIONS)) == LEAD_MUTATIONS - 4
    # An entry written before leads existed reads as no lead.
    old = {k: v for k, v in corpus.entries[0].to_json().items() if k != "lead"}
    assert CorpusEntry.from_json(old).lead is None


def test_a_hostile_corpus_file_is_skipped_on_resume_not_a_traceback(tmp_path: Path) -> None:
    # A lead read back from disk: a wrong type, NaN, or a number too big for an int.
    good = _corpus(1).entries[0].to_json()
    (tmp_path / "entry_00000.json").write_text(json.dumps(good))
    for i, lead in enumerate(('"abc"', '{"signature": "x", "until": NaN}', '{"signature": "x", "until": 1e400}'), 1):
        bad = json.dumps({**good, "id": i}).replace('"flagged": false', f'"flagged": false, "lead": {lead}')
        (tmp_path / f"entry_{i:05d}.json").write_text(bad)
    assert [e.id for e in load_entries(tmp_path)] == [0]
