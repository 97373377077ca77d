"""Natural text for prompts (`workload.TextSource`): where it comes from, and when it is used.

A trained model fed random token ids writes short loops: on SmolLM2-135M-Instruct 80-88% of
servefuzz's answers to random-id prompts ended in one, against 4-5 of 24 on natural text
(`docs/engines.md`), and a looping answer tests little of the engine's state. So where the
target's model has a real tokenizer, prompts are runs of natural text in its own tokens.

The text: the Python documentation's topics that ship inside the standard library
(`pydoc_data.topics`, the text `help()` shows; the Python documentation is under the PSF
License). It is in every Python, so nothing is downloaded, and it is English prose with code in
it. `CORPUS_CHARS` of it are tokenized by the target's own `/tokenize`, and the chat template's
tail (the tokens it writes after a user's text) is read from the template applied to `MARK`.

A real tokenizer is told from servefuzz's random models by what it does to the text: a trained
BPE writes English at about a quarter of a token a character; the random models' tokenizers,
trained on generated words, at 0.65 (`REAL_TOKENS_PER_CHAR`). Their prompts stay random ids, and
so their campaigns stay exactly as they were.

    >>> chat_tail((1, 9, 40, 41, 2, 9, 1, 5), (40, 41))
    (2, 9, 1, 5)
    >>> chat_tail((1, 40, 2), (40, 41)) is None
    True
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from servefuzz.workload import TextSource, TokenIds

__all__ = ["CORPUS_CHARS", "MARK", "REAL_TOKENS_PER_CHAR", "chat_tail", "corpus_text", "text_source"]

# About 15,000 tokens of a real tokenizer's: longer than the longest prompt of a campaign.
CORPUS_CHARS = 60_000
# Above this many tokens a character, the tokenizer is no trained one (the module docstring).
REAL_TOKENS_PER_CHAR = 0.45
# The user's text the chat template is applied to, to find what it writes after it.
MARK = "Please explain this."
WHERE = "Python's documentation topics (pydoc_data.topics, PSF License)"


def corpus_text(chars: int = CORPUS_CHARS) -> str | None:
    """The first `chars` characters of the documentation topics, in the order of their names,
    blank lines collapsed and cut at a paragraph; None where the standard library lacks them."""
    try:
        from pydoc_data.topics import topics
    except ImportError:
        return None
    text = "\n\n".join(topics[k].strip() for k in sorted(topics))
    text = re.sub(r"\n{3,}", "\n\n", re.sub(r"[ \t]+\n", "\n", text))
    cut = text.rfind("\n\n", 0, chars)
    return text[: cut if cut > 0 else chars]


def chat_tail(chat: Sequence[int], mark: Sequence[int]) -> TokenIds | None:
    """What follows the last run of `mark` (the user's text's tokens) in `chat` (the template
    applied to it); None where the run is not there (the template changed its tokens) or
    nothing follows."""
    m = len(mark)
    for i in range(len(chat) - m, -1, -1):
        if tuple(chat[i : i + m]) == tuple(mark):
            return tuple(chat[i + m :]) or None
    return None


def text_source(text: str, tokens: Sequence[int], tail: Sequence[int] | None) -> TextSource | None:
    """The prompts' text where `tokens` (the target's tokenization of `text`) are a trained
    tokenizer's; None where they are not (a random model's: its prompts stay random ids)."""
    if not text or len(tokens) > REAL_TOKENS_PER_CHAR * len(text) or len(set(tokens)) < 16:
        return None
    return TextSource(tokens=tuple(tokens), tail=tuple(tail or ()), where=WHERE)
