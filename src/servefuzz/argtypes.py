"""Argument types shared by every command's parser, so each refuses bad input the same way."""

from __future__ import annotations

import argparse

from servefuzz.errors import UsageError

__all__ = ["UsageParser", "positive_int", "positive_float"]


class UsageParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are `UsageError`s: one line and exit 2, via the CLI."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1, got {value}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected more than 0, got {value}")
    return value
