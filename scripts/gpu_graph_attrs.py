#!/usr/bin/env python3
"""Instrument llama.cpp's CUDA graph update (ggml/src/ggml-cuda/ggml-cuda.cu, b11434) to test the
cluster hypothesis of issue 28 item 5, behind environment variables that change nothing unset:

  GGML_CUDA_GRAPH_ATTRS=1    on every instantiation and every in-place update of an executable
                             graph, one line on stderr with the graph key and how many kernel
                             nodes it holds and how many of them launch in thread-block clusters;
                             on an update, one line per kernel node whose function, grid, block,
                             shared memory, cluster shape (launch attribute, or the function's
                             compile-time one) or programmatic-launch flag differs between the
                             graph the executable last held and the one it is updated to
  GGML_CUDA_GRAPH_REINST=R   re-instantiate instead of updating in place when rule R holds:
                               mlx           the new graph has a kernel node that uses clusters
                                             (MLX PR #2813's rule)
                               cluster-diff  a kernel node's cluster shape differs between the
                                             two graphs
                               func-diff     a kernel node's function differs
                             (never: unset; always: GGML_CUDA_GRAPH_NO_UPDATE of
                             gpu_patch_trace.py)

The executable cannot be read back (CUDA has no getters for a cudaGraphExec_t), so the patch
keeps a summary of the graph each executable was last instantiated from or updated to, per key.

    python3 gpu_graph_attrs.py path/to/llama.cpp     # edits the file in place; idempotent
    python3 gpu_graph_attrs.py --print-block         # the C++ it inserts (to compile-check it)

Exit status 0 when patched (or already patched), 1 when an anchor is missing.
"""

from __future__ import annotations

import sys
from pathlib import Path

MARK = "GGML_CUDA_GRAPH_ATTRS"

