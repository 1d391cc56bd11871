"""The array-level API over libexmy.so (CPU) and libexmy_cuda.so (CUDA)."""
import ctypes
import math
import operator
import sys

from . import _cuda, _lib
from ._lib import lib

# ------------------------------------------------------------------ formats


class Format:
    """A floating-point format: Format("e4m3"), Format("float8_e5m2"),
    Format("e8m3"), or Format.make(name, exponent_bits, mantissa_bits, bias,
    specials) for a custom one.

    Names (case-insensitive) are those of lib/exmy.h: the ml_dtypes names
    (float8_e4m3fn, float8_e5m2, float8_e4m3fnuz, float8_e5m2fnuz, float8_e3m4,
    float8_e4m3, float6_e2m3fn, float6_e3m2fn, float4_e2m1fn, float8_e8m0fnu,
    bfloat16, float16, float32), the aliases e4m3, e5m2, e2m3, e3m2, e2m1,
    e8m0, bf16, fp16, fp32, and any IEEE-like "eXmY" (1 <= X <= 8, 0 <= Y <=
    23, bias 2^(X-1)-1).  Facts are exact float32 values:

        name, bits, exponent_bits, mantissa_bits, bias, specials ("ieee",
        "fn", "fnuz", "none", "e8m0"), is_signed, emin, emax, max,
        min_normal, min_subnormal, epsilon (2^-M), finite_codes,
        finite_values, has_inf, has_nan, has_negative_zero, has_subnormals,
        code_bytes (1, 2 or 4 bytes per code), max_code, nan_code, inf_code
        (None where the format has no such code).
    """

    __slots__ = ("_c", "_info")

    def __init__(self, name):
        if isinstance(name, Format):
            self._c, self._info = name._c, name._info
            return
        if not isinstance(name, str):
            raise TypeError(f"exmy.Format: expected a format name, got {type(name).__name__}")
        c = _lib.Format()
        if lib.exmy_format_parse(name.encode(), ctypes.byref(c)) != 0:
            raise ValueError(f"exmy: unknown format '{name}' (e.g. e4m3, e5m2, bf16, fp16, "
                             f"e8m3, float6_e2m3fn, float4_e2m1fn, e8m0, or any eXmY)")
        self._set(c)

    @classmethod
    def make(cls, name, exponent_bits, mantissa_bits, bias, specials="ieee"):
        """A custom format; ValueError unless it is a subset of float32 and the
        special-value convention fits E and M (lib/exmy.h, exmy_format_make)."""
        if specials not in _lib.SPECIALS:
            raise ValueError(f"exmy: specials must be one of {', '.join(_lib.SPECIALS)}")
        c = _lib.Format()
        args = [operator.index(v) for v in (exponent_bits, mantissa_bits, bias)]
        if lib.exmy_format_make(str(name).encode(), *args, _lib.SPECIALS.index(specials),
                                ctypes.byref(c)) != 0:
            raise ValueError(f"exmy: E={args[0]} M={args[1]} bias={args[2]} specials={specials} "
                             "is not a format exmy can represent")
        self = cls.__new__(cls)
        self._set(c)
        return self

    def _set(self, c):
        self._c = c
        self._info = _lib.FormatInfo()
        lib.exmy_format_get_info(ctypes.byref(c), ctypes.byref(self._info))

    name = property(lambda self: self._c.name.decode())
    bits = property(lambda self: self._c.bits)
    exponent_bits = property(lambda self: self._c.exp_bits)
    mantissa_bits = property(lambda self: self._c.man_bits)
    bias = property(lambda self: self._c.bias)
    specials = property(lambda self: _lib.SPECIALS[self._c.specials])
    is_signed = property(lambda self: self._c.is_signed)
    emin = property(lambda self: self._c.emin)
    emax = property(lambda self: self._c.emax)
    max_code = property(lambda self: self._c.max_code)
    nan_code = property(lambda self: None if self._c.nan_code == _lib.NO_CODE else self._c.nan_code)
    inf_code = property(lambda self: None if self._c.inf_code == _lib.NO_CODE else self._c.inf_code)
    max = property(lambda self: self._info.max)
    min_normal = property(lambda self: self._info.min_normal)
    min_subnormal = property(lambda self: self._info.min_subnormal)
    epsilon = property(lambda self: self._info.epsilon)
    finite_codes = property(lambda self: self._info.finite_codes)
    finite_values = property(lambda self: self._info.finite_values)
    has_inf = property(lambda self: self._info.has_inf)
    has_nan = property(lambda self: self._info.has_nan)
    has_negative_zero = property(lambda self: self._info.has_negative_zero)
    has_subnormals = property(lambda self: self._info.has_subnormals)
    code_bytes = property(lambda self: int(lib.exmy_code_bytes(ctypes.byref(self._c))))

    def _key(self):
        c = self._c
        return (c.exp_bits, c.man_bits, c.bias, c.specials)

    def __eq__(self, other):
        return isinstance(other, Format) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def __repr__(self):
        return f"exmy.Format('{self.name}')"


_formats = {}


def _format(fmt):
    if isinstance(fmt, Format):
        return fmt
    key = fmt.lower() if isinstance(fmt, str) else fmt
    f = _formats.get(key)
    if f is None:
        f = _formats[key] = Format(fmt)
    return f


ROUNDINGS = ("rne", "rna", "rz", "ru", "rd", "ro", "sr")


def _flag(value, name):
    numpy_bool = getattr(value, "dtype", None) is not None and value.dtype.kind == "b" \
        and getattr(value, "shape", None) == ()
    if not isinstance(value, (bool, int)) and not numpy_bool:
        raise TypeError(f"exmy: {name} must be a bool, got {type(value).__name__}")
    return bool(value)


def _u64(value, name):
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"exmy: {name} must be an integer, got {type(value).__name__}") from None
    if not 0 <= v < 1 << 64:
        raise ValueError(f"exmy: {name} must be in [0, 2^64), got {v}")
    return v


_opts_cache = {}


