"""The shared vocabulary (servefuzz.terms): each word defined once, and every reader a view of it."""

from __future__ import annotations

import ast
import doctest
import re
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from servefuzz import terms
from servefuzz.terms import (
    BURST_GAP_MS,
    burst_positions,
    bursts,
    common_prefix,
    first_difference,
    known_page,
    page_boundary,
    page_class,
    page_edge,
    page_unit,
)

ROOT = Path(__file__).resolve().parent.parent
tokens = st.lists(st.integers(0, 3), max_size=8)


def test_the_doctests_run() -> None:
    result = doctest.testmod(terms)
    assert result.attempted > 10 and result.failed == 0


def test_first_difference_in_the_prefix_case() -> None:
    # One output a strict prefix of the other: they differ where the shorter one stops, either way round.
    assert first_difference([1, 2], [1, 2, 3]) == first_difference([1, 2, 3], [1, 2]) == 2
    assert first_difference([], []) is None
    assert common_prefix([1, 2], [1, 2, 3]) == 2


@given(tokens, tokens)
def test_first_difference_is_the_first_position_either_lacks_or_changes(a: list[int], b: list[int]) -> None:
    d = first_difference(a, b)
    if a == b:
        assert d is None and common_prefix(a, b) == len(a)
        return
    assert d is not None and a[:d] == b[:d] and common_prefix(a, b) == d
    assert d == len(a) or d == len(b) or a[d] != b[d]
    assert first_difference(b, a) == d


@given(st.lists(st.floats(0, 200, allow_nan=False), max_size=12))
def test_bursts_chain_by_the_one_gap(offsets: list[float]) -> None:
    groups = bursts(offsets)
    assert sorted(i for g in groups for i in g) == list(range(len(offsets)))
    for g in groups:
        assert all(0 <= offsets[j] - offsets[i] <= BURST_GAP_MS for i, j in zip(g, g[1:]))
    for g, h in zip(groups, groups[1:]):
        assert offsets[h[0]] - offsets[g[-1]] > BURST_GAP_MS
    positions = burst_positions(offsets)
    assert all((p == "alone") == (len(g) == 1) for g in groups for p in (positions[i] for i in g))


@given(st.integers(0, 2000), st.sampled_from([None, 1, 2, 3, 16, 64, 128]))
def test_the_page_views_agree(length: int, page: int | None) -> None:
    cls = page_class(length, page)
    assert (cls == "no-page") == (known_page(page) is None)
    if cls == "no-page":
        assert not page_edge(length, page)
        return
    assert page is not None
    m, d = page_boundary(length, page)
    assert m * page + d == length and abs(d) <= page / 2
    assert (cls == "aligned") == (d == 0)
    assert page_edge(length, page) == (m >= 1 and abs(d) == 1)
    if page_edge(length, page):
        assert cls == "mid-page"


def test_no_page_known_is_measured_against_the_assumed_page() -> None:
    assert page_unit(None) == page_unit(1) == terms.ASSUMED_PAGE
    assert page_unit(1, 16) == 16


def _source_files() -> list[Path]:
    src = ROOT / "src" / "servefuzz"
    # The reference engine is a program apart (it imports nothing of servefuzz), the stand-ins
    # run in another interpreter: neither speaks servefuzz's vocabulary.
    return [p for p in [*src.rglob("*.py"), *(ROOT / "scripts").glob("*.py")]
            if not {"reference", "standins"} & set(p.relative_to(ROOT).parts)]


def test_no_second_definition() -> None:
    """No module outside terms.py writes its own first difference, common prefix or burst gap."""
    loop = re.compile(r"enumerate\(zip\([^)]*\)\)\s+if\s+\w+\s*!=\s*\w+")
    burst = re.compile(r"BURST\w*\s*=\s*[\d.]+")
    offenders = []
    for path in _source_files():
        if path.name == "terms.py":
            continue
        text = path.read_text(encoding="utf-8")
        if loop.search(text) or burst.search(text):
            offenders.append(str(path.relative_to(ROOT)))
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef) and node.name.lstrip("_") in (
                    "first_difference", "common", "common_prefix", "burst_positions", "prefix_class"):
                offenders.append(f"{path.relative_to(ROOT)}:{node.name}")
    assert offenders == []
