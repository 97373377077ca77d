#!/usr/bin/env bash
# Re-judge the stored GPU findings under the contract-violation tier (issue 40; docs/verdicts.md,
# "Contract violations"): the SGLang FA3 deterministic campaigns, the vLLM batch-invariant ones,
# and their default-mode controls. Writes one markdown table per campaign to stdout.
#
#   bench/rejudge_contract.sh > bench/results/rejudge-contract-2026-12-04.md
#
# EVIDENCE (default ../shared/evidence from the repository root) holds the campaign folders the
# device sessions brought back; docs/gpu/engines-2026-12-02 is in the repository. Tarballs are
# unpacked into a scratch directory; each campaign's noise.json sits where bench/rejudge.py
# looks for it (two levels above each finding).
set -euo pipefail
cd "$(dirname "$0")/.."
EVIDENCE=${EVIDENCE:-../shared/evidence}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

table() {  # title, findings...
  echo "## $1"; echo
  shift
  python bench/rejudge.py "$@"
  echo
}

for tarball in "$EVIDENCE"/sglang-gpu-fa3-deterministic/*/*.tar.xz; do
  model=$(basename "$(dirname "$tarball")")
  dest="$scratch/$model-$(basename "$tarball" .tar.xz)"
  mkdir -p "$dest" && tar xJf "$tarball" -C "$dest"
  found=("$dest"/*/findings/finding_*.json)
  [[ -e "${found[0]}" ]] || { echo "## sglang-gpu-fa3-deterministic/$model/$(basename "$tarball"): no findings"; echo; continue; }
  table "sglang-gpu-fa3-deterministic/$model/$(basename "$tarball") (SGLang 0.5.17, --enable-deterministic-inference)" "${found[@]}"
done

gpu="$scratch/engines-2026-12-02"
mkdir -p "$gpu" && tar xJf docs/gpu/engines-2026-12-02/findings.tar.xz -C "$gpu"
for campaign in "$gpu"/campaign-*; do
  cp "docs/gpu/engines-2026-12-02/$(basename "$campaign")/noise.json" "$campaign/"
  found=("$campaign"/findings/finding_*.json)
  [[ -e "${found[0]}" ]] || { echo "## docs/gpu/engines-2026-12-02/$(basename "$campaign"): no findings"; echo; continue; }
  table "docs/gpu/engines-2026-12-02/$(basename "$campaign")" "${found[@]}"
done

# Flat folders of findings without their campaign's noise.json: the stored thresholds stand.
table "sglang-gpu-bf16 (SGLang default mode)" "$EVIDENCE"/sglang-gpu-bf16/finding_*.json
table "vllm-gpu-bf16 (vLLM default mode)" "$EVIDENCE"/vllm-gpu-bf16/finding_*.json
table "docs/gpu/findings (llama.cpp CUDA: no mode with a promise)" docs/gpu/findings/*/finding_*.json

# Whole campaigns re-judged from their histories (the only stored GPU campaigns that kept them:
# vLLM default mode, bf16): the finding verdicts they give under the tier.
echo "## bench/data/vllm-bf16 (vLLM default mode), re-judged from histories by bench/rejudge_campaign.py"; echo
python bench/rejudge_campaign.py bench/data/vllm-bf16/*.tar.xz
