"""The typed allow-list of launch flags: the reference engine's table is its parser's, a value of
the wrong type is refused with one line, and nothing a server plants becomes an option."""

from __future__ import annotations

import dataclasses
import typing

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servefuzz.engine_flags import Kind, env_name, flag_words, typed_value
from servefuzz.engines.llamacpp import FLAGS as LLAMACPP_FLAGS
from servefuzz.engines.reference import FLAGS as REFERENCE_FLAGS
from servefuzz.engines.reference import relaunch_argv as reference_flag_argv
from servefuzz.engines.registry import SPECS
from servefuzz.engines.vllm import FLAGS as VLLM_FLAGS
from servefuzz.errors import UsageError
from servefuzz.reference.faults import FAULTS
from servefuzz.reference.server_args import ServerArgs, build_parser, parse_args

_KINDS = {bool: Kind.BOOL, int: Kind.INT, float: Kind.FLOAT, str: Kind.NAME}


def test_the_reference_table_is_the_engines_flags_with_their_types() -> None:
    hints = typing.get_type_hints(ServerArgs)
    # --fault and --lora repeat: they are rebuilt beside the table (fault_name, NAME=SEED checks).
    # --coverage instruments the engine for a campaign's feedback (`reference.tracer`), changing
    # no answer: a replay or triage of a finding relaunches without it.
    # --disaggregation-peer-port is the pair's router's to set (its prefill server's port, picked
    # at start): a relaunch of the pair starts a router, which picks another.
    fields = {f.name for f in dataclasses.fields(ServerArgs)} - {"host", "port", "faults", "lora", "coverage",
                                                                 "disaggregation_peer_port"}
    assert {f.key for f in REFERENCE_FLAGS} == fields
    for flag in REFERENCE_FLAGS:
        assert flag.kind is _KINDS[hints[flag.key]], flag.key
        assert flag.flag == "--" + flag.key.replace("_", "-")
    parser_flags = {s for a in build_parser()._actions for s in a.option_strings}
    assert {f.flag for f in REFERENCE_FLAGS} <= parser_flags


def test_the_argv_rebuilds_the_server_exactly() -> None:
    args = ServerArgs(page_size=16, chunked_prefill_size=-1, disable_cuda_graph=True, served_model_name="m-1.b",
                      faults=tuple(sorted(FAULTS))[:2], lora=(("lora-a", 1), ("lora-b", 2)))
    argv = reference_flag_argv(args.to_json(), args.faults)
    assert all(w.startswith("--") for w in argv)  # --flag=value: no word can be read as an option
    assert parse_args(argv) == dataclasses.replace(args, host="127.0.0.1", port=30000)
    assert "--chunked-prefill-size=-1" in argv


@pytest.mark.parametrize(
    ("server_args", "faults", "says"),
    [
        ({"disable_radix_cache": "--host=0.0.0.0"}, (), "server arg disable_radix_cache: expected true or false"),
        ({"disable_radix_cache": 1}, (), "expected true or false, got 1"),
        ({"page_size": "16"}, (), "server arg page_size: expected an integer, got '16'"),
        ({"page_size": True}, (), "expected an integer, got True"),
        ({"page_size": 0}, (), "expected a value in 1..2.14748e+09, got 0"),
        ({"page_size": 10**5000}, (), "expected a value in 1.."),
        ({"served_model_name": "--host=0.0.0.0"}, (), "not starting with -"),
        ({"served_model_name": "a b"}, (), "expected a name"),
        ({"lora": ["--host=0.0.0.0"]}, (), "server arg lora: expected a list of NAME=SEED"),
        ({"lora": ["../x=1"]}, (), "server arg lora: expected a list of NAME=SEED"),
        ({"lora": "a=1"}, (), "server arg lora: expected a list of NAME=SEED"),
        ({"model_seed": 1.5}, (), "expected an integer"),
        ({}, ("--host=0.0.0.0",), "fault '--host=0.0.0.0': not a fault name"),
        ({}, ("overlap-war x",), "not a fault name"),
        ({}, (7,), "fault 7: not a fault name"),
    ],
)
def test_a_value_of_the_wrong_type_is_refused_with_one_line(server_args: dict, faults: tuple, says: str) -> None:
    with pytest.raises(UsageError) as e:
        reference_flag_argv(server_args, faults)
    message = str(e.value)
    assert says in message and "\n" not in message and message.endswith("refusing to launch with it")