def _opts(rounding, saturate, flush_subnormals, seed, offset, sr_bits):
    """The options struct (cached for plain Python arguments: the common case)."""
    plain = (type(rounding) is str and type(saturate) is bool and
             type(flush_subnormals) is bool and type(seed) is int and type(offset) is int and
             type(sr_bits) is int)
    key = (rounding, saturate, flush_subnormals, seed, offset, sr_bits)
    if plain and key in _opts_cache:
        return _opts_cache[key]
    o = _make_opts(rounding, saturate, flush_subnormals, seed, offset, sr_bits)
    if plain:
        if len(_opts_cache) > 256:
            _opts_cache.clear()
        _opts_cache[key] = o
    return o


def _make_opts(rounding, saturate, flush_subnormals, seed, offset, sr_bits):
    if not isinstance(rounding, str):
        raise TypeError(f"exmy: rounding must be a string ({', '.join(ROUNDINGS)})")
    o = _lib.RoundingOpts()
    mode = ctypes.c_int()
    if lib.exmy_rounding_parse(rounding.encode(), ctypes.byref(mode)) != 0:
        raise ValueError(f"exmy: unknown rounding '{rounding}' ({', '.join(ROUNDINGS)})")
    o.mode = mode.value
    o.saturate = _flag(saturate, "saturate")
    o.flush_subnormals = _flag(flush_subnormals, "flush_subnormals")
    o.seed = _u64(seed, "seed")
    o.offset = _u64(offset, "offset")
    try:
        sr_bits = operator.index(sr_bits)
    except TypeError:
        raise TypeError("exmy: sr_bits must be an integer in 0..32") from None
    if 0 <= sr_bits <= 32:
        o.sr_bits = sr_bits
    if not 0 <= sr_bits <= 32 or lib.exmy_rounding_opts_check(ctypes.byref(o)) != 0:
        raise ValueError(f"exmy: sr_bits must be in 0..32 (0 means 32), got {sr_bits}")
    return o


# ------------------------------------------------------------------ arrays

_NUMPY_CODES = {1: "uint8", 2: "uint16", 4: "uint32"}
_TORCH_CODES = {1: ("uint8", "uint8"), 2: ("uint16", "int16"), 4: ("uint32", "int32")}


def _torch_code_dtype(torch, nbytes):
    """torch.uint16 / uint32 where this torch has them, else the signed type
    of the same width (the same bits)."""
    unsigned, signed = _TORCH_CODES[nbytes]
    return getattr(torch, unsigned, None) or getattr(torch, signed)


class _Array:
    """A numpy array or torch tensor checked for the C calls: its pointer,
    element count and where it lives ("numpy", "cpu" or "cuda")."""

    __slots__ = ("obj", "kind", "ptr", "n", "nbytes")

    def __init__(self, obj, kind, ptr, n, nbytes):
        self.obj, self.kind, self.ptr, self.n, self.nbytes = obj, kind, ptr, n, nbytes

    @property
    def shape(self):
        return tuple(self.obj.shape)

    @property
    def on_cuda(self):
        return self.kind == "cuda"


def _wrap(x, what, want, writable=False):
    """want: "float32", or an int (code bytes: any integer dtype of that width)."""
    np = sys.modules.get("numpy")
    torch = sys.modules.get("torch")
    if np is not None and isinstance(x, np.ndarray):
        dt = x.dtype
        if want == "float32":
            ok = dt == np.float32
        else:
            ok = dt.kind in "ui" and dt.itemsize == want and dt.isnative
        if not ok:
            raise TypeError(f"exmy: {what} must be {_describe(want, 'numpy')}, got numpy {dt}")
        if not x.flags.c_contiguous:
            raise ValueError(f"exmy: {what} must be C-contiguous (use numpy.ascontiguousarray)")
        if not x.flags.aligned:
            raise ValueError(f"exmy: {what} is not aligned (copy it first)")
        if writable and not x.flags.writeable:
            raise ValueError(f"exmy: {what} is read-only")
        return _Array(x, "numpy", x.ctypes.data, x.size, x.nbytes)
    if torch is not None and isinstance(x, torch.Tensor):
        dt = x.dtype
        if want == "float32":
            ok = dt == torch.float32
        else:
            ok = (not dt.is_floating_point and not dt.is_complex and dt != torch.bool
                  and x.element_size() == want)
        if not ok:
            raise TypeError(f"exmy: {what} must be {_describe(want, 'torch')}, got {dt}")
        if x.layout != torch.strided:
            raise TypeError(f"exmy: {what} must be a dense (strided) tensor, got {x.layout}")
        if x.device.type not in ("cpu", "cuda"):
            raise TypeError(f"exmy: {what} must be on the CPU or a CUDA device, got {x.device}")
        if not x.is_contiguous():
            raise ValueError(f"exmy: {what} must be contiguous (call .contiguous())")
        if getattr(x, "is_neg", bool)() or getattr(x, "is_conj", bool)():
            raise ValueError(f"exmy: {what} is a lazy negated/conjugated view (call .resolve_neg())")
        if x.requires_grad and torch.is_grad_enabled():
            raise ValueError(f"exmy: {what} requires grad; exmy's array functions do not record "
                             "autograd: use exmy.torch.fake_quant, or call under torch.no_grad()")
        return _Array(x, x.device.type, x.data_ptr(), x.numel(), x.numel() * x.element_size())
    raise TypeError(f"exmy: {what} must be a numpy.ndarray or a torch.Tensor, "
                    f"got {type(x).__module__}.{type(x).__name__}")


def _describe(want, kind):
    if want == "float32":
        return "float32"
    if kind == "numpy":
        return f"an integer array of {want} byte(s) per code (e.g. {_NUMPY_CODES[want]})"
    return f"an integer tensor of {want} byte(s) per code (e.g. torch.{_TORCH_CODES[want][0]})"


def _like(a, shape, want):
    """A new output for input a: same kind and device; dtype float32 or codes."""
    if a.kind == "numpy":
        import numpy as np
        dtype = np.float32 if want == "float32" else np.dtype(_NUMPY_CODES[want])
        return np.empty(shape, dtype)
    import torch
    dtype = torch.float32 if want == "float32" else _torch_code_dtype(torch, want)
    return torch.empty(shape, dtype=dtype, device=a.obj.device)


