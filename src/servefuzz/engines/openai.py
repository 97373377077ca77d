"""The plain OpenAI completions dialect, which many engines speak: no flush, salts or constraints."""

from __future__ import annotations

from collections.abc import Mapping

from servefuzz.engines.spec import EngineSpec, IssueMatch, ServerFacts, flag_arg, positive_arg, sizes_arg

__all__ = ["GENERIC", "SPEC", "facts"]


def facts(args: Mapping[str, object]) -> ServerFacts:
    """The facts of a server of the plain dialect, which may front any engine: every name the
    known engines use for each fact, first match wins (the adapter records vLLM's
    `max_model_len` from `/v1/models`).

        >>> facts({"model": "m", "max_model_len": 2048}).context_length
        2048
    """
    return ServerFacts(
        context_length=positive_arg(args, "context_length", "max_model_len"),
        chunk_budget=positive_arg(args, "chunked_prefill_size", "max_num_batched_tokens"),
        max_running=positive_arg(args, "max_running_requests", "max_num_seqs"),
        page_size=positive_arg(args, "page_size", "page-size", "block_size", "block-size"),
        capture_sizes=sizes_arg(args, "cuda_graph_bs"),
        prefix_caching=flag_arg(args, "enable_prefix_caching"),
        pool_tokens=positive_arg(args, "max_total_tokens"),
    )


SPEC = EngineSpec("openai", default_port=8000, issue_match=IssueMatch.ANY, facts=facts)

# An engine servefuzz has no spec of: spoken to as openai, matched to no known issue.
GENERIC = EngineSpec("", default_port=8000, issue_match=IssueMatch.NONE, facts=facts)
