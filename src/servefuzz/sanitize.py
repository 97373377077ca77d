"""One sanitizer for text that a server (or a finding file) wrote, before a person sees it.

Servers are broken by definition, and finding files can come from anyone, so any string that
came from outside servefuzz (token text, an error body, a version, a request id, a log tail) is
hostile wherever it is shown. Each sink has its own function here, and every renderer uses these
and nothing else:

| sink                              | function             | what it guarantees                                  |
|-----------------------------------|----------------------|-----------------------------------------------------|
| a terminal, a log line, a text file | `visible`          | no control character (ESC, OSC, C1, CR, bidi) left  |
| rich (a string it parses)         | `terminal`           | `visible`, and no markup tag rich would interpret   |
| markdown prose or a table cell    | `markdown`           | `visible`, one line, no markdown or HTML syntax     |
| markdown inline code              | `markdown_code`      | `visible`, one line, a code span it cannot close    |
| a markdown code block             | `fence`              | `visible`, a fence its body cannot close            |
| HTML text or an attribute value   | `html_text`          | `visible`, every `<>&"'` escaped                    |

`visible` writes a control character as its Python escape, so it stays readable and cannot act:

    >>> visible("red \\x1b[31mX\\x1b[0m bell \\x07 osc \\x1b]8;;http://e\\x07 c1 \\x9b")
    'red \\\\x1b[31mX\\\\x1b[0m bell \\\\x07 osc \\\\x1b]8;;http://e\\\\x07 c1 \\\\x9b'
    >>> terminal("[/oops] [link=http://e]x[/link] [1, 2]")
    '\\\\[/oops] \\\\[link=http://e]x\\\\[/link] [1, 2]'
    >>> markdown("a|b <img src=x> `c`")
    'a\\\\|b &lt;img src=x&gt; \\\\`c\\\\`'
    >>> markdown_code("a`b")
    '`` a`b ``'
    >>> fence("x ``` y", "text").splitlines()[0]
    '````text'
    >>> html_text("<b title='x'>\\x1b")
    '&lt;b title=&#x27;x&#x27;&gt;\\\\x1b'

Pure functions of strings: no I/O, and no rich import (progress.py stays the only module that
imports rich; `terminal` escapes exactly the tags rich's markup parser reads).
"""

from __future__ import annotations

import html
import re

__all__ = ["visible", "one_line", "terminal", "markdown", "markdown_code", "fence", "html_text"]

# Characters that act on a terminal or a text layout instead of showing: C0 controls but tab and
# newline, DEL and the C1 controls (0x9b is a one-byte CSI, 0x9d a one-byte OSC), the bidi
# overrides and isolates that reorder what is shown (the "Trojan Source" trick), the Unicode line
# and paragraph separators, and lone surrogates (a JSON `"\ud800"` decodes to one, and writing it
# to a UTF-8 terminal or file raises).
_INVISIBLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]")

# What rich's markup parser reads (rich.markup.render): a tag (`RE_TAGS`: backslashes, then `[`,
# a lower-case letter, `#`, `/` or `@`, and anything up to the first `]` without another `[`),
# and, in the text between tags, a backslash before any other `[`, which it drops.
_RICH_TAG = re.compile(r"(\\*)(\[[a-z#/@][^[]*?])|(\\+)\[")

_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]|#~])")


def _escape(m: re.Match[str]) -> str:
    code = ord(m.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _escape_markup(m: re.Match[str]) -> str:
    if m.group(2) is not None:
        return f"{m.group(1)}{m.group(1)}\\{m.group(2)}"
    return f"{m.group(3)}\\["


def visible(text: object) -> str:
    """`text` with every control character written as its escape (`\\x1b`); tabs and newlines stay.

    Idempotent, and the identity on ordinary text (letters of any script, emoji, punctuation).
    """
    return _INVISIBLE.sub(_escape, str(text))


def one_line(text: object) -> str:
    """`visible(text)` on one line: every run of whitespace becomes one space."""
    return " ".join(visible(text).split())


def terminal(text: object) -> str:
    """`visible(text)`, safe inside a string that rich parses as markup (`console.print(f"...")`).

    Escapes what rich would read as a tag (`[/oops]` would raise MarkupError, `[link=...]` would
    render a link) the way `rich.markup.escape` does: a backslash before it, and the backslashes
    already before it doubled, so they stay text too; and, unlike `rich.markup.escape`, adds the
    backslash rich drops before any other `[` that follows one (`\\[` shows as `\\[`, not `[`).
    """
    out = _RICH_TAG.sub(_escape_markup, visible(text))
    # Trailing backslashes would escape the tag the caller puts after this text: doubled, they
    # are read as themselves before a tag (and show doubled where nothing follows).
    trailing = len(out) - len(out.rstrip("\\"))
    return out + "\\" * trailing


def markdown(text: object) -> str:
    """Text safe in markdown prose and table cells: one line, HTML and markdown syntax escaped."""
    return _MD_SPECIAL.sub(r"\\\1", html.escape(one_line(text), quote=False))


def markdown_code(text: object) -> str:
    """Text as an inline code span it cannot close (markdown shows it verbatim), on one line."""
    line = one_line(text)
    longest = max((len(run) for run in re.findall(r"`+", line)), default=0)
    ticks = "`" * (longest + 1)
    return f"{ticks} {line} {ticks}" if longest else f"{ticks}{line}{ticks}"


def fence(body: object, lang: str = "") -> str:
    """A fenced code block that `body` cannot close; its lines are kept, its controls made visible."""
    text = visible(body)
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{lang}\n{text}\n{ticks}"


def html_text(text: object) -> str:
    """Text safe in HTML element content and in a quoted attribute value."""
    return html.escape(visible(text), quote=True)