def _output(out, a, want, what="out", shape=None, alias_ok=False):
    """The output array: `out` checked against the input a, or a new one."""
    shape = a.shape if shape is None else tuple(shape)
    if out is None:  # a new array needs no checks
        o = _like(a, shape, want)
        if a.kind == "numpy":
            return _Array(o, "numpy", o.ctypes.data, o.size, o.nbytes)
        return _Array(o, a.kind, o.data_ptr(), o.numel(), o.numel() * o.element_size())
    o = _wrap(out, what, want, writable=True)
    if (o.kind == "numpy") != (a.kind == "numpy"):
        raise TypeError(f"exmy: {what} must be of the input's type ({type(a.obj).__name__})")
    if o.kind != "numpy" and o.obj.device != a.obj.device:
        raise ValueError(f"exmy: {what} is on {o.obj.device}, the input on {a.obj.device}")
    if o.shape != shape:
        raise ValueError(f"exmy: {what} has shape {o.shape}, expected {shape}")
    if a.nbytes and o.nbytes and a.ptr < o.ptr + o.nbytes and o.ptr < a.ptr + a.nbytes:
        if not (alias_ok and o.ptr == a.ptr and o.nbytes == a.nbytes):
            raise ValueError(f"exmy: {what} overlaps the input" +
                             (" (only exact aliasing is allowed)" if alias_ok else ""))
    return o


def _cuda_run(a, name, *args):
    """Calls exmy_cuda_<name> on a's device and current stream."""
    import torch
    cl = _cuda.lib()
    with torch.cuda.device(a.obj.device):
        code = getattr(cl, name)(*args, _cuda.stream_of(a.obj))
    _cuda.check(code, name)


def _run(a, name, *args):
    """Calls exmy_<name> on the host, or exmy_cuda_<name> (_cuda_run) where a
    is on a CUDA device."""
    if a.on_cuda:
        _cuda_run(a, "exmy_cuda_" + name, *args)
    else:
        getattr(lib, "exmy_" + name)(*args)


def _bytes_on(a, nbytes):
    """Device scratch (uint8) on a's device, from torch's caching allocator."""
    import torch
    return torch.empty(max(nbytes, 1), dtype=torch.uint8, device=a.obj.device)


# ------------------------------------------------------------- conversions

def quantize(x, fmt, rounding="rne", saturate=False, flush_subnormals=False, seed=0, offset=0,
             sr_bits=0, out=None):
    """Rounds float32 x into format fmt and returns the values as float32, of
    x's type (numpy array or torch tensor), shape and device.

    x: a C-contiguous float32 numpy array, or a contiguous float32 torch tensor
      on the CPU or a CUDA device (run on torch's current stream, no copy).
    fmt: a Format or a format name ("e4m3", "bf16", "e8m3", ...).
    rounding: "rne" (default), "rna", "rz", "ru", "rd", "ro" (to odd), "sr".
    saturate: out-of-range values become +-max instead of inf / NaN.
    flush_subnormals: the format without its subnormals.
    seed, offset, sr_bits: stochastic rounding (lib/exmy.h): element i uses
      Philox4x32-10 word (offset + i) under key seed, so the same call gives
      the same bits from C, Python, CPU and GPU; continue a stream with
      offset += x.size.  sr_bits: random bits, 1..32 (0 = 32).
    out: optional output of the same type, shape and device (may be x).
    """
    f = _format(fmt)
    o = _opts(rounding, saturate, flush_subnormals, seed, offset, sr_bits)
    a = _wrap(x, "x", "float32")
    y = _output(out, a, "float32", alias_ok=True)
    if a.n:
        _run(a, "quantize_f32", ctypes.byref(f._c), ctypes.byref(o), a.ptr, y.ptr, a.n)
    return y.obj


def encode(x, fmt, rounding="rne", saturate=False, flush_subnormals=False, seed=0, offset=0,
           sr_bits=0, out=None):
    """The codes of quantize(x, ...): uint8 for formats of <= 8 bits (sub-byte
    formats in the low bits), uint16 for <= 16 bits, uint32 for float32, same
    shape and device.  torch versions without uint16 / uint32 get int16 /
    int32 holding the same bits.  Options as quantize."""
    f = _format(fmt)
    o = _opts(rounding, saturate, flush_subnormals, seed, offset, sr_bits)
    a = _wrap(x, "x", "float32")
    c = _output(out, a, f.code_bytes)
    if a.n:
        _run(a, "encode_f32", ctypes.byref(f._c), ctypes.byref(o), a.ptr, c.ptr, a.n)
    return c.obj


def decode(codes, fmt, out=None):
    """The float32 values of codes in format fmt (any integer dtype of
    fmt.code_bytes bytes; bits above the format's width are ignored), same
    type, shape and device."""
    f = _format(fmt)
    a = _wrap(codes, "codes", f.code_bytes)
    y = _output(out, a, "float32")
    if a.n:
        _run(a, "decode_f32", ctypes.byref(f._c), a.ptr, y.ptr, a.n)
    return y.obj


def _rows_cols(shape):
    cols = shape[-1] if len(shape) else 1
    rows = math.prod(shape[:-1]) if len(shape) > 1 else 1
    return rows, cols


