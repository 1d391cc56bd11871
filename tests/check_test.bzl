"""check_test: one unit test written with Check (libcheck)."""

load("//cuda:cuda.bzl", "cuda_cc_test")

COPTS = ["-O2", "-std=c11", "-Wall", "-Wextra", "-fopenmp"]

# The C tools of the tests (shims, file editors, sanitizer builds of binaries).
TOOL_COPTS = COPTS + ["-D_GNU_SOURCE"]

# Check and subunit as static archives: cuda/bundle.sh carries the GPU tests
# to machines where neither is installed.
STATIC_CHECK = ["-l:libcheck.a", "-l:libsubunit.a", "-lm", "-lrt", "-lpthread"]

def check_test(name, srcs = None, deps = [], copts = [], linkopts = [], gpu = False, static = False, **kwargs):
    """A cc_test of name.c (or srcs) with Check, OpenMP and tests/check_suite.h.

    copts, linkopts: added to the common ones.
    gpu: tagged "gpu" (CI builds it and skips it, see .bazelrc; run it on a GPU
      machine with --test_tag_filters=gpu), Check linked statically; a
      cuda_cc_test, so it exists only where a CUDA toolkit was found.
    static: a CPU test with Check and its libraries linked statically, that
      cuda/bundle.sh carries to the GPU machine's host too.
    """
    if gpu or static:
        linkopts = linkopts + STATIC_CHECK
        kwargs["linkstatic"] = True
    if gpu:
        check_deps = ["@cuda//:headers"]
        kwargs["tags"] = kwargs.get("tags", []) + ["gpu"]
    elif static:
        check_deps = []  # check.h from the system's include path, as the GPU tests take it
    else:
        check_deps = ["@system_libs//:check"]
    rule = cuda_cc_test if gpu else native.cc_test
    rule(
        name = name,
        srcs = [name + ".c"] if srcs == None else srcs,
        copts = COPTS + copts,
        linkopts = ["-fopenmp"] + linkopts,
        deps = deps + check_deps + ["//tests:check_suite", "//tests:test_rng"],
        **kwargs
    )
