"""tool_test: a shell test that runs binaries built here (the CLI, the trainer).

The binaries reach the script as arguments, so that one script tests both the
plain build and the sanitizer build (asan = True) of a tool.
"""

# The sanitizers' settings for a tool built with -fsanitize=address,undefined.
ASAN_ENV = {
    # an allocation that fails returns NULL, as malloc's would (the tests try some)
    "ASAN_OPTIONS": "allocator_may_return_null=1:max_allocation_size_mb=16384:detect_leaks=1",
    # undefined behaviour in code built to recover from it (//cpu:exmy_cpu_asan) stops too
    "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1",
}

def tool_test(name, script, tools, args = [], data = [], asan = False, **kwargs):
    """An sh_test running `script ARGS... TOOL...`: each tool by its path.

    script: the test script (a label).
    tools: labels of the binaries, passed in this order after args; also data.
    args: arguments before the tools' paths.
    data: what the script reads besides the tools.
    asan: the tools are sanitizer builds: run under ASAN_ENV.
    """
    if asan:
        kwargs["env"] = ASAN_ENV
    native.sh_test(
        name = name,
        srcs = [script],
        args = args + ["$(location %s)" % tool for tool in tools],
        data = tools + data,
        **kwargs
    )
