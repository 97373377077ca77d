"""Oracles: pure functions from recorded histories to anomalies with evidence.

    >>> from servefuzz.oracles import replay_consistency, isolation, n_consistency, liveness, cache_state
    >>> replay_consistency([]).anomalies
    ()

Each divergence is classified by `verdict.classify` (numeric drift or suspected corruption, from
the logprob margin at the first differing token against the measured noise, the scenario's and
the campaign's: `servefuzz.oracles.noise`); logprobs that moved beyond the campaign's noise
without a flip are `anomalous-shift`s (`servefuzz.oracles.shift`); only a control
(`servefuzz.oracles.controls`) makes a suspected corruption a corruption. docs/verdicts.md has
the whole rule.

The judge (`servefuzz.oracles.judge`) runs them as checkers over one frozen record of an
execution (`servefuzz.oracles.observations.Observations`), whose shared views (outputs per
request, the noise) are built once.
"""

from __future__ import annotations

from servefuzz.oracles.cache_state import CACHE_STATES, cache_state
from servefuzz.oracles.isolation import isolation
from servefuzz.oracles.liveness import CRASH_MIN_TAIL, liveness
from servefuzz.oracles.nconsistency import n_consistency
from servefuzz.oracles.noisy_neighbour import latency_ms, noisy_neighbour
from servefuzz.oracles.outputs import Output, VariantGroup, determinate_outputs, group_variants, output_key
from servefuzz.oracles.replay import ReplayOutcome, replay_consistency
from servefuzz.oracles.verdict import NOISE_FLOOR, NOISE_K, NoiseModel, brief, classify, fmt_lp, measure_noise

__all__ = [
    "replay_consistency",
    "ReplayOutcome",
    "isolation",
    "n_consistency",
    "liveness",
    "CRASH_MIN_TAIL",
    "cache_state",
    "CACHE_STATES",
    "noisy_neighbour",
    "latency_ms",
    "NoiseModel",
    "measure_noise",
    "classify",
    "brief",
    "fmt_lp",
    "NOISE_K",
    "NOISE_FLOOR",
    "Output",
    "VariantGroup",
    "output_key",
    "group_variants",
    "determinate_outputs",
]
