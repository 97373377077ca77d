"""Fixtures of the reference-engine tests: the model the engine serves, built in-process.

Servers come from the suite-wide `reference_server(*flags)` fixture (tests/conftest.py): real
processes on 127.0.0.1, one per flag set, shared by the session.

Scoring answers runs the model here too; a multi-threaded BLAS on two busy cores makes that
several times slower, so the package is imported before numpy can be (it pins one thread).
"""

from __future__ import annotations

import pytest

import servefuzz.reference  # noqa: F401 - before numpy loads: pins BLAS to one thread
from servefuzz.reference.architectures import model_config
from servefuzz.reference.model import ModelConfig, TinyModel


@pytest.fixture(scope="session")
def model() -> TinyModel:
    """The default engine's model (seed 0): the reference every answer is checked against."""
    return TinyModel(ModelConfig())


@pytest.fixture(scope="session")
def hybrid() -> TinyModel:
    """The model of `--model-arch qwen3-next` (seed 0): linear-attention layers 3:1 with full attention."""
    return TinyModel(model_config("qwen3-next", seed=0, context_length=4096))


@pytest.fixture(scope="session")
def windowed() -> TinyModel:
    """The model of `--model-arch gemma3` (seed 0): five sliding-window layers (a 64-token window) to one global."""
    return TinyModel(model_config("gemma3", seed=0, context_length=4096))


@pytest.fixture(scope="session")
def moe() -> TinyModel:
    """The model of `--model-arch qwen3-moe` (seed 0): every MLP a mixture of 8 experts, 2 a token."""
    return TinyModel(model_config("qwen3-moe", seed=0, context_length=4096))
