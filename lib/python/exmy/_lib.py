"""ctypes mirror of lib/exmy.h and cpu/exmy_cpu.h, and the loading of libexmy.so.

The structures below copy the C declarations field for field, in order, so
that ctypes lays them out as the C compiler does (tests/python checks every
size and offset against the compiled library's own sizeof / offsetof).
"""
import ctypes
import os

c_bool, c_int, c_float, c_double = ctypes.c_bool, ctypes.c_int, ctypes.c_float, ctypes.c_double
c_uint32, c_uint64, c_size_t, c_void_p = ctypes.c_uint32, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p

# exmy_specials and exmy_scaling_kind, by the names this package uses
SPECIALS = ("ieee", "fn", "fnuz", "none", "e8m0")
SCALING_KINDS = ("none", "tensor", "delayed", "mx", "group", "nvfp4")  # exmy_scaling_kind
EXMY_SR = 6  # exmy_rounding: the stochastic mode
NO_CODE = 0xFFFFFFFF


class Format(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * 32), ("exp_bits", c_int), ("man_bits", c_int),
                ("bias", c_int), ("specials", c_int), ("is_signed", c_bool), ("bits", c_int),
                ("emin", c_int), ("emax", c_int), ("max_code", c_uint32), ("sign_mask", c_uint32),
                ("nan_code", c_uint32), ("inf_code", c_uint32)]


class FormatInfo(ctypes.Structure):
    _fields_ = [("max", c_float), ("min_normal", c_float), ("min_subnormal", c_float),
                ("epsilon", c_float), ("finite_codes", c_uint64), ("finite_values", c_uint64),
                ("has_inf", c_bool), ("has_nan", c_bool), ("has_negative_zero", c_bool),
                ("has_subnormals", c_bool)]


class RoundingOpts(ctypes.Structure):
    _fields_ = [("mode", c_int), ("saturate", c_bool), ("flush_subnormals", c_bool),
                ("seed", c_uint64), ("offset", c_uint64), ("sr_bits", c_int)]


class Scaling(ctypes.Structure):
    _fields_ = [("kind", c_int), ("margin", c_int), ("pow2", c_bool), ("group", c_int),
                ("history_len", c_int), ("history_most_recent", c_bool),
                ("dynamic_range_expansion", c_bool), ("block_rows", c_int), ("hadamard", c_int),
                ("hadamard_seed", c_uint64)]


class DelayedState(ctypes.Structure):
    _fields_ = [("history_len", c_int), ("count", c_int), ("latest", c_int),
                ("amax_history", ctypes.POINTER(c_float)), ("scale", c_float),
                ("scale_inv", c_float)]


class TensorStats(ctypes.Structure):
    _fields_ = [("n", c_size_t), ("amax", c_double), ("min_nonzero", c_double),
                ("underflow_ratio", c_double), ("subnormal_ratio", c_double),
                ("overflow_ratio", c_double), ("mse", c_double), ("rel_l2", c_double),
                ("cosine", c_double), ("sqnr_db", c_double), ("scale", c_double),
                ("delayed_over_current", c_double)]

    def as_dict(self):
        return {name: getattr(self, name) for name, _ in self._fields_}


class OperandQuant(ctypes.Structure):
    _fields_ = [("enabled", c_bool), ("format", Format), ("round", RoundingOpts),
                ("scaling", Scaling), ("delayed", ctypes.POINTER(DelayedState)),
                ("stats", ctypes.POINTER(TensorStats))]


class AccumModel(ctypes.Structure):
    _fields_ = [("group", c_int), ("product_bits", c_int), ("sum_bits", c_int), ("round", c_int),
                ("promote_every", c_int), ("align_sum", c_int), ("align_exp", c_int),
                ("emin_a", c_int), ("emin_b", c_int), ("k_slice", c_int)]


