"""Strategies aimed at speculative decoding: drafts that the model then accepts. Each `needs` the
`speculative` capability (`TargetShape.speculative`: the server speculates, by its switches or
its profile).

A draft is verified in the step that follows it, and a verify step that rejects every draft is
the plain decode path again: a spec-decoding bug (a KV slot written for a rejected draft, a
sampler stream advanced past what was kept, a batch whose rows accept different counts) needs
drafts that are *accepted*, many of them, in requests running together. On the H100 the SGLang
`spec-ngram` campaign's load averaged 1.23 tokens a verify step of 3 drafted (issue 53): the
mix's short decodes of random ids give prompt lookup nothing to find.

What a random-weight model accepts, measured on vLLM CPU 0.32.0's n-gram drafter (3 tokens a
step, lookup of the last 2-4 tokens; docs/benchmarks.md): its greedy next token depends mostly
on the last few tokens, so a long decode comes back to n-grams it said before, and a prompt
that repeats a short motif gives the lookup matches from the start. Four at once: a motif of
1 / 4 / 16 tokens repeated, 200 tokens decoded, 75% / 75% / 56% of the drafts accepted (48% /
36% / 12% of the generated tokens); a random 32-token prompt decoded 100 / 400 / 800 tokens,
1% / 13% / 28% of them; 32 tokens, 0 of 2 drafts; a sampled request (temperature 0.1-0.8),
0-1% of its drafts. The model does not copy its prompt (no induction heads in random weights):
the motif helps by putting n-grams in the context, and the longer the decode the more of it
loops. A scenario is fixed before it is sent (same seed, same scenario), so a prompt cannot echo
a continuation learned from an answer; SGLang's n-gram drafter does that itself, across
requests: one trie fed every step with every running request's last tokens (its
ngram_worker.py, `_update_ngram_corpus`; reset with the cache, `clear_cache_pool`), so a copy of
a prompt that trails its leader is drafted the leader's answer (read from its code, not
measured here). MTP drafts (`--model-build speculative`) agree where the decode is greedy and
long: the same scenario serves them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import ClassVar

from servefuzz.strategies.features import seeded_draw
from servefuzz.strategies.shape import Draft, TargetShape
from servefuzz.workload import Scenario, TokenIds

__all__ = ["MOTIF_LENGTHS", "SpecEcho", "repeated"]

# Motif lengths a prompt repeats: 56-80% of their drafts accepted at 1-16 tokens, 41-63% at
# 32-96 (a long period is found only once it has come round twice); the shorter, the more of the
# decode is drafted (docs/benchmarks.md).
MOTIF_LENGTHS: tuple[int, ...] = (1, 2, 3, 4, 6, 8, 12, 16)


def repeated(motif: TokenIds, length: int) -> TokenIds:
    """`motif` over and over, cut at `length` tokens.

    >>> repeated((5, 6, 7), 7)
    (5, 6, 7, 5, 6, 7, 5)
    """
    return (motif * (length // len(motif) + 1))[:length]


@dataclass(frozen=True)
class SpecEcho:
    """Long greedy decodes of prompts that repeat a motif, several together, sharing a prefix.

    Every prompt opens with one shared *head* (a motif repeated for 1-3 pages: prefix `s0`,
    cached by the first request and read by the others), then a *tail* of its own motif repeated
    4-16 times: prompt lookup finds the motif in the context, and the model, repeating what it
    just read, says it again (the module docstring's numbers). Each decodes 160-320 tokens
    greedily, so most of a scenario's tokens are drafted and most drafts kept. Around them, what
    carries state across a verify step: a copy of a prompt sent beside it (the same tokens
    drafted and accepted in two rows of one batch; SGLang's n-gram trie is shared by every
    request), greedy n = 2 (forks drafting alike), a late joiner sharing the head that is
    admitted while the others verify, and, where the engine promises per-request seeds, a short
    seeded sampled request whose drafts are rejected (a rejection must not move its sampler's
    draws), short so that it drafts little beside the greedy ones.
    """

    name: str = "spec-echo"
    needs: ClassVar[frozenset[str]] = frozenset({"speculative"})

    def generate(self, rng: random.Random, shape: TargetShape, *, seed: int) -> Scenario:
        d = Draft(seed, shape)
        page = rng.choice(shape.pages)
        head_motif = self._motif(rng, shape, rng.choice(MOTIF_LENGTHS))
        head_len = min(rng.randint(1, 3) * page, shape.pool_tokens // 8)
        head = repeated(head_motif, head_len)
        # A tail's first token starts the tail: never the head's own next token, never another
        # tail's first (so prompts naming `s0` share exactly the head, or are the same prompt).
        firsts = {head_motif[head_len % len(head_motif)]}
        prompts: list[TokenIds] = []
        t = rng.uniform(0, 5)
        for _ in range(rng.randint(3, 6)):
            if prompts and rng.random() < 0.25:  # a copy of an earlier prompt, sent beside it
                prompt = rng.choice(prompts)
            else:
                motif = self._motif(rng, shape, rng.choice(MOTIF_LENGTHS), avoid=firsts)
                firsts.add(motif[0])
                prompt = head + repeated(motif, len(motif) * rng.randint(4, 16))
                prompts.append(prompt)
            self._add(d, t, prompt, rng.randint(160, 320), head_len, n=rng.choice([1, 1, 1, 2]),
                      stream=rng.random() < 0.3)
            t += rng.uniform(0.3, 3.0)
        if "seeds" in shape.capabilities and rng.random() < 0.5:
            motif = self._motif(rng, shape, rng.choice(MOTIF_LENGTHS), avoid=firsts)
            firsts.add(motif[0])
            self._add(d, t, head + repeated(motif, 4 * len(motif)), rng.randint(16, 48), head_len, **seeded_draw(rng))
        # The late joiner: admitted some steps into the others' decodes, while they verify; most
        # often a trailing copy, whose drafts SGLang's shared n-gram trie takes from its leader.
        late = rng.choice(prompts) if rng.random() < 0.75 else None
        if late is None:
            motif = self._motif(rng, shape, rng.choice(MOTIF_LENGTHS), avoid=firsts)
            late = head + repeated(motif, len(motif) * rng.randint(4, 16))
        self._add(d, t + rng.uniform(150, 1500), late, rng.randint(64, 200), head_len)
        return d.scenario(self.name, page_size=page, head=head_len, head_motif=len(head_motif))

    @staticmethod
    def _motif(rng: random.Random, shape: TargetShape, length: int, avoid: set[int] | frozenset[int] = frozenset()) -> TokenIds:
        """`length` random ids of the target's vocabulary, the first not in `avoid`."""
        vocab = shape.vocab
        first = vocab[rng.randrange(len(vocab))]
        while first in avoid:
            first = vocab[rng.randrange(len(vocab))]
        return (first, *(vocab[rng.randrange(len(vocab))] for _ in range(length - 1)))

    @staticmethod
    def _add(d: Draft, at: float, prompt: TokenIds, out: int, head_len: int, *, n: int = 1, stream: bool = False,
             temperature: float = 0.0, seed: int | None = None) -> None:
        """One request of `prompt` (the head, its `s0` prefix, then its tail), its tail cut and
        its decode shortened where the target holds less (`Draft.add` clamps neither for given ids)."""
        room = d.shape.pool_tokens
        out = max(1, min(out, room // 2 // n))
        prompt = prompt[: max(head_len + 1, room - out * n - 1)]
        d.add(at, len(prompt), out, prefix="s0", prefix_len=head_len, n=n, stream=stream, prompt_ids=prompt,
              temperature=temperature, seed=seed)
