// Does cudaGraphExecUpdate carry a kernel node's thread-block cluster shape?
//
// Found behind wrong results in llama.cpp's CUDA graph path, whose executables are updated in
// place while cuBLAS switches between a cluster kernel and a cluster-free one (README.md beside
// this file); MLX met the same (ml-explore/mlx#2748, PR #2813).
// This program asks the CUDA runtime that question directly, with nothing of ggml or cuBLAS:
// each case captures one kernel launch into graph OLD, instantiates it, runs it, then captures
// the same launch with another configuration into graph NEW, updates the executable in place
// with cudaGraphExecUpdate and runs it again. The kernel writes, per block, the cluster size it
// ran in and a value it read from a neighbour block's shared memory over distributed shared
// memory (DSMEM), so a kernel run in a cluster shape other than the one its node asks for is
// visible in its output. A case is WRONG when the updated executable's output differs from what
// NEW's configuration computes when instantiated fresh (run beside it as the reference).
//
//   nvcc -arch=sm_90 -o cluster_probe gpu_cluster_update_probe.cu
//   ./cluster_probe --count          # how many cases there are
//   ./cluster_probe CASE             # one case; a failed launch leaves the context unusable,
//                                    # so each case runs in its own process
//
// Exit status 0 when the case is right, 1 when it is WRONG, 3 when the updated executable's
// launch failed, 2 on any other CUDA error.
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace cg = cooperative_groups;

#define CHECK(call)                                                                          \
    do {                                                                                     \
        cudaError_t e_ = (call);                                                             \
        if (e_ != cudaSuccess) {                                                             \
            std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call,                \
                         cudaGetErrorString(e_));                                            \
            std::exit(2);                                                                    \
        }                                                                                    \
    } while (0)

constexpr int kGrid = 64;       // the most blocks a case launches
constexpr int kFields = 3;      // per block: cluster size, neighbour's block index, tag

// The body every variant shares: what a block sees of its cluster.
__device__ void probe_body(int *out, int tag) {
    cg::cluster_group cluster = cg::this_cluster();
    __shared__ int mine;
    const int flat = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    if (threadIdx.x == 0) mine = flat;
    cluster.sync();
    const unsigned peer = (cluster.block_rank() + 1) % cluster.num_blocks();
    const int seen = *cluster.map_shared_rank(&mine, peer);
    cluster.sync();  // the neighbour's shared memory must outlive the read
    if (threadIdx.x == 0) {
        out[kFields * flat + 0] = (int) cluster.num_blocks();
        out[kFields * flat + 1] = seen;
        out[kFields * flat + 2] = tag;
    }
}

// A kernel that never uses the cluster API (as the cutlass_80 kernels llama.cpp's trace shows):
// it reads only the cluster size the hardware gives it.
__global__ void probe_plain(int *out, int tag) {
    const int flat = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    unsigned n = 0;
    asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(n));
    if (threadIdx.x == 0) {
        out[kFields * flat + 0] = (int) n;
        out[kFields * flat + 1] = flat;
        out[kFields * flat + 2] = tag;
    }
}

// Cluster shape from the launch (cudaLaunchAttributeClusterDimension), as cuBLAS launches do.
__global__ void probe_dynamic(int *out, int tag) { probe_body(out, tag); }
// Cluster shape fixed at compile time.
__global__ void __cluster_dims__(2, 1, 1) probe_static2(int *out, int tag) { probe_body(out, tag); }
__global__ void __cluster_dims__(4, 1, 1) probe_static4(int *out, int tag) { probe_body(out, tag); }

enum Kernel { DYNAMIC, STATIC2, STATIC4, PLAIN };

struct Launch {
    Kernel kernel;
    dim3 cluster;  // the launch attribute (DYNAMIC, PLAIN); x == 0: no attribute at all
    dim3 grid;
    int blocks() const { return (int) (grid.x * grid.y * grid.z); }
    const char *label() const {
        static char buf[4][64];
        static int i = 0;
        char *b = buf[i++ % 4];
        const char *k = kernel == DYNAMIC ? "dynamic" : kernel == STATIC2 ? "static2" : kernel == STATIC4 ? "static4" : "plain";
        std::snprintf(b, 64, "%s(cluster %u,%u,%u grid %u,%u,%u)", k, cluster.x, cluster.y, cluster.z, grid.x, grid.y, grid.z);
        return b;
    }
};
static dim3 none() { return dim3(0, 0, 0); }

