"""A GGUF of any architecture servefuzz builds, through llama.cpp's own `convert_hf_to_gguf.py`:
the converter of the llama.cpp servefuzz runs knows that llama.cpp's tensor layout for each
architecture (fused experts, MLA's split key/value projection, Mamba's decay sign, Gemma's norm
offset) better than a second hand-written copy would.

servefuzz's tokenizer is a byte-level BPE trained here, which the converter refuses as an unknown
pre-tokenizer (it recognises released tokenizers by a hash of how they split a test text): the
converter runs with its vocabulary step replaced by its own GPT-2 path, so the GGUF carries the
Hugging Face folder's own vocabulary, the same token ids. It runs in a child process (it imports
torch and the `gguf` package it ships), float32 out, and the first line of its error is what a
failure says.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

__all__ = ["convert"]

# Runs in the child: the converter's folder (and its own gguf-py) first on the path, the class
# the converter picks for the architecture given the GPT-2 vocabulary step.
_SHIM = """
import runpy, sys
from pathlib import Path
script = Path(sys.argv[1])
sys.path[:0] = [str(script.parent), str(script.parent / "gguf-py")]
import conversion
_pick = conversion.get_model_class
def get_model_class(name, mmproj=False):
    cls = _pick(name, mmproj)
    if mmproj:
        return cls
    def set_vocab(self):
        self._set_vocab_gpt2()
    def get_vocab_base_pre(self, tokenizer):
        return "gpt-2"
    cls.set_vocab = set_vocab  # on the class itself: a subclass would be registered anew
    cls.get_vocab_base_pre = get_vocab_base_pre
    return cls
conversion.get_model_class = get_model_class
sys.argv = [str(script), *sys.argv[2:]]
runpy.run_path(str(script), run_name="__main__")
"""

_TIMEOUT_S = 300


def convert(hf_dir: Path, out: Path, converter: Path | None) -> tuple[Path | None, str]:
    """(the GGUF written, "") or (None, why not): no converter given, or the converter's refusal."""
    if converter is None:
        return None, "no llama.cpp converter (scripts/setup_engines.sh keeps it beside llama-server)"
    if not converter.is_file():
        return None, f"no llama.cpp converter at {converter}"
    argv = [sys.executable, "-c", _SHIM, str(converter), str(hf_dir), "--outfile", str(out), "--outtype", "f32"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return None, f"llama.cpp's converter ran past {_TIMEOUT_S} s"
    if done.returncode != 0 or not out.is_file():
        lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
        errors = [ln for ln in lines if "Error" in ln or "error" in ln] or lines or [f"exit {done.returncode}"]
        return None, f"llama.cpp's converter refused it: {errors[-1].strip()[:300]}"
    return out, ""