def mx_encode(x, fmt, block=32, rounding="rne", saturate=False, flush_subnormals=False, seed=0,
              offset=0, sr_bits=0):
    """OCP MX encoding along the last dimension: returns (codes, scales),
    codes uint8 of x's shape (fmt of <= 8 bits), scales the E8M0 codes
    (uint8) of shape x.shape[:-1] + (ceil(cols / block),).  The values are
    those of quantize_scaled(x, fmt, "mx:<block>")."""
    f = _format(fmt)
    if f.bits > 8:
        raise ValueError(f"exmy: MX element formats have at most 8 bits ({f.name} has {f.bits})")
    block = _block(block)
    o = _opts(rounding, saturate, flush_subnormals, seed, offset, sr_bits)
    a = _wrap(x, "x", "float32")
    rows, cols = _rows_cols(a.shape)
    nblocks = -(-cols // block)
    c = _output(None, a, 1)
    s = _output(None, a, 1, shape=(a.shape[:-1] if a.shape else ()) + (nblocks,))
    if a.n:
        if a.on_cuda:
            _cuda_run(a, "exmy_cuda_mx_encode_f32", ctypes.byref(f._c), ctypes.byref(o), block,
                      a.ptr, rows, cols, c.ptr, s.ptr)
        elif lib.exmy_mx_encode_f32(ctypes.byref(f._c), ctypes.byref(o), block, a.ptr, rows, cols,
                                    c.ptr, s.ptr) != 0:
            raise ValueError("exmy: exmy_mx_encode_f32 refused the arguments")
    return c.obj, s.obj


def mx_decode(codes, scales, fmt, block=32, out=None):
    """The inverse of mx_encode: decode(code) * 2^(scale - 127), float32."""
    f = _format(fmt)
    if f.bits > 8:
        raise ValueError(f"exmy: MX element formats have at most 8 bits ({f.name} has {f.bits})")
    block = _block(block)
    a = _wrap(codes, "codes", 1)
    s = _wrap(scales, "scales", 1)
    rows, cols = _rows_cols(a.shape)
    want = (a.shape[:-1] if a.shape else ()) + (-(-cols // block),)
    if s.shape != want or s.kind != a.kind or (a.kind != "numpy" and s.obj.device != a.obj.device):
        raise ValueError(f"exmy: scales must have shape {want} and live with the codes")
    y = _output(out, a, "float32")
    if a.n:
        if a.on_cuda:
            _cuda_run(a, "exmy_cuda_mx_decode_f32", ctypes.byref(f._c), block, a.ptr, s.ptr, rows,
                      cols, y.ptr)
        else:
            lib.exmy_mx_decode_f32(ctypes.byref(f._c), block, a.ptr, s.ptr, rows, cols, y.ptr)
    return y.obj


def _block(block):
    block = operator.index(block)
    if block < 1:
        raise ValueError(f"exmy: block must be >= 1, got {block}")
    return block


# ---------------------------------------------------------------- scaling

class DelayedState:
    """The state of delayed scaling for one tensor (Transformer Engine's
    DelayedScaling): an amax history of history_len calls and the scale the
    next call uses (1 at first).  The scale is recomputed after each call
    from the history's max, or from the most recent amax if most_recent.

    The state lives where it is first used (host memory for numpy / CPU
    tensors, device memory for CUDA tensors, updated there without a host
    round trip); used with an array elsewhere, it moves (a synchronous copy).
    On CUDA the calls that share a state must be ordered: keep them on one
    stream (or synchronise between streams), as for any tensor they share.
    """

    def __init__(self, history_len=16, most_recent=False):
        history_len = operator.index(history_len)
        if not 1 <= history_len <= 1 << 20:
            raise ValueError(f"exmy: history_len must be >= 1, got {history_len}")
        self.history_len = history_len
        self.most_recent = _flag(most_recent, "most_recent")
        self._device = None  # None (not created yet), "cpu" or a torch.device
        self._ptr = None

    @property
    def device(self):
        return self._device

    def _host(self):
        p = lib.exmy_delayed_state_new(self.history_len)
        if not p:
            raise MemoryError("exmy_delayed_state_new")
        return p

    def _release(self):
        if self._ptr is None:
            return
        if self._device == "cpu":
            lib.exmy_delayed_state_free(self._ptr)
        else:
            import torch
            with torch.cuda.device(self._device):
                torch.cuda.synchronize(self._device)  # whichever stream last used it
                _cuda.lib().exmy_cuda_delayed_state_free(self._ptr)
        self._ptr, self._device = None, None

    def __del__(self):
        try:
            self._release()
        except Exception:  # interpreter shutdown
            pass

    def _snapshot(self):
        """A host exmy_delayed_state holding the current values (caller frees)."""
        h = self._host()
        if self._device == "cpu":
            src = self._ptr.contents
            h.contents.count, h.contents.latest = src.count, src.latest
            h.contents.scale, h.contents.scale_inv = src.scale, src.scale_inv
            ctypes.memmove(h.contents.amax_history, src.amax_history, 4 * self.history_len)
        elif self._device is not None:
            import torch
            with torch.cuda.device(self._device):
                torch.cuda.synchronize(self._device)  # whichever stream last updated it
                _cuda.check(_cuda.lib().exmy_cuda_delayed_state_download(self._ptr, h),
                            "exmy_cuda_delayed_state_download")
        return h

    def to(self, device):
        """Moves the state to "cpu" or a CUDA device (a torch.device or name)."""
        if device != "cpu":
            import torch
            device = torch.device(device)
            if device.type == "cpu":
                device = "cpu"
            elif device.index is None:
                device = torch.device("cuda", torch.cuda.current_device())
        if device == self._device:
            return self
        h = self._snapshot() if self._device is not None else None
        self._release()
        if device == "cpu":
            self._ptr = h if h is not None else self._host()
        else:
            import torch
            cl = _cuda.lib()
            with torch.cuda.device(device):
                p = cl.exmy_cuda_delayed_state_new(self.history_len)
                if not p:
                    raise MemoryError("exmy_cuda_delayed_state_new")
                if h is not None:
                    code = cl.exmy_cuda_delayed_state_upload(p, h)
                    lib.exmy_delayed_state_free(h)
                    _cuda.check(code, "exmy_cuda_delayed_state_upload")
            self._ptr = p
        self._device = device
        return self

    def _pointer_for(self, a):
        self.to("cpu" if not a.on_cuda else a.obj.device)
        return self._ptr

    def _values(self):
        if self._device is None:
            return 1.0, 1.0, 0, []
        h = self._snapshot() if self._device != "cpu" else self._ptr
        s = h.contents
        n = min(s.count, self.history_len)
        hist = [s.amax_history[(s.latest - i) % self.history_len] for i in range(n)]
        vals = (s.scale, s.scale_inv, s.count, hist)
        if h is not self._ptr:
            lib.exmy_delayed_state_free(h)
        return vals

    def __getstate__(self):
        """Pickling and copy.deepcopy carry the values (restored on the CPU;
        the copy moves to a device on its first use there)."""
        d = {"history_len": self.history_len, "most_recent": self.most_recent, "values": None}
        if self._device is not None:
            h = self._snapshot() if self._device != "cpu" else self._ptr
            s = h.contents
            d["values"] = (s.count, s.latest, s.scale, s.scale_inv,
                           [s.amax_history[i] for i in range(self.history_len)])
            if h is not self._ptr:
                lib.exmy_delayed_state_free(h)
        return d

    def __setstate__(self, d):
        self.history_len, self.most_recent = d["history_len"], d["most_recent"]
        self._device, self._ptr = None, None
        if d["values"] is not None:
            h = self._host()
            s = h.contents
            s.count, s.latest, s.scale, s.scale_inv, hist = d["values"]
            for i, v in enumerate(hist):
                s.amax_history[i] = v
            self._ptr, self._device = h, "cpu"

    @property
    def scale(self):
        """The scale the next call will use (synchronises a CUDA state's stream)."""
        return self._values()[0]

    @property
    def amax_history(self):
        """The recorded amax values, most recent first."""
        return self._values()[3]

    def __repr__(self):
        return (f"exmy.DelayedState(history_len={self.history_len}, most_recent="
                f"{self.most_recent}, device={self._device}, scale={self.scale})")


def _parse_scaling(scaling):
    if not isinstance(scaling, str):
        raise TypeError('exmy: scaling must be a string: "none", "tensor", "delayed", "mx", '
                        '"mx:B", "group", "group:G", "nvfp4" or "nvfp4:G"')
    kind, colon, arg = scaling.strip().lower().partition(":")
    if kind not in _lib.SCALING_KINDS or (colon and kind not in ("mx", "group", "nvfp4")):
        raise ValueError(f'exmy: unknown scaling "{scaling}" (none, tensor, delayed, mx, mx:B, '
                         'group, group:G, nvfp4, nvfp4:G)')
    group = 0
    if colon:
        if not arg.isdigit():
            raise ValueError(f'exmy: scaling "{scaling}": the group size must be an integer')
        group = int(arg)
        if kind == "mx" and group < 1:
            raise ValueError("exmy: the MX block size must be >= 1")
    return kind, group


def _blocks(kind, block_rows, hadamard, hadamard_seed):
    """(block_rows, hadamard, hadamard_seed) checked as exmy_quantize_scaled_f32 does."""
    try:
        block_rows, hadamard = operator.index(block_rows), operator.index(hadamard)
    except TypeError:
        raise TypeError("exmy: block_rows and hadamard must be integers") from None
    if not 0 <= block_rows < 1 << 31:
        raise ValueError("exmy: block_rows must be >= 0")
    if block_rows > 1 and kind not in ("group", "nvfp4"):
        raise ValueError("exmy: block_rows > 1 needs group or nvfp4 scaling")
    if hadamard not in (0, 16):
        raise ValueError("exmy: hadamard must be 0 or 16")
    if hadamard and kind != "nvfp4":
        raise ValueError("exmy: the Hadamard transform goes with nvfp4 scaling only")
    return block_rows, hadamard, _u64(hadamard_seed, "hadamard_seed")


def _scaling(scaling, margin, pow2, dynamic_range_expansion, block_rows, hadamard, hadamard_seed):
    """The exmy_scaling struct of quantize_scaled's scaling arguments, checked."""
    kind, group = _parse_scaling(scaling)
    try:
        margin = operator.index(margin)
    except TypeError:
        raise TypeError("exmy: margin must be an integer") from None
    if not -(1 << 31) <= margin < 1 << 31:
        raise ValueError("exmy: margin out of range")
    pow2 = _flag(pow2, "pow2")
    dre = _flag(dynamic_range_expansion, "dynamic_range_expansion")
    if dre and kind != "group":
        raise ValueError("exmy: dynamic_range_expansion applies to group scaling only")
    block_rows, hadamard, hadamard_seed = _blocks(kind, block_rows, hadamard, hadamard_seed)
    if dre and block_rows > 1:
        raise ValueError("exmy: dynamic_range_expansion takes 1-row groups only")
    return _lib.Scaling(kind=_lib.SCALING_KINDS.index(kind), margin=margin, pow2=pow2, group=group,
                        dynamic_range_expansion=dre, block_rows=block_rows, hadamard=hadamard,
                        hadamard_seed=hadamard_seed)


def _scaled(x, fmt, scaling, rounding, saturate, flush_subnormals, seed, offset, sr_bits, margin,
            pow2, state, dynamic_range_expansion, out, want_stats, block_rows=1, hadamard=0,
            hadamard_seed=0):
    f = _format(fmt)
    o = _opts(rounding, saturate, flush_subnormals, seed, offset, sr_bits)
    sc = _scaling(scaling, margin, pow2, dynamic_range_expansion, block_rows, hadamard,
                  hadamard_seed)
    kind = _lib.SCALING_KINDS[sc.kind]
    if (kind == "delayed") != (state is not None):
        raise ValueError('exmy: scaling="delayed" needs state=exmy.DelayedState(...), and only '
                         'it takes a state')
    if state is not None and not isinstance(state, DelayedState):
        raise TypeError("exmy: state must be an exmy.DelayedState")
    a = _wrap(x, "x", "float32")
    y = _output(out, a, "float32", alias_ok=not want_stats)
    rows, cols = _rows_cols(a.shape)
    stats = _lib.TensorStats()
    if a.on_cuda:
        _scaled_cuda(f, o, sc, state, a, y, rows, cols, stats if want_stats else None)
    else:
        st = None
        if state is not None:
            st = state._pointer_for(a)
            sc.history_len, sc.history_most_recent = state.history_len, state.most_recent
        if lib.exmy_quantize_scaled_f32(ctypes.byref(f._c), ctypes.byref(o), ctypes.byref(sc), st,
                                        a.ptr, y.ptr, rows, cols,
                                        ctypes.byref(stats) if want_stats else None) != 0:
            raise ValueError("exmy: exmy_quantize_scaled_f32 refused the arguments")
    if want_stats:
        d = stats.as_dict()
        d["n"] = int(d["n"])
        return y.obj, d
    return y.obj


def _scaled_cuda(f, o, sc, state, a, y, rows, cols, stats):
    import torch
    fp, op = ctypes.byref(f._c), ctypes.byref(o)
    kind, group, margin, pow2 = _lib.SCALING_KINDS[sc.kind], sc.group, sc.margin, sc.pow2
    dre = sc.dynamic_range_expansion
    dstats = _bytes_on(a, ctypes.sizeof(_lib.TensorStats)) if stats is not None else None
    n = a.n
    if kind == "none":
        if n:
            _cuda_run(a, "exmy_cuda_quantize_f32", fp, op, a.ptr, y.ptr, n)
        if stats is not None:
            _cuda_run(a, "exmy_cuda_tensor_stats_f32", fp, a.ptr, y.ptr, n, dstats.data_ptr())
    elif kind == "tensor":
        si = torch.ones(2, dtype=torch.float32, device=a.obj.device)  # {s, 1/s}; [1] unread
        if n:
            _cuda_run(a, "exmy_cuda_quantize_tensor_scaled_f32", fp, op, margin, pow2, a.ptr,
                      y.ptr, n, si.data_ptr())
        if stats is not None:
            _cuda_run(a, "exmy_cuda_tensor_stats_scaled_f32", fp, a.ptr, y.ptr, n, si.data_ptr(),
                      margin, pow2, False, dstats.data_ptr())
    elif kind == "delayed":
        ptr = state._pointer_for(a)
        used = None
        if stats is not None:  # the {s, 1/s} this call will use, before the update
            with torch.cuda.device(a.obj.device):
                cur = _cuda.lib().exmy_cuda_delayed_scale(ptr)
                used = torch.as_tensor(_cuda.DeviceView(cur, 2), device=a.obj.device).clone()
        _cuda_run(a, "exmy_cuda_quantize_delayed_scaled_f32", fp, op, margin, pow2,
                  state.most_recent, ptr, a.ptr, y.ptr, n)
        if stats is not None:
            _cuda_run(a, "exmy_cuda_tensor_stats_scaled_f32", fp, a.ptr, y.ptr, n, used.data_ptr(),
                      margin, pow2, True, dstats.data_ptr())
    elif kind == "mx":
        if f.bits > 8:
            raise ValueError(f"exmy: MX on CUDA needs an element format of <= 8 bits "
                             f"({f.name} has {f.bits})")
        block = group or 32
        nblocks = -(-cols // block) if cols else 0
        codes = _bytes_on(a, n)
        scales = _bytes_on(a, rows * nblocks)
        if n:
            _cuda_run(a, "exmy_cuda_mx_encode_f32", fp, op, block, a.ptr, rows, cols,
                      codes.data_ptr(), scales.data_ptr())
            _cuda_run(a, "exmy_cuda_mx_decode_f32", fp, block, codes.data_ptr(),
                      scales.data_ptr(), rows, cols, y.ptr)
        if stats is not None:
            _cuda_run(a, "exmy_cuda_tensor_stats_mx_f32", fp, block, a.ptr, y.ptr,
                      scales.data_ptr(), rows, cols, dstats.data_ptr())
    elif kind == "group" and dre:
        if stats is not None:
            raise NotImplementedError("exmy.stats: group scaling with dynamic_range_expansion "
                                      "has no GPU statistics (call it on x.cpu())")
        if n:
            _cuda_run(a, "exmy_cuda_quantize_group_scaled_f32", fp, op, group, margin, pow2, dre,
                      a.ptr, y.ptr, rows, cols)
    else:  # group, nvfp4: the blocks, and their statistics on the device
        if n or stats is not None:
            _cuda_run(a, "exmy_cuda_quantize_blocks_stats_f32", fp, op, ctypes.byref(sc), a.ptr,
                      y.ptr, rows, cols, dstats.data_ptr() if stats is not None else None)
    if stats is not None:
        raw = dstats.cpu().numpy().tobytes()[:ctypes.sizeof(_lib.TensorStats)]
        ctypes.memmove(ctypes.addressof(stats), raw, len(raw))


def quantize_scaled(x, fmt, scaling="tensor", rounding="rne", saturate=False,
                    flush_subnormals=False, seed=0, offset=0, sr_bits=0, margin=0, pow2=False,
                    state=None, dynamic_range_expansion=False, out=None, block_rows=1,
                    hadamard=0, hadamard_seed=0):
    """Fake quantization under a scaling recipe (lib/exmy.h, exmy_scaling):
    y = Q(x * s) * (1/s) in float32, of x's type, shape and device.

    scaling: "tensor" (per-tensor current scaling: s = fmax / amax * 2^-margin,
      rounded down to a power of two if pow2), "delayed" (needs
      state=exmy.DelayedState(); uses its scale, then records this amax),
      "mx" / "mx:B" (OCP MX: blocks of B = 32 consecutive elements along the
      last dimension share a power-of-two scale; saturating), "group" /
      "group:G" (the tensor formula per group of G along the last dimension,
      0 or none = the whole row; with dynamic_range_expansion, COAT's),
      "nvfp4" / "nvfp4:G" (NVIDIA's NVFP4: blocks of G = 16 with E4M3 scales
      under a float32 tensor scale; satfinite), or "none".  Blocks and groups
      run along x.shape[-1]; x is taken as a row-major matrix of x.shape[-1]
      columns.  group and nvfp4: block_rows > 1 makes each block that many
      rows tall (16 x 16 weight blocks, DeepSeek-V3's 128 x 128); nvfp4:
      hadamard = 16 first applies the random Hadamard transform of 16 points
      along the rows, its signs drawn from hadamard_seed.
    The other options are quantize's; stochastic rounding's element index is
    the position in x.  out may be x.
    """
    return _scaled(x, fmt, scaling, rounding, saturate, flush_subnormals, seed, offset, sr_bits,
                   margin, pow2, state, dynamic_range_expansion, out, False, block_rows, hadamard,
                   hadamard_seed)


def stats(x, fmt, scaling="none", rounding="rne", saturate=False, flush_subnormals=False, seed=0,
          offset=0, sr_bits=0, margin=0, pow2=False, state=None, dynamic_range_expansion=False,
          out=None, block_rows=1, hadamard=0, hadamard_seed=0):
    """The statistics of quantize_scaled(x, fmt, scaling, ...) against x, as
    NVIDIA's FP8 debug tool reports them (lib/exmy.h, exmy_tensor_stats), as
    a dict: n, amax, min_nonzero, underflow_ratio, subnormal_ratio,
    overflow_ratio (judged on x*s and Q(x*s)), mse, rel_l2, cosine, sqnr_db,
    scale (the scale used; NaN for mx, group and nvfp4), delayed_over_current;
    nvfp4 with hadamard describes the transformed tensor.  out, if given,
    receives the quantized values (it must not alias x).  A delayed state is
    advanced as by quantize_scaled.  CUDA: counts, amax and min_nonzero
    equal the CPU's; the sums up to the order of double additions; group
    scaling with dynamic_range_expansion is CPU only.
    """
    return _scaled(x, fmt, scaling, rounding, saturate, flush_subnormals, seed, offset, sr_bits,
                   margin, pow2, state, dynamic_range_expansion, out, True, block_rows, hadamard,
                   hadamard_seed)[1]


def scale_from_amax(fmt, amax, margin=0, pow2=False):
    """The per-tensor scale for a given amax (exmy_scale_from_amax)."""
    f = _format(fmt)
    return lib.exmy_scale_from_amax(ctypes.byref(f._c), float(amax), operator.index(margin),
                                    _flag(pow2, "pow2"))


# ------------------------------------------------------ accumulation models

class AccumModel:
    """How a GEMM accumulates its dot products (lib/accum_core.h): a name of
    lib/exmy.h's exmy_accum_model_parse, "fp32" (float32, in order along K),
    "hopper" (groups of 32 products aligned to their largest exponent with
    the running sum, 14 bits kept of each product and of the sum,
    truncation, no promotion) or "hopper-split" (the same, promoted to
    float32 every 128 products), or keys over hopper's defaults,
    "group:32,bits:14,sum:14,round:trunc,promote:128,align:1,align_to:inputs,kslice:0";
    or fields:

        AccumModel(group=32, product_bits=14, sum_bits=14, round="trunc",
                   promote_every=0, align_sum=1, align_to="inputs", k_slice=0)

    hopper and hopper-split are the H100's cuBLASLt FP8 GEMM with and
    without fast accumulation, calibrated bit for bit (cuda/NOTES.md).
    align_to "inputs": a product's exponent for the alignment is the sum of
    its inputs' exponents, a subnormal input's its format's emin (qgemm_accum
    takes the formats); "product": its own (lib/accum_core.h).  k_slice: K
    split into slices of that many products reduced in float32, as cuBLASLt
    chooses per shape (none up to K = 4096 at 64 x 64; 2816 at K = 16384).

    group 0 is float32 accumulation.  str(model) is its keys (or "fp32"),
    which parse back to it.  Invalid models are a ValueError.
    """

    __slots__ = ("_c",)

    def __init__(self, text=None, *, group=32, product_bits=14, sum_bits=14, round="trunc",
                 promote_every=0, align_sum=1, align_to="inputs", k_slice=0):
        if isinstance(text, AccumModel):
            self._c = text._c
            return
        c = _lib.AccumModel()
        if text is not None:
            if not isinstance(text, str):
                raise TypeError(f"exmy.AccumModel: expected a model name, got {type(text).__name__}")
            if lib.exmy_accum_model_parse(text.encode(), ctypes.byref(c)) != 0:
                raise ValueError(f"exmy: '{text}' is not an accumulation model (fp32, hopper, "
                                 "hopper-split, or keys group:,bits:,sum:,round:,promote:,align:,"
                                 "align_to:,kslice:)")
        else:
            if round not in ("trunc", "nearest"):
                raise ValueError(f"exmy: round must be 'trunc' or 'nearest', got {round!r}")
            if align_to not in ("product", "inputs"):
                raise ValueError(f"exmy: align_to must be 'product' or 'inputs', got {align_to!r}")
            try:
                fields = [operator.index(v) for v in (group, product_bits, sum_bits,
                                                      promote_every, align_sum, k_slice)]
            except TypeError:
                raise TypeError("exmy.AccumModel: the fields must be integers") from None
            text = ("fp32" if fields[0] == 0 else
                    "group:%d,bits:%d,sum:%d,round:%s,promote:%d,align:%d,align_to:%s,kslice:%d" %
                    (fields[0], fields[1], fields[2], round, fields[3], fields[4], align_to,
                     fields[5]))
            if any(not 0 <= v < 1 << 20 for v in fields) or \
                    lib.exmy_accum_model_parse(text.encode(), ctypes.byref(c)) != 0:
                raise ValueError(f"exmy: invalid accumulation model ({text})")
        self._c = c

    group = property(lambda self: self._c.group)
    product_bits = property(lambda self: self._c.product_bits)
    sum_bits = property(lambda self: self._c.sum_bits)
    round = property(lambda self: "nearest" if self._c.round else "trunc")
    promote_every = property(lambda self: self._c.promote_every)
    align_sum = property(lambda self: self._c.align_sum)
    align_to = property(lambda self: "inputs" if self._c.align_exp else "product")
    k_slice = property(lambda self: self._c.k_slice)

    def __str__(self):
        buf = ctypes.create_string_buffer(128)
        lib.exmy_accum_model_format(ctypes.byref(self._c), buf, len(buf))
        return buf.value.decode()

    def __repr__(self):
        return f"exmy.AccumModel('{self}')"

    def __eq__(self, other):
        return isinstance(other, AccumModel) and str(self) == str(other)

    def __hash__(self):
        return hash(str(self))


def _operand_quant(fmt, scaling, rounding="rne", saturate=False, flush_subnormals=False, seed=0,
                   offset=0, sr_bits=0, margin=0, pow2=False, block_rows=1, hadamard=0,
                   hadamard_seed=0):
    """The exmy_operand_quant of a GEMM operand rounded as quantize_scaled(x,
    fmt, scaling, ...) rounds x (laid out with K contiguous, x.shape[-1] the
    GEMM's reduction dimension): what exmy_qgemm_accum takes to round the
    operand itself.  Delayed scaling has no state here: refused."""
    sc = _scaling(scaling, margin, pow2, False, block_rows, hadamard, hadamard_seed)
    if _lib.SCALING_KINDS[sc.kind] == "delayed":
        raise ValueError("exmy: a GEMM operand recipe takes no delayed scaling")
    return _lib.OperandQuant(enabled=True, format=_format(fmt)._c,
                             round=_opts(rounding, saturate, flush_subnormals, seed, offset,
                                         sr_bits), scaling=sc)


def _accum_block_scaled(q, model):
    """Whether exmy_qgemm_accum reads an operand rounded per q (an
    exmy_operand_quant) under `model` as its codes with a scale per block,
    applied at each promotion (exmy_accum_block_scaled)."""
    return bool(lib.exmy_accum_block_scaled(ctypes.byref(q), ctypes.byref(AccumModel(model)._c)))


_cuda_gemm = {}  # device index -> exmy_cuda_gemm (its workspaces), kept for the process


def qgemm_accum(a, b, model="fp32", trans_a=False, trans_b=False, out=None, fmt_a=None,
                fmt_b=None):
    """C = op(a) @ op(b), every dot product accumulated as `model` says
    (AccumModel or its text), as float32: exmy_qgemm_accum on the CPU and
    exmy_cuda_qgemm_accum on a CUDA device, bit-identical.  The operands are
    used as they are (round them first with quantize / quantize_scaled).
    fmt_a, fmt_b: the formats op(a)'s and op(b)'s values are in (Format or
      name; None: float32), whose smallest normal exponents a model aligned
      by its inputs' exponents counts their subnormals with (emin_a /
      emin_b; the H100's FP8 GEMM does so).  Values rounded with a scale
      (quantize_scaled) are not in the format: leave it None.

    a, b: 2-D float32 numpy arrays or torch tensors on the CPU or one CUDA
      device; op(a) = a.T if trans_a (a is k x m), else a (m x k); op(b) =
      b.T if trans_b (b is n x k), else b (k x n).
    out: optional m x n output of the same type and device (not overlapping
      a or b).
    """
    return _qgemm_accum(a, b, model, trans_a, trans_b, out, fmt_a, fmt_b)


def _qgemm_accum(a, b, model="fp32", trans_a=False, trans_b=False, out=None, fmt_a=None,
                 fmt_b=None, qa=None, qb=None):
    """qgemm_accum with op(a) and op(b) rounded inside the GEMM per qa and qb
    (exmy_operand_quant from _operand_quant, or None: used as they are), as
    the C trainer's exmy_qgemm_accum does: an operand that the model reads
    as codes (_accum_block_scaled) is accumulated as its codes with its block
    scales applied at each promotion.  With qa or qb: CPU arrays only."""
    m_ = AccumModel(model)
    c_model = _lib.AccumModel.from_buffer_copy(m_._c)
    c_model.emin_a = -126 if fmt_a is None else _format(fmt_a)._c.emin
    c_model.emin_b = -126 if fmt_b is None else _format(fmt_b)._c.emin
    x = _wrap(a, "a", "float32")
    y = _wrap(b, "b", "float32")
    if len(x.shape) != 2 or len(y.shape) != 2:
        raise ValueError(f"exmy: a and b must be 2-D, got shapes {x.shape} and {y.shape}")
    if (x.kind == "numpy") != (y.kind == "numpy") or \
            (x.kind != "numpy" and x.obj.device != y.obj.device):
        raise ValueError("exmy: a and b must be of one type on one device")
    m, k = x.shape[::-1] if trans_a else x.shape
    k2, n = y.shape[::-1] if trans_b else y.shape
    if k != k2:
        raise ValueError(f"exmy: op(a) is {m} x {k} but op(b) is {k2} x {n}")
    c = _output(out, x, "float32", shape=(m, n))
    if c.nbytes and y.nbytes and y.ptr < c.ptr + c.nbytes and c.ptr < y.ptr + y.nbytes:
        raise ValueError("exmy: out overlaps b")
    if k > 2 ** 31 - 1:
        raise ValueError("exmy: k must be below 2^31")
    lda, ldb = x.shape[1], y.shape[1]
    if not (m and n):
        return c.obj
    if x.on_cuda and (qa is not None or qb is not None):
        raise ValueError("exmy: operand recipes take CPU arrays (exmy_qgemm_accum)")
    if x.on_cuda:
        import torch
        dev = x.obj.device.index if x.obj.device.index is not None else torch.cuda.current_device()
        if dev not in _cuda_gemm:
            with torch.cuda.device(dev):
                g = _cuda.lib().exmy_cuda_gemm_new()
            if not g:
                raise RuntimeError("exmy: exmy_cuda_gemm_new failed (is cuBLAS there?)")
            _cuda_gemm[dev] = g
        _cuda_run(x, "exmy_cuda_qgemm_accum", _cuda_gemm[dev], bool(trans_a), bool(trans_b), m, n,
                  k, 1.0, x.ptr, lda, None, y.ptr, ldb, None, 0.0, c.ptr, n, None,
                  ctypes.byref(c_model))
    elif lib.exmy_qgemm_accum(bool(trans_a), bool(trans_b), m, n, k, 1.0, x.ptr, lda,
                              None if qa is None else ctypes.byref(qa), y.ptr, ldb,
                              None if qb is None else ctypes.byref(qb), 0.0, c.ptr, n, None,
                              ctypes.byref(c_model)) != 0:
        raise MemoryError("exmy: exmy_qgemm_accum failed (out of memory" +
                          (" or an operand recipe it refuses)" if qa is not None or qb is not None
                           else ")"))
    return c.obj
