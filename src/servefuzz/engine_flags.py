"""The typed allow-list of each engine's launch flags: the only way a server argument becomes argv.

A finding's `server_args` are copied from the server's own `/server_info`, so a hostile server
writes them; a finding file can be edited by anyone. Turning such a value into a command line
naively (`--flag VALUE` for anything that is not `True`) lets `"disable_radix_cache":
"--host=0.0.0.0"` relaunch the engine listening everywhere. Here every flag servefuzz would ever
pass on is a row of a table with its type, and a value reaches argv only as servefuzz's own
rendering of a value of that type (an int printed by Python, a bool as the bare flag, a name
from a fixed alphabet that cannot start with `-`). Keys outside the table are facts about the
server (vocabulary, version, bind address), never flags.

    >>> reference_flag_argv({"page_size": 16, "disable_cuda_graph": True, "vocab_size": 1024}, ("overlap-war",))
    ['--page-size=16', '--disable-cuda-graph', '--fault=overlap-war']
    >>> reference_flag_argv({"disable_radix_cache": "--host=0.0.0.0"}, ())
    Traceback (most recent call last):
    ...
    servefuzz.errors.UsageError: server arg disable_radix_cache: expected true or false, got '--host=0.0.0.0'; refusing to launch with it

Launch argv uses the `--flag=value` form, so that no value, whatever it holds, can be read as an
option of its own. Reports (`flag_words`) show the `--flag value` form, each word shell-quoted by
the caller, and leave out what does not type-check, saying so.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from servefuzz.errors import UsageError

__all__ = [
    "Kind",
    "Flag",
    "REFERENCE_FLAGS",
    "SGLANG_FLAGS",
    "VLLM_FLAGS",
    "LLAMACPP_FLAGS",
    "FLAG_TABLES",
    "Checked",
    "check_flags",
    "flag_words",
    "reference_flag_argv",
    "fault_name",
    "env_name",
    "typed_value",
]


class Kind(enum.Enum):
    """What a flag's value is; the value servefuzz passes on is its own rendering of it."""

    BOOL = "bool"  # True: the bare flag; False or absent: nothing (or the flag's `off` form)
    INT = "int"  # a JSON integer (not a bool) within [minimum, maximum]
    FLOAT = "float"  # a finite JSON number within [minimum, maximum]
    CHOICE = "choice"  # one of `choices`, exactly
    NAME = "name"  # a word of letters, digits and `_.:/+-`, not starting with `-` (a backend, a model name)
    PATH = "path"  # a file path: printable, no leading `-` (shown in reports, never launched from a finding)


# A name: what backends, dtypes and served-model names are spelled with. No leading `-`, so it
# can never be read as an option; no space, quote or shell character.
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:/+-]{0,199}")
# The reference engine's fault names (`page-boundary-prefix`): lower-case words and hyphens.
_FAULT = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
# An environment variable name, as a POSIX shell accepts it in `NAME=value`.
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_INT_LIMIT = 2**31 - 1  # no engine flag counts beyond this; a longer number is not a setting


@dataclass(frozen=True)
class Flag:
    """One launch flag: the server-args key it comes from, the flag, its kind and bounds."""

    key: str
    flag: str
    kind: Kind
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    off: str | None = None  # a BOOL flag's spelling for False, where the engine's default is on

    def check(self, value: Any) -> Any:
        """The value, typed, or ValueError with a short reason; None means "leave the flag out"."""
        if value is None:
            return None
        if self.kind is Kind.BOOL:
            if value is True or value is False:
                return value
            raise ValueError(f"expected true or false, got {_show(value)}")
        if self.kind is Kind.INT:
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"expected an integer, got {_show(value)}")
            self._bounds(value)
            return value
        if self.kind is Kind.FLOAT:
            if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
                raise ValueError(f"expected a finite number, got {_show(value)}")
            self._bounds(value)
            return float(value)
        if not isinstance(value, str):
            raise ValueError(f"expected a string, got {_show(value)}")
        if self.kind is Kind.CHOICE:
            if value not in self.choices:
                raise ValueError(f"expected one of {', '.join(self.choices)}, got {_show(value)}")
            return value
        if self.kind is Kind.NAME:
            if not _NAME.fullmatch(value):
                raise ValueError(f"expected a name (letters, digits, _.:/+-, not starting with -), got {_show(value)}")
            return value
        if not value or value.startswith("-") or len(value) > 4096 or not value.isprintable():
            raise ValueError(f"expected a path not starting with -, got {_show(value)}")
        return value

    def _bounds(self, value: float) -> None:
        low = self.minimum if self.minimum is not None else -_INT_LIMIT
        high = self.maximum if self.maximum is not None else _INT_LIMIT
        if not low <= value <= high:
            raise ValueError(f"expected a value in {low:g}..{high:g}, got {_show(value)}")

    def words(self, value: Any, *, joined: bool) -> list[str]:
        """The argv words of a checked value: `--flag=value` when `joined`, else `--flag value`."""
        if value is None:
            return []
        if self.kind is Kind.BOOL:
            spelled = self.flag if value else self.off
            return [spelled] if spelled else []
        text = repr(value) if isinstance(value, float) else str(value)
        return [f"{self.flag}={text}"] if joined else [self.flag, text]


