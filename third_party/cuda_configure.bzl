"""Finds the CUDA Toolkit on the build machine and describes it to the build.

The repository @cuda always exists.  Its defs.bzl says whether a usable
toolkit was found (CUDA_FOUND), where nvcc is and which version it is; its
BUILD holds the toolkit's headers and static runtime when there is one, and
nothing else otherwise.  BUILD files never mention a path of the toolkit: they
load cuda/cuda.bzl, whose rules build GPU code only when CUDA_FOUND is true.

Where we look, first hit wins:
  1. $CUDA_PATH/bin/nvcc, then $CUDA_HOME/bin/nvcc
  2. /usr/local/cuda/bin/nvcc (NVIDIA's packages and runfile installer)
  3. nvcc on $PATH (Debian's nvidia-cuda-toolkit puts it in /usr/bin, with the
     headers in /usr/include and the libraries in /usr/lib/x86_64-linux-gnu)
A toolkit older than MIN_CUDA_VERSION is reported and left unused; so is one
whose layout lacks cuda_runtime.h or the static runtime.  EXMY_NO_CUDA=1 hides
every toolkit (a CPU-only build on a machine that has one).
"""

# The kernels need sm_90 code generation and the cuBLASLt FP8 GEMM: 12.0 or
# newer.  Built and tested with 13.0.
MIN_CUDA_VERSION = (12, 0)

def _nvcc_version(rctx, nvcc):
    result = rctx.execute([nvcc, "--version"])
    if result.return_code != 0:
        return None
    for line in result.stdout.splitlines():
        # "Cuda compilation tools, release 13.0, V13.0.88"
        if "release " in line:
            release = line.split("release ")[1].split(",")[0].strip()
            parts = release.split(".")
            if len(parts) >= 2 and parts[0].isdigit() and parts[1].isdigit():
                return (int(parts[0]), int(parts[1]))
    return None

def _layout(rctx, nvcc):
    """(include dir, library dir) of the toolkit that nvcc belongs to, or None."""
    root = nvcc.dirname.dirname  # <root>/bin/nvcc
    candidates = [
        (root.get_child("include"), root.get_child("lib64")),
        (root.get_child("include"), root.get_child("lib")),
        # Debian's nvidia-cuda-toolkit: nvcc in /usr/bin
        (rctx.path("/usr/include"), rctx.path("/usr/lib/x86_64-linux-gnu")),
    ]
    for include, lib in candidates:
        if include.get_child("cuda_runtime.h").exists and lib.get_child("libcudart_static.a").exists:
            return (include, lib)
    return None

def _candidates(rctx):
    found = []
    for var in ["CUDA_PATH", "CUDA_HOME"]:
        value = rctx.os.environ.get(var, "")
        if value:
            found.append(rctx.path(value + "/bin/nvcc"))
    found.append(rctx.path("/usr/local/cuda/bin/nvcc"))
    on_path = rctx.which("nvcc")
    if on_path:
        found.append(on_path)
    return found

def _write_absent(rctx, reason):
    rctx.file("BUILD", "# No usable CUDA Toolkit on this machine: %s\n" % reason +
                       "package(default_visibility = [\"//visibility:public\"])\n")
    rctx.file("defs.bzl", "\n".join([
        "CUDA_FOUND = False",
        "CUDA_VERSION = \"\"",
        "NVCC = \"\"",
        "CUDA_LIB_DIR = \"\"",
        "CUDA_ABSENT_REASON = %r" % reason,
        "",
    ]))

def _cuda_configure_impl(rctx):
    if rctx.os.environ.get("EXMY_NO_CUDA", "") == "1":
        _write_absent(rctx, "EXMY_NO_CUDA=1")
        return
    reasons = []
    for nvcc in _candidates(rctx):
        if not nvcc.exists:
            continue
        version = _nvcc_version(rctx, nvcc)
        if version == None:
            reasons.append("%s does not run" % nvcc)
            continue
        if version < MIN_CUDA_VERSION:
            reasons.append("%s is CUDA %d.%d; exmy needs %d.%d or newer" %
                           (nvcc, version[0], version[1], MIN_CUDA_VERSION[0], MIN_CUDA_VERSION[1]))
            continue
        layout = _layout(rctx, nvcc)
        if layout == None:
            reasons.append("%s has no cuda_runtime.h and libcudart_static.a beside it" % nvcc)
            continue
        include, lib = layout
        rctx.symlink(include, "include")
        rctx.file("BUILD", "\n".join([
            "# The CUDA Toolkit %d.%d found at %s (third_party/cuda_configure.bzl)." %
            (version[0], version[1], nvcc),
            "package(default_visibility = [\"//visibility:public\"])",
            "",
            "cc_library(",
            "    name = \"headers\",",
            "    hdrs = glob([\"include/**/*.h\", \"include/**/*.hpp\", \"include/nv/**\"]),",
            "    includes = [\"include\"],",
            ")",
            "",
            "# cuBLAS is not linked: cuda/cublas_loader.c opens it when a GPU run starts,",
            "# so that CPU runs need no CUDA library at all.",
            "cc_library(",
            "    name = \"cudart_static\",",
            "    linkopts = [",
            "        \"-L%s\"," % lib,
            "        \"-l:libcudart_static.a\",",
            "        \"-ldl\",",
            "        \"-lrt\",",
            "        \"-lpthread\",",
            "        \"-lstdc++\",",
            "    ],",
            ")",
            "",
        ]))
        rctx.file("defs.bzl", "\n".join([
            "CUDA_FOUND = True",
            "CUDA_VERSION = \"%d.%d\"" % version,
            "NVCC = \"%s\"" % nvcc,
            "CUDA_LIB_DIR = \"%s\"" % lib,
            "CUDA_ABSENT_REASON = \"\"",
            "",
        ]))
        return
    if reasons:
        print("exmy: building without CUDA: " + "; ".join(reasons))
    _write_absent(rctx, "; ".join(reasons) if reasons else "no nvcc in $CUDA_PATH, $CUDA_HOME, /usr/local/cuda or $PATH")

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = ["CUDA_PATH", "CUDA_HOME", "PATH", "EXMY_NO_CUDA"],
    local = True,
    configure = True,
)
