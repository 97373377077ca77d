# Optimisation levels for servefuzz's llama-server builds (CMAKE_PROJECT_INCLUDE: CMake runs this
# after every project() of the tree). ggml, the tensor kernels every request's arithmetic runs in,
# keeps the Release flags (-O3); the C++ around it (libllama, common/ and its chat parsers, the
# multimodal library, cpp-httplib, the server) is built at -O1, which is nine tenths of the
# build's CPU and none of its numerics (no -ffast-math at either level; docs/benchmarks.md).
if(PROJECT_NAME STREQUAL "ggml")
    set(CMAKE_C_FLAGS_RELEASE "-O3 -DNDEBUG")
    set(CMAKE_CXX_FLAGS_RELEASE "-O3 -DNDEBUG")
else()
    set(CMAKE_C_FLAGS_RELEASE "-O1 -DNDEBUG")
    set(CMAKE_CXX_FLAGS_RELEASE "-O1 -DNDEBUG")
endif()

# No AMX kernels, on x86 hosts that have them: GGML_NATIVE's -march=native turns on ggml's AMX
# buffer type on a Sapphire Rapids class CPU, and there llama-server died with SIGSEGV loading
# SmolLM2-135M Q4_1 (tests/engines' real-model tests, 2026-12-08; `--no-repack`, which keeps
# weights off the AMX buffer, served it) as in llama.cpp#20824 ("segfault in
# ggml_backend_amx_mul_mat", machine-dependent, closed stale). An explicit -mno-X wins over
# -march=native whatever their order; each of the three is needed (GCC 12: -mno-amx-tile alone
# leaves __AMX_INT8__ defined, which is what ggml's AMX code is compiled under).
if(PROJECT_NAME STREQUAL "ggml" AND CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
    set(CMAKE_C_FLAGS "${CMAKE_C_FLAGS} -mno-amx-tile -mno-amx-int8 -mno-amx-bf16")
    set(CMAKE_CXX_FLAGS "${CMAKE_CXX_FLAGS} -mno-amx-tile -mno-amx-int8 -mno-amx-bf16")
endif()