def _show(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**18:
        return f"an integer of {value.bit_length()} bits"  # repr of a huge one raises, or floods
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# The embedded reference engine (servefuzz.reference.server_args.ServerArgs, minus host and port,
# which servefuzz always sets itself, and faults, which `--fault` carries). The fuzzer does not
# import the engine, a program apart; tests/test_engine_flags.py keeps this table equal to it.
REFERENCE_FLAGS: tuple[Flag, ...] = (
    Flag("page_size", "--page-size", Kind.INT, minimum=1),
    Flag("max_total_tokens", "--max-total-tokens", Kind.INT, minimum=2),
    Flag("chunked_prefill_size", "--chunked-prefill-size", Kind.INT, minimum=-1),
    Flag("max_running_requests", "--max-running-requests", Kind.INT, minimum=1),
    Flag("context_length", "--context-length", Kind.INT, minimum=2, maximum=32768),
    Flag("model_seed", "--model-seed", Kind.INT, minimum=0),
    Flag("served_model_name", "--served-model-name", Kind.NAME),
    Flag("disable_radix_cache", "--disable-radix-cache", Kind.BOOL),
    Flag("disable_overlap_schedule", "--disable-overlap-schedule", Kind.BOOL),
    Flag("disable_cuda_graph", "--disable-cuda-graph", Kind.BOOL),
    Flag("enable_deterministic_inference", "--enable-deterministic-inference", Kind.BOOL),
)

# SGLang (`python -m sglang.launch_server`): the args that decide whether these bugs show (the
# ones the seeds' bisection varies); the others are in a report's environment section.
SGLANG_FLAGS: tuple[Flag, ...] = (
    Flag("context_length", "--context-length", Kind.INT, minimum=1),
    Flag("mem_fraction_static", "--mem-fraction-static", Kind.FLOAT, minimum=0.0, maximum=1.0),
    Flag("page_size", "--page-size", Kind.INT, minimum=1),
    Flag("max_total_tokens", "--max-total-tokens", Kind.INT, minimum=1),
    Flag("chunked_prefill_size", "--chunked-prefill-size", Kind.INT, minimum=-1),
    Flag("max_running_requests", "--max-running-requests", Kind.INT, minimum=1),
    Flag("attention_backend", "--attention-backend", Kind.NAME),
    Flag("kv_cache_dtype", "--kv-cache-dtype", Kind.NAME),
    Flag("tp_size", "--tp-size", Kind.INT, minimum=1),
    Flag("disable_radix_cache", "--disable-radix-cache", Kind.BOOL),
    Flag("disable_overlap_schedule", "--disable-overlap-schedule", Kind.BOOL),
    Flag("disable_cuda_graph", "--disable-cuda-graph", Kind.BOOL),
    Flag("enable_deterministic_inference", "--enable-deterministic-inference", Kind.BOOL),
)

# vLLM's OpenAI server. Prefix caching is on by default in vLLM V1, so off is said out loud.
VLLM_FLAGS: tuple[Flag, ...] = (
    Flag("dtype", "--dtype", Kind.CHOICE, choices=("auto", "half", "float16", "bfloat16", "float", "float32")),
    Flag("max_model_len", "--max-model-len", Kind.INT, minimum=1),
    Flag("block_size", "--block-size", Kind.INT, minimum=1),
    Flag("enable_prefix_caching", "--enable-prefix-caching", Kind.BOOL, off="--no-enable-prefix-caching"),
    Flag("gpu_memory_utilization", "--gpu-memory-utilization", Kind.FLOAT, minimum=0.0, maximum=1.0),
    Flag("cache_dtype", "--kv-cache-dtype", Kind.NAME),
)

# llama.cpp's server: what the adapter reads from /props and a relaunch needs.
LLAMACPP_FLAGS: tuple[Flag, ...] = (
    Flag("total_slots", "-np", Kind.INT, minimum=1, maximum=4096),
    Flag("slot_n_ctx", "-c", Kind.INT, minimum=1),
)

# Every engine's table by engine name (the openai dialect describes any server, so it has none).
FLAG_TABLES: Mapping[str, tuple[Flag, ...]] = {
    "reference": REFERENCE_FLAGS,
    "sglang": SGLANG_FLAGS,
    "vllm": VLLM_FLAGS,
    "llamacpp": LLAMACPP_FLAGS,
}


@dataclass(frozen=True)
class Checked:
    """The typed values of the flags a server's args set, and the keys refused with why."""

    values: tuple[tuple[Flag, Any], ...]
    refused: tuple[tuple[str, str], ...]

    def why(self) -> str:
        """The first refusal as one line (its value shown as a Python repr, so on one line)."""
        key, reason = self.refused[0]
        return f"server arg {key}: {reason}"


def check_flags(table: Sequence[Flag], server_args: Mapping[str, Any]) -> Checked:
    """Check every key of `table` that `server_args` holds; collect refusals rather than raise."""
    values: list[tuple[Flag, Any]] = []
    refused: list[tuple[str, str]] = []
    for flag in table:
        if flag.key not in server_args:
            continue
        try:
            value = flag.check(server_args[flag.key])
        except ValueError as e:
            refused.append((flag.key, str(e)))
            continue
        if value is not None:
            values.append((flag, value))
    return Checked(tuple(values), tuple(refused))


def flag_words(table: Sequence[Flag], server_args: Mapping[str, Any]) -> tuple[list[str], tuple[str, ...]]:
    """For reports: the `--flag value` words of the values that type-check, and the refused keys.

    >>> flag_words(SGLANG_FLAGS, {"page_size": 64, "disable_radix_cache": "yes", "tp_size": 1})
    (['--page-size', '64', '--tp-size', '1'], ('disable_radix_cache',))
    """
    checked = check_flags(table, server_args)
    words = [w for flag, value in checked.values for w in flag.words(value, joined=False)]
    return words, tuple(key for key, _ in checked.refused)


def typed_value(engine: str, server_args: Mapping[str, Any], key: str) -> Any:
    """One server arg of `engine`, checked against its table (None when absent); a value of the
    wrong type is a UsageError. For code that relaunches an engine from a finding (vLLM's dtype,
    llama.cpp's slots) and passes a single value on.

    >>> typed_value("vllm", {"dtype": "bfloat16"}, "dtype"), typed_value("llamacpp", {}, "total_slots")
    ('bfloat16', None)
    """
    table = {f.key: f for f in FLAG_TABLES.get(engine, ())}
    if key not in table:
        raise UsageError(f"{key} is not a known launch setting of {engine}")
    try:
        return table[key].check(server_args.get(key))
    except ValueError as e:
        raise UsageError(f"server arg {key}: {e}; refusing to launch with it") from None


def fault_name(name: Any) -> str:
    """A planted fault's name, if it is spelled like one (lower-case words and hyphens)."""
    if not isinstance(name, str) or not _FAULT.fullmatch(name) or len(name) > 64:
        raise UsageError(f"fault {_show(name)}: not a fault name (lower-case words joined by -); refusing to launch with it")
    return name


def env_name(key: Any) -> bool:
    """Whether `key` is a valid environment variable name (`NAME=value` in a shell means that and
    nothing else).

    >>> env_name("VLLM_BATCH_INVARIANT"), env_name("X=1;touch /tmp/x;Y")
    (True, False)
    """
    return isinstance(key, str) and _ENV_NAME.fullmatch(key) is not None


def reference_flag_argv(server_args: Mapping[str, Any], faults: Iterable[Any]) -> list[str]:
    """The reference engine's flags that rebuild a server with these args and planted faults.

    Only the keys of `REFERENCE_FLAGS` are read; each value must have its flag's type (a
    UsageError with one line otherwise), and goes out in the `--flag=value` form. Keys that
    are not flags (vocabulary, version, the bind address) are left out.
    """
    checked = check_flags(REFERENCE_FLAGS, server_args)
    if checked.refused:
        raise UsageError(f"{checked.why()}; refusing to launch with it")
    argv = [w for flag, value in checked.values for w in flag.words(value, joined=True)]
    return argv + [f"--lora={lora}" for lora in _loras(server_args.get("lora"))] + [f"--fault={fault_name(f)}" for f in faults]


# The reference engine's LoRA adapters, as its /server_info lists them: `NAME=SEED`, the name in
# the charset a request may carry (workload.ADAPTER_NAME), the seed an integer.
_LORA = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}=[0-9]{1,9}")


def _loras(value: Any) -> list[str]:
    """`--lora` values (repeatable, so not a row of the table), each checked whole.

    >>> _loras(["lora-a=1"]), _loras(None)
    (['lora-a=1'], [])
    """
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > 64 or not all(isinstance(v, str) and _LORA.fullmatch(v) for v in value):
        raise UsageError(f"server arg lora: expected a list of NAME=SEED, got {_show(value)}; refusing to launch with it")
    return list(value)
