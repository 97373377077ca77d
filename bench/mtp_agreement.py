"""How often DeepSeek-V3's next-token-prediction layer guesses what the main model then says, in
each build of servefuzz's tiny DeepSeek-V3, no engine (issue 53, item 4).

    python bench/mtp_agreement.py                      # numerics, judgeable, speculative
    python bench/mtp_agreement.py --builds speculative --prompts 2 --new 40

Each build is written to a temporary folder (`models.build_arch`) and loaded by transformers
(5.19, on the CPU) in float64, with its RMS norms and routers patched to compute in float64 too
(transformers casts both to float32 inside). The main model answers each of `--prompts` random
prompts greedily (`--new` tokens); the next-token-prediction layer then runs as vLLM's
deepseek_mtp.py and SGLang's deepseek_nextn.py run it, over the whole answer at once: at
position j it reads token j+1's embedding (zero at position 0), `enorm`, the main model's
post-norm hidden state at j, `hnorm`, `eh_proj` over the two side by side, decoder layer
`model.layers.2` (causal, rotary position j), `shared_head.norm`, `shared_head.head`. Its greedy
token is its draft of token j+2; a verifier drafting one token a step accepts it where the main
model's own greedy token j+2 is the same. The figure printed is that agreement over every
generated token j+2 (a verifier drafts at most one a step, so it sees a subset of these
positions: the rate, not the count, carries over).

`--serve` asks vLLM CPU (the `vllm-cpu` preset, float32) instead: each DeepSeek-V3 build from
servefuzz's cache (`engine_files.arch_models`, as `--model-arch deepseek-v3 --model-build BUILD`
serves it) behind `--speculative-config {"method":"mtp","num_speculative_tokens":1}`, eight
greedy 48-token completions of random 24-token prompts one after another, and the engine's own
meter: `vllm:spec_decode_num_accepted_tokens_total` of `vllm:spec_decode_num_draft_tokens_total`.

    python bench/mtp_agreement.py --serve
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["LAYOUTS", "Layout", "agreement", "main"]


@dataclass(frozen=True)
class Layout:
    """Where an architecture's next-token-prediction layer keeps each part (Hugging Face names):
    its decoder layer's prefix, the embeddings it reads, the norms of the embedding and of the
    main model's hidden state, the fusing matrix, its final norm and output layer; whether its
    norms scale by 1 + weight (Qwen3-Next's), whether the engines zero the embedding at position 0
    (vLLM's deepseek_mtp.py does, its qwen3_next_mtp.py does not)."""

    block: str
    embed: str
    norms: tuple[str, str]
    fuse: str
    final_norm: str
    head: str
    centred: bool = False
    mask_first: bool = False


_DS = "model.layers.2."
LAYOUTS = {
    "deepseek-v3": Layout(_DS, _DS + "embed_tokens.weight", (_DS + "enorm.weight", _DS + "hnorm.weight"),
                          _DS + "eh_proj.weight", _DS + "shared_head.norm.weight", _DS + "shared_head.head.weight",
                          mask_first=True),
    "qwen3-next": Layout("mtp.layers.0.", "model.embed_tokens.weight",
                         ("mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight"), "mtp.fc.weight",
                         "mtp.norm.weight", "lm_head.weight", centred=True),
}


def _deeper(hf_dir: Path, layout: Layout, out: Path) -> int:
    """A copy of `hf_dir` under `out` one layer deeper, whose last layer is the next-token
    layer's decoder layer (renamed `model.layers.N.`): transformers then loads it with its own
    name mapping (fused experts and all). N, the index it got."""
    from safetensors.numpy import load_file, save_file

    config = json.loads((hf_dir / "config.json").read_text())
    n = int(config["num_hidden_layers"])
    config["num_hidden_layers"] = n + 1
    if "layer_types" in config:
        config["layer_types"] = [*config["layer_types"], "full_attention"]
    out.mkdir(parents=True)
    for f in hf_dir.iterdir():
        if f.name not in ("config.json", "model.safetensors"):
            shutil.copy(f, out / f.name)
    (out / "config.json").write_text(json.dumps(config))
    w = load_file(str(hf_dir / "model.safetensors"))
    save_file({(f"model.layers.{n}." + k[len(layout.block):] if k.startswith(layout.block) else k): v
               for k, v in w.items()}, str(out / "model.safetensors"), metadata={"format": "pt"})
    return n


def agreement(hf_dir: Path, arch: str = "deepseek-v3", *, prompts: int = 6, new: int = 50,
              seed: int = 53) -> tuple[int, int]:
    """(drafts that match the main model's greedy token, drafts) over `prompts` random prompts of
    `new` greedy tokens each (the module docstring)."""
    import torch
    import transformers
    from safetensors.numpy import load_file

    layout = LAYOUTS[arch]
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()

    def load(folder: Path) -> Any:
        return transformers.AutoModelForCausalLM.from_pretrained(
            str(folder), dtype=torch.float64, attn_implementation="eager", experts_implementation="eager").eval()

    main_model = load(hf_dir)
    with tempfile.TemporaryDirectory() as tmp:
        index = _deeper(hf_dir, layout, Path(tmp) / "deeper")
        deeper = load(Path(tmp) / "deeper")
    block, rotary = deeper.model.layers[index], deeper.model.rotary_emb
    w = {k: torch.from_numpy(v.astype(np.float64)) for k, v in load_file(str(hf_dir / "model.safetensors")).items()
         if k in (layout.embed, *layout.norms, layout.fuse, layout.final_norm, layout.head)}
    eps = float(main_model.config.rms_norm_eps)

    def rms(x: Any, name: str) -> Any:
        weight = w[name] + 1.0 if layout.centred else w[name]
        return weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)

    seen: list[Any] = []
    main_model.model.norm.register_forward_hook(lambda _m, _a, out: seen.append(out))
    rng = np.random.default_rng(seed)
    hits = total = 0
    for _ in range(prompts):
        prompt = torch.tensor([rng.integers(100, 2000, 24).tolist()])
        with torch.no_grad():
            seq = main_model.generate(prompt, max_new_tokens=new, do_sample=False)[0]
            seen.clear()
            main_model(seq[None])
            hidden = seen[-1][0]  # post-norm hidden state at every position
            nxt = seq[1:]
            n = len(nxt)
            embed = w[layout.embed][nxt].clone()
            if layout.mask_first:
                embed[0] = 0.0
            fused = torch.cat([rms(embed, layout.norms[0]), rms(hidden[:n], layout.norms[1])], -1)
            x = (fused @ w[layout.fuse].T)[None]
            positions = torch.arange(n)[None]
            mask = torch.full((n, n), torch.finfo(torch.float64).min, dtype=torch.float64).triu(1)[None, None]
            out = block(x, attention_mask=mask, position_ids=positions, position_embeddings=rotary(x, positions))
            out = out[0] if isinstance(out, tuple) else out
            drafts = (rms(out[0], layout.final_norm) @ w[layout.head].T).argmax(-1)
        start = prompt.shape[1] - 1  # the draft at j guesses token j + 2: from the second generated token on
        guessed, said = drafts[start: n - 1], seq[start + 2:]
        hits += int((guessed == said).sum())
        total += len(said)
    return hits, total


MTP_CONFIG = ("--speculative-config", '{"method":"mtp","num_speculative_tokens":1}')
_METERS = ("vllm:spec_decode_num_draft_tokens_total", "vllm:spec_decode_num_accepted_tokens_total")


def served(build: str, log: Path, *, answers: int = 8, new: int = 48, seed: int = 53) -> tuple[int, int]:
    """(accepted, drafted) by vLLM CPU's own meter for the DeepSeek-V3 `build` (the module docstring)."""
    import urllib.request

    from servefuzz import engine_files
    from servefuzz.engine_flags import with_flags
    from servefuzz.launcher import Launch, ServerProcess

    launch = Launch.resolve("vllm-cpu", model=engine_files.arch_models("deepseek-v3", build=build))
    argv = with_flags(launch.argv, MTP_CONFIG)
    rng = np.random.default_rng(seed)
    with ServerProcess(argv, env=launch.env, log_path=log, start_timeout_s=launch.start_timeout_s) as srv:
        for _ in range(answers):
            body = {"model": "tiny", "prompt": rng.integers(100, 2000, 24).tolist(), "max_tokens": new, "temperature": 0}
            request = urllib.request.Request(srv.base_url + "/v1/completions", json.dumps(body).encode(),
                                             {"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=300) as answer:
                answer.read()
        with urllib.request.urlopen(srv.base_url + "/metrics", timeout=30) as page:
            text = page.read().decode()
    counts = {m: sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(m + "{"))
              for m in _METERS}
    return int(counts[_METERS[1]]), int(counts[_METERS[0]])


def main(argv: Sequence[str] | None = None) -> int:
    from servefuzz.models import BUILDS, build_arch

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", nargs="+", default=list(LAYOUTS), choices=list(LAYOUTS))
    parser.add_argument("--builds", nargs="+", default=list(BUILDS), choices=BUILDS)
    parser.add_argument("--prompts", type=int, default=6)
    parser.add_argument("--new", type=int, default=50)
    parser.add_argument("--serve", action="store_true", help="vLLM CPU's own acceptance meter instead (DeepSeek-V3)")
    args = parser.parse_args(argv)
    if args.serve:
        print("| engine | model | build | accepted / drafted | rate | seconds |")
        print("|---|---|---|---|---|---|")
        for build in args.builds:
            start = time.monotonic()
            with tempfile.TemporaryDirectory() as tmp:
                accepted, drafted = served(build, Path(tmp) / "server.log")
            print(f"| vLLM CPU | deepseek-v3 | {build} | {accepted} / {drafted} | {accepted / max(drafted, 1):.1%} "
                  f"| {time.monotonic() - start:.0f} |", flush=True)
        return 0
    print("| model | build | hidden | agreeing drafts | rate | seconds |")
    print("|---|---|---|---|---|---|")
    for arch in args.arch:
        for build in args.builds:
            with tempfile.TemporaryDirectory() as tmp:
                start = time.monotonic()
                paths = build_arch(Path(tmp), arch, build=build)
                hidden = json.loads((paths.hf_dir / "config.json").read_text())["hidden_size"]
                hits, total = agreement(paths.hf_dir, arch, prompts=args.prompts, new=args.new)
                print(f"| {arch} | {build} | {hidden} | {hits} / {total} | {hits / total:.1%} "
                      f"| {time.monotonic() - start:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
