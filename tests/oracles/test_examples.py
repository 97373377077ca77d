"""The usage examples in the oracles' docstrings run and hold."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["", ".outputs", ".verdict", ".replay", ".isolation", ".nconsistency", ".liveness", ".noise", ".shift",
           ".controls", ".vote", ".observations"]


@pytest.mark.parametrize("suffix", MODULES)
def test_docstring_examples(suffix: str) -> None:
    # By name: the package re-exports functions that shadow their submodules' names.
    result = doctest.testmod(importlib.import_module("servefuzz.oracles" + suffix))
    assert result.attempted > 0 and result.failed == 0
