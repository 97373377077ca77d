"""report.html: one self-contained page with the finding's plots, drawn as inline SVG here.

No script and nothing fetched from anywhere: the page opens from a file, offline, in any
browser. It shows the verdict and its evidence (first divergent position, margins, threshold),
a request timeline with the diverging requests in red, divergence by prefix_len modulo the page
size (a bar chart: all requests in blue, diverging ones in red), the triage matrix (cured rows
green), the evidence that its trigger happened (the cached tokens and counters its execution read),
the known-issue matches and the request trace. Every string from the finding passes
through `sanitize.html_text` (escaped, control characters made visible).

    >>> from servefuzz.reports.facts import Bar
    >>> svg = timeline_svg([Bar("r01", 0.0, 80.0, True, False), Bar("r02", 10.0, 50.0, False, False)])
    >>> svg.count(DIVERGED), svg.count(STABLE)
    (1, 1)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from servefuzz.anomaly import previews
from servefuzz.evidence import Picture
from servefuzz.finding import Bisect, Finding
from servefuzz.history import RunHistory
from servefuzz.known_issues import Match, trigger_features
from servefuzz.reports.facts import (
    Bar,
    TraceRow,
    deciding_divergence,
    diverged_variants,
    repro_command,
    server_command,
    server_death,
    timeline,
    trace_rows,
    triage_rows,
)
from servefuzz.sanitize import html_text

__all__ = ["DIVERGED", "STABLE", "ALL", "CURED", "report_html", "timeline_svg", "prefix_mod_svg", "shift_svg", "noise_svg"]

# The plot colours (a test looks for them in a screenshot of the page).
DIVERGED = "#d62728"  # red: diverging requests
STABLE = "#8c9bab"  # grey: requests that stayed stable
ALL = "#4c78a8"  # blue: all requests in a bucket
CURED = "#c7ecc7"  # green: a triage variant that cured the finding
_WIDTH = 1080
_DIV_ROW = " class='div'"
_LABEL_W = 150  # room for request ids left of the timeline


# Every string from the finding goes through the one sanitizer: escaped, controls made visible.
_e = html_text


def report_html(finding: Finding, matches: Sequence[Match], histories: Sequence[RunHistory] = ()) -> str:
    """The page for `finding`; `histories` (a campaign's runs) give the timeline its end times."""
    bars, source = timeline(finding, histories)
    page = finding.target.page_size
    sections = [
        _header(finding),
        _section("Verdict and evidence", _evidence(finding)),
        _section("Request timeline", f"<p class='note'>{_e(source)}; red: expected to diverge.</p>" + timeline_svg(bars)),
        _section(
            "Divergence by prefix length modulo page size",
            f"<p class='note'>Requests grouped by prefix_len % {_e(page) if page else 'page size (unknown: by prefix_len)'}; "
            "blue: all requests, red: diverging.</p>" + prefix_mod_svg(trace_rows(finding), page),
        ),
    ]
    drawn = finding.headline.picture
    if drawn is not None:
        sections.append(_section("Where the margin sits", _picture(drawn)))
    if finding.triage is not None:
        sections.append(_section("Triage matrix", _triage(finding)))
    if finding.bisect is not None:
        sections.append(_section("Versions (bisect)", _bisect(finding.bisect)))
    if finding.triggered:
        sections.append(_section("Evidence the trigger happened", _triggered(finding)))
    sections += [
        _section("Known issues this may be", _matches(matches)),
        _section("Diverged outputs", _outputs(finding)),
        _section("Trigger features", _features(finding)),
        _section("Reproduce", _reproduce(finding)),
        _section("Request trace", _trace(trace_rows(finding))),
    ]
    return _PAGE.format(title=_e(f"servefuzz {finding.filename}"), body="\n".join(sections), cured=CURED)


def _section(title: str, body: str) -> str:
    return f"<section><h2>{_e(title)}</h2>\n{body}\n</section>"


def _header(finding: Finding) -> str:
    rate = f" · reproduced {finding.confirmation.interval}" if finding.confirmation else ""
    t = finding.target
    return (
        f"<header><h1>{_e(finding.filename)}</h1>"
        f"<p><span class='verdict v-{_e(finding.verdict.value)}'>{_e(finding.verdict.value.upper())}</span> "
        f"on {_e(t.engine)}{' ' + _e(t.version) if t.version else ''}{_e(rate)}</p>"
        f"<p class='note'>signature <code>{_e(finding.signature)}</code></p></header>"
    )


def _evidence(finding: Finding) -> str:
    d = deciding_divergence(finding)
    rows = [("verdict", finding.verdict.value), ("why", finding.why if d is None else d.reason)]
    if (p := finding.headline.promise) is not None:
        rows.append(("promise broken", f"{p.mode}: {p.words} ({p.source})"))
    if d is not None:
        bound = " (at least)" if d.margin_is_bound else ""
        rows += [
            ("request", d.request_id),
            ("first divergent position", f"{d.unit} {d.position}"),
            ("margin", "unknown" if d.margin is None else f"{d.margin:.4f}{bound}"),
            ("threshold", "unknown" if d.threshold is None else f"{d.threshold:.4f}"),
            ("noise p99", "unknown" if d.noise_p99 is None else f"{d.noise_p99:.4f} over {d.noise_tokens} agreeing tokens"),
        ]
        for side in (d.a, d.b):
            lp = "?" if side.lp_own is None else f"{side.lp_own:.4f}"
            other = "?" if side.lp_other is None else f"{'≤ ' if side.other_is_bound else ''}{side.lp_other:.4f}"
            rows.append((side.name, f"chose {side.token} (logprob {lp}); the other side's token: {other}"))
    return "<table class='kv'>" + "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows) + "</table>"


def _outputs(finding: Finding) -> str:
    variants = diverged_variants(finding)
    if not variants:
        death = server_death(finding)
        tail = "" if death is None else (f"<p>The server exited with status {_e(death[0])}; the end of its log:</p>"
                                         f"<pre>{_e(death[1])}</pre>")
        return f"<p>{_e(finding.headline.summary)}</p>{tail}"
    return "".join(
        f"<h3>{_e(rid)}</h3><pre>"
        + "\n".join(f"variant {i}{_e(f' ({v.label})' if v.label else '')}: {_e(shown)}  ({v.count})"
                    for i, (v, shown) in enumerate(zip(vs, previews(vs, 60), strict=True), 1))
        + "</pre>"
        for rid, vs in variants.items()
    )


def _triggered(finding: Finding) -> str:
    """What the execution that showed it read of the mechanism it hinges on (`Finding.triggered`):
    a cache-state finding whose warm run hit nothing in the cache was not about the cache."""
    items = "".join(f"<li>{_e(t.line())}</li>" for t in finding.triggered)
    return f"<ul>{items}</ul>"


def _features(finding: Finding) -> str:
    items = "".join(f"<li>{_e(reason)} <code>{_e(f)}</code></li>" for f, reason in trigger_features(finding).items())
    return f"<ul>{items}</ul>"


def timeline_svg(bars: Sequence[Bar]) -> str:
    """One row per request: a bar from send to end (a dot at the send time when the end is
    unknown), red for the requests expected to diverge."""
    row = 16 if len(bars) <= 60 else 8
    height = 40 + row * len(bars)
    end = max((b.end_ms if b.end_ms is not None else b.start_ms for b in bars), default=0.0)
    span = max(end, 1.0) * 1.05
    plot_w = _WIDTH - _LABEL_W - 20

    def x(ms: float) -> float:
        return _LABEL_W + plot_w * ms / span

    parts = [_axis(span, x, height - 24)]
    for i, b in enumerate(bars):
        y = 8 + i * row
        colour = DIVERGED if b.diverged else STABLE
        if b.end_ms is None:
            parts.append(f"<circle cx='{x(b.start_ms):.1f}' cy='{y + row / 2:.1f}' r='{row / 2 - 1:.1f}' fill='{colour}'/>")
        else:
            w = max(x(b.end_ms) - x(b.start_ms), 2.0)
            dash = " stroke='#333' stroke-dasharray='3 2'" if b.cancelled else ""
            parts.append(f"<rect x='{x(b.start_ms):.1f}' y='{y + 1}' width='{w:.1f}' height='{row - 3}' fill='{colour}'{dash}/>")
        if row >= 12:
            parts.append(f"<text x='{_LABEL_W - 6}' y='{y + row - 4}' text-anchor='end'>{_e(b.id)}</text>")
    return _svg(height, "".join(parts))


def _axis(span: float, x: Callable[[float], float], y: float) -> str:
    step = _nice_step(span / 8)
    ticks = []
    t = 0.0
    while t <= span:
        px = x(t)
        ticks.append(f"<line x1='{px:.1f}' x2='{px:.1f}' y1='0' y2='{y}' class='grid'/>"
                     f"<text x='{px:.1f}' y='{y + 16}' text-anchor='middle'>{t:g} ms</text>")
        t += step
    return "".join(ticks)


def _nice_step(raw: float) -> float:
    """1, 2 or 5 times a power of ten, at least `raw`."""
    power = 10 ** max(0, len(str(int(raw))) - 1) if raw >= 1 else 1
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw)


