"""Issue 5's acceptance, bounded for CI: the default `servefuzz fuzz` finds every zoo fault with
the right class.

One campaign per fault, exactly as a user runs it (`servefuzz fuzz --fault NAME`: the embedded
engine with that fault planted, the default strategy mix, stop at the first confirmed finding),
under a time cap. The right class is `corruption`, or `numeric-drift` for the benign
batch-variant-numerics (and the contract fault, deterministic-decode-drift, without its mode),
which must never be called corruption. The 5-seed statistics and the
comparison with anchor batteries are `bench/zoo.py`'s job (docs/benchmarks.md).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from servefuzz.finding import load_finding
from servefuzz.reference.faults import FAULTS

pytestmark = pytest.mark.slow

CAP_S = 150  # seed 0 finds each fault in about a minute or less on 2 shared cores (bench/zoo.py)
# Faults whose campaign needs longer on a loaded box: window-modulo-after-saturation's default
# campaign took 23-141 s on seeds 0-2 (bench/zoo.py, docs/benchmarks.md), and under a whole
# suite on two cores its 150 s ran out at a suspected corruption in 3 of 6 tries.
LONGER_S: dict[str, int] = {"window-modulo-after-saturation": 240}
# A cross-tenant cache hit reads the right KV: its class is an isolation breach (docs/verdicts.md).
# The contract fault in default mode (as here) is benign drift too; under its mode it is a
# contract violation (tests/quality/test_contract_tier.py).
# host-key-no-salt is either, as the tenant its host key forgets is a salt (the right KV of another
# tenant: an isolation breach) or an adapter (KV computed under another adapter: corruption).
RIGHT: dict[str, tuple[str, ...]] = {
    f: {"batch-variant-numerics": ("numeric-drift",), "deterministic-decode-drift": ("numeric-drift",),
        "router-tie-numerics": ("numeric-drift",), "salt-ignored": ("isolation-breach",),
        "host-key-no-salt": ("corruption", "isolation-breach")}.get(f, ("corruption",))
    for f in FAULTS}


@pytest.mark.timeout(max(CAP_S, *LONGER_S.values()) + 60)
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_the_default_campaign_finds_the_fault_with_the_right_class(fault: str, tmp_path: Path) -> None:
    out, cap = tmp_path / fault, LONGER_S.get(fault, CAP_S)
    p = subprocess.run(
        [sys.executable, "-m", "servefuzz", "fuzz", "--fault", fault, "--time", str(cap), "--json", "--out", str(out)],
        capture_output=True, text=True, timeout=cap + 50, check=False,
    )
    assert "Traceback" not in p.stderr, p.stderr[-2000:]
    summary = json.loads(p.stdout)
    assert summary["stopped_because"] == "first confirmed finding", summary["stopped_because"]
    assert set(RIGHT[fault]) & set(summary["first_confirmed"]), (summary["first_confirmed"], _controls(out))
    verdicts = {load_finding(f).verdict.value for f in (out / "findings").glob("finding_*.json")}
    assert set(RIGHT[fault]) & verdicts, verdicts
    if fault in ("batch-variant-numerics", "deterministic-decode-drift", "router-tie-numerics"):
        assert verdicts == {"numeric-drift"}, verdicts
    if fault == "shared-sampler-rng":
        # Found by the seeded-sampling rule on seeded draws, and backed by the deterministic
        # control (the content swap keeps the same wrong draw: the noise follows the batch).
        found = [load_finding(f) for f in (out / "findings").glob("finding_*.json")]
        for f in (f for f in found if f.verdict.value == "corruption"):
            assert "seeded-sampling" in f.signature, f.signature
            assert "deterministic" in f.headline.backed_by, f.headline.controls
    if fault == "bitmask-row-skip":
        # Found on constrained requests and backed by the broken constraint itself.
        found = [load_finding(f) for f in (out / "findings").glob("finding_*.json")]
        for f in (f for f in found if f.verdict.value == "corruption"):
            assert "structured-output" in f.signature, f.signature
            assert "constraint" in f.headline.backed_by, f.headline.controls


def _controls(out: Path) -> list[str]:
    """What each confirmed finding's confirmation and controls said: what a wrong class needs
    to be explained (a CI run once stopped at a suspected corruption, and nothing said why)."""
    said = []
    for path in sorted((out / "findings").glob("finding_*.json")):
        f = load_finding(path)
        if f.confirmation is not None and f.confirmation.reproduced:
            said += [f"{path.name}: {f.verdict.value}, {f.confirmation.rate}", *f.notes]
            said += [c.summary for a in f.anomalies for c in a.controls]
    return said


LEAK_CAP_S = 60  # seeds 0-2 found it in 11-28 s at nice 19 on 2 shared cores (docs/fault-zoo.md)


@pytest.mark.timeout(LEAK_CAP_S + 60)
def test_the_default_campaign_finds_the_stale_slot_by_the_leak_it_writes(tmp_path: Path) -> None:
    """The stale slot hands a fresh request a finished request's state: its answer is that
    request's solo continuation, and the finding says so (the leak oracle backs it, no control
    had to run)."""
    out = tmp_path / "stale-slot"
    p = subprocess.run(
        [sys.executable, "-m", "servefuzz", "fuzz", "--fault", "stale-slot-continuation", "--time", str(LEAK_CAP_S),
         "--json", "--out", str(out)],
        capture_output=True, text=True, timeout=LEAK_CAP_S + 50, check=False,
    )
    assert "Traceback" not in p.stderr, p.stderr[-2000:]
    summary = json.loads(p.stdout)
    assert summary["stopped_because"] == "first confirmed finding", summary["stopped_because"]
    # The confirmed one: a suspect seen earlier that did not come back is kept too (a finding,
    # once seen, is never lost), which a loaded box made happen once on CI.
    [finding] = [f for f in map(load_finding, (out / "findings").glob("finding_*.json"))
                 if f.confirmation is not None and f.confirmation.reproduced]
    assert finding.verdict.value == "corruption"
    leaks = [c for a in finding.anomalies for c in a.controls if c.name == "leak-forensics" and c.backs]
    assert leaks and "leak-forensics" in finding.headline.backed_by, finding.headline.controls
    leak = leaks[0].leak
    assert leak is not None
    other = leak.request
    assert other != leaks[0].request_id and leak.source == f"{other} continuation" and leak.at == 0, leak
    assert leak.tokens >= 8 and leaks[0].summary.startswith("leak: "), leaks[0].summary
