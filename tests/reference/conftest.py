"""Fixtures of the reference-engine tests: the model the engine serves, built in-process.

Servers come from the suite-wide `reference_server(*flags)` fixture (tests/conftest.py): real
processes on 127.0.0.1, one per flag set, shared by the session.

Scoring answers runs the model here too; a multi-threaded BLAS on two busy cores makes that
several times slower, so the package is imported before numpy can be (it pins one thread).
"""

from __future__ import annotations

import pytest

import servefuzz.reference  # noqa: F401 - before numpy loads: pins BLAS to one thread
from servefuzz.reference.model import ModelConfig, TinyModel


@pytest.fixture(scope="session")
def model() -> TinyModel:
    """The default engine's model (seed 0): the reference every answer is checked against."""
    return TinyModel(ModelConfig())


# The non-dense models the engine serves, as their architectures lay them out (servefuzz.models).
GEMMA3 = ModelConfig(n_layers=6, layer_types=tuple(
    "full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(6)), window=64)
QWEN3_MOE = ModelConfig(experts=8, experts_per_token=2)


@pytest.fixture(scope="session")
def windowed() -> TinyModel:
    """A Gemma 3-like model: five sliding-window layers (a 64-token window) to one global."""
    return TinyModel(GEMMA3)


@pytest.fixture(scope="session")
def moe() -> TinyModel:
    """A Qwen3-MoE-like model: every MLP a mixture of 8 experts, 2 a token."""
    return TinyModel(QWEN3_MOE)
