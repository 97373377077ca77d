"""The README's Python example, run as written, against the real reference engine: it passes on
a clean engine and fails (with the finding's rate printed) on one with a planted fault."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


def example() -> str:
    text = README.read_text(encoding="utf-8")
    section = text.split("## servefuzz in your own tests", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)  # type: ignore[union-attr]


@pytest.mark.slow
def test_the_readme_example_passes_on_a_clean_engine(tmp_path: Path) -> None:
    space: dict[str, object] = {}
    exec(compile(example(), "README.md", "exec"), space)
    space["test_no_corruption_under_concurrent_load"](tmp_path)  # type: ignore[operator]


@pytest.mark.slow
def test_the_readme_example_fails_on_a_faulty_engine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The same example with a planted fault: the assertion must fire, naming the finding's rate.
    code = example().replace('fuzz(launch="reference",', 'fuzz(launch="reference", faults=("page-boundary-prefix",),')
    space: dict[str, object] = {}
    exec(compile(code, "README.md", "exec"), space)
    with pytest.raises(AssertionError):
        space["test_no_corruption_under_concurrent_load"](tmp_path)  # type: ignore[operator]
    assert re.search(r"finding_\d+_\d+\.json \d+/5", capsys.readouterr().out)


def test_a_resumed_campaign_keeps_its_profile_and_refuses_another(tmp_path: Path) -> None:
    import json

    from servefuzz.api import FuzzOptions
    from servefuzz.errors import UsageError

    out = tmp_path / "c"
    out.mkdir()
    target = {"engine": "llamacpp", "base_url": "http://127.0.0.1:1", "profile": "cache-reuse"}
    (out / "config.json").write_text(json.dumps({"seed": 0, "strategies": ["burst-reuse"], "target": target}))
    # Resumed without --profile: the one it was started under, so it goes on against the same server.
    assert FuzzOptions(out=out, launch="llama-server", resume=True).chosen_profile() == "cache-reuse"
    assert FuzzOptions(out=out, launch="llama-server", resume=True, profile="cache-reuse").chosen_profile() == "cache-reuse"
    with pytest.raises(UsageError, match="was started with profile cache-reuse; resume it with the same --profile"):
        FuzzOptions(out=out, launch="llama-server", resume=True, profile="kv-unified").validate()
    # A name planted in config.json is shown escaped and looked up, never launched as flags.
    target["profile"] = "x\x1b[2J"
    (out / "config.json").write_text(json.dumps({"seed": 0, "strategies": ["burst-reuse"], "target": target}))
    with pytest.raises(UsageError) as e:
        FuzzOptions(out=out, launch="llama-server", resume=True, profile="kv-unified").validate()
    assert "\x1b" not in str(e.value) and "\\x1b" in str(e.value)
    with pytest.raises(UsageError, match="not a profile of llama-server"):
        FuzzOptions(out=out, launch="llama-server", resume=True).validate()


def test_fuzz_takes_every_option_as_a_typed_keyword_with_the_options_default() -> None:
    # One source for the defaults: `FuzzOptions`. fuzz's keywords name its fields (each default
    # taken from the field), so a field added, renamed or given another default there and not
    # here fails this test, and mypy sees every keyword (no **fields).
    import dataclasses
    import inspect
    import typing
    from collections.abc import Mapping

    from servefuzz.api import FuzzOptions, fuzz

    params = inspect.signature(fuzz).parameters
    assert not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    keywords = {n: p for n, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}
    fields = {f.name: f for f in dataclasses.fields(FuzzOptions)}
    assert set(keywords) == set(fields) | {"on_event"}
    hints, field_hints = typing.get_type_hints(fuzz), typing.get_type_hints(FuzzOptions)
    # Paths may be given as strings; no headers is None (the field's own default is a fresh dict).
    wider: dict[str, object] = {"out": str | Path, "model": str | Path | None, "trace": str | Path | None,
                                "engine_python": str | Path | None, "headers": Mapping[str, str] | None}
    for name, field in fields.items():
        if field.default is dataclasses.MISSING:
            assert keywords[name].default is None and field.default_factory() == {}, name  # type: ignore[operator]
        else:
            assert keywords[name].default == field.default, name
        assert hints[name] == wider.get(name, field_hints[name]), name


def test_fuzz_takes_options_or_keywords_not_both(tmp_path: Path) -> None:
    from servefuzz.api import FuzzOptions, fuzz
    from servefuzz.errors import UsageError

    with pytest.raises(UsageError, match=r"a FuzzOptions or keywords, not both \(got time_s, runs besides"):
        fuzz(FuzzOptions(out=tmp_path / "c"), runs=3, time_s=1.0)
    assert not (tmp_path / "c").exists()


@pytest.mark.slow
def test_the_type_checker_sees_fuzz_keywords(tmp_path: Path) -> None:
    # What a user's mypy says of a call into the public API: a wrong type or a keyword that is no
    # option is an error, and the result is typed.
    import os
    import subprocess
    import sys

    src = Path(__file__).resolve().parent.parent / "src"
    (tmp_path / "use.py").write_text(
        "from servefuzz import fuzz\n"
        "fuzz(out='c', runs='2')\n"
        "fuzz(out='c', stop_at_frist=True)\n"
        "reveal_type(fuzz(out='c', launch='reference', requests=10, faults=('none',), time_s=1.5))\n",
        encoding="utf-8")
    p = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / "cache"), "use.py"],
                       cwd=tmp_path, env={**os.environ, "MYPYPATH": str(src)}, capture_output=True, text=True,
                       timeout=240, check=False)
    lines = [line.split("use.py:", 1)[1] for line in p.stdout.splitlines() if line.startswith("use.py:")]
    assert any(line.startswith('2: error: Argument "runs" to "fuzz" has incompatible type "str"; expected "int"')
               for line in lines), p.stdout
    assert any(line.startswith('3: error: Unexpected keyword argument "stop_at_frist" for "fuzz"') for line in lines), p.stdout
    assert any(line.startswith('4: note: Revealed type is "servefuzz.campaign.records.CampaignResult"') for line in lines), p.stdout
    assert len([line for line in lines if ": error:" in line]) == 2, p.stdout
