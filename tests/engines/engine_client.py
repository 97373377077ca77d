"""Talking to a real engine in a test: the runner on its adapter, one request alone, a flag read back,
a burst against each request alone, and the structured-output scenario the engines are held to."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

from servefuzz.history import RequestRecord, Status
from servefuzz.launcher import ServerProcess
from servefuzz.oracles.constraint import keeps
from servefuzz.runner import RunConfig, Runner
from servefuzz.targets import make_target
from servefuzz.trial import Executed
from servefuzz.workload import PromptBuilder, RequestSpec, Scenario, choice_text

_R = TypeVar("_R")


def flag(srv: ServerProcess, name: str) -> int:
    """A launch flag's value, read back from the command line the server was started with."""
    return int(srv.argv[srv.argv.index(name) + 1])


def with_runner(engine: str, url: str, body: Callable[[Runner], Awaitable[_R]], **target_opts: object) -> _R:
    async def main() -> _R:
        # vLLM's CPU build can take long over a first request; a hang is its own test.
        async with Runner(make_target(engine, url, **target_opts), RunConfig(top_k=5, request_timeout_s=300)) as r:
            return await body(r)

    return asyncio.run(main())


def alone(engine: str, url: str, *specs: RequestSpec, **target_opts: object) -> list[RequestRecord]:
    async def body(r: Runner) -> list[RequestRecord]:
        return [await r.run_alone(s, run=0) for s in specs]

    return with_runner(engine, url, body, **target_opts)


def alone_and_in_a_burst(
    engine: str, url: str, shapes: list[tuple[int, int]], max_tokens: int
) -> tuple[list[RequestRecord], dict[str, RequestRecord]]:
    """Each (prefix_len, prompt_len) shape twice (the twin can hit the cache), run alone one by
    one, then, after a flush, all in one burst: (the records alone, the burst's by request id).
    The burst was one (most requests in flight before the first answer came back), or this fails.
    """
    builder = PromptBuilder(seed=3, vocab=range(3, 2000))
    specs = tuple(
        RequestSpec(f"r{i:02d}", float(i), builder.prompt("p", prefix_len=pl, prompt_len=n),
                    max_tokens=max_tokens, prefix_name="p" if pl else None, prefix_len=pl)
        for i, (pl, n) in enumerate(shapes * 2)
    )

    async def body(r: Runner) -> tuple[list[RequestRecord], tuple[RequestRecord, ...]]:
        solo = [await r.run_alone(s, run=0) for s in specs]
        await r.flush()
        burst = await r.run(Scenario(seed=3, requests=specs), run=1)
        return solo, burst.records

    solo, burst = with_runner(engine, url, body)
    first_end = min(rec.end_ms for rec in burst)
    assert sum(rec.sent_ms < first_end for rec in burst) >= len(burst) // 2, "not one burst"
    by_id = {rec.request_id: rec for rec in burst}
    for ref in solo:
        got = by_id[ref.request_id]
        assert ref.status is Status.OK and got.status is Status.OK, (ref.error, got.error)
    return solo, by_id


def structured_scenario(vocab: range) -> Scenario:
    """Five constrained requests with their own choices (two share one), some on a shared
    prefix, one with n = 2, leaving within a few ms beside two free neighbours: the shape of
    the structured-burst strategy, fixed so the test asks the same thing every time."""
    builder = PromptBuilder(seed=19, vocab=vocab)
    pick = random.Random(19)
    constraints = [tuple(sorted({choice_text(pick.choice(range(3, 1000)) for _ in range(pick.randint(1, 2)))
                                 for _ in range(3)})) for _ in range(4)]
    specs = [
        RequestSpec(f"c{i}", float(i), builder.prompt("p" if i % 2 else None, 48 if i % 2 else 0, 70 + 5 * i),
                    max_tokens=24, prefix_name="p" if i % 2 else None, prefix_len=48 if i % 2 else 0,
                    n=2 if i == 2 else 1, ignore_eos=False, choices=constraints[min(i, 3)])
        for i in range(5)
    ]
    specs += [RequestSpec(f"free{i}", 1.5 + i, builder.prompt(None, 0, 60), max_tokens=12) for i in range(2)]
    return Scenario(seed=19, requests=tuple(specs))


def broken_constraints(scenario: Scenario, done: Executed) -> list[str]:
    """Every constrained answer, alone and under load, that is not one of its own choices."""
    bound = scenario.constrained
    seen = [*(r for h in done.loaded for r in h.records), *(r for recs in done.alone.values() for r in recs)]
    assert all(r.status is Status.OK for r in seen if r.request_id in bound), [r.error for r in seen if not r.ok]
    return [f"{r.label} {r.request_id}: {c.text!r} ({c.finish_reason})" for r in seen if r.request_id in bound
            for c in r.choices if not keeps(bound[r.request_id], c)]