def prefix_mod_svg(rows: Sequence[TraceRow], page: int | None) -> str:
    """Bars per residue of prefix_len modulo the page size ("none": no shared prefix): how many
    requests fall there (blue) and how many of them diverged (red)."""
    buckets: dict[str, list[TraceRow]] = {}
    for r in rows:
        key = "none" if r.prefix_len == 0 else str(r.prefix_len % page if page else r.prefix_len)
        buckets.setdefault(key, []).append(r)
    keys = sorted(buckets, key=lambda k: (k == "none", int(k) if k.isdigit() else 0))
    top = max((len(v) for v in buckets.values()), default=1)
    height, base, plot_h = 260, 220, 190
    slot = min(120.0, (_WIDTH - 80) / max(len(keys), 1))
    parts = [f"<line x1='50' x2='{_WIDTH - 10}' y1='{base}' y2='{base}' stroke='#333'/>"]
    for n in range(top + 1):
        if top <= 10 or n % max(1, top // 5) == 0:
            y = base - plot_h * n / top
            parts.append(f"<text x='42' y='{y + 4:.1f}' text-anchor='end'>{n}</text>"
                         f"<line x1='50' x2='{_WIDTH - 10}' y1='{y:.1f}' y2='{y:.1f}' class='grid'/>")
    for i, key in enumerate(keys):
        left = 60 + i * slot
        bar_w = slot * 0.38
        for j, (count, colour) in enumerate(((len(buckets[key]), ALL), (sum(r.diverged for r in buckets[key]), DIVERGED))):
            h = plot_h * count / top
            parts.append(f"<rect x='{left + j * bar_w:.1f}' y='{base - h:.1f}' width='{bar_w - 2:.1f}' height='{h:.1f}' fill='{colour}'/>")
        label = "0 (aligned)" if key == "0" and page else key
        parts.append(f"<text x='{left + bar_w:.1f}' y='{base + 18}' text-anchor='middle'>{_e(label)}</text>")
    return _svg(height, "".join(parts))


def _picture(d: Picture) -> str:
    """The two pictures of the verdict (`oracles.noise.picture`), with what they show."""
    return (
        "<p class='note'>The deviant run's top-k logprob shift from the reference at each agreeing token before "
        "the flip (grey; log scale, zero at the bottom) against the campaign's band there (green: 2 x its largest "
        "benign shift); red: the flip's margin.</p>" + shift_svg(d)
        + f"<p class='note'>The campaign's benign top-1/top-2 gap shifts at {_e(d.where)} "
          f"({_e(d.count)} of them; log-spaced bins, height: log count); red: the flip's margin, "
          "green: the threshold.</p>" + noise_svg(d)
    )


_LOG_LO, _LOG_HI = -7.0, 2.0  # 1e-7 .. 100 nats


def _logx(v: float, left: float, width: float) -> float:
    lv = _LOG_LO if v <= 0 else min(_LOG_HI, max(_LOG_LO, math.log10(v)))
    return left + (lv - _LOG_LO) / (_LOG_HI - _LOG_LO) * width


def shift_svg(d: Picture) -> str:
    """Per position: the shift (bars), the band (ticks), the flip's margin (a red bar).

    >>> svg = shift_svg(Picture((0, 1), (0.001, 0.0), (0.01, 0.01), 2, 1.2, 0.02, "2-7/uncached", {}, (1e-7, 12)))
    >>> svg.count(DIVERGED), svg.count("#3a7d44")
    (1, 2)
    """
    positions, linf, band, flip, margin = d.positions, d.linf, d.band, d.flip, d.margin
    height, top, base, left = 200.0, 16.0, 170.0, 60.0
    n = max(flip + 1, 1)
    step = (_WIDTH - left - 20) / n

    def y(v: float) -> float:
        lv = _LOG_LO if v <= 0 else min(_LOG_HI, max(_LOG_LO, math.log10(v)))
        return base - (lv - _LOG_LO) / (_LOG_HI - _LOG_LO) * (base - top)

    parts = [f"<text x='4' y='{y(10 ** k) + 4:.1f}'>1e{k}</text>" for k in range(-7, 3, 3)]
    parts += [f"<line class='grid' x1='{left}' x2='{_WIDTH - 20}' y1='{y(10 ** k):.1f}' y2='{y(10 ** k):.1f}'/>"
              for k in range(-7, 3, 3)]
    for p, v, b in zip(positions, linf, band, strict=False):
        x = left + p * step
        parts.append(f"<rect x='{x:.1f}' y='{y(v):.1f}' width='{max(step - 1, 1):.1f}' height='{base - y(v):.1f}' "
                     f"fill='{STABLE}'/>")
        if b > 0:
            parts.append(f"<line x1='{x:.1f}' x2='{x + max(step - 1, 1):.1f}' y1='{y(b):.1f}' y2='{y(b):.1f}' "
                         "stroke='#3a7d44' stroke-width='2'/>")
    if margin is not None:
        x = left + flip * step
        parts.append(f"<rect x='{x:.1f}' y='{y(margin):.1f}' width='{max(step - 1, 1):.1f}' "
                     f"height='{base - y(margin):.1f}' fill='{DIVERGED}'/>")
    parts.append(f"<text x='{left}' y='{base + 20}'>token 0</text>"
                 f"<text x='{left + flip * step:.1f}' y='{base + 20}'>flip at token {flip}</text>")
    return _svg(height, "".join(parts))


def noise_svg(d: Picture) -> str:
    """The campaign's benign gap shifts at the flip's bucket as a log-binned histogram, with the
    margin (red) and the threshold (green) marked.

    >>> svg = noise_svg(Picture((), (), (), 0, 0.5, 0.02, "0-1/uncached", {"count": 3, "zeros": 1, "bins": {"60": 2}},
    ...                         (1e-7, 12)))
    >>> svg.count(DIVERGED), svg.count("#3a7d44")
    (1, 1)
    """
    lo, per = d.edges
    height, top, base, left = 180.0, 16.0, 150.0, 60.0
    width = _WIDTH - left - 20
    counts, zeros = d.bins, d.zeros
    tallest = math.log10(1 + max([*counts.values(), zeros, 1]))
    parts = [f"<text x='{_logx(10.0 ** k, left, width) - 8:.1f}' y='{base + 18}'>1e{k}</text>" for k in range(-7, 3)]
    bar = width / ((_LOG_HI - _LOG_LO) * float(per))
    if zeros:
        h = math.log10(1 + zeros) / tallest * (base - top)
        parts.append(f"<rect x='{left - bar - 4:.1f}' y='{base - h:.1f}' width='{bar + 2:.1f}' height='{h:.1f}' "
                     f"fill='{STABLE}'><title>{zeros} exactly 0</title></rect>")
    for i, c in sorted(counts.items()):
        upper = float(lo) * 10 ** (i / float(per))
        h = math.log10(1 + c) / tallest * (base - top)
        x = _logx(upper, left, width) - bar
        parts.append(f"<rect x='{x:.1f}' y='{base - h:.1f}' width='{max(bar - 1, 1):.1f}' height='{h:.1f}' "
                     f"fill='{ALL}'><title>{c} up to {upper:.2e}</title></rect>")
    for value, colour in ((d.threshold, "#3a7d44"), (d.margin, DIVERGED)):
        if value is not None and value > 0:
            x = _logx(value, left, width)
            parts.append(f"<line x1='{x:.1f}' x2='{x:.1f}' y1='{top}' y2='{base}' stroke='{colour}' stroke-width='2'/>")
    return _svg(height, "".join(parts))


def _svg(height: float, body: str) -> str:
    return (
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{_WIDTH}' height='{height:.0f}' "
        f"viewBox='0 0 {_WIDTH} {height:.0f}' font-size='11' font-family='sans-serif'>{body}</svg>"
    )


def _triage(finding: Finding) -> str:
    rows = []
    for r in triage_rows(finding):
        cls = " class='cured'" if r.cured else " class='repro'" if r.reproduced else ""
        rows.append(
            f"<tr{cls}><td>{_e(r.name)}</td><td><code>{_e(r.change)}</code></td><td>{_e(r.component)}</td>"
            f"<td>{_e(r.rate)}</td><td>{_e(r.outcome)}</td></tr>"
        )
    return (
        "<table class='grid'><tr><th>variant</th><th>flags / env</th><th>component</th><th>reproduced</th>"
        f"<th>outcome</th></tr>{''.join(rows)}</table>"
    )


def _bisect(record: Bisect) -> str:
    """The bisection: its conclusion and every version tried, the first bad one marked."""
    rows = []
    for s in record.steps:
        cls = " class='repro'" if s.version == record.first_bad else " class='cured'" if s.version == record.last_good else ""
        rows.append(f"<tr{cls}><td>{_e(s.version)}</td><td>{_e(s.outcome)}</td><td>{_e(s.interval)}</td>"
                    f"<td>{_e(s.reported or '-')}</td><td>{_e(s.error or '')}</td></tr>")
    return (f"<p>{_e(record.preset)} {_e(record.versions)}: {_e(record.conclusion)}</p>"
            "<table class='grid'><tr><th>version</th><th>outcome</th><th>reproduced</th><th>server reported</th>"
            f"<th>note</th></tr>{''.join(rows)}</table>")


def _matches(matches: Sequence[Match]) -> str:
    if not matches:
        return "<p>No issue of servefuzz's known-issue catalogue matches.</p>"
    items = []
    for m in matches:
        i = m.issue
        reasons = "".join(f"<li>{_e(r)}</li>" for r in m.reasons)
        against = "".join(f"<li class='against'>against: {_e(r)}</li>" for r in m.against)
        caveat = f"<li class='note'>note: {_e(i.caveats)}</li>" if i.caveats else ""
        items.append(
            f"<li><a href='{_e(i.link)}'>{_e(i.id)}</a> {_e(i.title)} <span class='note'>({_e(i.status)}; score {m.score})</span>"
            f"<ul>{reasons}{against}{caveat}</ul></li>"
        )
    return f"<ul>{''.join(items)}</ul>"


def _reproduce(finding: Finding) -> str:
    return (
        f"<p>Start the server:</p><pre>{_e(server_command(finding.target, multiline=True))}</pre>"
        f"<p>Replay with the standalone script beside this page:</p><pre>{_e(repro_command(finding))}</pre>"
    )


def _trace(rows: Sequence[TraceRow]) -> str:
    body = "".join(
        f"<tr{_DIV_ROW if r.diverged else ''}><td>{_e(r.id)}</td><td>{r.offset_ms:g}</td><td>{r.prompt_len}</td>"
        f"<td>{r.prefix_len}</td><td>{r.max_tokens}</td><td>{r.n}</td><td>{'✓' if r.diverged else ''}</td><td>{_e(r.notes)}</td></tr>"
        for r in rows
    )
    return (
        "<table class='grid'><tr><th>request</th><th>offset_ms</th><th>prompt_len</th><th>prefix_len</th>"
        f"<th>max_tokens</th><th>n</th><th>diverged</th><th>notes</th></tr>{body}</table>"
    )


_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:">
<title>{title}</title>
<style>
body {{ font: 14px/1.45 system-ui, sans-serif; margin: 24px auto; max-width: 1100px; color: #222; }}
h1 {{ font-size: 20px; margin: 0 0 4px; }} h2 {{ font-size: 17px; border-bottom: 1px solid #ddd; }}
h3 {{ font-size: 14px; margin: 12px 0 4px; }}
.note {{ color: #666; font-size: 12px; }}
.verdict {{ padding: 2px 8px; border-radius: 4px; color: #fff; background: #666; font-weight: 600; }}
.v-corruption, .v-crash, .v-isolation-breach {{ background: #b0191e; }}
.v-suspected-corruption, .v-suspected-isolation-breach {{ background: #d0641a; }}
.v-anomalous-shift {{ background: #8a6d1d; }} .v-numeric-drift {{ background: #3a7d44; }}
.v-contract-violation {{ background: #7a2a8a; }}
table {{ border-collapse: collapse; }} td, th {{ padding: 3px 8px; text-align: left; vertical-align: top; }}
table.grid td, table.grid th {{ border: 1px solid #ddd; }} table.kv th {{ color: #555; font-weight: 500; }}
tr.cured td {{ background: {cured}; }} tr.repro td {{ background: #fbe3e3; }} tr.div td {{ color: #b0191e; font-weight: 600; }}
pre {{ background: #f6f8fa; padding: 8px; overflow-x: auto; }}
svg text {{ fill: #333; }} svg .grid {{ stroke: #e4e4e4; }}
li.against {{ color: #b0191e; }}
</style></head><body>
{body}
</body></html>
"""
