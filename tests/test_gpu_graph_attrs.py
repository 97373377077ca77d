"""scripts/gpu_graph_attrs.py: the instrumentation behind the CUDA finding's root cause applies to
the code it names, once, and refuses a file whose anchors moved (the device call would otherwise
build an uninstrumented llama-server and report nothing)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from scriptload import load_script

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_graph_attrs.py"


def _tree(tmp_path: Path, text: str) -> Path:
    cu = tmp_path / "ggml/src/ggml-cuda/ggml-cuda.cu"
    cu.parent.mkdir(parents=True)
    cu.write_text(text)
    return cu


def _run(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), str(tree)], capture_output=True, text=True, check=False)


def test_it_patches_every_anchor_once_and_then_says_already_patched(tmp_path: Path) -> None:
    module = load_script(SCRIPT)
    cu = _tree(tmp_path, "\n/* ... */\n".join(old for old, _ in module.EDITS))
    first = _run(tmp_path)
    assert first.returncode == 0, first.stderr
    text = cu.read_text()
    assert text.count("sf_before_update(graph_key, graph->graph)") == 1
    assert text.count('sf_note_instantiated(graph_key, graph->graph, "new")') == 1
    assert text.count("static std::vector<sf_knode> sf_summarize") == 1
    second = _run(tmp_path)
    assert second.returncode == 0 and "already patched" in second.stdout
    assert cu.read_text() == text


def test_a_moved_anchor_is_refused_and_the_file_left_alone(tmp_path: Path) -> None:
    module = load_script(SCRIPT)
    original = "\n".join(old for old, _ in module.EDITS[1:])   # the update call is missing
    cu = _tree(tmp_path, original)
    result = _run(tmp_path)
    assert result.returncode == 1
    assert "anchor not found" in result.stderr
    assert cu.read_text() == original
