"""Run a bisection: each version `bisection.Search` picks is launched, the finding replayed on it
by the one reproduction rule on a fresh server (`servers.replay_fresh`, stopped once `stats.decide` decides),
and the version decided good, bad or undecided. The search itself is `servefuzz.bisection`
(pure); this module owns the servers.

    search = bisect(finding, ("b9093", ..., "b11434"), lambda v: Launch.resolve(f"llama-server@{v}", finding.target))
    print(search.conclusion())
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from servefuzz import stats
from servefuzz.bisection import UNDECIDED, Search, outcome_of
from servefuzz.errors import InstallError, LaunchError, TargetError, UsageError
from servefuzz.finding import BisectStep, Finding
from servefuzz.launcher import Launch
from servefuzz.oracles.judge import Expectation
from servefuzz.oracles.noise import CampaignNoise
from servefuzz.servers import replay_fresh

__all__ = ["bisect", "try_version"]


def try_version(
    finding: Finding,
    version: str,
    launch_of: Callable[[str], Launch],
    *,
    runs: int = stats.REPRODUCTION.cap,
    noise: CampaignNoise | None = None,
    log_dir: Path | None = None,
) -> BisectStep:
    """Replay `finding` on a fresh server of `version` (`launch_of(version)`, which may install
    it first) until the sequential test decides or `runs` are spent. A version that cannot be
    built or started, or whose server goes away under a finding that is not a crash, is
    undecided, its error said: the search steps around it as around any undecided version."""
    try:
        launch = launch_of(version)
        log = None if log_dir is None else log_dir / f"server-{version}.log"
        fresh = replay_fresh(launch, finding.scenario, Expectation.of(finding), runs, log_path=log, noise=noise,
                             stop=lambda seen, done: stats.decide(seen, done) != stats.UNDECIDED)
    except (InstallError, LaunchError, TargetError, UsageError) as e:
        return BisectStep(version, UNDECIDED, error=str(e))
    rep, reported = fresh.reproduction, fresh.info.version
    if fresh.gone is not None:
        return BisectStep(version, UNDECIDED, rep.reproduced, rep.attempts, reported=reported,
                          error=f"the server went away: {fresh.gone}")
    return BisectStep(version, outcome_of(stats.decide(rep.reproduced, rep.attempts)), rep.reproduced, rep.attempts,
                      reported=reported)


def bisect(
    finding: Finding,
    versions: Sequence[str],
    launch_of: Callable[[str], Launch],
    *,
    runs: int = stats.REPRODUCTION.cap,
    noise: CampaignNoise | None = None,
    on_step: Callable[[BisectStep], None] | None = None,
    log_dir: Path | None = None,
    max_versions: int | None = None,
) -> Search:
    """Bisect `finding` over `versions` (oldest first), one fresh server per version tried, until
    the search has no version left to try, or `max_versions` were tried (each may be a build of
    ten minutes: the search then says where it stands, "not finished"); `on_step` hears each
    step as it is decided."""
    search = Search(tuple(versions))
    while (version := search.next()) is not None and (max_versions is None or len(search.steps) < max_versions):
        done = try_version(finding, version, launch_of, runs=runs, noise=noise, log_dir=log_dir)
        search = search.with_step(done)
        if on_step is not None:
            on_step(done)
    return search
