"""The trainer's precision recipes (experiments/configs/*.cfg) for Python.

A recipe file holds `key = value` lines ('#' starts a comment) of the recipe
keys of experiments/trainer/config.c; keys it leaves out take their defaults.  This
module reads those same files and turns them into GEMM operands exactly as
experiments/trainer/recipe.c does (recipe_from_config):

  * roles: "w" (weights), "a" (activations), "g" (output gradients dY), with
    format_w / format_a / format_g (fp32, float32, none or empty: not
    quantized), rounding_<role> or else rounding, and the shared sr_bits,
    saturate, flush_subnormals, scaling (none | tensor | delayed | mx |
    group | nvfp4), margin, pow2_scale, mx_block, and for group and nvfp4
    weight_block_rows, wgrad_hadamard, hadamard_seed;
  * stochastic rounding's seed of a role is seed + 1 + (0 for w, 1 for a,
    2 for g), seed being the run's (the trainer's default 1337);
  * the "high" operands (high_format, rne, no scaling, seed 0) are those of
    the first and last blocks under high_precision_first_last.

RECIPE_DEFAULTS mirrors the recipe section of experiments/trainer/config.c's key
table; tests/python/torch_test.py checks it against the C parser for every
file in experiments/configs.
"""
import os
import re

from . import _core, _lib

# key -> default, in the order of experiments/trainer/config.c
RECIPE_DEFAULTS = {
    "recipe": "fp32",
    "format_w": "fp32",
    "format_a": "fp32",
    "format_g": "fp32",
    "rounding": "rne",
    "rounding_w": "",
    "rounding_a": "",
    "rounding_g": "",
    "sr_bits": "0",
    "saturate": "0",
    "flush_subnormals": "0",
    "scaling": "none",
    "margin": "0",
    "amax_history": "16",
    "pow2_scale": "0",
    "mx_block": "32",
    "weight_block_rows": "1",
    "wgrad_hadamard": "0",
    "hadamard_seed": "1",
    "quant_attention": "0",
    "quant_lm_head": "0",
    "high_precision_first_last": "0",
    "high_format": "fp32",
    "accumulate": "fp32",
    "swiglu_scale": "none",
    "activations": "f32",
    "grad_format": "fp32",
    "moments": "fp32",
    "moment1_format": "e4m3",
    "moment2_format": "e4m3",
    "moment_group": "128",
    "moment_dre": "1",
}
ROLES = ("w", "a", "g")
# the values of config.c's `scaling` key
SCALINGS = ("none", "tensor", "delayed", "mx", "group", "nvfp4")
# those whose blocks run along each GEMM's reduction dimension
ALONG_K = ("mx", "group", "nvfp4")
DEFAULT_SEED = 1337  # experiments/trainer/config.c's default `seed`
CONFIG_VALUE_LEN = 512
_INT = re.compile(r"\s*-?\d+\s*\Z")  # as the C key table: no "+"


def config_dirs():
    """Where recipe names are looked up: $EXMY_CONFIG_DIR, the installed
    package's configs/, the source tree's experiments/configs/."""
    dirs = []
    if os.environ.get("EXMY_CONFIG_DIR"):
        dirs.append(os.environ["EXMY_CONFIG_DIR"])
    dirs.append(os.path.join(_lib.PACKAGE_DIR, "configs"))
    dirs.append(os.path.join(_lib.SOURCE_ROOT, "experiments", "configs"))
    return dirs


def available():
    """The recipe names found in config_dirs()."""
    names = set()
    for d in config_dirs():
        if os.path.isdir(d):
            names.update(f[:-4] for f in os.listdir(d) if f.endswith(".cfg"))
    return sorted(names)


def _is_fp32(name):
    return name in ("fp32", "float32", "none", "")


