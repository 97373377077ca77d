"""coverage.html: one cell per bucket pair, counted, shaded, and escaped like every report."""

from __future__ import annotations

import doctest
import itertools
import json
import random
from pathlib import Path

import servefuzz.reports.coverage_page
from servefuzz.coverage import Coverage, FeatureSpace, points
from servefuzz.covering import PairwiseCover
from servefuzz.reports.coverage_page import COVERED, IMPOSSIBLE_CELL, MISSING, coverage_html, write_coverage_page
from servefuzz.strategies import TargetShape

SHAPE = TargetShape(page_size=16, chunked_prefill_size=128, max_total_tokens=2048, context_length=1024)


def _cells(page: str, cls: str) -> int:
    return page.count(f"<td class='{cls}'")


def test_the_docstring_runs() -> None:
    result = doctest.testmod(servefuzz.reports.coverage_page)
    assert result.attempted > 0 and result.failed == 0


def test_every_pair_is_one_cell_covered_missing_or_not_counted(tmp_path: Path) -> None:
    cov = Coverage.empty(FeatureSpace.for_shape(SHAPE))
    s = PairwiseCover().generate(random.Random(3), SHAPE, seed=3)
    cov = cov.observe(points(s, SHAPE).values())
    page = write_coverage_page(cov, tmp_path / "coverage.html", title="c").read_text(encoding="utf-8")
    dims = cov.space.dimensions
    cells = sum(len(a.buckets) * len(b.buckets) for a, b in itertools.combinations(dims, 2))
    assert _cells(page, COVERED) == cov.covered > 0
    assert _cells(page, MISSING) == cov.total - cov.covered > 0
    assert _cells(page, IMPOSSIBLE_CELL) == cells - cov.total > 0
    assert f"{cov.covered}/{cov.total} pairs" in page and f"Missing pairs ({cov.total - cov.covered})" in page
    top = max(cov.pairs, key=lambda k: cov.pairs[k])
    assert f"title='{top}: {cov.pairs[top]} requests'>{cov.pairs[top]}</td>".replace("&", "&amp;") in page
    full = Coverage(cov.space, {k: 1 for k in cov.space.pairs}, {}, 1)
    assert _cells(coverage_html(full), MISSING) == 0 and "Missing pairs (0)" in coverage_html(full)


def test_strings_from_a_hostile_coverage_file_are_escaped() -> None:
    data = Coverage.empty(FeatureSpace.for_shape(SHAPE)).to_json()
    data["space"][0]["buckets"] = ["1", "<script>alert(1)</script>", "\x1b[31mred"]
    data["pairs"] = {"n=<script>alert(1)</script> & stream=on": 2}
    cov = Coverage.from_json(json.loads(json.dumps(data)))
    assert cov.pairs  # the hostile key belongs to the space read from the file
    page = coverage_html(cov, title="<img src=x onerror=alert(1)>")
    assert "<script>" not in page and "<img" not in page and "\x1b" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "&lt;img src=x onerror=alert(1)&gt;" in page
