"""A campaign as JUnit XML, the test-result format CI systems read (GitHub Actions, GitLab,
Buildkite, Jenkins): `servefuzz fuzz --junit FILE`.

A campaign is not a test suite, so the mapping is chosen to make a CI page say what the exit
code means, and a little more:

| test case (classname)     | passes when                         | otherwise                                  |
|---------------------------|-------------------------------------|--------------------------------------------|
| one per kept finding       | its verdict is `numeric-drift`      | `<failure>`: the verdict, why, rate, file  |
| (`servefuzz.finding`)     | (benign numerics: no bug)           | (what makes `fuzz` exit 1)                 |
| one per engine mechanism   | the engine's meters or answers show | `<skipped>`: on (or aimed at) and never    |
| (`servefuzz.exercise`)    | it happening                        | exercised: nothing about it was tested     |
| `campaign`                | always: its numbers are properties  |                                            |

So the failures are exactly the findings that fail the exit code (`CampaignResult.found`), and a
mechanism the campaign never reached shows as a skipped test rather than silently passing.
Everything in it that a server or a finding file wrote is untrusted: it goes through
`sanitize.visible` (no control character, none of which XML 1.0 allows either) and the XML
writer escapes the rest.

    >>> from servefuzz.campaign.records import CampaignResult, Stop, StopReason
    >>> xml = junit_xml(CampaignResult(3, 40, 1.5, (), Stop(StopReason.TIME_BUDGET, "time budget")), target="t")
    >>> xml.splitlines()[1][:62]
    '<testsuites name="servefuzz" tests="1" failures="0" errors="0"'
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from servefuzz._version import __version__
from servefuzz.anomaly import Verdict
from servefuzz.campaign.records import CampaignResult
from servefuzz.finding import Finding
from servefuzz.sanitize import one_line, visible

__all__ = ["junit_xml"]


def junit_xml(result: CampaignResult, *, target: str, seed: int | None = None) -> str:
    """The campaign `result` against `target` (a URL or a launch's words) as a JUnit XML document."""
    cases = [_campaign_case(result, target, seed)]
    cases += [_finding_case(path.name, f, result.seen.get(f.signature, 1)) for path, f in result.findings]
    # A mechanism that is off and never happened is no test: only those exercised or left untested.
    cases += [_exercise_case(f.words, line, gap) for f, line, gap in result.exercise.marked()
              if gap or result.exercise.exercised(f)]
    failures = sum(1 for c in cases if c.find("failure") is not None)
    skipped = sum(1 for c in cases if c.find("skipped") is not None)
    counts = {"tests": str(len(cases)), "failures": str(failures), "errors": "0"}
    root = ET.Element("testsuites", {"name": "servefuzz", **counts, "time": f"{result.elapsed_s:.3f}"})
    suite = ET.SubElement(root, "testsuite", {"name": "servefuzz fuzz", **counts, "skipped": str(skipped),
                                              "time": f"{result.elapsed_s:.3f}"})
    props = ET.SubElement(suite, "properties")
    named: list[tuple[str, object]] = [("servefuzz", __version__), ("target", target), ("seed", seed),
                                       ("requests", result.requests), ("scenarios", result.iterations),
                                       ("stop_reason", result.stop.reason.value), ("restarts", result.restarts)]
    for name, value in named:
        if value is not None:
            ET.SubElement(props, "property", {"name": name, "value": one_line(value)})
    suite.extend(cases)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _n(k: int, unit: str) -> str:
    return f"{k:,} {unit}{'' if k == 1 else 's'}"


def _case(classname: str, name: str, time_s: float = 0.0) -> ET.Element:
    return ET.Element("testcase", {"classname": classname, "name": one_line(name), "time": f"{time_s:.3f}"})


def _campaign_case(result: CampaignResult, target: str, seed: int | None) -> ET.Element:
    case = _case("servefuzz.campaign", f"campaign against {target}", result.elapsed_s)
    out = ET.SubElement(case, "system-out")
    out.text = visible(f"{_n(result.requests, 'request')} in {_n(result.iterations, 'scenario')} over "
                       f"{result.elapsed_s:.1f} s{'' if seed is None else f', seed {seed}'}; stopped: "
                       f"{result.stopped_because}; {_n(len(result.findings), 'finding')} kept")
    return case


def _finding_case(file: str, finding: Finding, seen: int) -> ET.Element:
    """A kept finding: its verdict names it, and anything but benign numerics fails."""
    verdict = finding.verdict
    case = _case("servefuzz.finding", f"{verdict.value}: {finding.signature}")
    rate = finding.confirmation.rate if finding.confirmation is not None else "not confirmed"
    flagged = ", ".join(finding.expected_diverging) or "no request named"
    detail = (f"{verdict.value} ({rate}; seen {_n(seen, 'time')})\n{finding.why}\n"
              f"requests: {flagged}\nfile: findings/{file}")
    if verdict is Verdict.NUMERIC_DRIFT:
        out = ET.SubElement(case, "system-out")
        out.text = visible(f"benign numerics, no bug: {detail}")
    else:
        failure = ET.SubElement(case, "failure", {"type": verdict.value,
                                                  "message": one_line(f"{verdict.value} ({rate}) on {flagged}")})
        failure.text = visible(detail)
    return case


def _exercise_case(words: str, line: str, gap: bool) -> ET.Element:
    """A mechanism the server has on (or the campaign aimed at): exercised, or skipped untested."""
    case = _case("servefuzz.exercise", words)
    if gap:
        ET.SubElement(case, "skipped", {"message": one_line(line)})
    else:
        out = ET.SubElement(case, "system-out")
        out.text = visible(line)
    return case
