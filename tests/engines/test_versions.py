"""A llama.cpp release tag built by `servefuzz engines install` serves the preset, and a finding
made on it records the version the server itself reported (`/props` build_info: the build number
the build was told, since the sdist's tree has no git metadata)."""

from __future__ import annotations

import pytest

from servefuzz import engine_files
from servefuzz.engines import llamacpp
from servefuzz.launcher import Launch
from servefuzz.servers import Replayer


@pytest.mark.parametrize("tag", ["b11434", "b9093"])
def test_a_release_tag_serves_the_preset_and_reports_its_build(tag: str) -> None:
    if not engine_files.installed("llama-server", tag):
        pytest.skip(f"llama-server {tag} is not built: servefuzz engines install llama-server@{tag}")
    launch = Launch.resolve(f"llama-server@{tag}")
    assert launch.argv[0] == str(engine_files.program("llama-server", tag))
    with Replayer(launch) as bench:
        assert bench.info.version is not None
        assert bench.info.version.startswith(f"b{llamacpp.build_number(tag)}-")
