"""The reference engine's flags: SGLang's names, one frozen record, and the way back to argv.

Every flag `--some-name` resolves to the key `some_name` of `/server_info`, so a client can
relaunch an engine exactly as it found it (`--fault` repeats; its key is `faults`).

    >>> a = parse_args(["--page-size", "16", "--fault", "stale-padding"])
    >>> a.page_size, a.faults, a.to_argv()
    (16, ('stale-padding',), ['--page-size', '16', '--fault', 'stale-padding'])
    >>> parse_args(a.to_argv()) == a
    True

`--lora NAME=SEED` (repeatable) serves a LoRA adapter: random low-rank deltas on the q and v
projections drawn from SEED (`model.lora_deltas`), requested by NAME (`lora_path` in /generate,
`model` in /v1/completions). Its key in /server_info is `lora`, a list of `NAME=SEED`.

    >>> b = parse_args(["--lora", "lora-a=1", "--lora", "lora-b=2"])
    >>> b.lora, b.to_argv(), parse_args(b.to_argv()) == b
    ((('lora-a', 1), ('lora-b', 2)), ['--lora', 'lora-a=1', '--lora', 'lora-b=2'], True)
"""

from __future__ import annotations

import argparse
import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from servefuzz.reference.architectures import DEFAULT_ARCH, REFERENCE_ARCHS
from servefuzz.reference.faults import EXPERT_FAULTS, FAULTS, RECURRENT_FAULTS, WINDOW_FAULTS

__all__ = ["CAPTURE_BATCH_SIZES", "DISAGGREGATION_MODES", "ArgsError", "ServerArgs", "build_parser", "parse_args"]

# Decode batch sizes "captured as CUDA graphs": a decode batch is padded up to the next one.
CAPTURE_BATCH_SIZES = (1, 2, 4, 8, *range(16, 257, 8))
# `--disaggregation-mode`: SGLang's values (null, prefill, decode), and the pair: the router that
# starts one of each behind it (`pd.py`).
DISAGGREGATION_MODES = ("null", "prefill", "decode", "pair")
# An adapter's name: the charset the fuzzer's requests may carry (servefuzz.workload.ADAPTER_NAME;
# the engine imports nothing from the fuzzer, so the rule is stated again here).
_LORA_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


class ArgsError(ValueError):
    """A flag value the engine cannot run with; the message is one line for the user."""