# Driver API only (cuda.h): the runtime's cudaGraphKernelNodeGetParams cannot name a kernel
# that a library such as cuBLAS loaded through the driver.
BLOCK = r"""
// ---- servefuzz: kernel-node launch attributes across in-place graph updates (issue 28) ----
#include <string>
#include <unordered_map>
#include <vector>
#include <cstdio>
#include <cstdlib>
#include <cstring>

struct sf_knode {
    std::string name;
    unsigned grid[3] = {0, 0, 0}, block[3] = {0, 0, 0};
    unsigned cluster[3] = {0, 0, 0};      // the node's launch attribute
    int static_cluster[3] = {0, 0, 0};    // the function's compile-time cluster shape
    unsigned smem = 0;
    int pdl = -1;

    unsigned cluster_size() const {
        unsigned a = cluster[0] * cluster[1] * cluster[2];
        int b = static_cluster[0] * static_cluster[1] * static_cluster[2];
        return a > 1 ? a : (b > 1 ? (unsigned) b : 1u);
    }
    bool same_cluster(const sf_knode & o) const {
        return std::memcmp(cluster, o.cluster, sizeof cluster) == 0 &&
               std::memcmp(static_cluster, o.static_cluster, sizeof static_cluster) == 0;
    }
    bool same(const sf_knode & o) const {
        return name == o.name && std::memcmp(grid, o.grid, sizeof grid) == 0 &&
               std::memcmp(block, o.block, sizeof block) == 0 && smem == o.smem && pdl == o.pdl &&
               same_cluster(o);
    }
    std::string str() const {
        char buf[512];
        std::snprintf(buf, sizeof buf, "grid=%u,%u,%u block=%u,%u,%u smem=%u cluster=%u,%u,%u static=%d,%d,%d pdl=%d %s",
                      grid[0], grid[1], grid[2], block[0], block[1], block[2], smem, cluster[0], cluster[1],
                      cluster[2], static_cluster[0], static_cluster[1], static_cluster[2], pdl,
                      name.substr(0, 160).c_str());
        return buf;
    }
};

static std::vector<sf_knode> sf_summarize(cudaGraph_t g) {
    std::vector<sf_knode> out;
    size_t n = 0;
    if (cuGraphGetNodes((CUgraph) g, nullptr, &n) != CUDA_SUCCESS) {
        return out;
    }
    std::vector<CUgraphNode> nodes(n);
    if (cuGraphGetNodes((CUgraph) g, nodes.data(), &n) != CUDA_SUCCESS) {
        return out;
    }
    for (size_t i = 0; i < n; ++i) {
        CUgraphNodeType t;
        if (cuGraphNodeGetType(nodes[i], &t) != CUDA_SUCCESS || t != CU_GRAPH_NODE_TYPE_KERNEL) {
            continue;
        }
        sf_knode k;
        CUDA_KERNEL_NODE_PARAMS p;
        std::memset(&p, 0, sizeof p);
        if (cuGraphKernelNodeGetParams(nodes[i], &p) == CUDA_SUCCESS) {
            CUfunction f = p.func;
            if (f == nullptr && p.kern != nullptr) {
                (void) cuKernelGetFunction(&f, p.kern);
            }
            const char * nm = nullptr;
            if (f != nullptr) {
                (void) cuFuncGetName(&nm, f);
                int v = 0;
                if (cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH, f) == CUDA_SUCCESS) k.static_cluster[0] = v;
                if (cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT, f) == CUDA_SUCCESS) k.static_cluster[1] = v;
                if (cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH, f) == CUDA_SUCCESS) k.static_cluster[2] = v;
            }
            k.name = nm ? nm : "?";
            k.grid[0] = p.gridDimX; k.grid[1] = p.gridDimY; k.grid[2] = p.gridDimZ;
            k.block[0] = p.blockDimX; k.block[1] = p.blockDimY; k.block[2] = p.blockDimZ;
            k.smem = p.sharedMemBytes;
        }
        CUlaunchAttributeValue v;
        std::memset(&v, 0, sizeof v);
        if (cuGraphKernelNodeGetAttribute(nodes[i], CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, &v) == CUDA_SUCCESS) {
            k.cluster[0] = v.clusterDim.x; k.cluster[1] = v.clusterDim.y; k.cluster[2] = v.clusterDim.z;
        }
        std::memset(&v, 0, sizeof v);
        if (cuGraphKernelNodeGetAttribute(nodes[i], CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, &v) == CUDA_SUCCESS) {
            k.pdl = (int) v.programmaticStreamSerializationAllowed;
        }
        out.push_back(k);
    }
    return out;
}

static bool sf_attrs_on() {
    static const bool on = getenv("GGML_CUDA_GRAPH_ATTRS") != nullptr;
    return on;
}

static const char * sf_reinst_rule() {
    static const char * rule = getenv("GGML_CUDA_GRAPH_REINST");
    return rule ? rule : "";
}

// What each executable graph was last instantiated from or updated to, by graph key.
static std::unordered_map<const void *, std::vector<sf_knode>> & sf_loaded() {
    static std::unordered_map<const void *, std::vector<sf_knode>> m;
    return m;
}

static int sf_cluster_kernels(const std::vector<sf_knode> & ks) {
    int c = 0;
    for (const sf_knode & k : ks) c += k.cluster_size() > 1 ? 1 : 0;
    return c;
}

static void sf_note_instantiated(const void * key, cudaGraph_t g, const char * why) {
    if (!sf_attrs_on() && !*sf_reinst_rule()) return;
    std::vector<sf_knode> ks = sf_summarize(g);
    if (sf_attrs_on()) {
        fprintf(stderr, "sf-attrs: instantiate key=%p why=%s kernels=%zu cluster_kernels=%d\n", key, why, ks.size(),
                sf_cluster_kernels(ks));
        for (size_t i = 0; i < ks.size(); ++i) {
            if (ks[i].cluster_size() > 1) fprintf(stderr, "sf-attrs:   node %zu %s\n", i, ks[i].str().c_str());
        }
        fflush(stderr);
    }
    sf_loaded()[key] = std::move(ks);
}

// Before an in-place update: log what changes, and say whether the rule wants a fresh instance.
static bool sf_before_update(const void * key, cudaGraph_t g) {
    if (!sf_attrs_on() && !*sf_reinst_rule()) return false;
    std::vector<sf_knode> now = sf_summarize(g);
    const std::vector<sf_knode> & was = sf_loaded()[key];
    int diff = 0, func_diff = 0, cluster_diff = 0;
    const size_t n = now.size() < was.size() ? now.size() : was.size();
    for (size_t i = 0; i < n; ++i) {
        if (now[i].same(was[i])) continue;
        ++diff;
        func_diff += now[i].name != was[i].name ? 1 : 0;
        cluster_diff += now[i].same_cluster(was[i]) ? 0 : 1;
        if (sf_attrs_on() && diff <= 40) {
            fprintf(stderr, "sf-attrs:   node %zu was %s\nsf-attrs:   node %zu now %s\n", i, was[i].str().c_str(), i,
                    now[i].str().c_str());
        }
    }
    const char * rule = sf_reinst_rule();
    const bool reinst = (!strcmp(rule, "mlx") && sf_cluster_kernels(now) > 0) ||
                        (!strcmp(rule, "cluster-diff") && cluster_diff > 0) ||
                        (!strcmp(rule, "func-diff") && func_diff > 0);
    if (sf_attrs_on()) {
        fprintf(stderr,
                "sf-attrs: update key=%p kernels=%zu->%zu cluster_kernels=%d->%d diff=%d func_diff=%d cluster_diff=%d "
                "reinstantiate=%d\n",
                key, was.size(), now.size(), sf_cluster_kernels(was), sf_cluster_kernels(now), diff, func_diff,
                cluster_diff, (int) reinst);
        fflush(stderr);
    }
    sf_loaded()[key] = std::move(now);
    return reinst;
}
// ---- end servefuzz ----
"""

