"""The words every layer uses, each defined once: first difference, common prefix, burst, page class.

The verdict, the noise model, the controls, the triggers, the feedback, the coverage, the
reports and the GPU scripts all speak of where two outputs first differ, of requests that leave
in one burst and of a length against the KV page. Each of those words is defined here, with its
threshold, so that no two readers can mean different things by it; the modules above are views
of these definitions (a trigger's `prefix=mid-page`, a coverage bucket's `page-edge`, a feedback
feature's `2p-1` are all read from `page_boundary`).

Standard library only, and nothing else of servefuzz: the standalone repro_full.py embeds
`first_difference` verbatim (`reports/repro.py`), so the script and servefuzz find a
divergence at the same token.

    >>> first_difference([5, 7, 9], [5, 8, 9]), common_prefix([5, 7, 9], [5, 8, 9])
    (1, 1)
    >>> burst_positions([0.0, 0.4, 1.0, 40.0])
    ('first', 'inside', 'last', 'alone')
    >>> page_class(64, 64), page_class(65, 64), page_class(65, None)
    ('aligned', 'mid-page', 'no-page')
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Literal

__all__ = [
    "ASSUMED_PAGE",
    "BURST_GAP_MS",
    "BurstPosition",
    "PageClass",
    "burst_positions",
    "bursts",
    "common_prefix",
    "first_difference",
    "known_page",
    "page_boundary",
    "page_class",
    "page_edge",
    "page_unit",
]

# --- first difference, common prefix -----------------------------------------------------------


def first_difference(a: Sequence[Hashable], b: Sequence[Hashable]) -> int | None:
    """The first position at which `a` and `b` differ; None when they are equal.

    When one is a strict prefix of the other they differ at the shorter one's length: the first
    position that one of them has and the other lacks (an output that stopped there against one
    that went on). Token ids and text alike (text differs character by character).

    >>> first_difference([5, 7, 9], [5, 8, 9])
    1
    >>> first_difference([5, 7], [5, 7, 9, 11])  # one a prefix of the other
    2
    >>> first_difference([], [3])
    0
    >>> first_difference([5, 7], [5, 7]) is None
    True
    >>> first_difference("abc", "abd")
    2
    """
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def common_prefix(a: Sequence[Hashable], b: Sequence[Hashable]) -> int:
    """How many leading positions `a` and `b` share: their first difference, or the whole
    length when they are equal.

    >>> common_prefix([5, 7, 9], [5, 7]), common_prefix([5, 7], [5, 7]), common_prefix([1], [2])
    (2, 2, 0)
    """
    where = first_difference(a, b)
    return len(a) if where is None else where


# --- burst -------------------------------------------------------------------------------------

# Requests that leave at most this long after the one before them leave in one burst (a burst
# chains: its first and last request may be further apart). The strategies space a burst's
# requests 0.3-2 ms apart and a blocker 6-11 ms ahead of it (`strategies.shape.prefix_burst`), and
# requests one client sends at one instant reached an engine up to 11 ms apart on two busy cores
# (docs/fault-zoo.md): 12 ms keeps all of that one burst, and the pairwise generator
# (`covering`) spaces the bursts it plans several times this far apart.
BURST_GAP_MS = 12.0

BurstPosition = Literal["alone", "first", "inside", "last"]


def bursts(offsets_ms: Sequence[float]) -> tuple[tuple[int, ...], ...]:
    """The indices of `offsets_ms` (send offsets, ms), grouped into bursts in the order they
    leave: a request more than BURST_GAP_MS after the one before it starts a new burst.

    >>> bursts([0.0, 20.0, 5.0, 31.0, 60.0])
    ((0, 2), (1, 3), (4,))
    """
    order = sorted(range(len(offsets_ms)), key=lambda i: (offsets_ms[i], i))
    groups: list[list[int]] = []
    for i in order:
        if not groups or offsets_ms[i] - offsets_ms[groups[-1][-1]] > BURST_GAP_MS:
            groups.append([])
        groups[-1].append(i)
    return tuple(tuple(g) for g in groups)


def burst_positions(offsets_ms: Sequence[float]) -> tuple[BurstPosition, ...]:
    """Each request's place in its burst (by index of `offsets_ms`): alone, first, inside, last.

    >>> burst_positions([0.0, 12.0, 24.1])
    ('first', 'last', 'alone')
    """
    out: list[BurstPosition] = ["alone"] * len(offsets_ms)
    for g in bursts(offsets_ms):
        if len(g) > 1:
            out[g[0]], out[g[-1]] = "first", "last"
            for i in g[1:-1]:
                out[i] = "inside"
    return tuple(out)


# --- page class --------------------------------------------------------------------------------

# The page length measures are taken against when the server states none (or a page of one
# token): the commonest KV block size of the engines servefuzz knows, and the unit the
# strategies aim at then (`strategies.TargetShape.unit`).
ASSUMED_PAGE = 64

PageClass = Literal["aligned", "mid-page", "no-page"]


def known_page(page: int | None) -> int | None:
    """The page size when it says something about a length: None for no page, and for a page of
    one token (SGLang's default), on which every length is a whole number of pages.

    >>> known_page(64), known_page(1), known_page(None)
    (64, None, None)
    """
    return page if page is not None and page > 1 else None


def page_unit(*pages: int | None) -> int:
    """The unit to measure lengths against: the first known page of `pages` (the server's,
    then what a scenario recorded), else ASSUMED_PAGE.

    >>> page_unit(16, 32), page_unit(1, 32), page_unit(None, None)
    (16, 32, 64)
    """
    return next((p for p in map(known_page, pages) if p is not None), ASSUMED_PAGE)


def page_class(length: int, page: int | None) -> PageClass:
    """`length` tokens against the KV page: a whole number of pages (`aligned`), ending inside
    a page (`mid-page`), or no page known (`no-page`, `known_page`). A length of 0 is aligned:
    whether anything is shared at all is the caller's word ("none").

    >>> [page_class(n, 64) for n in (64, 128, 65, 63, 1)]
    ['aligned', 'aligned', 'mid-page', 'mid-page', 'mid-page']
    >>> page_class(64, 1), page_class(64, None)
    ('no-page', 'no-page')
    """
    p = known_page(page)
    if p is None:
        return "no-page"
    return "aligned" if length % p == 0 else "mid-page"


def page_boundary(length: int, page: int) -> tuple[int, int]:
    """The page boundary nearest `length` and the offset from it: `(m, d)` with
    `length == m * page + d` and `|d| <= page / 2` (at exactly half a page, the boundary above).

    >>> [page_boundary(n, 64) for n in (64, 127, 129, 100, 32, 5)]
    [(1, 0), (2, -1), (2, 1), (2, -28), (1, -32), (0, 5)]
    """
    if page < 1:
        raise ValueError(f"a page holds at least one token, not {page}")
    m = (length + page // 2) // page
    return m, length - m * page


def page_edge(length: int, page: int | None) -> bool:
    """Whether `length` ends one token before or after a boundary of one or more whole pages:
    where off-by-one page bugs live. False when no page is known.

    >>> [page_edge(n, 16) for n in (15, 17, 33, 16, 1, 20)]
    [True, True, True, False, False, False]
    """
    p = known_page(page)
    if p is None:
        return False
    m, d = page_boundary(length, p)
    return m >= 1 and abs(d) == 1