P = ctypes.POINTER
PROTOTYPES = {
    "exmy_format_parse": (c_int, [ctypes.c_char_p, P(Format)]),
    "exmy_format_make": (c_int, [ctypes.c_char_p, c_int, c_int, c_int, c_int, P(Format)]),
    "exmy_code_bytes": (c_size_t, [P(Format)]),
    "exmy_format_get_info": (None, [P(Format), P(FormatInfo)]),
    "exmy_rounding_opts_check": (c_int, [P(RoundingOpts)]),
    "exmy_rounding_parse": (c_int, [ctypes.c_char_p, P(c_int)]),
    "exmy_rounding_name": (ctypes.c_char_p, [c_int]),
    "exmy_quantize_f32": (None, [P(Format), P(RoundingOpts), c_void_p, c_void_p, c_size_t]),
    "exmy_encode_f32": (None, [P(Format), P(RoundingOpts), c_void_p, c_void_p, c_size_t]),
    "exmy_decode_f32": (None, [P(Format), c_void_p, c_void_p, c_size_t]),
    "exmy_delayed_state_new": (P(DelayedState), [c_int]),
    "exmy_delayed_state_free": (None, [P(DelayedState)]),
    "exmy_scale_from_amax": (c_float, [P(Format), c_float, c_int, c_bool]),
    "exmy_quantize_scaled_f32": (c_int, [P(Format), P(RoundingOpts), P(Scaling), P(DelayedState),
                                         c_void_p, c_void_p, c_size_t, c_size_t, P(TensorStats)]),
    "exmy_mx_encode_f32": (c_int, [P(Format), P(RoundingOpts), c_int, c_void_p, c_size_t,
                                   c_size_t, c_void_p, c_void_p]),
    "exmy_mx_decode_f32": (None, [P(Format), c_int, c_void_p, c_void_p, c_size_t, c_size_t,
                                  c_void_p]),
    "exmy_qgemm": (c_int, [c_bool, c_bool, c_size_t, c_size_t, c_size_t, c_float, c_void_p,
                           c_size_t, P(OperandQuant), c_void_p, c_size_t, P(OperandQuant),
                           c_float, c_void_p, c_size_t, P(OperandQuant)]),
    "exmy_qgemm_accum": (c_int, [c_bool, c_bool, c_size_t, c_size_t, c_size_t, c_float, c_void_p,
                                 c_size_t, P(OperandQuant), c_void_p, c_size_t, P(OperandQuant),
                                 c_float, c_void_p, c_size_t, P(OperandQuant), P(AccumModel)]),
    "exmy_accum_model_parse": (c_int, [ctypes.c_char_p, P(AccumModel)]),
    "exmy_accum_model_format": (c_int, [P(AccumModel), ctypes.c_char_p, c_size_t]),
    "exmy_accum_block_scaled": (c_bool, [P(OperandQuant), P(AccumModel)]),
}

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
# lib/python/exmy -> the repository root, when the package is used from its source tree
SOURCE_ROOT = os.path.normpath(os.path.join(PACKAGE_DIR, "..", "..", ".."))


def candidates(env, name, subdir=""):
    """Where a library may be: $env, next to the package (pip install copies
    it there), the source tree's bazel-bin/, and ./bazel-bin/."""
    if os.environ.get(env):
        return [os.environ[env]]
    return [os.path.join(PACKAGE_DIR, name),
            os.path.join(SOURCE_ROOT, "bazel-bin", subdir, name),
            os.path.join(os.getcwd(), "bazel-bin", subdir, name)]


def load(env, name, subdir, build_hint):
    paths = candidates(env, name, subdir)
    for path in paths:
        if os.path.exists(path):
            try:
                return ctypes.CDLL(path), path
            except OSError as e:
                raise ImportError(f"exmy: cannot load {path}: {e}") from None
    if os.environ.get(env):
        raise ImportError(f"exmy: {env}={os.environ[env]} does not exist")
    raise ImportError(f"exmy: {name} not found (looked in {', '.join(paths)}); "
                      f"build it with `{build_hint}` from the repository root "
                      f"or point {env} at it")


def declare(lib, prototypes):
    for name, (restype, argtypes) in prototypes.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes


lib, path = load("EXMY_LIBRARY", "libexmy.so", "", "bazel build -c opt //:libexmy.so")
declare(lib, PROTOTYPES)