EDITS = [
    # 1. the in-place update: log, and let the rule force a fresh instance
    (
        """#if CUDART_VERSION >= 12000
    cudaGraphExecUpdateResultInfo result_info;
    cudaError_t stat = cudaGraphExecUpdate(graph->instance, graph->graph, &result_info);""",
        """#if CUDART_VERSION >= 12000
    cudaGraphExecUpdateResultInfo result_info = {};
    const bool sf_reinst = sf_before_update(graph_key, graph->graph);  // GGML_CUDA_GRAPH_ATTRS
    cudaError_t stat = sf_reinst ? cudaErrorGraphExecUpdateFailure
                                 : cudaGraphExecUpdate(graph->instance, graph->graph, &result_info);
    if (sf_attrs_on()) {
        fprintf(stderr, "sf-attrs: update key=%p stat=%d result=%d\\n", graph_key, (int) stat, (int) result_info.result);
        fflush(stderr);
    }""",
    ),
    # 2. the re-instantiation after a refused (or overruled) update
    (
        """        CUDA_CHECK(cudaGraphExecDestroy(graph->instance));
        graph->instance = nullptr;
        CUDA_CHECK(cudaGraphInstantiate(&graph->instance, graph->graph, NULL, NULL, 0));""",
        """        CUDA_CHECK(cudaGraphExecDestroy(graph->instance));
        graph->instance = nullptr;
        CUDA_CHECK(cudaGraphInstantiate(&graph->instance, graph->graph, NULL, NULL, 0));
        sf_note_instantiated(graph_key, graph->graph, "update-refused");""",
    ),
    # 3. the first instantiation of a key's capture
    (
        """        if (graph->instance == nullptr) { // Create executable graph from captured graph.
            CUDA_CHECK(cudaGraphInstantiate(&graph->instance, graph->graph, NULL, NULL, 0));
        }""",
        """        if (graph->instance == nullptr) { // Create executable graph from captured graph.
            CUDA_CHECK(cudaGraphInstantiate(&graph->instance, graph->graph, NULL, NULL, 0));
            sf_note_instantiated(graph_key, graph->graph, "new");
        }""",
    ),
    # 4. the helpers, before the first function that uses them
    (
        "static void ggml_cuda_graph_update_executable(ggml_backend_cuda_context * cuda_ctx, const void * graph_key) {",
        BLOCK + "\nstatic void ggml_cuda_graph_update_executable(ggml_backend_cuda_context * cuda_ctx, const void * graph_key) {",
    ),
]


def main() -> int:
    if sys.argv[1:] == ["--print-block"]:
        print(BLOCK)
        return 0
    path = Path(sys.argv[1]) / "ggml/src/ggml-cuda/ggml-cuda.cu"
    text = path.read_text()
    if MARK in text:
        print("already patched")
        return 0
    for old, new in EDITS:
        if text.count(old) != 1:
            print(f"anchor not found exactly once: {old.splitlines()[0]!r}", file=sys.stderr)
            return 1
        text = text.replace(old, new)
    path.write_text(text)
    print(f"patched {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