static void launch(const Launch &l, int *out, int tag, cudaStream_t s) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = l.grid;
    cfg.blockDim = dim3(32);
    cfg.stream = s;
    cudaLaunchAttribute attr = {};
    if ((l.kernel == DYNAMIC || l.kernel == PLAIN) && l.cluster.x > 0) {
        attr.id = cudaLaunchAttributeClusterDimension;
        attr.val.clusterDim.x = l.cluster.x;
        attr.val.clusterDim.y = l.cluster.y;
        attr.val.clusterDim.z = l.cluster.z;
        cfg.attrs = &attr;
        cfg.numAttrs = 1;
    }
    switch (l.kernel) {
        case DYNAMIC: CHECK(cudaLaunchKernelEx(&cfg, probe_dynamic, out, tag)); break;
        case STATIC2: CHECK(cudaLaunchKernelEx(&cfg, probe_static2, out, tag)); break;
        case STATIC4: CHECK(cudaLaunchKernelEx(&cfg, probe_static4, out, tag)); break;
        case PLAIN: CHECK(cudaLaunchKernelEx(&cfg, probe_plain, out, tag)); break;
    }
}

static cudaGraph_t capture(const Launch &l, int *out, int tag, cudaStream_t s) {
    cudaGraph_t g = nullptr;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    launch(l, out, tag, s);
    CHECK(cudaStreamEndCapture(s, &g));
    return g;
}

static std::vector<int> fetch(int *dev, int blocks, cudaStream_t s) {
    std::vector<int> host(kFields * blocks, -1);
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemcpy(host.data(), dev, sizeof(int) * kFields * blocks, cudaMemcpyDeviceToHost));
    return host;
}

static void clear(int *dev, cudaStream_t s) {
    CHECK(cudaMemsetAsync(dev, 0xff, sizeof(int) * kFields * kGrid, s));
}

// NEW's output when its graph is instantiated fresh: what the update should give.
static std::vector<int> reference(const Launch &l, int *out, int tag, cudaStream_t s) {
    cudaGraph_t g = capture(l, out, tag, s);
    cudaGraphExec_t e = nullptr;
    CHECK(cudaGraphInstantiate(&e, g, 0));
    clear(out, s);
    CHECK(cudaGraphLaunch(e, s));
    std::vector<int> r = fetch(out, l.blocks(), s);
    CHECK(cudaGraphExecDestroy(e));
    CHECK(cudaGraphDestroy(g));
    return r;
}

static int cluster_seen(const std::vector<int> &o) { return o.empty() ? -1 : o[0]; }

// One case: OLD instantiated, updated in place to NEW (and, if given, on to THIRD).
static int run_case(const char *name, std::vector<Launch> steps, int *out, cudaStream_t s) {
    bool wrong = false;
    cudaGraph_t g = capture(steps[0], out, 1, s);
    cudaGraphExec_t e = nullptr;
    CHECK(cudaGraphInstantiate(&e, g, 0));
    clear(out, s);
    CHECK(cudaGraphLaunch(e, s));
    std::vector<int> first = fetch(out, steps[0].blocks(), s);
    std::printf("%-28s instantiate %-44s -> ran in clusters of %d\n", name, steps[0].label(), cluster_seen(first));
    CHECK(cudaGraphDestroy(g));
    for (size_t i = 1; i < steps.size(); ++i) {
        const int tag = (int) i + 1;
        std::vector<int> want = reference(steps[i], out, tag, s);
        cudaGraph_t ng = capture(steps[i], out, tag, s);
        cudaGraphExecUpdateResultInfo info = {};
        cudaError_t st = cudaGraphExecUpdate(e, ng, &info);
        if (st != cudaSuccess) {
            (void) cudaGetLastError();
            std::printf("%-28s update to   %-44s -> update refused (%s, result %d): re-instantiated\n", name,
                        steps[i].label(), cudaGetErrorString(st), (int) info.result);
            CHECK(cudaGraphExecDestroy(e));
            CHECK(cudaGraphInstantiate(&e, ng, 0));
        }
        clear(out, s);
        CHECK(cudaGraphLaunch(e, s));
        cudaError_t run = cudaStreamSynchronize(s);
        if (run != cudaSuccess) {
            std::printf("%-28s update to   %-44s -> %s, then the launch failed: %s  WRONG\n", name, steps[i].label(),
                        st == cudaSuccess ? "accepted" : "re-instantiated", cudaGetErrorString(run));
            return 3;  // a sticky error: nothing after it can be trusted
        }
        std::vector<int> got = fetch(out, steps[i].blocks(), s);
        const bool same = got == want;
        wrong |= !same;
        std::printf("%-28s update to   %-44s -> %s: ran in clusters of %d, fresh instance runs in %d%s\n", name,
                    steps[i].label(), st == cudaSuccess ? "accepted" : "re-instantiated", cluster_seen(got),
                    cluster_seen(want), same ? "" : "  WRONG");
        CHECK(cudaGraphDestroy(ng));
    }
    CHECK(cudaGraphExecDestroy(e));
    return wrong ? 1 : 0;
}

