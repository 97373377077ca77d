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