def test_keys_outside_the_table_are_facts_not_flags() -> None:
    planted = {"host": "0.0.0.0", "port": 1, "vocab_size": 1024, "api_key": "x", "page_size": 16, "faults": ["a"]}
    assert reference_flag_argv(planted, ()) == ["--page-size=16"]
    assert reference_flag_argv({"disable_radix_cache": False, "page_size": None}, ()) == []


planted_values = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=30),
    st.sampled_from(["--host=0.0.0.0", "-1", "--port", "0.0.0.0", "x;y", "$(id)"]),
    st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


@given(st.dictionaries(st.sampled_from([f.key for f in REFERENCE_FLAGS] + ["host", "other"]), planted_values),
       st.lists(st.one_of(st.text(max_size=20), st.sampled_from(sorted(FAULTS)))))
def test_whatever_a_server_plants_the_argv_is_typed_or_refused(server_args: dict, faults: list) -> None:
    try:
        argv = reference_flag_argv(server_args, faults)
    except UsageError as e:
        assert "\n" not in str(e)
        return
    # Every word is one of our flags, alone or with a value of its type after '='.
    table = {f.flag: f for f in REFERENCE_FLAGS}
    for word in argv:
        name, eq, value = word.partition("=")
        if name == "--fault":
            assert value in faults
            continue
        flag = table[name]
        if flag.kind is Kind.BOOL:
            assert not eq
        elif flag.kind is Kind.INT:
            assert str(int(value)) == value
        else:
            assert value and not value.startswith("-") and value.isprintable() and " " not in value
    # And the engine's own parser reads it back without being given a host, a port or anything else.
    ns = vars(build_parser().parse_args(argv))
    assert ns["host"] == "127.0.0.1" and ns["port"] == 30000


def test_report_words_leave_out_what_does_not_type_check() -> None:
    words, refused = flag_words(VLLM_FLAGS, {"block_size": 32, "enable_prefix_caching": False, "dtype": "x;y",
                                             "gpu_memory_utilization": 0.5, "cache_dtype": "auto"})
    assert words == ["--block-size", "32", "--no-enable-prefix-caching", "--gpu-memory-utilization", "0.5",
                     "--kv-cache-dtype", "auto"]
    assert refused == ("dtype",)


def test_a_single_relaunch_value_is_typed() -> None:
    assert typed_value(VLLM_FLAGS, {"dtype": "float32"}, "dtype") == "float32"
    assert typed_value(LLAMACPP_FLAGS, {"total_slots": 4}, "total_slots") == 4
    with pytest.raises(UsageError, match="server arg dtype: expected one of auto"):
        typed_value(VLLM_FLAGS, {"dtype": "--host=0.0.0.0"}, "dtype")
    with pytest.raises(UsageError, match="expected an integer"):
        typed_value(LLAMACPP_FLAGS, {"total_slots": "8; rm"}, "total_slots")
    with pytest.raises(UsageError, match="not a known launch setting"):
        typed_value(LLAMACPP_FLAGS, {"host": "0.0.0.0"}, "host")
    # Every engine servefuzz launches has its table in its spec; the openai dialect has none.
    assert {name for name, spec in SPECS.items() if spec.flags} == {"reference", "sglang", "vllm", "llamacpp"}


def test_environment_names() -> None:
    assert env_name("VLLM_BATCH_INVARIANT") and env_name("_x1")
    for bad in ("X=1;touch /tmp/x;Y", "1X", "A-B", "", "A B", "A\nB", 3):
        assert not env_name(bad)


def test_the_reference_architectures_are_the_engines_and_their_facts_the_fuzzers_record() -> None:
    from servefuzz.engines.reference import ARCHS
    from servefuzz.model_facts import ModelFacts
    from servefuzz.reference.architectures import REFERENCE_ARCHS, model_facts

    assert ARCHS == tuple(REFERENCE_ARCHS)
    for arch in ARCHS:
        said = model_facts(arch, state_interval=64)
        assert ModelFacts.from_json(said).to_json() == said, arch  # every key the record's, well formed
    assert ModelFacts.from_json(model_facts("qwen3-next", state_interval=64)).traits == {"state", "stateful"}
    assert ModelFacts.from_json(model_facts("llama", state_interval=64)).traits == frozenset()
