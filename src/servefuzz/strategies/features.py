"""Strategies aimed at per-request features that carry their own state: cache salts, seeds,
choice constraints, LoRA adapters. Each `needs` its capability."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import ClassVar, TypedDict

from servefuzz.strategies.shape import Draft, TargetShape
from servefuzz.workload import Scenario, choice_text

__all__ = [
    "LoraAlternation",
    "RetractionPressure",
    "SeededDraw",
    "SeededSampling",
    "StructuredBurst",
    "TenantSalt",
    "draw_choices",
    "seeded_draw",
    "tenant_salt",
]


@dataclass(frozen=True)
class TenantSalt:
    """Tenant isolation (the paired assertion, `oracles.tenancy`): tenant A primes a long prefix
    under its salt; then A sends the prefix again (same salt: must reuse), tenant B sends it
    (another salt: must not), and a third tenant sends a fresh prefix of the same shape, B's cold
    twin for the timing channel; unsalted background load runs throughout. Salts are drawn per
    scenario, so no two scenarios' tenants share a cache either."""

    name: str = "tenant-salt"
    needs: ClassVar[frozenset[str]] = frozenset({"salts"})

    def generate(self, rng: random.Random, shape: TargetShape, *, seed: int) -> Scenario:
        page = rng.choice(shape.pages)
        d = Draft(seed, shape)
        a, b, c = (tenant_salt(rng, x) for x in "abc")
        # Whole pages, long enough that a hit saves a visible prefill (the timing channel).
        prefix_len = page * rng.randint(max(2, 128 // page), max(4, 512 // page))
        prompt = prefix_len + rng.randint(4, 32)
        d.add(0, prompt, 4, prefix="tenant", prefix_len=prefix_len, stream=True, cache_salt=a)  # cached at its first token
        for _ in range(rng.randint(2, 5)):
            d.add(rng.uniform(0, 400), rng.choice([1, 2, 4]) * page + rng.randint(1, page), rng.randint(8, 32))
        # The prime's prefill is done by then on the engines measured; a probe sent before it is
        # no opportunity for either half, and the check says so.
        t = rng.uniform(150, 250)
        gap = rng.uniform(40, 80)
        # Streamed: the runner times the first token only where it arrives on its own. The twin
        # goes first: a later request meets more queued load (a clean engine answered a twin
        # sent after the probe 39-85 ms later), so the order can only hide a hit, never fake one.
        d.add(t, prompt, 4, prefix="tenant", prefix_len=prefix_len, stream=True, cache_salt=a)
        twin = d.add(t + gap, prompt, 4, prefix="cold", prefix_len=prefix_len, stream=True, cache_salt=c)
        probe = d.add(t + 2 * gap, prompt, 4, prefix="tenant", prefix_len=prefix_len, stream=True, cache_salt=b)
        return d.scenario(self.name, page_size=page, twins={probe.id: twin.id})


@dataclass(frozen=True)
class SeededSampling:
    """Seeded sampled requests decoding together: each must draw alone what it draws under load.

    A few requests at temperature > 0, each with its own seed, leave within a few milliseconds
    (so they sample in the same steps), some on a shared prefix, with n of 1 to 3, beside a
    greedy bystander now and then. Offered only where the engine promises per-request seeds
    (`needs` names `seeds`, `TargetShape.seeded_sampling`).
    """

    name: str = "seeded-sampling"
    needs: ClassVar[frozenset[str]] = frozenset({"seeds"})

    def generate(self, rng: random.Random, shape: TargetShape, *, seed: int) -> Scenario:
        page = rng.choice(shape.pages)
        d = Draft(seed, shape)
        prefix_len = rng.choice([page // 2, page, page + rng.randint(1, 16)])
        for _ in range(rng.randint(3, 6)):
            shared = rng.random() < 0.5
            d.add(rng.uniform(0, 8), prefix_len + rng.randint(4, 48), rng.randint(8, 32),
                  prefix="p0" if shared else None, prefix_len=prefix_len if shared else 0,
                  n=rng.choice([1, 1, 2, 3]), **seeded_draw(rng))
        if rng.random() < 0.5:
            d.add(rng.uniform(0, 8), rng.randint(16, 64), rng.randint(8, 24))  # a greedy bystander
        return d.scenario(self.name, page_size=page)


@dataclass(frozen=True)
class StructuredBurst:
    """Structured outputs decoding together (vLLM #19493: one step's grammar bitmask across
    rows): three to six requests, each constrained to its own two to five choices (now and then
    two share one), leave within a few milliseconds, some on a shared prefix, n of 1 or 2, beside
    an unconstrained neighbour or two. Every answer must be one of its own choices
    (`oracles.constraint`). Choices are spelt ' w<t>' per token (`workload.choice_text`): the
    reference engine reads them as those tokens, a real engine as plain text. Offered only where
    the dialect sends a constraint (`needs` names `choices`)."""

    name: str = "structured-burst"
    needs: ClassVar[frozenset[str]] = frozenset({"choices"})

    def generate(self, rng: random.Random, shape: TargetShape, *, seed: int) -> Scenario:
        page = rng.choice(shape.pages)
        d = Draft(seed, shape)
        prefix_len = rng.choice([page // 2, page, page + rng.randint(1, 16)])
        last = draw_choices(rng, shape.vocab)
        for _ in range(rng.randint(3, 6)):
            shared = rng.random() < 0.5
            last = last if rng.random() < 0.2 else draw_choices(rng, shape.vocab)
            # Room to finish: a real engine's tokenizer may spell one ' w<t>' word in a few tokens.
            d.add(rng.uniform(0, 8), prefix_len + rng.randint(4, 48), 24,
                  prefix="p0" if shared else None, prefix_len=prefix_len if shared else 0,
                  n=rng.choice([1, 1, 1, 2]), choices=last)
        for _ in range(rng.randint(0, 2)):
            d.add(rng.uniform(0, 8), rng.randint(16, 64), rng.randint(8, 24))  # unconstrained neighbours
        return d.scenario(self.name, page_size=page)


def tenant_salt(rng: random.Random, tenant: str) -> str:
    """A cache salt for `tenant`, drawn per scenario (no two scenarios' tenants share a cache)."""
    return f"tenant-{tenant}-{rng.getrandbits(32):08x}"


class SeededDraw(TypedDict):
    temperature: float
    seed: int


def seeded_draw(rng: random.Random) -> SeededDraw:
    """A sampled request's temperature and its own seed, as `Draft.add` takes them."""
    return {"temperature": rng.choice([0.3, 0.6, 0.8, 1.0]), "seed": rng.randrange(2**31)}


def draw_choices(rng: random.Random, vocab: range) -> tuple[str, ...]:
    """A choice constraint: two to five distinct choices of one to three tokens each, spelt as
    the reference engine reads them (`workload.choice_text`)."""
    words = {choice_text(rng.choice(vocab) for _ in range(rng.randint(1, 3))) for _ in range(rng.randint(2, 5))}
    return tuple(sorted(words))


@dataclass(frozen=True)
class LoraAlternation:
    """Rapid alternation of LoRA adapters and the base model over shared prefixes (vLLM #38606:
    7-9 of 10 runs diverged there). Waves of requests leave a few milliseconds apart, each wave
    on one or two prefixes of whole pages (and +1), each request under an adapter or the base
    model chosen in turn, so that an adapter's request meets pages another adapter computed for
    the same tokens, in the same batch and in the next one. Each request's answer alone, under
    its own adapter, is the reference. Offered only where the server lists adapters
    (`needs` names `adapters`, `TargetShape.adapters`).
    """

    name: str = "lora-alternation"
    needs: ClassVar[frozenset[str]] = frozenset({"adapters"})

    def generate(self, rng: random.Random, shape: TargetShape, *, seed: int) -> Scenario:
        page = rng.choice(shape.pages)
        d = Draft(seed, shape)
        # Two adapters at most and the base: the alternation, not the number of adapters, is
        # what the cousin needs (and a server holds few at once: vLLM's --max-loras).
        cast: list[str | None] = [None, *rng.sample(shape.adapters, min(2, len(shape.adapters)))]
        prefixes = {f"p{i}": page * rng.randint(1, max(1, 256 // page)) + rng.choice([0, 0, 1]) for i in range(2)}
        t, turn = 0.0, rng.randrange(len(cast))
        for _ in range(rng.randint(2, 4)):
            for _ in range(rng.randint(2, 4)):
                name = rng.choice(list(prefixes))
                d.add(t + rng.uniform(0, 3), prefixes[name] + rng.randint(4, 24), rng.randint(6, 16),
                      prefix=name, prefix_len=prefixes[name], adapter=cast[turn % len(cast)])
                turn += 1
            t += rng.uniform(20, 120)  # the next wave meets pages the last one cached
        return d.scenario(self.name, page_size=page)




@dataclass(frozen=True)
class RetractionPressure:
    """Decodes that outgrow the pool, each carrying state a retraction must restore (issue 53).

    Three to six requests with short prompts leave within a few milliseconds, so the pool holds
    all their prompts and admits them together; their outputs add up to 1.2-1.6 times the pool,
    so as they decode the engine runs out of pages and must retract (or preempt) some of them
    and prefill them again later. Each carries, in turn, one of the per-request features whose
    state outlives a retraction: a seeded draw (its sampler must resume where it was), an adapter
    (its KV must be recomputed under it), n = 2 forks (both copies retracted and resumed), or
    nothing (greedy, the control). A newcomer or two arrive while the pool is full. Each answer
    alone is the reference: a retracted request must answer what it answers alone. Choice
    constraints are not among them: a constrained answer ends after its choice, too soon to hold
    pages when the pool runs out.

    Offered only where the server states a pool one scenario can fill past (`small-pool`:
    `TargetShape.conditions`); on a larger one the same traffic would only decode for minutes.
    """

    name: str = "retraction"
    needs: ClassVar[frozenset[str]] = frozenset({"small-pool"})

    def generate(self, rng: random.Random, shape: TargetShape, *, seed: int) -> Scenario:
        pool = shape.max_total_tokens or shape.pool_tokens
        d = Draft(seed, shape)
        kinds = ["greedy", "forks"] + (["seeded"] if shape.seeded_sampling else []) + (["adapter"] if shape.adapters else [])
        count = rng.randint(3, 6)
        want = int(pool * rng.uniform(1.2, 1.6))
        prompts = [rng.randint(16, max(17, pool // (4 * count))) for _ in range(count)]
        each = max(8, (want - sum(prompts)) // count)
        start = rng.randrange(len(kinds))  # the features in turn, from a drawn one
        for i, prompt in enumerate(prompts):
            kind = kinds[(start + i) % len(kinds)]
            draw = seeded_draw(rng) if kind == "seeded" else SeededDraw(temperature=0.0, seed=0)
            n = 2 if kind == "forks" else 1
            # Each copy's output fits beside the prompt in what one request may hold.
            d.add(rng.uniform(0, 3), prompt, min(each, shape.pool_tokens - prompt - 1) // n, n=n, temperature=draw["temperature"],
                  seed=draw["seed"] if kind == "seeded" else None,
                  adapter=rng.choice(shape.adapters) if kind == "adapter" else None)
        for _ in range(rng.randint(1, 2)):  # newcomers that meet a full pool
            d.add(rng.uniform(100, 600), rng.randint(16, 128), rng.randint(8, 32))
        return d.scenario(self.name, pool=pool, load_tokens=sum(prompts) + each * count)
