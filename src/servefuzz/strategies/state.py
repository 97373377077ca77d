"""Strategies aimed at the state an architecture keeps beside per-token KV (issue 42): a sliding
window, a recurrent state, experts.

Each needs a trait of the served model (`TargetShape.model`, `model_facts.ModelFacts.traits`):
where the model lacks it the strategy would aim at nothing, so `offer.offered` leaves it out and
the campaign says so once (`offer.left_out`). Lengths are aimed at the model's own window and state
chunk."""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import ClassVar

from servefuzz.strategies.shape import CACHED_BY_MS, STRAGGLER_MS, Draft, TargetShape, boundary_lengths
from servefuzz.workload import Scenario

__all__ = [
    "ExpertBatch",
    "PrefillAbort",
    "StateRestore",
    "WindowEdge",
    "WindowPrefix",
    "state_chunk_of",
    "window_of",
]


def window_of(shape: TargetShape) -> int:
    """The model's sliding window, or the strategies' unit where it states none."""
    return shape.model.window or shape.unit


def state_chunk_of(shape: TargetShape) -> int:
    """The chunk the model scans its recurrent state in, or the strategies' unit where unknown."""
    return shape.model.state_chunk or shape.unit



@dataclass(frozen=True)
class WindowEdge:
    """Prompt lengths at multiples of the sliding window and +-1 (the length modulo the window),
    and decodes that cross a multiple of it in the middle of decoding, in one burst behind a
    blocker; a long decode crosses a whole window while newcomers join its batch. A ring buffer
    or a freed out-of-window page indexed off by one shows there first."""

    name: str = "window-edge"
    needs: ClassVar[frozenset[str]] = frozenset({"window"})

    def generate(self, rng: random.Random, shape: TargetShape, *, seed: int) -> Scenario:
        w = window_of(shape)
        d = Draft(seed, shape)
        d.blocker(0)
        at = rng.uniform(6, 10)
        for _ in range(rng.randint(2, 4)):  # prompts on the window's edge
            d.add(at + rng.uniform(0, 2), rng.choice(boundary_lengths(w, [1, 2, 3])), rng.randint(4, 16))
        for _ in range(rng.randint(2, 3)):  # the window crossed in the middle of decoding
            back = rng.randint(1, max(1, min(16, w - 1)))
            d.add(at + rng.uniform(0, 2), rng.choice([1, 2]) * w - back, back + rng.randint(2, 24))
        d.add(at + rng.uniform(0, 2), rng.randint(4, max(4, w // 2)), w + rng.randint(8, 32))  # a whole window
        for _ in range(rng.randint(1, 3)):  # newcomers while it decodes
            d.add(at + rng.uniform(20, 120), rng.choice(boundary_lengths(w, [1, 2])), rng.randint(4, 12))
        return d.scenario(self.name, window=w)


@dataclass(frozen=True)
class WindowPrefix:
    """Prefix hits longer than the sliding window. A prompt of L > window tokens is cached on its
    own; then, in one burst, requests extend it by a few tokens (a hit of L: the windowed layers
    must see exactly the last window of it), one shares only a part that ends more than a window
    before L (the window the engine kept ends elsewhere: it must recompute or restore, never
    reuse), and one shares exactly a window; a straggler extends it again 1.2-2 s in, for an
    engine too slow to have cached it by then."""

    name: str = "window-prefix"
    needs: ClassVar[frozenset[str]] = frozenset({"window"})

    def generate(self, rng: random.Random, shape: TargetShape, *, seed: int) -> Scenario:
        w = window_of(shape)
        d = Draft(seed, shape)
        cached = w * rng.randint(2, 4) + rng.choice([-1, 0, 1, rng.randint(2, max(2, w - 1))])
        cached = d.add(0, cached, rng.randint(2, 8), prefix="p0", prefix_len=cached).prompt_len  # all of it the prefix
        t = rng.uniform(*CACHED_BY_MS)
        d.blocker(t)
        at = t + rng.uniform(6, 10)
        for _ in range(rng.randint(2, 3)):
            d.add(at + rng.uniform(0, 2), cached + rng.randint(1, w), rng.randint(8, 24), prefix="p0", prefix_len=cached)
        stale = cached - w - rng.randint(1, w)
        if stale > 0:
            d.add(at + rng.uniform(0, 2), stale + rng.randint(1, w), rng.randint(8, 24), prefix="p0", prefix_len=stale)
        d.add(at + rng.uniform(0, 2), w + rng.randint(1, w), rng.randint(8, 24), prefix="p0", prefix_len=w)
        d.add(rng.uniform(*STRAGGLER_MS), cached + rng.randint(1, w), rng.randint(8, 24), prefix="p0", prefix_len=cached)
        return d.scenario(self.name, window=w, aims=[cached])


@dataclass(frozen=True)
class StateRestore:
    """Prefix hits that must restore a recurrent state at exactly the cached length. Two prompts
    are cached on their own, their lengths at multiples of the state chunk and +-1 or anywhere.
    Each is then hit four ways: a prompt that extends it by a few tokens (the state at exactly
    its length), the whole prompt but its last token (the state one token before the cached one:
    only a checkpoint or a recompute has it), the same prompt again (a full hit, its last
    token computed anew), and, where the prompt is longer than a chunk, its beginning up to the
    last multiple of the chunk below its length alone (a whole prompt cached inside a longer one,
    ending on a checkpoint: the N-1 hit of LMCache #4614, whose last tokens are computed again
    from an earlier state, not restored after them). One hit of each prompt goes in one burst
    behind a blocker (two restores in one batch); the others follow one at a time, later (an
    engine that keeps one state per slot, as llama-server, restores for one request of a prompt
    at a time); a straggler extends each 1.2-2 s in, for an engine too slow to have cached them
    by then."""

    name: str = "state-restore"
    needs: ClassVar[frozenset[str]] = frozenset({"state"})

    def generate(self, rng: random.Random, shape: TargetShape, *, seed: int) -> Scenario:
        c = state_chunk_of(shape)
        d = Draft(seed, shape)
        lengths = [rng.choice([*boundary_lengths(c, [1, 2, 3, 4]), rng.randint(c, 6 * c)]) for _ in range(2)]
        primers = [d.add(i * rng.uniform(0.3, 1.0), n, rng.randint(2, 8), prefix=f"p{i}", prefix_len=n)
                   for i, n in enumerate(lengths)]
        lengths = [p.prompt_len for p in primers]  # as the target can hold them
        t = rng.uniform(*CACHED_BY_MS)
        d.blocker(t)
        at, later = t + rng.uniform(6, 10), t + rng.uniform(300, 400)
        for i, (n, primer) in enumerate(zip(lengths, primers, strict=True)):
            head = (n - 1) // c * c  # the last multiple of the chunk below n: a checkpoint inside it
            kinds = ["extend", "all-but-last", "again", *(["head"] if head else [])] if n > 1 else ["extend", "again"]
            rng.shuffle(kinds)
            for k, kind in enumerate(kinds):
                when = at + rng.uniform(0, 2) if k == 0 else later + rng.uniform(0, 20)
                later += rng.uniform(60, 120) if k else 0
                p, max_tokens = f"p{i}", rng.randint(8, 24)
                if kind == "extend":
                    d.add(when, n + rng.randint(1, c), max_tokens, prefix=p, prefix_len=n)
                elif kind == "all-but-last":
                    d.add(when, n, max_tokens, prefix=p, prefix_len=n - 1)
                elif kind == "head":  # the primer's beginning alone, every token of it cached
                    d.add(when, 0, max_tokens, prefix=p, prefix_len=head, prompt_ids=primer.prompt_ids[:head])
                else:  # the very prompt: only its output must fit beside it
                    d.add(when, 0, max(1, min(max_tokens, shape.pool_tokens - n)), prefix=p, prefix_len=n,
                          prompt_ids=primer.prompt_ids)
        for i, n in enumerate(lengths):
            d.add(rng.uniform(*STRAGGLER_MS) + i * 100, n + rng.randint(1, c), rng.randint(8, 24), prefix=f"p{i}", prefix_len=n)
        return d.scenario(self.name, state_chunk=c, aims=lengths)


@dataclass(frozen=True)
class PrefillAbort:
    """Requests cut in the middle of a chunked prefill, and retried at once. Long prompts (three
    to six steps of the step budget, sharing a prefix) are streamed and cancelled 5-120 ms in,
    beside another long prompt that shares the step budget; each is sent again 5-60 ms after its
    cut (the client's retry: whatever the engine kept of the cut prefill, a recurrent state or a
    window at the cut, is what the retry reuses), and a longer prompt hits their prefix later.

    Where the engine reports its prefill's progress (llama-server's `return_progress`, which the
    adapter asks for on a stream it will cut), the cut is placed in the prefill instead of on the
    clock (`RequestSpec.cancel_at_prefill`): once the prompt's first 1 to (steps - 3) steps are
    in the slot. llama-server notices the client gone at its next write, after one more step, and
    stops before the next, so the cut leaves the prompt's last steps uncomputed however loaded
    the machine, unless the client takes more than a step to close (a clock's cut landed before
    the slot started on a quiet box and after the whole prefill on a busy one). Elsewhere the
    clock cuts, as the engine's speed has it."""

    name: str = "prefill-abort"
    needs: ClassVar[frozenset[str]] = frozenset({"stateful"})

    def generate(self, rng: random.Random, shape: TargetShape, *, seed: int) -> Scenario:
        room = shape.pool_tokens - 96
        chunk = shape.chunked_prefill_size or rng.choice([256, 512])
        d = Draft(seed, shape)
        d.add(0, min(room, rng.randint(chunk, 2 * chunk)), rng.randint(4, 16))  # shares the step budget
        # Three to six steps of the budget: a cut 5-120 ms in lands between two of them on an
        # engine of any speed here (a step of 64 tokens took 45 ms on an idle core, 400 ms loaded).
        shared = max(1, min(room - 64, chunk * rng.randint(3, 6) + rng.choice([-1, 0, 1, rng.randint(2, 63)])))
        last = 0.0
        for _ in range(rng.randint(1, 2)):
            at, cut = rng.uniform(1, 3), rng.uniform(5, 120)
            victim = d.add(at, shared + rng.randint(1, 64), rng.randint(16, 64), prefix="p0", prefix_len=shared,
                           stream=True, cancel_after_ms=cut)
            steps = -(-victim.prompt_len // chunk)
            victim = d.specs[-1] = replace(victim, cancel_at_prefill=chunk * rng.randint(1, max(1, steps - 3)))
            retry = at + cut + rng.uniform(5, 60)
            d.add(retry, 0, max(1, min(rng.randint(8, 24), shape.pool_tokens - victim.prompt_len)), prefix="p0",
                  prefix_len=victim.prefix_len, prompt_ids=victim.prompt_ids)
            last = max(last, retry)
        d.add(last + rng.uniform(*CACHED_BY_MS), shared + rng.randint(65, 128), rng.randint(8, 24),
              prefix="p0", prefix_len=shared)
        return d.scenario(self.name, chunk=chunk, cancelled=sum(1 for r in d.specs if r.cancel_after_ms is not None))


@dataclass(frozen=True)
class ExpertBatch:
    """Mixture-of-experts routing under batch changes: a probe decodes while the batch around it
    grows and shrinks (waves of newcomers with short decodes), with copies of the probe in the
    same burst (identical tokens in one step must be routed alike). A router or expert kernel
    whose result depends on the batch's size or its other rows' tokens shows in the probe's
    answer against its answer alone."""

    name: str = "expert-batch"
    needs: ClassVar[frozenset[str]] = frozenset({"experts"})

    def generate(self, rng: random.Random, shape: TargetShape, *, seed: int) -> Scenario:
        d = Draft(seed, shape)
        probe = d.add(0, rng.randint(16, 128), rng.randint(48, 96))
        for _ in range(rng.randint(1, 2)):
            d.add(rng.uniform(0.3, 2), 0, probe.max_tokens, prompt_ids=probe.prompt_ids)
        t = 0.0
        for _ in range(rng.randint(3, 5)):  # each wave joins, decodes a few steps and leaves
            t += rng.uniform(15, 60)
            for _ in range(rng.randint(1, 4)):
                d.add(t + rng.uniform(0, 2), rng.randint(8, 256), rng.randint(2, 12))
        return d.scenario(self.name, experts=shape.model.experts)


