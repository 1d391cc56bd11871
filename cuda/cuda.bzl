"""GPU code in Bazel 4, which has no CUDA rules of its own.

cuda_library: each .cu file becomes one genrule running the nvcc that
third_party/cuda_configure.bzl found (`nvcc -c`), and the objects are wrapped
in a cc_library that links the static CUDA runtime.  Code is built for Hopper
(sm_90 machine code) plus compute_90 PTX, which newer GPUs compile at load
time.

Every rule here builds only where a toolkit was found (CUDA_FOUND); elsewhere
it defines nothing, so `bazel build //...` and `bazel test //...` on a machine
without CUDA build and test everything else, and the GPU targets simply do not
exist.  cuda_cc_binary, cuda_cc_test and cuda_sh_test are cc_binary, cc_test
and sh_test under that condition; if_cuda picks one of two lists.
"""

load("@cuda//:defs.bzl", "CUDA_FOUND", "CUDA_LIB_DIR", "CUDA_VERSION", "NVCC")

NVCC_FLAGS = [
    "-O3",
    "-std=c++17",
    "-gencode=arch=compute_90,code=sm_90",
    "-gencode=arch=compute_90,code=compute_90",
    "-Xcompiler",
    "-fPIC",
    "-I.",
]

def if_cuda(with_cuda, without_cuda = []):
    return with_cuda if CUDA_FOUND else without_cuda

# Hopper's architecture-specific features (wgmma, setmaxnreg): machine code
# for sm_90a, which runs on compute capability 9.0 only, and the same
# compute_90 PTX as above for newer GPUs, where such code must not run (see
# experiments/gpu/wgmma.cuh).
NVCC_FLAGS_SM90A = [
    "-gencode=arch=compute_90a,code=sm_90a" if f == "-gencode=arch=compute_90,code=sm_90" else f
    for f in NVCC_FLAGS
]

def cuda_library(name, srcs, hdrs = [], cu_deps = [], deps = [], sm90a = False, **kwargs):
    """srcs: .cu files; hdrs: headers they include (also exported);
    cu_deps: other headers the .cu files include (labels); sm90a: built with
    NVCC_FLAGS_SM90A."""
    if not CUDA_FOUND:
        return
    flags = NVCC_FLAGS_SM90A if sm90a else NVCC_FLAGS
    objs = []
    for src in srcs:
        obj = "_objs_%s/%s.o" % (name, src.replace("/", "_")[:-len(".cu")])
        native.genrule(
            name = "%s_%s_nvcc" % (name, src.replace("/", "_").replace(".", "_")),
            srcs = [src] + hdrs + cu_deps,
            outs = [obj],
            # nvcc names its temporary files after its process id, which is
            # the same in every sandbox (its own PID namespace) while /tmp is
            # shared: two nvcc at once removed each other's files.  Each run
            # gets a directory of its own.
            cmd = ("t=$$(mktemp -d) && TMPDIR=$$t %s %s -c $(location %s) -o $@; " +
                   "rc=$$?; rm -rf $$t; exit $$rc") % (NVCC, " ".join(flags), src),
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

def _nothing(**_kwargs):
    """A GPU target where no toolkit was found: defines nothing."""
    pass

cuda_cc_library = native.cc_library if CUDA_FOUND else _nothing
cuda_cc_binary = native.cc_binary if CUDA_FOUND else _nothing
cuda_cc_test = native.cc_test if CUDA_FOUND else _nothing
cuda_sh_test = native.sh_test if CUDA_FOUND else _nothing

# Where cuda/cublas_loader.c looks for cuBLAS after the loader's own search,
# and which soname it asks for (libcublas.so.<major>).
CUBLAS_DEFINES = [
    "EXMY_CUDA_LIB_DIR=\\\"%s\\\"" % CUDA_LIB_DIR,
    "EXMY_CUDA_MAJOR=\\\"%s\\\"" % CUDA_VERSION.split(".")[0],
] if CUDA_FOUND else []
