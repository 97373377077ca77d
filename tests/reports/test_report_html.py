"""report.html: rendered by headless Chromium, its screenshot must show the plots; nothing from
the finding may become markup; nothing is fetched from anywhere.

Chromium comes from Debian: `apt-get install -y --no-install-recommends chromium` (as root).
"""

from __future__ import annotations

import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from png_pixels import hex_rgb, read_png
from report_findings import loaded_run, seed_like

from servefuzz.evidence import Picture
from servefuzz.known_issues import match
from servefuzz.reports import write_report
from servefuzz.reports.facts import timeline
from servefuzz.reports.html import ALL, CURED, DIVERGED, STABLE, report_html

CHROMIUM = shutil.which("chromium")


def screenshot(page: Path, png: Path, profile: Path) -> bytes:
    assert CHROMIUM is not None
    subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={profile}", f"--screenshot={png}", "--window-size=1200,1600", page.as_uri()],
        capture_output=True, timeout=120, check=True,
    )
    return png.read_bytes()


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian chromium: apt-get install -y --no-install-recommends chromium")
def test_the_screenshot_shows_the_timeline_the_bar_chart_and_the_triage_matrix(tmp_path: Path) -> None:
    finding = seed_like()
    paths = write_report(finding, tmp_path / "report", [loaded_run(finding, 0)])
    width, _, pixels = read_png(screenshot(paths.html, tmp_path / "shot.png", tmp_path / "profile"))

    def where(colour: str) -> list[int]:
        rgb = hex_rgb(colour)
        return [i // width for i, p in enumerate(pixels) if p == rgb]

    red, blue, grey, green = where(DIVERGED), where(ALL), where(STABLE), where(CURED)
    # The diverging request's red bar on the timeline *and* its red bar in the bar chart below.
    assert len(red) > 1000, len(red)
    assert max(red) - min(red) > 150, (min(red), max(red))
    assert len(blue) > 3000, len(blue)  # bar chart: all requests per prefix_len % 64
    assert len(grey) > 3000, len(grey)  # timeline: the stable requests
    assert len(green) > 1000, len(green)  # triage matrix: the --disable-radix-cache row cured it
    assert min(blue) > max(grey)  # the bar chart sits below the timeline


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def test_nothing_from_the_finding_becomes_markup_and_nothing_is_fetched() -> None:
    finding = seed_like(hostile=True)
    page = report_html(finding, match(finding), [loaded_run(finding, 0)])
    parser = _Tags()
    parser.feed(page)
    names = {tag for tag, _ in parser.tags}
    assert "script" not in names and "img" not in names and "link" not in names and "iframe" not in names
    attrs = [(tag, k, v) for tag, a in parser.tags for k, v in a.items()]
    assert not [a for a in attrs if a[1].startswith("on") or a[1] == "src"]
    hrefs = [v for _, k, v in attrs if k == "href"]
    assert hrefs and all(v and v.startswith("https://github.com/") for v in hrefs)  # known issues only
    assert page.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 3  # the id, the version, the outputs


def test_the_timeline_takes_end_times_from_a_run_of_this_very_scenario() -> None:
    finding = seed_like()
    other, own = loaded_run(finding, 0, shift_ms=7.0), loaded_run(finding, 1)
    bars, source = timeline(finding, [other, own])
    assert "loaded run 1" in source
    assert [b.end_ms for b in bars] == [s.offset_ms + 300.0 for s in finding.scenario.requests]
    assert [b.id for b in bars if b.diverged] == ["r02"]
    bars, source = timeline(finding, [other])
    assert all(b.end_ms is None for b in bars) and "send times only" in source


def test_the_bar_chart_buckets_prefix_length_modulo_the_page_size() -> None:
    page = report_html(seed_like(), [])
    chart = page.split("Divergence by prefix length modulo page size")[1].split("</svg>")[0]
    assert ">0 (aligned)<" in chart and ">none<" in chart
    # Two buckets (aligned: r02 and r04; none: r01, r03, r05), each a blue and a red bar.
    assert chart.count(f"fill='{ALL}'") == 2 and chart.count(f"fill='{DIVERGED}'") == 2


def test_the_margin_is_drawn_against_the_shifts_and_the_campaigns_noise() -> None:
    import dataclasses

    f = seed_like(triage=False)
    assert "Where the margin sits" not in report_html(f, match(f))  # nothing to draw: no section
    drawn = {"positions": [0, 1, 2], "linf": [0.0, 0.002, 0.001], "band": [0.02, 0.02, 0.02], "flip": 3,
             "margin": 1.47, "threshold": 0.027,
             "noise": {"where": "position 0 <b>", "count": 4222, "zeros": 10, "bins": {"50": 4000, "70": 212}},
             "edges": [1e-7, 12]}
    head = dataclasses.replace(f.anomalies[0], picture=Picture.from_json(drawn))
    page = report_html(dataclasses.replace(f, anomalies=(head, *f.anomalies[1:])), match(f))
    section = page[page.index("Where the margin sits"):]
    section = section[: section.index("</section>")]
    assert section.count("<svg") == 2 and section.count(DIVERGED) == 2  # the margin, in both pictures
    assert "4222 of them" in section and "position 0 &lt;b&gt;" in section and "<b>" not in section
