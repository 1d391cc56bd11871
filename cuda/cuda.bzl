"""cuda_library: .cu files compiled by the system nvcc into a cc_library.

Bazel 4 has no CUDA rules of its own, so each .cu becomes one genrule running
/usr/local/cuda/bin/nvcc -c, and the objects are wrapped in a cc_library that
links the static CUDA runtime.  Code is built for Hopper (sm_90 machine code)
plus compute_90 PTX, which newer GPUs compile at load time.
"""

NVCC = "/usr/local/cuda/bin/nvcc"

NVCC_FLAGS = [
    "-O3",
    "-std=c++17",
    "-gencode=arch=compute_90,code=sm_90",
    "-gencode=arch=compute_90,code=compute_90",
    "-Xcompiler",
    "-fPIC",
    "-I.",
]

def cuda_library(name, srcs, hdrs = [], cu_deps = [], deps = [], **kwargs):
    """srcs: .cu files; hdrs: headers they include (also exported);
    cu_deps: other headers the .cu files include (labels)."""
    objs = []
    for src in srcs:
        obj = "_objs_%s/%s.o" % (name, src.replace("/", "_")[:-len(".cu")])
        native.genrule(
            name = "%s_%s_nvcc" % (name, src.replace("/", "_").replace(".", "_")),
            srcs = [src] + hdrs + cu_deps,
            outs = [obj],
            cmd = "%s %s -c $(location %s) -o $@" % (NVCC, " ".join(NVCC_FLAGS), src),
        )
        objs.append(obj)
    native.cc_library(
        name = name,
        srcs = objs,
        hdrs = hdrs,
        deps = deps + ["@cuda//:headers", "@cuda//:cudart_static"],
        alwayslink = True,
        linkstatic = True,
        **kwargs
    )