struct Case { const char *name; std::vector<Launch> steps; };

static std::vector<Case> cases() {
    const dim3 g16(16), g8(8);
    return {
        {"control: grid only", {{DYNAMIC, dim3(2, 1, 1), g8}, {DYNAMIC, dim3(2, 1, 1), g16}}},
        {"control: no cluster", {{DYNAMIC, none(), g8}, {DYNAMIC, none(), g16}}},
        {"control: plain, grid only", {{PLAIN, none(), g8}, {PLAIN, none(), g16}}},
        {"dynamic 1 -> 2", {{DYNAMIC, dim3(1, 1, 1), g16}, {DYNAMIC, dim3(2, 1, 1), g16}}},
        {"dynamic 2 -> 1", {{DYNAMIC, dim3(2, 1, 1), g16}, {DYNAMIC, dim3(1, 1, 1), g16}}},
        {"dynamic 2 -> 4", {{DYNAMIC, dim3(2, 1, 1), g16}, {DYNAMIC, dim3(4, 1, 1), g16}}},
        {"dynamic 4 -> 2", {{DYNAMIC, dim3(4, 1, 1), g16}, {DYNAMIC, dim3(2, 1, 1), g16}}},
        {"none -> dynamic 2", {{DYNAMIC, none(), g16}, {DYNAMIC, dim3(2, 1, 1), g16}}},
        {"dynamic 2 -> none", {{DYNAMIC, dim3(2, 1, 1), g16}, {DYNAMIC, none(), g16}}},
        {"static2 -> static4", {{STATIC2, none(), g16}, {STATIC4, none(), g16}}},
        {"static4 -> static2", {{STATIC4, none(), g16}, {STATIC2, none(), g16}}},
        {"none -> static2", {{DYNAMIC, none(), g16}, {STATIC2, none(), g16}}},
        {"static2 -> none", {{STATIC2, none(), g16}, {DYNAMIC, none(), g16}}},
        // llama.cpp's KQV product as its trace shows it: cuBLAS swaps a cutlass_80 kernel (no
        // cluster, grid 8,1,4) for an sm90 kernel (cluster 1,6,1, grid 8,6,1) and back
        {"ggml-like: plain -> 1,6,1", {{PLAIN, none(), dim3(8, 1, 4)}, {DYNAMIC, dim3(1, 6, 1), dim3(8, 6, 1)}}},
        {"ggml-like: 1,6,1 -> plain", {{DYNAMIC, dim3(1, 6, 1), dim3(8, 6, 1)}, {PLAIN, none(), dim3(8, 1, 4)}}},
        {"ggml-like: plain->1,6,1->plain",
         {{PLAIN, none(), dim3(8, 1, 4)}, {DYNAMIC, dim3(1, 6, 1), dim3(8, 6, 1)}, {PLAIN, none(), dim3(8, 1, 4)}}},
    };
}

int main(int argc, char **argv) {
    const std::vector<Case> all = cases();
    if (argc == 2 && !std::strcmp(argv[1], "--count")) {
        std::printf("%zu\n", all.size());
        return 0;
    }
    const int which = argc == 2 ? std::atoi(argv[1]) : -1;
    if (which < 0 || which >= (int) all.size()) {
        std::fprintf(stderr, "usage: %s --count | CASE (0..%zu)\n", argv[0], all.size() - 1);
        return 2;
    }
    int dev = 0;
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, dev));
    if (which == 0) {
        int driver = 0, runtime = 0;
        CHECK(cudaDriverGetVersion(&driver));
        CHECK(cudaRuntimeGetVersion(&runtime));
        std::printf("device %s (sm_%d%d), driver API %d, runtime %d\n", prop.name, prop.major, prop.minor, driver, runtime);
    }
    if (prop.major < 9) {
        std::printf("thread-block clusters need sm_90 or newer\n");
        return 2;
    }
    int *out = nullptr;
    CHECK(cudaMalloc(&out, sizeof(int) * kFields * kGrid));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const int rc = run_case(all[which].name, all[which].steps, out, s);
    (void) cudaFree(out);
    return rc;
}
