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
