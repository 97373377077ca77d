"""coverage.html: a campaign's pairwise feature coverage on one self-contained page.

For every two dimensions of the space (`servefuzz.coverage`) a small grid: one row per bucket
of the first, one column per bucket of the second, each cell the number of requests that
exercised the pair, shaded by that number (log scale); a pair never exercised is an empty
white cell, a pair that cannot happen or that the target cannot reach is hatched grey and not
counted. Then the cheap dimensions' triples and the list of the pairs still missing; above
them, what the engine did (`servefuzz.exercise`), a mechanism on that never ran in red. No script,
nothing fetched; every string read from `coverage.json` passes through `sanitize.html_text`.

    >>> from servefuzz.coverage import Coverage, FeatureSpace
    >>> from servefuzz.strategies import TargetShape
    >>> cov = Coverage.empty(FeatureSpace.for_shape(TargetShape(page_size=16))).observe([{"n": "2", "stream": "on"}])
    >>> page = coverage_html(cov, title="demo")
    >>> page.count(f"class='{COVERED}'"), "1/447 pairs" in page
    (1, True)
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path

from servefuzz import durable
from servefuzz.coverage import Coverage, Dimension
from servefuzz.exercise import Exercise
from servefuzz.sanitize import html_text

__all__ = ["COVERED", "GAP", "IMPOSSIBLE_CELL", "MISSING", "coverage_html", "write_coverage_page"]

# Cell classes (a test counts them), and the class of a mechanism on that was never exercised.
COVERED, MISSING, IMPOSSIBLE_CELL = "hit", "miss", "none"
GAP = "gap"

_e = html_text

_STYLE = """
body{font:14px system-ui,sans-serif;margin:24px;color:#222;max-width:1200px}
h1{font-size:20px}h2{font-size:16px;margin-top:28px}
.grids{display:flex;flex-wrap:wrap;gap:18px}
table.g{border-collapse:collapse;font-size:12px}
table.g td,table.g th{border:1px solid #ccc;padding:2px 6px;text-align:center;min-width:26px}
table.g caption{font-weight:600;text-align:left;padding-bottom:2px}
td.hit{color:#000}td.miss{background:#fff}
td.none{background:repeating-linear-gradient(45deg,#eee,#eee 3px,#ccc 3px,#ccc 6px)}
ul.missing{columns:3;font-family:monospace;font-size:12px}
.note{color:#666}
li.gap{color:#b00;font-weight:600}
"""


def _shade(count: int, top: int) -> str:
    """Light to dark green by log(count) against the most exercised pair."""
    t = math.log1p(count) / math.log1p(max(top, 1))
    return f"hsl(120,55%,{round(92 - 52 * t)}%)"


def _grid(cov: Coverage, a: Dimension, b: Dimension, top: int) -> str:
    rows = []
    for x in a.buckets:
        cells = []
        for y in b.buckets:
            key = f"{a.name}={x} & {b.name}={y}"
            n = cov.pairs.get(key, 0)
            if key not in cov.space.pairs:
                cells.append(f"<td class='{IMPOSSIBLE_CELL}' title='not counted'></td>")
            elif n:
                cells.append(f"<td class='{COVERED}' style='background:{_shade(n, top)}' "
                             f"title='{_e(key)}: {n} requests'>{n}</td>")
            else:
                cells.append(f"<td class='{MISSING}' title='{_e(key)}: never exercised'></td>")
        rows.append(f"<tr><th>{_e(x)}</th>{''.join(cells)}</tr>")
    head = "".join(f"<th>{_e(y)}</th>" for y in b.buckets)
    return (f"<table class='g'><caption>{_e(a.name)} × {_e(b.name)}</caption>"
            f"<tr><th></th>{head}</tr>{''.join(rows)}</table>")


def _exercised(exercise: Exercise | None) -> str:
    """What the engine did, per mechanism (`servefuzz.exercise`); a mechanism on that never ran
    is marked, as the closing summary marks it."""
    marked = [] if exercise is None else exercise.marked()
    if exercise is None or not marked:
        return ""
    items = "".join(f"<li class='{GAP if gap else ''}'>{_e(line)}</li>" for _, line, gap in marked)
    return (f"<section><h2>What the engine did</h2><p class='note'>Read from {exercise.requests:,} answers and "
            f"{exercise.scraped:,} of {exercise.runs:,} loaded runs' /metrics counters; each count says where it came "
            f"from.</p><ul class='exercise'>{items}</ul></section>")


def coverage_html(cov: Coverage, *, title: str = "campaign", exercise: Exercise | None = None) -> str:
    """The page for `cov`; `title` names the campaign (escaped like everything else); `exercise`:
    what the engine did over the campaign, shown above the grids."""
    top = max(cov.pairs.values(), default=1)
    grids = "\n".join(_grid(cov, a, b, top) for a, b in itertools.combinations(cov.space.dimensions, 2))
    missing = sorted(cov.space.pairs - set(cov.pairs))
    triples = "".join(f"<tr><td>{_e(k)}</td><td>{cov.triples.get(k, 0)}</td></tr>" for k in sorted(cov.space.triples))
    dims = "".join(
        f"<tr><td>{_e(d.name)}</td><td>{_e(', '.join(d.buckets))}</td><td>{_e(d.source)}</td></tr>"
        for d in cov.space.dimensions
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>coverage: {_e(title)}</title>
<style>{_STYLE}</style></head><body>
<header><h1>Pairwise feature coverage: {_e(title)}</h1>
<p><b>{cov.covered}/{cov.total} pairs</b> ({math.floor(100 * cov.fraction)}%) exercised by {cov.requests:,} requests;
triples of the cheap dimensions {len(cov.triples)}/{len(cov.space.triples)}.</p>
<p class='note'>Each cell: requests that exercised the pair. White: never exercised. Hatched: cannot happen
on this target, not counted in the total.</p></header>
{_exercised(exercise)}
<section><h2>Dimensions</h2><table class='g'><tr><th>dimension</th><th>buckets</th><th>read from</th></tr>{dims}</table></section>
<section><h2>Pairs</h2><div class='grids'>
{grids}
</div></section>
<section><h2>Missing pairs ({len(missing)})</h2><ul class='missing'>{''.join(f'<li>{_e(k)}</li>' for k in missing)}</ul></section>
<section><h2>Triples</h2><table class='g'><tr><th>triple</th><th>requests</th></tr>{triples}</table></section>
</body></html>
"""


def write_coverage_page(cov: Coverage, path: Path, *, title: str = "campaign", exercise: Exercise | None = None) -> Path:
    """Write the page atomically (a campaign may be rewriting it while a person opens it)."""
    durable.write_atomic(path, coverage_html(cov, title=title, exercise=exercise))
    return path
