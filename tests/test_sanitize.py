"""The one sanitizer: every sink's guarantee, for any text (hypothesis), checked against the real
parsers where there is one (rich's markup, Python's HTML parser)."""

from __future__ import annotations

import html
import re
import unicodedata

from hypothesis import given
from hypothesis import strategies as st
from rich.text import Text

from servefuzz.sanitize import fence, html_text, markdown, markdown_code, one_line, terminal, visible

# What a hostile server sends in token text and error bodies.
HOSTILE = (
    "[/oops] [link=http://evil.example]click[/link] [bold red]x[/] \\[/oops]\\ "
    "\x1b[31mred\x1b[0m \x1b]8;;http://evil.example\x07osc8\x1b]8;;\x07 \x1b]0;title\x07 "
    "\x9b31m \x9d0;t\x9c \r\x08\x7f \u202eevil\u202c \u2028 \ud800 `x``` |a| <b>&"
)

# Any text, weighted towards what matters here: controls, brackets, backslashes, backticks.
texts = st.text(
    alphabet=st.one_of(
        st.characters(codec=None),
        st.sampled_from(list("[]/\\`|<>&#*_\x1b\x07\x9b\x9d\n\t\r\u202e\ud800 ab=")),
    )
)

# Characters a sanitized text may not hold (besides tab and newline where lines are kept).
_ACTING = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]")


def acts(text: str) -> bool:
    """Whether `text` holds a character that would act rather than show."""
    return any(
        (unicodedata.category(c) in ("Cc", "Cs") and c not in "\t\n") or c in "\u061c\u200e\u200f\u2028\u2029"
        or "\u202a" <= c <= "\u202e" or "\u2066" <= c <= "\u2069"
        for c in text
    )


def test_hostile_text_is_shown_not_obeyed() -> None:
    out = visible(HOSTILE)
    assert not acts(out)
    assert "\\x1b[31mred" in out and "\\x1b]8;;http://evil.example\\x07" in out and "\\x9b31m" in out
    assert "\\u202eevil" in out and "\\ud800" in out and "\\x0d" in out
    out.encode("utf-8")  # a lone surrogate would raise here


@given(texts)
def test_visible_leaves_no_control_character_and_is_idempotent(text: str) -> None:
    out = visible(text)
    assert not acts(out)
    assert visible(out) == out
    out.encode("utf-8")


@given(st.text(alphabet=st.characters(categories=("L", "N", "P", "S", "Zs"))))
def test_visible_is_the_identity_on_ordinary_text(text: str) -> None:
    ordinary = "".join(c for c in text if not _ACTING.match(c))
    assert visible(ordinary) == ordinary


@given(texts)
def test_terminal_text_is_never_read_as_markup_by_rich(text: str) -> None:
    safe, shown = terminal(text), visible(text)
    # Inside the caller's markup: it shows exactly, and the caller's tags still work around it.
    wrapped = Text.from_markup(f"[bold]{safe}[/bold] [dim]x[/]", emoji=False)
    assert wrapped.plain == shown + " x"
    assert [(s.start, s.end, str(s.style)) for s in wrapped.spans if s.end > s.start] == [
        *([(0, len(shown), "bold")] if shown else []), (len(shown) + 1, len(shown) + 2, "dim"),
    ]
    # Alone, nothing after it: trailing backslashes (doubled so that they cannot escape the
    # caller's next tag) show twice; nothing else changes, and nothing is styled or linked.
    alone = Text.from_markup(safe, emoji=False)
    assert alone.plain == shown + "\\" * (len(shown) - len(shown.rstrip("\\")))
    assert not alone.spans


def test_terminal_escapes_the_tags_of_the_issue() -> None:
    rendered = Text.from_markup(f"error: {terminal(HOSTILE)}", emoji=False)
    assert "[/oops]" in rendered.plain and "[link=http://evil.example]click[/link]" in rendered.plain
    assert not rendered.spans


@given(texts)
def test_markdown_is_one_line_without_markup(text: str) -> None:
    out = markdown(text)
    assert "\n" not in out and not acts(out)
    assert "<" not in out and ">" not in out
    # Every markdown special character is escaped by a backslash.
    assert not re.search(r"(?<!\\)(?:\\\\)*[`*_{}\[\]|#~]", out.replace("&lt;", "").replace("&gt;", ""))


@given(texts)
def test_markdown_code_is_a_span_its_text_cannot_close(text: str) -> None:
    out = markdown_code(text)
    assert "\n" not in out and not acts(out)
    ticks = re.match(r"`+", out)
    assert ticks is not None and out.endswith(ticks.group())
    inner = out[len(ticks.group()) : -len(ticks.group())]
    assert ticks.group() not in re.findall(r"`+", inner)


@given(texts, st.sampled_from(["", "bash", "text"]))
def test_fence_cannot_be_closed_by_its_body(text: str, lang: str) -> None:
    out = fence(text, lang)
    first, *body, last = out.split("\n")
    assert first == last + lang and set(last) == {"`"} and len(last) >= 3
    assert not any(line.startswith(last) for line in body)
    assert not acts(out)


@given(texts)
def test_html_text_round_trips_through_an_html_parser(text: str) -> None:
    out = html_text(text)
    assert not set("<>\"'") & set(out) and not acts(out)
    assert html.unescape(out) == visible(text)


def test_one_line_collapses_whitespace_after_making_controls_visible() -> None:
    assert one_line("a\n\tb\x1c c\x85") == "a b\\x1c c\\x85"
