#!/usr/bin/env python3
"""Instrument llama.cpp's CUDA graph path (ggml/src/ggml-cuda/ggml-cuda.cu, pinned 0c1e570) for
issue 15, behind two environment variables that change nothing when unset:

  GGML_CUDA_GRAPH_TRACE=1      one line per graph compute on stderr (fprintf: llama-server
                               drops ggml's INFO log lines unless verbose): the graph key (first node),
                               node count, whether the CUDA graph is used / (re)captured, whether
                               the node properties changed, the warmup state, and for every
                               executable update the result of cudaGraphExecUpdate
  GGML_CUDA_GRAPH_NO_UPDATE=1  never update an existing executable graph in place
                               (cudaGraphExecUpdate): destroy it and instantiate the new capture

    python3 gpu_patch_trace.py path/to/llama.cpp     # edits the file in place; idempotent

Exit status 0 when patched (or already patched), 1 when an anchor is missing.
"""

import sys
from pathlib import Path

MARK = "GGML_CUDA_GRAPH_TRACE"

EDITS = [
    # 1. the executable update: trace its result; optionally never update in place
    (
        """    if (stat == cudaErrorGraphExecUpdateFailure) {
#ifndef NDEBUG
        GGML_LOG_DEBUG("%s: CUDA graph update failed\\n", __func__);
#endif""",
        """    if (getenv("GGML_CUDA_GRAPH_TRACE")) {
        fprintf(stderr, "cuda-graph-trace: update key=%p stat=%d result=%d\\n", graph_key, (int) stat, (int) result_info.result);
        fflush(stderr);
    }
    if (stat == cudaErrorGraphExecUpdateFailure) {
#ifndef NDEBUG
        GGML_LOG_DEBUG("%s: CUDA graph update failed\\n", __func__);
#endif""",
    ),
    (
        """#if CUDART_VERSION >= 12000
    cudaGraphExecUpdateResultInfo result_info;
    cudaError_t stat = cudaGraphExecUpdate(graph->instance, graph->graph, &result_info);""",
        """#if CUDART_VERSION >= 12000
    cudaGraphExecUpdateResultInfo result_info = {};
    static const bool no_update = getenv("GGML_CUDA_GRAPH_NO_UPDATE") != nullptr;
    cudaError_t stat = no_update ? cudaErrorGraphExecUpdateFailure
                                 : cudaGraphExecUpdate(graph->instance, graph->graph, &result_info);""",
    ),
    # 2. every graph compute: what the state machine decided
    (
        """    if (use_cuda_graph && cuda_graph_update_required) {
        // Start CUDA graph capture""",
        """    if (getenv("GGML_CUDA_GRAPH_TRACE")) {
#ifdef USE_CUDA_GRAPH
        ggml_cuda_graph * tg = cuda_ctx->cuda_graph(graph_key);
        fprintf(stderr, "cuda-graph-trace: compute key=%p uid=%llu nodes=%d node0=%s ne0=[%lld,%lld,%lld,%lld] "
                        "use=%d capture=%d warm=%d instance=%p\\n",
                      graph_key, (unsigned long long) cgraph->uid, cgraph->n_nodes, cgraph->nodes[0]->name,
                      (long long) cgraph->nodes[0]->ne[0], (long long) cgraph->nodes[0]->ne[1],
                      (long long) cgraph->nodes[0]->ne[2], (long long) cgraph->nodes[0]->ne[3],
                      (int) use_cuda_graph, (int) cuda_graph_update_required, (int) tg->warmup_complete,
                      (void *) tg->instance);
        fflush(stderr);
#endif
    }
    if (use_cuda_graph && cuda_graph_update_required) {
        // Start CUDA graph capture""",
    ),
]


def main() -> int:
    root = Path(sys.argv[1])
    path = root / "ggml/src/ggml-cuda/ggml-cuda.cu"
    text = path.read_text()
    if MARK in text:
        print("already patched")
        return 0
    for old, new in EDITS:
        if text.count(old) != 1:
            print(f"anchor found {text.count(old)} times, expected once:\n{old[:200]}", file=sys.stderr)
            return 1
        text = text.replace(old, new)
    # the update function needs the key for its trace line
    old_sig = "static void ggml_cuda_graph_update_executable(ggml_backend_cuda_context * cuda_ctx, const void * graph_key) {"
    if text.count(old_sig) != 1:
        print("update_executable signature not found", file=sys.stderr)
        return 1
    path.write_text(text)
    print(f"patched {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