class Operand:
    """How one GEMM operand is rounded: format, rounding options, scaling.
    enabled False: the operand stays float32.  group and nvfp4: block_rows
    (the weights' blocks), and the random Hadamard transform of the
    weight-gradient GEMM's inputs (wgrad_hadamard, hadamard_seed)."""

    def __init__(self, enabled, fmt=None, rounding="rne", saturate=False, flush_subnormals=False,
                 seed=0, sr_bits=0, scaling="none", margin=0, pow2=False, mx_block=32,
                 block_rows=1, wgrad_hadamard=0, hadamard_seed=1):
        self.enabled = enabled
        self.format = _core.Format(fmt) if enabled else None
        self.rounding, self.saturate, self.flush_subnormals = rounding, saturate, flush_subnormals
        self.seed, self.sr_bits = seed, sr_bits
        self.scaling, self.margin, self.pow2, self.mx_block = scaling, margin, pow2, mx_block
        self.block_rows, self.wgrad_hadamard = block_rows, wgrad_hadamard
        self.hadamard_seed = hadamard_seed

    @property
    def stochastic(self):
        return self.enabled and self.rounding == "sr"

    @property
    def elementwise(self):
        """True unless the blocks follow each GEMM's reduction dimension (mx,
        group, nvfp4)."""
        return self.scaling not in ALONG_K

    def quantize(self, x, offset=0, state=None, wgrad=False):
        """x (array or tensor, last dimension = the GEMM's reduction dimension
        for mx, group and nvfp4) rounded per this operand; stochastic rounding
        from `offset`.  wgrad: x is an input of a linear layer's
        weight-gradient GEMM (where nvfp4's Hadamard transform applies)."""
        if not self.enabled:
            return x
        return _core.quantize_scaled(x, self.format, state=state, **self._args(offset, wgrad))

    def gemm_quant(self, offset=0, wgrad=False):
        """This operand as the C GEMMs take it (an exmy_operand_quant, for
        exmy_qgemm_accum to round it as quantize rounds x); None if disabled.
        Not for delayed scaling (its state stays with quantize)."""
        if not self.enabled:
            return None
        return _core._operand_quant(self.format, **self._args(offset, wgrad))

    def _args(self, offset, wgrad):
        """quantize_scaled's arguments but x, format and state."""
        scaling, blocks = self.scaling, {}
        if scaling == "mx":
            scaling = f"mx:{self.mx_block or 32}"
        elif scaling in ("group", "nvfp4"):  # mx_block 0: the whole row, or nvfp4's 16
            scaling = f"{scaling}:{self.mx_block}"
            blocks = dict(block_rows=self.block_rows, hadamard=self.wgrad_hadamard if wgrad else 0,
                          hadamard_seed=self.hadamard_seed)
        return dict(scaling=scaling, rounding=self.rounding, saturate=self.saturate,
                    flush_subnormals=self.flush_subnormals, seed=self.seed, offset=offset,
                    sr_bits=self.sr_bits, margin=self.margin, pow2=self.pow2, **blocks)

    def __repr__(self):
        if not self.enabled:
            return "Operand(fp32)"
        return (f"Operand({self.format.name}, {self.rounding}, scaling={self.scaling}, "
                f"saturate={self.saturate}, seed={self.seed})")


