"""Strategies aimed at a second KV tier behind the device pool: SGLang's HiCache (host memory),
vLLM's CPU offloading connector, the reference engine's `--host-tier-tokens`. Each `needs` the
`host_tier` capability (`TargetShape.host_tier`, from the server's own facts).

A campaign flushes before every loaded run, and a prefix reused inside one scenario is still on
the device when it comes back: the host tier's read path, the load-back, never runs (issue 53:
101,424 tokens moved out to the host on the H200, none loaded back in 4,448 requests). Here the
prefix is pushed out of the device, not out of the host, inside one scenario, and then sent again.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import ClassVar

from servefuzz.strategies.features import tenant_salt
from servefuzz.strategies.shape import CACHED_BY_MS, STRAGGLER_MS, Draft, TargetShape
from servefuzz.workload import Scenario

__all__ = ["HostTierReturn", "tiers_of"]

# A tenant: its cache salt and its adapter (None, None: the unsalted base model).
Tenant = tuple[str | None, str | None]


def tiers_of(shape: TargetShape) -> tuple[int, int]:
    """The device pool and the host tier in tokens, as the server says them: where it does not
    size its host tier in tokens (SGLang's `--hicache-size` in gigabytes), twice the device
    pool, SGLang's default `--hicache-ratio`.

    >>> tiers_of(TargetShape(max_total_tokens=4096, host_tier=True, host_tier_tokens=12288))
    (4096, 12288)
    >>> tiers_of(TargetShape(max_total_tokens=4096, host_tier=True))
    (4096, 8192)
    """
    device = shape.max_total_tokens or 8192
    return device, shape.host_tier_tokens or 2 * device


@dataclass(frozen=True)
class HostTierReturn:
    """A prefix, then enough other prompts to push it out of the device pool but not out of the
    host tier, then the prefix again, with no flush in between.

    Sized from the server's facts (`tiers_of`): the other prompts come to 1.1-1.5x the device
    pool (capped, and below what the host holds beside the prefix, so the host keeps it). They
    are sent once the prefix is cached; the returns leave after the last of them, so that they
    queue behind every one (a scheduler admits in arrival order) and the prefix has left the
    device by the time they are admitted. Half the scenarios return *busy*: each return rides
    right behind a fresh companion prompt while the pushers still decode (a load-back admitted
    beside other admissions, beside a decode in flight); the other half return *quiet*, seconds
    later. Where the target takes salts or adapters, the prefix belongs to a tenant, and a
    return may come from another tenant or adapter (the host's keys must keep them apart). A
    straggler hits the prefix once more, on the pages the load-back brought to the device.
    """

    name: str = "host-tier-return"
    needs: ClassVar[frozenset[str]] = frozenset({"host_tier"})
    cap_tokens: int = 12288

    def generate(self, rng: random.Random, shape: TargetShape, *, seed: int) -> Scenario:
        page = rng.choice(shape.pages)
        device, host = tiers_of(shape)
        d = Draft(seed, shape)
        tenants = self._tenants(rng, shape)
        home = tenants[0] if rng.random() < 0.5 else rng.choice(tenants)
        prefix_len = min(rng.randint(2, 6) * page + rng.choice([0, 0, 1, rng.randint(2, max(2, page - 1))]),
                         max(page, shape.pool_tokens // 3))
        for _ in range(rng.randint(1, 2)):  # the prefix, cached
            self._add(d, rng.uniform(0, 3), prefix_len + rng.randint(1, page), rng.randint(4, 16), prefix_len, home)
        # Pushers: unique prompts past the device pool, not past what the host holds beside the prefix.
        want = min(int(device * rng.uniform(1.1, 1.5)), self.cap_tokens, max(device + page, host - prefix_len - 2 * page))
        biggest = max(page, min(shape.pool_tokens - 64, device // 3, 1024))
        t = rng.uniform(*CACHED_BY_MS)
        used = pushers = 0
        while used < want:
            spec = d.add(t, rng.randint(biggest // 3, biggest), rng.randint(8, 48))
            used, pushers = used + spec.prompt_len + spec.max_tokens, pushers + 1
            t += rng.uniform(0, 15)
        busy = rng.random() < 0.5
        t += rng.uniform(5, 40) if busy else rng.uniform(1500, 2500)
        for _ in range(rng.randint(1, 3)):
            back = home if rng.random() < 0.7 else rng.choice(tenants)
            if busy:  # a fresh companion, admitted in the same round just before the return
                d.add(t, rng.randint(page, 4 * page), rng.randint(16, 64))
                t += rng.uniform(0.3, 1.0)
            self._add(d, t, prefix_len + rng.randint(1, page), rng.randint(8, 32), prefix_len, back)
            t += rng.uniform(1, 30)
        self._add(d, t + rng.uniform(*STRAGGLER_MS), prefix_len + rng.randint(1, page), 16, prefix_len, home)
        return d.scenario(self.name, page_size=page, device=device, host=host, load_tokens=used, pushers=pushers,
                          returned="busy" if busy else "quiet")

    @staticmethod
    def _tenants(rng: random.Random, shape: TargetShape) -> list[Tenant]:
        """The unsalted base model first, then two salted tenants and each adapter, as served."""
        out: list[Tenant] = [(None, None)]
        if shape.salts:
            out += [(tenant_salt(rng, t), None) for t in "ab"]
        out += [(None, a) for a in shape.adapters]
        return out

    @staticmethod
    def _add(d: Draft, at: float, prompt: int, out: int, prefix_len: int, tenant: Tenant) -> None:
        d.add(at, prompt, out, prefix="p0", prefix_len=prefix_len, cache_salt=tenant[0], adapter=tenant[1])