@dataclass(frozen=True)
class ServerArgs:
    host: str = "127.0.0.1"
    port: int = 30000
    page_size: int = 64
    max_total_tokens: int = 131072
    chunked_prefill_size: int = 2048
    max_running_requests: int = 128
    context_length: int = 4096
    model_seed: int = 0
    # The served model's architecture (`architectures.REFERENCE_ARCHS`): the dense llama, or a
    # hybrid whose linear-attention layers keep a recurrent state per request.
    model_arch: str = DEFAULT_ARCH
    # A hybrid model's state cache, by SGLang's names: the state is checkpointed every this many
    # tokens (a multiple of the page size), and a prefix hit restores it at a checkpoint only.
    mamba_track_interval: int = 64
    # State slots (each request running holds one, each checkpoint kept in the cache one);
    # 0: twice --max-running-requests, and 64 more.
    max_mamba_cache_size: int = 0
    served_model_name: str = "servefuzz-reference"
    disable_radix_cache: bool = False
    disable_overlap_schedule: bool = False
    disable_cuda_graph: bool = False
    enable_deterministic_inference: bool = False
    # A windowed model's window KV pool, as a share of --max-total-tokens (SGLang's flag and
    # default): its sliding-window layers keep their KV there, given back as the window moves.
    swa_full_tokens_ratio: float = 0.8
    faults: tuple[str, ...] = ()
    lora: tuple[tuple[str, int], ...] = ()  # (name, seed) of each adapter served
    # The host tier (`hosttier`, HiCache-shaped): its pool in tokens; 0 is off. With
    # `flush_device_only` a flush empties the device pool alone (vLLM's /reset_prefix_cache
    # without reset_external): a misconfigured flush, for a client's flush check to catch.
    host_tier_tokens: int = 0
    flush_device_only: bool = False
    # Trace the engine's own code as edges in context, served at GET /coverage (`tracer`):
    # instrumentation for a fuzzer's feedback, not an engine setting (it changes no answer).
    coverage: bool = False
    # Prefill/decode disaggregation (`pd.py`, SGLang's flag name and values): "null" is one
    # server; "prefill" computes a prompt's KV and holds it for its decode server to pull;
    # "decode" pulls it from the prefill server on `disaggregation_peer_port` (127.0.0.1 only)
    # and continues from it; "pair" is the router in front of a prefill and a decode server,
    # which it starts with the same flags.
    disaggregation_mode: str = "null"
    disaggregation_peer_port: int = 0

    def __post_init__(self) -> None:
        if self.page_size < 1:
            raise ArgsError("--page-size must be >= 1")
        if self.max_total_tokens < 2 * self.page_size:
            raise ArgsError("--max-total-tokens must hold at least two pages (page 0 is reserved)")
        if self.chunked_prefill_size == 0 or self.chunked_prefill_size < -1:
            raise ArgsError("--chunked-prefill-size must be >= 1, or -1 to disable chunking")
        if self.max_running_requests < 1:
            raise ArgsError("--max-running-requests must be >= 1")
        if not 2 <= self.context_length <= 32768:
            raise ArgsError("--context-length must be in 2..32768")
        if self.host_tier_tokens and self.host_tier_tokens < self.page_size:
            raise ArgsError("--host-tier-tokens must be 0 (off) or hold at least one page")
        if self.host_tier_tokens < 0:
            raise ArgsError("--host-tier-tokens must be >= 0")
        if not 0 <= self.port <= 65535:
            raise ArgsError("--port must be in 0..65535")
        if not (0 < self.swa_full_tokens_ratio <= 1) or self.swa_tokens < 2 * self.page_size:
            raise ArgsError("--swa-full-tokens-ratio must be in (0, 1] and leave the window pool two pages")
        if self.disaggregation_mode not in DISAGGREGATION_MODES:
            raise ArgsError(f"--disaggregation-mode must be one of {', '.join(DISAGGREGATION_MODES)}")
        if self.disaggregation_mode != "null" and (self.model_arch != DEFAULT_ARCH or self.host_tier_tokens):
            # A transfer of window pages or recurrent states (or of a host tier's) is not modelled:
            # one line, not a pair that silently hands over half of what the decode needs.
            raise ArgsError("--disaggregation-mode: the KV transfer carries a dense model's KV pages alone "
                            f"(--model-arch {DEFAULT_ARCH}, no --host-tier-tokens)")
        if self.disaggregation_mode == "decode" and not 0 < self.disaggregation_peer_port <= 65535:
            raise ArgsError("--disaggregation-mode decode needs --disaggregation-peer-port (its prefill server's port)")
        if self.model_arch not in REFERENCE_ARCHS:
            raise ArgsError(f"unknown --model-arch {self.model_arch!r}; this engine serves: {', '.join(REFERENCE_ARCHS)}")
        if self.host_tier_tokens and (self.recurrent or REFERENCE_ARCHS[self.model_arch].window):
            # A host copy of a window pool or of recurrent checkpoints is not modelled: one line,
            # not a tier that silently holds only half of what a hit needs.
            raise ArgsError(f"--host-tier-tokens: the host tier sits behind a dense model's cache; "
                            f"--model-arch {self.model_arch} keeps state it does not hold")
        if self.recurrent and (self.mamba_track_interval < 1 or self.mamba_track_interval % self.page_size):
            raise ArgsError("--mamba-track-interval must be a positive multiple of --page-size")
        if self.max_mamba_cache_size and self.max_mamba_cache_size < self.max_running_requests:
            raise ArgsError("--max-mamba-cache-size must be 0 (automatic) or at least --max-running-requests")
        for name in self.faults:
            if name not in FAULTS:
                raise ArgsError(f"unknown fault {name!r}; known: {', '.join(sorted(FAULTS))}")
            if name in RECURRENT_FAULTS and not self.recurrent:
                raise ArgsError(f"fault {name} needs a model with a recurrent state: --model-arch qwen3-next")
            if name in WINDOW_FAULTS and not REFERENCE_ARCHS[self.model_arch].window:
                raise ArgsError(f"fault {name} needs a model with a sliding window: --model-arch gemma3")
            if name in EXPERT_FAULTS and not REFERENCE_ARCHS[self.model_arch].experts:
                raise ArgsError(f"fault {name} needs a mixture of experts: --model-arch qwen3-moe")
        # /server_info lists adapters as NAME=SEED: take that form back too, so that a client
        # relaunches from what the server reports (as it does with every other flag).
        object.__setattr__(self, "lora", tuple(
            _lora_flag(x) if isinstance(x, str) else (str(x[0]), int(x[1])) for x in self.lora))
        names = [n for n, _ in self.lora]
        if len(set(names)) != len(names):
            raise ArgsError("--lora names must be distinct")
        if names == [self.served_model_name] or self.served_model_name in names:
            raise ArgsError("a --lora name must differ from --served-model-name")

    @property
    def swa_tokens(self) -> int:
        """The window KV pool's size in tokens (a windowed model's; `window.WindowPool`)."""
        return int(self.max_total_tokens * self.swa_full_tokens_ratio)

    @property
    def recurrent(self) -> bool:
        """The model keeps a recurrent state per request (its state cache flags apply)."""
        return bool(REFERENCE_ARCHS[self.model_arch].recurrent_layers)

    @property
    def state_slots(self) -> int:
        """The state pool's slots (`--max-mamba-cache-size`, 0 resolved)."""
        return self.max_mamba_cache_size or 2 * self.max_running_requests + 64

    def has_fault(self, name: str) -> bool:
        assert name in FAULTS, name
        return name in self.faults

    def to_json(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["faults"] = list(self.faults)
        d["lora"] = [f"{n}={seed}" for n, seed in self.lora]
        return d

    def to_argv(self) -> list[str]:
        """The flags that differ from the defaults, in a form `parse_args` reads back."""
        out: list[str] = []
        default = ServerArgs()
        for f in dataclasses.fields(self):
            value, flag = getattr(self, f.name), "--" + f.name.replace("_", "-")
            if value == getattr(default, f.name):
                continue
            if f.name == "faults":
                for name in value:
                    out += ["--fault", name]
            elif f.name == "lora":
                for name, seed in value:
                    out += ["--lora", f"{name}={seed}"]
            elif isinstance(value, bool):
                out.append(flag)
            else:
                out += [flag, str(value)]
        return out


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise ArgsError(message)


def build_parser() -> argparse.ArgumentParser:
    d = ServerArgs()
    p = _Parser(
        prog="servefuzz serve-reference",
        description="The embedded reference engine: a tiny exact model behind an SGLang-shaped server.",
    )
    p.add_argument("--host", default=d.host, help="bind address (default %(default)s)")
    p.add_argument("--port", type=int, default=d.port, help="0 picks a free port (default %(default)s)")
    p.add_argument("--page-size", type=int, default=d.page_size, help="tokens per KV page (default %(default)s)")
    p.add_argument(
        "--max-total-tokens", type=int, default=d.max_total_tokens, help="KV pool size in tokens (default %(default)s)"
    )
    p.add_argument(
        "--chunked-prefill-size",
        type=int,
        default=d.chunked_prefill_size,
        help="prefill token budget per batch; -1 disables chunking (default %(default)s)",
    )
    p.add_argument("--max-running-requests", type=int, default=d.max_running_requests)
    p.add_argument("--context-length", type=int, default=d.context_length)
    p.add_argument("--model-seed", type=int, default=d.model_seed, help="seed of the random weights")
    p.add_argument("--model-arch", default=d.model_arch, choices=list(REFERENCE_ARCHS),
                   help="the model's architecture (default %(default)s; qwen3-next: linear-attention layers with a "
                        "recurrent state, 3:1 with full attention)")
    p.add_argument("--mamba-track-interval", type=int, default=d.mamba_track_interval,
                   help="a hybrid model's state is checkpointed every this many tokens (default %(default)s)")
    p.add_argument("--max-mamba-cache-size", type=int, default=d.max_mamba_cache_size,
                   help="a hybrid model's state slots; 0: 2 * --max-running-requests + 64 (default %(default)s)")
    p.add_argument("--served-model-name", default=d.served_model_name)
    p.add_argument("--disable-radix-cache", action="store_true")
    p.add_argument("--disable-overlap-schedule", action="store_true")
    p.add_argument("--disable-cuda-graph", action="store_true", help="no decode batch padding")
    p.add_argument("--enable-deterministic-inference", action="store_true", help="batch-invariant numerics")
    p.add_argument(
        "--swa-full-tokens-ratio",
        type=float,
        default=d.swa_full_tokens_ratio,
        help="a windowed model's window KV pool, as a share of --max-total-tokens (default %(default)s)",
    )
    p.add_argument(
        "--fault",
        dest="faults",
        action="append",
        default=[],
        metavar="NAME",
        help=f"plant a bug (repeatable): {', '.join(FAULTS)}",
    )
    p.add_argument(
        "--host-tier-tokens",
        type=int,
        default=d.host_tier_tokens,
        help="a host-memory KV tier of this many tokens behind the radix cache (HiCache-shaped: "
        "written through, loaded back on a hit); 0 is off (default %(default)s)",
    )
    p.add_argument(
        "--flush-device-only",
        action="store_true",
        help="a flush empties the device pool but keeps the host tier (as vLLM's /reset_prefix_cache "
        "without reset_external): cold references then hit the host",
    )
    p.add_argument(
        "--coverage",
        action="store_true",
        help="trace the engine's scheduling code as edges in context, served at GET /coverage",
    )
    p.add_argument(
        "--disaggregation-mode",
        default=d.disaggregation_mode,
        choices=DISAGGREGATION_MODES,
        help="prefill/decode disaggregation: prefill or decode (one side), pair (a router in front of one "
        "prefill and one decode server it starts with these flags), null: one server (default %(default)s)",
    )
    p.add_argument(
        "--disaggregation-peer-port",
        type=int,
        default=d.disaggregation_peer_port,
        help="a decode server's prefill server, on 127.0.0.1, that it pulls KV from",
    )
    p.add_argument(
        "--lora",
        action="append",
        default=[],
        type=_lora_arg,
        metavar="NAME=SEED",
        help="serve a random LoRA adapter (q and v deltas drawn from SEED) under NAME (repeatable)",
    )
    return p


def _lora_arg(value: str) -> tuple[str, int]:
    try:
        return _lora_flag(value)
    except ArgsError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _lora_flag(value: str) -> tuple[str, int]:
    name, sep, seed = value.partition("=")
    if not sep or not _LORA_NAME.fullmatch(name) or not (seed.isascii() and seed.isdigit()):
        raise ArgsError(f"--lora takes NAME=SEED (NAME of letters, digits, '.', '_', '-'), got {value!r}")
    return name, int(seed)


def parse_args(argv: Sequence[str]) -> ServerArgs:
    """Flags -> ServerArgs; raises ArgsError with a one-line message on bad input."""
    ns = build_parser().parse_args(list(argv))
    kw = vars(ns)
    kw["faults"] = tuple(dict.fromkeys(kw["faults"]))  # repeated names collapse, order kept
    kw["lora"] = tuple(kw["lora"])
    return ServerArgs(**kw)