class Recipe:
    """A precision recipe: Recipe.load("e8m3"), Recipe.load("path/to.cfg"),
    or Recipe.from_text("format_w = e4m3\\n...").  Attributes: values (every
    recipe key, resolved), name, amax_history, quant_attention,
    quant_lm_head, high_precision_first_last, accumulate (an AccumModel),
    grad_format, moments, ... and
    operands(seed, high=False) -> {"w": Operand, "a": ..., "g": ...}.
    ValueError (with the file and line) on what recipe_from_config rejects."""

    def __init__(self, values, source="(recipe)"):
        self.values = dict(values)
        self.source = source
        v = self.values
        ints = {}
        for key in ("margin", "pow2_scale", "mx_block", "sr_bits", "saturate", "flush_subnormals",
                    "amax_history", "quant_attention", "quant_lm_head",
                    "high_precision_first_last", "moment_group", "moment_dre",
                    "weight_block_rows", "wgrad_hadamard", "hadamard_seed"):
            if not _INT.match(v[key]) or not -(1 << 63) <= int(v[key]) < 1 << 63:
                raise ValueError(f"{source}: config key '{key}': not an integer: '{v[key]}'")
            ints[key] = int(v[key])
        if v["scaling"] not in SCALINGS:  # checked even when unused, as in C
            raise ValueError(f"{source}: config key 'scaling' must be one of {'|'.join(SCALINGS)}, "
                             f"not '{v['scaling']}'")
        self.name = v["recipe"]
        self.amax_history = ints["amax_history"]
        if not 1 <= self.amax_history <= 1024:
            raise ValueError(f"{source}: amax_history must be in 1..1024")
        self.quant_attention = ints["quant_attention"] != 0
        self.quant_lm_head = ints["quant_lm_head"] != 0
        self.high_precision_first_last = ints["high_precision_first_last"] != 0
        self._ints = ints
        self.operands(0)  # validates formats, roundings and scaling, as recipe_from_config
        self.operands(0, high=True)
        # the keys' ranges (config.c) and recipe_from_config's checks of the blocks
        if not 1 <= ints["weight_block_rows"] <= 1 << 20:
            raise ValueError(f"{source}: config key 'weight_block_rows' out of range")
        if ints["wgrad_hadamard"] not in (0, 16):
            raise ValueError(f"{source}: config key 'wgrad_hadamard' must be one of 0|16")
        if not 0 <= ints["hadamard_seed"] <= 1 << 53:
            raise ValueError(f"{source}: config key 'hadamard_seed' out of range")
        if ints["weight_block_rows"] > 1 and v["scaling"] not in ("group", "nvfp4"):
            raise ValueError(f"{source}: weight_block_rows needs scaling = group or nvfp4")
        ops = self.operands(0)
        if ints["wgrad_hadamard"] and (v["scaling"] != "nvfp4" or not ops["a"].enabled or
                                       not ops["g"].enabled):
            raise ValueError(f"{source}: wgrad_hadamard needs scaling = nvfp4 and format_a, "
                             "format_g quantized")
        try:
            self.accumulate = _core.AccumModel(v["accumulate"])
        except ValueError:
            raise ValueError(f"{source}: accumulate: '{v['accumulate']}' is not an accumulation "
                             "model") from None
        self.grad_format = None if _is_fp32(v["grad_format"]) else self._format(
            v["grad_format"], "grad_format")
        # a model-level choice (model.c's SwiGLU): carried for the caller, not
        # applied by QuantLinear
        self.swiglu_scale = v["swiglu_scale"].lower()
        if self.swiglu_scale not in ("none", "row"):
            raise ValueError(f"{source}: config key 'swiglu_scale' must be one of none|row, "
                             f"not '{v['swiglu_scale']}'")
        # likewise model-level (model.c: which tensors are rounded to bf16 between the GEMMs)
        self.activations = v["activations"]
        if self.activations not in ("f32", "bf16"):
            raise ValueError(f"{source}: config key 'activations' must be one of f32|bf16, "
                             f"not '{v['activations']}'")
        if self.activations == "bf16" and self.swiglu_scale == "row":
            raise ValueError(f"{source}: activations = bf16 with swiglu_scale = row is not defined")
        self.moments = v["moments"]
        if self.moments in ("coat", "fp8"):
            for key in ("moment1_format", "moment2_format"):
                self._format(v[key], "moment format")
            if ints["moment_group"] < 1:
                raise ValueError(f"{source}: moment_group must be >= 1")
        elif self.moments not in ("fp32", "bf16"):
            raise ValueError(f"{source}: moments must be fp32, coat, bf16 or fp8, not "
                             f"'{self.moments}'")

    def _format(self, name, key):
        try:
            return _core.Format(name)
        except ValueError:
            raise ValueError(f"{self.source}: {key}: unknown format '{name}'") from None

    def operands(self, seed=DEFAULT_SEED, high=False):
        """The role templates {"w", "a", "g"} for a run seeded `seed`."""
        v, ints = self.values, self._ints
        ops = {}
        for i, role in enumerate(ROLES):
            key = "high_format" if high else f"format_{role}"
            fmt = v[key]
            if _is_fp32(fmt):
                ops[role] = Operand(False)
                continue
            self._format(fmt, key)
            rounding = "rne" if high else (v[f"rounding_{role}"] or v["rounding"])
            if rounding.lower() not in _core.ROUNDINGS:
                raise ValueError(f"{self.source}: {key}: unknown rounding '{rounding}'")
            if not high and v["scaling"] not in SCALINGS:
                raise ValueError(f"{self.source}: {key}: unknown scaling '{v['scaling']}' "
                                 f"({', '.join(SCALINGS)})")
            sr_bits = 0 if high else ints["sr_bits"]
            if not 0 <= sr_bits <= 32:
                raise ValueError(f"{self.source}: {key}: invalid rounding options "
                                 f"(sr_bits {sr_bits})")
            if high:
                ops[role] = Operand(True, fmt, "rne", seed=0, mx_block=32)
            else:
                ops[role] = Operand(True, fmt, rounding.lower(), saturate=ints["saturate"] != 0,
                                    flush_subnormals=ints["flush_subnormals"] != 0,
                                    seed=(seed + 1 + i) % (1 << 64), sr_bits=sr_bits,
                                    scaling=v["scaling"], margin=ints["margin"],
                                    pow2=ints["pow2_scale"] != 0,
                                    mx_block=ints["mx_block"] if v["scaling"] in ALONG_K else 0,
                                    block_rows=ints["weight_block_rows"] if role == "w" else 1,
                                    wgrad_hadamard=ints["wgrad_hadamard"],
                                    hadamard_seed=ints["hadamard_seed"])
        return ops

    @classmethod
    def from_text(cls, text, source="(recipe text)"):
        values = dict(RECIPE_DEFAULTS)
        for lineno, line in enumerate(text.splitlines(), 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            key, eq, value = line.partition("=")
            key, value = key.strip(), value.strip()
            if not eq:
                raise ValueError(f"{source}:{lineno}: expected key=value, got '{line}'")
            if key not in RECIPE_DEFAULTS:
                raise ValueError(f"{source}:{lineno}: '{key}' is not a recipe key")
            if len(value) >= CONFIG_VALUE_LEN:
                raise ValueError(f"{source}:{lineno}: value of '{key}' too long")
            values[key] = value
        return cls(values, source)

    @classmethod
    def load(cls, name_or_path):
        """A recipe by name (a file <name>.cfg in config_dirs()) or by path."""
        if isinstance(name_or_path, Recipe):
            return name_or_path
        path = name_or_path
        if not (os.sep in path or path.endswith(".cfg")):
            for d in config_dirs():
                cand = os.path.join(d, path + ".cfg")
                if os.path.exists(cand):
                    path = cand
                    break
            else:
                raise ValueError(f"exmy: no recipe '{name_or_path}' in {', '.join(config_dirs())}"
                                 f" (available: {', '.join(available()) or 'none'})")
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise ValueError(f"exmy: cannot open recipe '{path}': {e.strerror}") from None
        except UnicodeDecodeError:
            raise ValueError(f"exmy: recipe '{path}' is not text") from None
        return cls.from_text(text, path)

    def __repr__(self):
        return f"exmy.recipe.Recipe({self.name!r} from {self.source})"
