"""servefuzz's embedded reference engine: SGLang's dialect, planted faults in `/server_info`."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from typing import Any

from servefuzz.engine_flags import Flag, FlagVariant, Kind, fault_name, flag_argv, flag_words, show, variant
from servefuzz.engines.sglang import SERVER_ARG_FEATURES, SWITCH_FLAGS
from servefuzz.engines.sglang import facts as sglang_facts
from servefuzz.engines.spec import Built, CommandInputs, Deterministic, EngineSpec, Feature, IssueMatch, Meter, Preset, Switch
from servefuzz.errors import UsageError

__all__ = ["ARCHS", "FLAGS", "METERS", "PAIR_FLAGS", "PAIR_PRESET", "PRESET", "SPEC", "SWITCHES", "TRIAGE", "ZOO_SETTINGS", "relaunch_argv"]

# The architectures it serves (`--model-arch`; servefuzz.reference.architectures.REFERENCE_ARCHS,
# kept equal to this by tests/test_engine_flags.py): the dense llama, the hybrid Qwen3-Next, the
# sliding-window Gemma 3 and the mixture-of-experts Qwen3-MoE.
ARCHS: tuple[str, ...] = ("llama", "qwen3-next", "gemma3", "qwen3-moe")

# The embedded reference engine (servefuzz.reference.server_args.ServerArgs, minus host and port,
# which servefuzz always sets itself, and faults, which `--fault` carries). The fuzzer does not
# import the engine, a program apart; tests/test_engine_flags.py keeps this table equal to it.
FLAGS: tuple[Flag, ...] = (
    Flag("page_size", "--page-size", Kind.INT, minimum=1),
    Flag("max_total_tokens", "--max-total-tokens", Kind.INT, minimum=2),
    Flag("chunked_prefill_size", "--chunked-prefill-size", Kind.INT, minimum=-1),
    Flag("max_running_requests", "--max-running-requests", Kind.INT, minimum=1),
    Flag("context_length", "--context-length", Kind.INT, minimum=2, maximum=32768),
    Flag("model_seed", "--model-seed", Kind.INT, minimum=0),
    Flag("model_arch", "--model-arch", Kind.NAME),
    Flag("mamba_track_interval", "--mamba-track-interval", Kind.INT, minimum=1),
    Flag("max_mamba_cache_size", "--max-mamba-cache-size", Kind.INT, minimum=0),
    Flag("served_model_name", "--served-model-name", Kind.NAME),
    Flag("swa_full_tokens_ratio", "--swa-full-tokens-ratio", Kind.FLOAT, minimum=0.01, maximum=1.0),
    *SWITCH_FLAGS,  # SGLang's own switches, by SGLang's names
    Flag("host_tier_tokens", "--host-tier-tokens", Kind.INT, minimum=0),
    Flag("flush_device_only", "--flush-device-only", Kind.BOOL),
    # A prefill/decode pair (`reference/pd.py`): the router in front of a prefill and a decode
    # server, which it starts with these same flags.
    Flag("disaggregation_mode", "--disaggregation-mode", Kind.NAME),
)

# Triage's rows: the reference engine's own flags; each planted fault's cure is among them.
TRIAGE: tuple[FlagVariant, ...] = (
    variant("--disable-radix-cache", "radix cache (prefix reuse)"),
    variant("--disable-overlap-schedule", "overlap scheduler"),
    variant("--disable-cuda-graph", "CUDA-graph decode (padding)"),
    variant("--chunked-prefill-size -1", "chunked prefill"),
    variant("--page-size 1", "paged KV (page size)"),
    variant("--max-running-requests 1", "continuous batching (concurrency)"),
    variant("--max-total-tokens 131072", "KV pool size (eviction)"),
    variant("--enable-deterministic-inference", "batch-variant numerics"),
    variant("--host-tier-tokens 0", "host tier (HiCache load-back)"),
    # One server: the pair relaunched as one engine, no KV transfer (a finding's server rebuilt from
    # its args says its mode, so on one server the row changes nothing and is not run).
    variant("--disaggregation-mode null", "one server (prefill/decode KV transfer)"),
)

# Its /metrics counters (reference/server.py, `_METRICS`: SGLang's prefix, its own names) that say
# what it did.
METERS: tuple[Meter, ...] = (
    Meter("sglang:cache_hit_tokens_total", Feature.PREFIX_CACHE, "hit tokens"),
    # The host tier's (with --host-tier-tokens), by SGLang's HiCache names: a load-back and a hit
    # the host served show its read path ran; what was written to it shows nothing was read.
    Meter("sglang:load_back_tokens_total", Feature.HOST_CACHE, "tokens loaded back from the host tier"),
    Meter("sglang:cached_tokens_total{cache_source=host}", Feature.HOST_CACHE, "hit tokens from the host tier"),
    Meter("sglang:hicache_backup_tokens_total", Feature.HOST_CACHE, "tokens written to the host tier", shows=False),
    Meter("sglang:num_retracted_requests_total", Feature.PREEMPTION, "retracted requests"),
    # Its own: retractions of requests whose state must be carried over (seeded draws, grammars,
    # adapters, n > 1 siblings), each a count of its own (issue 53, item 5), and each a part of
    # the preemption goal where the target can send such requests. Not the constrained ones: a
    # constrained answer ends after its choice, too soon to hold pages when the pool runs out
    # (`strategies.features.RetractionPressure`), so no scenario could move that part.
    *(Meter(f"sglang:num_retracted_requests_by_feature_total{{feature={name}}}", Feature.PREEMPTION, f"retracted {what}",
            part=part)
      for name, what, part in (("seeded", "seeded requests", "seeds"), ("choices", "constrained requests", None),
                               ("adapter", "requests under adapters", "adapters"),
                               ("n", "choices of n > 1 requests", "any"))),
    Meter("sglang:evicted_tokens_total", Feature.EVICTION, "evicted tokens"),
    Meter("sglang:num_aborted_requests_total", Feature.ABORTS, "aborted requests"),
    # Its own: SGLang counts no cut prefills. A batch total over the budget cuts its last prompt
    # even where no prompt alone outgrows the budget (what the answers' count sees).
    Meter("sglang:chunked_prefill_cuts_total", Feature.CHUNKED_PREFILL, "prefill cuts"),
    # A prefill/decode pair's (its router labels each server's series with its `role`): what the
    # decode server received, and what the prefill server handed over.
    Meter("sglang:kv_transfers_total{role=decode}", Feature.KV_TRANSFER, "transfers received by the decode server"),
    Meter("sglang:kv_transfer_pages_total{role=decode}", Feature.KV_TRANSFER, "KV pages moved to the decode server"),
    Meter("sglang:kv_transfer_bytes_total{role=decode}", Feature.KV_TRANSFER, "KV bytes moved to the decode server"),
    Meter("sglang:kv_transfers_total{role=prefill}", Feature.KV_TRANSFER, "transfers the prefill server handed over"),
)

# Its /server_info args (ServerArgs) that turn a mechanism on or off: SGLang's names; `lora`
# lists its adapters as NAME=SEED.
SWITCHES: tuple[Switch, ...] = (
    Switch(Feature.PREFIX_CACHE, "disable_radix_cache", lambda v: None if not isinstance(v, bool) else not v),
    Switch(Feature.CHUNKED_PREFILL, "chunked_prefill_size",
           lambda v: v > 0 if isinstance(v, int) and not isinstance(v, bool) else None),
    Switch(Feature.ADAPTERS, "lora", lambda v: bool(v) if isinstance(v, list) else None),
    Switch(Feature.HOST_CACHE, "host_tier_tokens", lambda v: v > 0 if isinstance(v, int) and not isinstance(v, bool) else None),
    Switch(Feature.KV_TRANSFER, "disaggregation_mode", lambda v: v != "null" if isinstance(v, str) else None),
)


def _is_fault(name: str) -> bool:
    try:
        fault_name(name)
    except UsageError:
        return False
    return True


def _command(c: CommandInputs) -> Built:
    flags, bad = flag_words(FLAGS, c.server_args)
    faults = [f for f in c.faults if _is_fault(f)]
    argv = ["servefuzz", "serve-reference", *flags, *(w for f in faults for w in ("--fault", f))]
    return argv, dict(c.env), [*bad, *(["faults not spelled like fault names"] if len(faults) < len(c.faults) else [])]


# `--disaggregation-mode pair`: what makes the reference engine a prefill/decode pair.
PAIR_FLAGS: tuple[str, ...] = ("--disaggregation-mode", "pair")

# The `reference` preset: servefuzz's embedded engine, which the launcher starts from its own
# flags (`relaunch_argv`), so no plan here.
PRESET = Preset("reference", command=_command, program="")
# The `reference-pd` preset: the same engine as a prefill/decode pair behind its router (the
# launcher adds `PAIR_FLAGS`); a report's command for it is the reference engine's, whose args say
# `--disaggregation-mode pair`.
PAIR_PRESET = "reference-pd"
PAIR = Preset(PAIR_PRESET, command=_command, program="")

# Engine settings a zoo fault needs to be reachable at all, as its trigger says (eviction needs
# a pool small enough to fill); the embedded engine gets them when that fault is planted
# (`api.FuzzOptions.reference_flags`).
ZOO_SETTINGS: Mapping[str, tuple[str, ...]] = {
    "evict-in-use": ("--max-total-tokens", "4096"),
    # LoRA faults need adapters to alternate: two, as the lora-alternation strategy uses.
    "lora-prefix-shared": ("--lora", "lora-a=1", "--lora", "lora-b=2"),
    # The state-cache faults need a model with a recurrent state; stale-state-donated a prefill
    # cut in chunks, which the default budget (2048) leaves to the longest prompts alone.
    "ssm-checkpoint-batch": ("--model-arch", "qwen3-next"),
    "stale-state-donated": ("--model-arch", "qwen3-next", "--chunked-prefill-size", "256"),
    "unwritten-state-published": ("--model-arch", "qwen3-next"),
    "state-n-minus-1": ("--model-arch", "qwen3-next"),
    # The sliding-window faults need a windowed model; the one that waits for a saturated pool a
    # pool small enough to fill, as evict-in-use's. The router's a mixture of experts.
    "window-ring-stale": ("--model-arch", "gemma3"),
    "window-modulo-after-saturation": ("--model-arch", "gemma3", "--max-total-tokens", "4096"),
    "router-tie-numerics": ("--model-arch", "qwen3-moe"),
    # The host-tier faults need the tier, and a device pool small enough that other prompts push
    # a prefix out of it to the host (SGLang's hicache profile's shape: a 4,096-token device
    # pool, a host twice its size); the one keyed without the tenant needs adapters to show.
    **{f: ("--max-total-tokens", "4096", "--host-tier-tokens", "8192")
       for f in ("host-loadback-stale-pages", "host-loadback-race")},
    "host-key-no-salt": ("--max-total-tokens", "4096", "--host-tier-tokens", "8192",
                         "--lora", "lora-a=1", "--lora", "lora-b=2"),
    # The transfer fault needs a transfer: the prefill/decode pair (the `reference-pd` preset's).
    "transfer-region-dedupe": PAIR_FLAGS,
}


SPEC = EngineSpec(
    "reference",
    default_port=30000,
    coverage_flag="--coverage",  # it traces its own scheduler, cache and pool (reference/tracer.py)
    salts=True,  # `extra_key`, as SGLang
    seeds=True,
    choices=True,  # SGLang's `regex` alternation, read as token choices
    adapters=True,  # `lora_path`
    # Exact on the CPU too: its deterministic mode is SGLang's flag.
    # Its promise is servefuzz's own: the flag's help, and the engine computes a batch of any
    # size, with or without a cached prefix, as it computes the request alone.
    deterministic=Deterministic("--enable-deterministic-inference", flag="--enable-deterministic-inference",
                                server_arg="enable_deterministic_inference",
                                words='"batch-invariant numerics": a request\'s logits do not depend on its batch, '
                                      'on the cache or on what ran before',
                                source="servefuzz's reference engine (serve-reference --help; docs/fault-zoo.md)"),
    issue_match=IssueMatch.FAULTS,  # a finding is an issue only where a planted fault models it
    arg_features=SERVER_ARG_FEATURES,
    flags=FLAGS,
    triage=TRIAGE,
    presets=(PRESET, PAIR),
    meters=METERS,
    switches=SWITCHES,
    chunk_flag="--chunked-prefill-size",
    # Its /server_info speaks SGLang's names (page_size, chunked_prefill_size, disable_radix_cache),
    # and its own for its host tier.
    facts=lambda args: dataclasses.replace(sglang_facts(args), **_host_facts(args), **_pair_facts(args)),
)


def _host_facts(args: Mapping[str, Any]) -> dict[str, Any]:
    """Its host tier (`--host-tier-tokens`, 0: off), where its args say.

    >>> _host_facts({"host_tier_tokens": 8192}), _host_facts({"host_tier_tokens": 0}), _host_facts({})
    ({'host_tier': True, 'host_tier_tokens': 8192}, {'host_tier': False, 'host_tier_tokens': None}, {})
    """
    tokens = args.get("host_tier_tokens")
    if isinstance(tokens, bool) or not isinstance(tokens, int):
        return {}
    return {"host_tier": tokens > 0, "host_tier_tokens": tokens if tokens > 0 else None}


def _pair_facts(args: Mapping[str, Any]) -> dict[str, Any]:
    """Its KV transfer's backend, where its args say it is a prefill/decode pair (a name, else
    "unknown": the server's words are never taken as they come).

    >>> _pair_facts({"disaggregation_mode": "pair", "disaggregation": {"transfer_backend": "http-pull"}})
    {'transfer': 'http-pull'}
    >>> _pair_facts({"disaggregation_mode": "pair", "disaggregation": {"transfer_backend": "<b>"}}), _pair_facts({})
    ({'transfer': 'unknown'}, {})
    """
    if args.get("disaggregation_mode") != "pair":
        return {}
    said = args.get("disaggregation")
    backend = said.get("transfer_backend") if isinstance(said, dict) else None
    return {"transfer": backend if isinstance(backend, str) and re.fullmatch(r"[a-z0-9-]{1,32}", backend) else "unknown"}


def relaunch_argv(server_args: Mapping[str, Any], faults: Iterable[Any]) -> list[str]:
    """The reference engine's flags that rebuild a server with these args and planted faults
    (`engine_flags.flag_argv` over `FLAGS`, then its repeatable `--lora` and `--fault`).

    >>> relaunch_argv({"page_size": 16, "disable_cuda_graph": True, "vocab_size": 1024}, ("overlap-war",))
    ['--page-size=16', '--disable-cuda-graph', '--fault=overlap-war']
    >>> relaunch_argv({"disable_radix_cache": "--host=0.0.0.0"}, ())
    Traceback (most recent call last):
    ...
    servefuzz.errors.UsageError: server arg disable_radix_cache: expected true or false, got '--host=0.0.0.0'; refusing to launch with it
    """
    argv = flag_argv(FLAGS, server_args)
    return argv + [f"--lora={lora}" for lora in _loras(server_args.get("lora"))] + [f"--fault={fault_name(f)}" for f in faults]


# Its LoRA adapters, as its /server_info lists them: `NAME=SEED`, the name in the charset a
# request may carry (workload.ADAPTER_NAME), the seed an integer.
_LORA = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}=[0-9]{1,9}")


def _loras(value: Any) -> list[str]:
    """`--lora` values (repeatable, so not a row of the table), each checked whole.

    >>> _loras(["lora-a=1"]), _loras(None)
    (['lora-a=1'], [])
    """
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > 64 or not all(isinstance(v, str) and _LORA.fullmatch(v) for v in value):
        raise UsageError(f"server arg lora: expected a list of NAME=SEED, got {show(value)}; refusing to launch with it")
    return list(value)
