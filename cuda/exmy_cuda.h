/*
 * exmy_cuda.h — the GPU twin of cpu/exmy_cpu.h's bulk conversions.
 *
 * Every function takes device pointers, enqueues its work on `stream` and
 * returns at once (the result of the launch; errors of the kernel itself show
 * at the next synchronisation).  The device code is lib/round_core.h and
 * lib/philox.h compiled by nvcc, so a GPU result is bit-identical to the CPU
 * reference with the same options, stochastic rounding included: element i of
 * a call draws Philox word (offset + i) & 3 of block (offset + i) >> 2 under
 * key = seed, exactly as exmy_encode_f32 does.
 *
 * Formats and options are passed by host pointer and copied into the launch;
 * the caller may free them right after the call.
 */
#ifndef EXMY_CUDA_H
#define EXMY_CUDA_H

#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/exmy.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Opens cuBLAS and cuBLASLt (cuda/cublas_loader.c): exmy links neither, so
 * that programs which never use the GPU start without them.  0 when they are
 * loaded; otherwise -1 and one line in err saying what is missing.  The GEMM
 * functions call it themselves; call it first for a clear message. */
int exmy_cuda_cublas_load(char *err, size_t errlen);

/* How many times a stream's reduction scratch (the amax and statistics
 * passes' device buffer, kept per stream and grown on demand) has moved: a
 * CUDA graph that captured such a pass must be captured again once it has
 * changed. */
unsigned long long exmy_cuda_scratch_epoch(void);

/* y[i] = the nearest value of x[i] in format f (per o), as float32; y may
 * alias x.  Device pointers. */
cudaError_t exmy_cuda_quantize_f32(const exmy_format *f,
                                   const exmy_rounding_opts *o, const float *x,
                                   float *y, size_t n, cudaStream_t stream);

/* codes[i] = the code of x[i]: uint8_t / uint16_t / uint32_t per
 * exmy_code_bytes(f), sub-byte formats in the low bits of their byte. */
cudaError_t exmy_cuda_encode_f32(const exmy_format *f,
                                 const exmy_rounding_opts *o, const float *x,
                                 void *codes, size_t n, cudaStream_t stream);

/* y[i] = the value of codes[i]. */
cudaError_t exmy_cuda_decode_f32(const exmy_format *f, const void *codes,
                                 float *y, size_t n, cudaStream_t stream);

/* OCP MX, as exmy_mx_encode_f32: codes (one byte per element, f of <= 8
 * bits) and one E8M0 code per block (scales[r * nblocks + b], nblocks =
 * ceil(cols / block), block 0 = 32); bit-identical to the CPU.  Blocks of a
 * multiple of 8 up to 256 elements dividing cols take the one-pass path. */
cudaError_t exmy_cuda_mx_encode_f32(const exmy_format *f,
                                    const exmy_rounding_opts *o, int block,
                                    const float *x, size_t rows, size_t cols,
                                    uint8_t *codes, uint8_t *scales,
                                    cudaStream_t stream);
/* The inverse, as exmy_mx_decode_f32: y = decode(code) * 2^(scale - 127). */
cudaError_t exmy_cuda_mx_decode_f32(const exmy_format *f, int block,
                                    const uint8_t *codes, const uint8_t *scales,
                                    size_t rows, size_t cols, float *y,
                                    cudaStream_t stream);

/* An MX operand of a GEMM as one bfloat16 image, K contiguous: y (uint16_t
 * bf16 bits, rows x cols dense) holds the MX values of X' (rows x cols, X'[r][c]
 * = x[r ld + c], trans: x[c ld + r]) in blocks of 32 along cols, exactly
 * those of exmy_cuda_mx_encode_f32 followed by exmy_cuda_mx_decode_f32 on the
 * dense X' (sr word index o->offset + r cols + c), each stored as bfloat16.
 * An MX value is an element value times a power of two, so it is a bfloat16
 * value unless it is a float32 subnormal with bits below 2^-133 (blocks of
 * amax below about 2^-116 for E4M3); where one is not, *inexact (device) =
 * tag, and y holds its bf16 rounding.  One pass, no synchronisation.
 * block: 0 or 32 (else cudaErrorNotSupported); f of one-byte codes. */
cudaError_t exmy_cuda_mx_quantize_bf16(const exmy_format *f, const exmy_rounding_opts *o,
                                       int block, const float *x, size_t ld, bool trans,
                                       size_t rows, size_t cols, void *y, unsigned *inexact,
                                       unsigned tag, cudaStream_t stream);
/* Both images of x (rows x cols, ld) in one read, where a GEMM and its
 * weight gradient read the same tensor along each of its dimensions (dY
 * along OC for dX, along the tokens for dW): y as
 * exmy_cuda_mx_quantize_bf16(f, o, block, x, ld, false, rows, cols, y,
 * inexact, tag) and yt as exmy_cuda_mx_quantize_bf16(f, o, block, x, ld,
 * true, cols, rows, yt, inexact_t, tag_t), the same bits and flags; the two
 * calls themselves where the one-pass kernel does not serve the shape (rows
 * and cols multiples of 64, aligned). */
cudaError_t exmy_cuda_mx_quantize_bf16_pair(const exmy_format *f, const exmy_rounding_opts *o,
                                            int block, const float *x, size_t ld, size_t rows,
                                            size_t cols, void *y, unsigned *inexact,
                                            unsigned tag, void *yt, unsigned *inexact_t,
                                            unsigned tag_t, cudaStream_t stream);
/* The exact fallback of a GEMM of such images, decided on the device: when
 * *flag == tag or a carry word is nonzero (carry_a, carry_b: other images'
 * inexact words, each may be NULL), r (m x n, ldr) = alpha op(A) op(B) +
 * beta C (C not read when beta == 0; r may be C then) with op(A) and op(B)^T MX-quantized
 * along K as exmy_cuda_mx_quantize_bf16 does (blocks of 32, sr indices of
 * the dense K-contiguous images m x k and n x k), products and sums in
 * float32 (fmaf, k in order); *flag = tag and *count += 1.  Otherwise
 * nothing (one small launch). */
cudaError_t exmy_cuda_mx_gemm_f32_if(unsigned *flag, unsigned tag, const unsigned *carry_a,
                                     const unsigned *carry_b, bool trans_a,
                                     bool trans_b, size_t m, size_t n, size_t k, float alpha,
                                     const float *a, size_t lda, const exmy_format *fa,
                                     const exmy_rounding_opts *oa, const float *b, size_t ldb,
                                     const exmy_format *fb, const exmy_rounding_opts *ob,
                                     float beta, const float *c, size_t ldc, float *r, size_t ldr,
                                     unsigned long long *count, cudaStream_t stream);

/* exmy_tensor_stats_f32 on the device: the statistics of x against its
 * quantized image y (n values each), reduced on the device and written to
 * *stats, a DEVICE pointer (no host round trip; copy it when you need it).
 * Counts, amax and min_nonzero are exact and equal the CPU's; the four sums
 * are double, reduced in a fixed order (deterministic), so they equal the
 * CPU's up to the order of double additions. */
cudaError_t exmy_cuda_tensor_stats_f32(const exmy_format *f, const float *x,
                                       const float *y, size_t n,
                                       exmy_tensor_stats *stats,
                                       cudaStream_t stream);

/* Per-tensor current scaling (EXMY_SCALING_TENSOR) entirely on the device:
 * amax reduction, s = exmy_scale_from_amax(f, amax, margin, pow2), then
 * y = Q(x*s) * (1/s) in float32; y may alias x; bit-identical to
 * exmy_quantize_scaled_f32 with that recipe.  If scale_out is not NULL the
 * scale used is stored there (device pointer). */
cudaError_t exmy_cuda_quantize_tensor_scaled_f32(const exmy_format *f,
                                                 const exmy_rounding_opts *o,
                                                 int margin, bool pow2,
                                                 const float *x, float *y,
                                                 size_t n, float *scale_out,
                                                 cudaStream_t stream);

/* Per-tensor delayed scaling (EXMY_SCALING_DELAYED, Transformer Engine's
 * DelayedScaling) with the amax history on the device: quantize with the
 * state's current scale, then record this tensor's amax and recompute the
 * scale from the history (max, or the most recent amax), keeping the old one
 * where that is 0 or not finite; no host round trip.  Bit-identical to
 * exmy_quantize_scaled_f32 with a CPU exmy_delayed_state fed the same
 * tensors.  exmy_cuda_delayed_scale: device pointer to {scale, 1/scale}. */
typedef struct exmy_cuda_delayed_state exmy_cuda_delayed_state;
exmy_cuda_delayed_state *exmy_cuda_delayed_state_new(int history_len);
void exmy_cuda_delayed_state_free(exmy_cuda_delayed_state *s);
const float *exmy_cuda_delayed_scale(const exmy_cuda_delayed_state *s);
cudaError_t exmy_cuda_quantize_delayed_scaled_f32(
    const exmy_format *f, const exmy_rounding_opts *o, int margin, bool pow2,
    bool history_most_recent, exmy_cuda_delayed_state *state, const float *x,
    float *y, size_t n, cudaStream_t stream);

/* The delayed state between the device and a host exmy_delayed_state of the
 * same history length (checkpoints; synchronous). */
cudaError_t exmy_cuda_delayed_state_download(const exmy_cuda_delayed_state *s,
                                             exmy_delayed_state *host);
cudaError_t exmy_cuda_delayed_state_upload(exmy_cuda_delayed_state *s,
                                           const exmy_delayed_state *host);
/* dst becomes src (counters, history and scale; the same history length, else
 * cudaErrorInvalidValue), in stream order. */
cudaError_t exmy_cuda_delayed_state_copy(exmy_cuda_delayed_state *dst,
                                         const exmy_cuda_delayed_state *src,
                                         cudaStream_t stream);

/* exmy_tensor_stats_f32 of a per-tensor-scaled quantization: x the input, y
 * its dequantized image, scale_inv (device) the {s, 1/s} that was used (NULL:
 * no scaling, as exmy_cuda_tensor_stats_f32).  The ratios are judged on x·s
 * and Q(x·s), as the CPU does; stats->scale = s, and with `delayed`
 * stats->delayed_over_current = s / exmy_scale_from_amax(f, amax, margin,
 * pow2).  *stats is a device pointer. */
cudaError_t exmy_cuda_tensor_stats_scaled_f32(const exmy_format *f, const float *x,
                                              const float *y, size_t n,
                                              const float *scale_inv, int margin, bool pow2,
                                              bool delayed, exmy_tensor_stats *stats,
                                              cudaStream_t stream);

/* The statistics of an MX quantization: x (rows x cols) the input, y its
 * dequantized image, scales the E8M0 codes of exmy_cuda_mx_encode_f32
 * (blocks of `block` along a row, 0 = 32).  Ratios judged on x·2^-e and
 * Q(x·2^-e) per block, as the CPU; scale NAN.  *stats is a device pointer. */
cudaError_t exmy_cuda_tensor_stats_mx_f32(const exmy_format *f, int block, const float *x,
                                          const float *y, const uint8_t *scales, size_t rows,
                                          size_t cols, exmy_tensor_stats *stats,
                                          cudaStream_t stream);

/* The BF16 GEMM path's scaled operands in one pass over x (f must pass
 * exmy_cuda_bf16_exact): y (uint16_t bf16 bits) = Q(x·s), the SCALED values,
 * which are exactly those exmy_cuda_quantize_{delayed,tensor}_scaled_f32 round
 * (their output is y·(1/s)); the GEMM applies 1/s itself.  Delayed: s is the
 * state's current scale, copied to *scale_used (device, may be NULL), and the
 * amax of x is recorded and the state updated as there.  Tensor: amax pass,
 * then the rounding pass; s to *scale_out (device, may be NULL). */
cudaError_t exmy_cuda_quantize_delayed_bf16(const exmy_format *f, const exmy_rounding_opts *o,
                                            int margin, bool pow2, bool history_most_recent,
                                            exmy_cuda_delayed_state *state, const float *x,
                                            void *y, size_t n, float *scale_used,
                                            cudaStream_t stream);
cudaError_t exmy_cuda_quantize_tensor_bf16(const exmy_format *f, const exmy_rounding_opts *o,
                                           int margin, bool pow2, const float *x, void *y,
                                           size_t n, float *scale_out, cudaStream_t stream);
/* The rounding pass alone, under a scale already on the device: y = Q(x·s)
 * with s = scale_inv[0] (scale_inv: device {s, 1/s}; NULL: unscaled, as
 * exmy_cuda_quantize_bf16).  After exmy_cuda_scale_from_amax (below) of an
 * amax that the kernel writing x folded as it wrote it, this is
 * exmy_cuda_quantize_tensor_bf16 without its amax pass: the same bits. */
cudaError_t exmy_cuda_quantize_scaled_bf16(const exmy_format *f, const exmy_rounding_opts *o,
                                           const float *scale_inv, const float *x, void *y,
                                           size_t n, cudaStream_t stream);

/* For a kernel that computes a tensor and rounds it in the same pass into the
 * image above (the BF16 path's quantize8_bf16 of cuda/elementwise.cuh, then
 * block_amax_fold), in place of the float32 tensor and that pass.  Delayed:
 * exmy_cuda_delayed_begin zeroes the state's amax and gives its device
 * {s, 1/s} (*scale_inv) and amax word (*amax_bits) for the kernel to scale by
 * and fold the unscaled tensor's amax into; exmy_cuda_delayed_end, after the
 * kernel, records that amax and moves the state on as
 * exmy_cuda_quantize_delayed_bf16 does after its pass (*scale_used as there).
 * Current scaling: exmy_cuda_scale_from_amax sets scale_inv (device, two
 * floats) to {s, 1/s}, s = exmy_scale_from_amax(f, amax, margin, pow2) of the
 * device amax word (finite max |x| as float bits, as block_amax_fold leaves
 * it), the s that exmy_cuda_quantize_tensor_bf16 takes from its amax pass. */
cudaError_t exmy_cuda_delayed_begin(exmy_cuda_delayed_state *state, const float **scale_inv,
                                    unsigned int **amax_bits, cudaStream_t stream);
cudaError_t exmy_cuda_delayed_end(const exmy_format *f, int margin, bool pow2,
                                  bool history_most_recent, exmy_cuda_delayed_state *state,
                                  float *scale_used, cudaStream_t stream);
cudaError_t exmy_cuda_scale_from_amax(const exmy_format *f, int margin, bool pow2,
                                      const unsigned int *amax_bits, float *scale_inv,
                                      cudaStream_t stream);
/* Current scaling's scale worked out by the kernel that rounds with it, in
 * place of exmy_cuda_scale_from_amax's one-thread kernel before it: each
 * block takes s = exmy_scale_from_amax(fmax, *amax_bits, margin, pow2)
 * (fmax: the format's largest value; shrink: 2^-margin, made on the host by
 * exmy_cuda_amax_scale_of) and block 0 leaves {s, 1/s} in
 * scale_out (device, two floats), as exmy_cuda_scale_from_amax would.
 * amax_bits NULL: none (the scale, if any, is given).  Block 0 also leaves,
 * for up to two products of this tensor's scaled image with another's
 * (partner[k]: that one's device {s_k, 1/s_k}, final before the kernel),
 * the factor that takes the product back to the tensors' own: product_alpha[k]
 * = (1/s)(1/s_k), each inverse rounded once (NULL: none). */
typedef struct {
  const unsigned int *amax_bits;
  float fmax;
  double shrink; /* 2^-margin */
  int pow2;
  float *scale_out;
  const float *partner[2];
  float *product_alpha[2];
} exmy_cuda_amax_scale;
exmy_cuda_amax_scale exmy_cuda_amax_scale_of(const exmy_format *f, int margin, bool pow2,
                                             const unsigned int *amax_bits, float *scale_out);
/* exmy_cuda_scale_from_amax then exmy_cuda_quantize_scaled_bf16, in one
 * kernel: the same bits and the same {s, 1/s} in sc->scale_out. */
cudaError_t exmy_cuda_quantize_amax_scaled_bf16(const exmy_format *f,
                                                const exmy_rounding_opts *o,
                                                const exmy_cuda_amax_scale *sc, const float *x,
                                                void *y, size_t n, cudaStream_t stream);
/* The amax pass of exmy_cuda_quantize_tensor_bf16 on its own: x's finite max
 * |x| folded into *amax_bits (device; the caller zeroes it), as float bits.
 * Then exmy_cuda_scale_from_amax and exmy_cuda_quantize_scaled_bf16 are that
 * call, with no stream scratch (which a CUDA graph's capture cannot grow). */
cudaError_t exmy_cuda_amax_fold(const float *x, size_t n, unsigned int *amax_bits,
                                cudaStream_t stream);

/* Per-group scaling (EXMY_SCALING_GROUP) of a row-major rows x cols tensor:
 * each group of `group` consecutive elements of a row (0 = the whole row; the
 * last group of a row may be shorter) gets the TENSOR-formula scale of its
 * own finite amax, y = Q(x*s) * (1/s); y may alias x.  With
 * dynamic_range_expansion, COAT's x -> sign(x)|x|^k per group (see
 * exmy_scaling).  Without it the result is bit-identical to
 * exmy_quantize_scaled_f32; with it, pow and log are CUDA's double ones, so a
 * value may differ where the CPU's libm rounds pow differently. */
cudaError_t exmy_cuda_quantize_group_scaled_f32(
    const exmy_format *f, const exmy_rounding_opts *o, int group, int margin,
    bool pow2, bool dynamic_range_expansion, const float *x, float *y,
    size_t rows, size_t cols, cudaStream_t stream);

/* Two-dimensional GROUP blocks (sc->block_rows > 1; no dynamic range
 * expansion) and NVFP4 (EXMY_SCALING_NVFP4, with its `hadamard`) of a
 * row-major rows x cols tensor, as exmy_quantize_scaled_f32 computes them,
 * bit for bit; y may alias x.  Other kinds: cudaErrorInvalidValue. */
cudaError_t exmy_cuda_quantize_blocks_f32(const exmy_format *f, const exmy_rounding_opts *o,
                                          const exmy_scaling *sc, const float *x, float *y,
                                          size_t rows, size_t cols, cudaStream_t stream);

/* GROUP blocks (any block_rows; no dynamic range expansion) as
 * exmy_cuda_quantize_blocks_f32, also writing each element's code q =
 * Q(x·s) to codes (rows x cols, or NULL; neither x nor y) and each block's
 * dequantization factor 1/s to block_inv (or NULL), as the CPU's
 * exmy_quantize_group_codes_f32 lays them out, bit for bit.  Other kinds:
 * cudaErrorInvalidValue. */
cudaError_t exmy_cuda_quantize_group_codes_f32(const exmy_format *f,
                                               const exmy_rounding_opts *o,
                                               const exmy_scaling *sc, const float *x, float *y,
                                               float *codes, float *block_inv, size_t rows,
                                               size_t cols, cudaStream_t stream);

/* exmy_cuda_quantize_blocks_f32 (GROUP, including 1-row blocks, and NVFP4)
 * with the statistics exmy_quantize_scaled_f32 gives, reduced on the device
 * into *stats (a DEVICE pointer; NULL: none): ratios judged on x·s and
 * Q(x·s) per block (for NVFP4 with `hadamard`, of the transformed tensor, as
 * the CPU describes it), scale NAN; no host round trip.  Counts, amax and
 * min_nonzero equal the CPU's; the double sums are reduced in a fixed order
 * (deterministic) and equal the CPU's up to the order of additions. */
cudaError_t exmy_cuda_quantize_blocks_stats_f32(const exmy_format *f,
                                                const exmy_rounding_opts *o,
                                                const exmy_scaling *sc, const float *x,
                                                float *y, size_t rows, size_t cols,
                                                exmy_tensor_stats *stats, cudaStream_t stream);

/* Whether every product q · s_b of a value q of f and an E4M3 value s_b is a
 * bfloat16 value (exponent range included): E2M1 and formats of <= 3
 * mantissa bits in a range near it. */
bool exmy_cuda_nvfp4_bf16_exact(const exmy_format *f);

/* An NVFP4 (sc->kind EXMY_SCALING_NVFP4) GEMM operand for a bf16 GEMM: the
 * dense rows x cols image op(X) (x with leading dimension ldx, transposed
 * when `transpose`: x is then cols x rows), quantized exactly as
 * exmy_cuda_quantize_blocks_f32 quantizes that dense image (the same tensor
 * amax and S_enc, block scales, rounding, sr indices, Hadamard transform,
 * blocks of sc->block_rows rows), written as image (uint16_t bf16 bits, rows
 * x cols) = q · s_b, the rounded element times its block's E4M3 decode scale,
 * exactly (f must pass exmy_cuda_nvfp4_bf16_exact).  The reference's value is
 * q · exmy_core_nvfp4_decode_factor(s_b, S_enc); a GEMM of the images applies
 * exmy_core_nvfp4_tensor_decode(S_enc) of each operand once.  s_enc (device,
 * or NULL) receives S_enc; block_scales (device, or NULL) s_b of each block,
 * blocks in row-major order over the grid of blocks.  work: rows x cols
 * floats of device scratch (gathered and transformed operand), which may be
 * NULL only where x is dense (ldx == cols), not transposed and has no
 * Hadamard transform.  No host synchronisation. */
cudaError_t exmy_cuda_nvfp4_quantize_bf16(const exmy_format *f, const exmy_rounding_opts *o,
                                          const exmy_scaling *sc, const float *x, size_t ldx,
                                          bool transpose, size_t rows, size_t cols, float *work,
                                          void *image, float *s_enc, float *block_scales,
                                          cudaStream_t stream);

/* ---- quantized GEMM through cuBLAS ----
 * C (m x n, row-major) = Q(A) . Q(B)^T with A m x k and Bt n x k, both
 * row-major with K contiguous (exmy_qgemm's op(A) and op(B)^T), FP32
 * accumulation.  Paths:
 *   BF16: both operands in a format whose values are all bfloat16 values
 *     (M <= 7 and no value below bf16's smallest subnormal): the quantized
 *     operands go to bf16 exactly, in the same pass as the rounding, and
 *     cuBLAS multiplies them on the tensor cores with FP32 accumulation; the
 *     products are exact, so this IS the emulated low-precision GEMM up to the
 *     order of the FP32 additions.
 *   FP32: anything else (or an unquantized operand): quantize to float32 and
 *     cublasGemmEx with CUBLAS_COMPUTE_32F_PEDANTIC (never TF32).
 *   FP8: E4M3/E5M2 operands (not both E5M2): our encode gives the FP8 codes
 *     and cublasLt's FP8 GEMM (per-tensor scales 1) multiplies them; the
 *     hardware reference path.
 *   AUTO: BF16 where exact, else FP32.
 * fa / fb NULL: that operand is used as it is (FP32 path).  sr: the element
 * index is the position in the operand's row-major storage + offset. */
typedef enum {
  EXMY_CUDA_GEMM_AUTO = 0,
  EXMY_CUDA_GEMM_BF16,
  EXMY_CUDA_GEMM_FP32,
  EXMY_CUDA_GEMM_FP8,
} exmy_cuda_gemm_path;

typedef struct exmy_cuda_gemm exmy_cuda_gemm; /* cuBLAS handles, buffers */
exmy_cuda_gemm *exmy_cuda_gemm_new(void);
void exmy_cuda_gemm_free(exmy_cuda_gemm *g);

/* Whether every value of f is a bfloat16 value (the BF16 path is exact). */
bool exmy_cuda_bf16_exact(const exmy_format *f);

/* Round x into f (exmy_cuda_bf16_exact(f) must hold) and store each value as
 * bfloat16 (uint16_t bits): the operand of the BF16 path in one pass; the
 * values are those of exmy_cuda_quantize_f32 with the same options. */
cudaError_t exmy_cuda_quantize_bf16(const exmy_format *f, const exmy_rounding_opts *o,
                                    const float *x, void *y, size_t n,
                                    cudaStream_t stream);

/* Returns cudaSuccess, cudaErrorInvalidValue for a path that cannot serve
 * these operands, or cudaErrorUnknown when cuBLAS refuses (message on
 * stderr).  *used (if not NULL) receives the path taken. */
cudaError_t exmy_cuda_qgemm_nt(exmy_cuda_gemm *g, exmy_cuda_gemm_path path,
                               size_t m, size_t n, size_t k, const float *a,
                               const exmy_format *fa,
                               const exmy_rounding_opts *oa, const float *bt,
                               const exmy_format *fb,
                               const exmy_rounding_opts *ob, float *c,
                               exmy_cuda_gemm_path *used, cudaStream_t stream);

/* ---- exmy_qgemm's twin: C = alpha . op(A) . op(B) + beta . C ----
 * Same argument order and meaning as exmy_qgemm (cpu/exmy_cpu.h), device
 * pointers, row-major, plus the context g, *used and a stream.  Each operand
 * is first copied K contiguous into a workspace of g (op(A) as m x k, op(B)^T
 * as n x k) and quantized there with its recipe by the GPU recipe kernels
 * (NONE / TENSOR / DELAYED / MX / GROUP / NVFP4 along K; sr's index = position in
 * that dense image + round.offset, as on the CPU), so the dequantized
 * operands are bit-identical to the CPU's; cuBLAS then multiplies them with
 * FP32 accumulation and applies alpha/beta to C (ldc), and C is quantized
 * per qc (as a dense m x n image).
 * Path (*used): BF16 when both operands' formats pass exmy_cuda_bf16_exact
 * and their recipe dequantizes with a power-of-two factor (NONE, MX, or
 * TENSOR/DELAYED/GROUP with pow2 and no dynamic range expansion) AND a device
 * check finds every dequantized value unchanged by the conversion to bf16
 * (it can fail only for values below 2^-126 whose float32 subnormal bits lie
 * below bf16's 2^-133 grid); else FP32 (pedantic, never TF32).  That check
 * is one 4-byte readback: the call synchronises `stream` once when the BF16
 * path is a candidate.  Disabled or NULL quant: operand used as it is (FP32).
 * DELAYED takes the device state `delayed` (exmy_cuda_delayed_state), not the
 * CPU one.  stats must be NULL (not done on the GPU yet: the scaled recipes
 * have no GPU statistics); MX needs a format of <= 8 bits.  Returns
 * cudaSuccess, cudaErrorInvalidValue / cudaErrorNotSupported for arguments
 * it cannot serve, cudaErrorUnknown when cuBLAS refuses. */
typedef struct {
  bool enabled;
  exmy_format format;
  exmy_rounding_opts round;
  exmy_scaling scaling;
  exmy_cuda_delayed_state *delayed; /* DELAYED only */
  exmy_tensor_stats *stats;         /* must be NULL (not supported yet) */
} exmy_cuda_operand_quant;

cudaError_t exmy_cuda_qgemm(exmy_cuda_gemm *g, bool trans_a, bool trans_b,
                            size_t m, size_t n, size_t k, float alpha,
                            const float *a, size_t lda,
                            const exmy_cuda_operand_quant *qa, const float *b,
                            size_t ldb, const exmy_cuda_operand_quant *qb,
                            float beta, float *c, size_t ldc,
                            const exmy_cuda_operand_quant *qc,
                            exmy_cuda_gemm_path *used, cudaStream_t stream);

struct exmy_accum_model; /* lib/accum_core.h */

/* exmy_cuda_qgemm with every dot product of op(A)·op(B) accumulated as
 * `model` says (lib/accum_core.h, compiled for the device: a tensor core's
 * limited-precision accumulation), bit-identical to the CPU's
 * exmy_qgemm_accum: the operands are gathered and quantized as in
 * exmy_cuda_qgemm, then one thread per element of C runs exmy_accum_dot over
 * them and writes alpha·dot (+ beta·C when beta != 0) rounded as the CPU
 * does (no fused multiply-add); then C is quantized per qc.  `model` is a
 * host pointer, copied into the launch, emin_a / emin_b included (as for
 * exmy_qgemm_accum, the caller's, except for pow2-scaled qa / qb: below;
 * a block-scaled qa / qb (exmy_accum_block_scaled) is read as its codes
 * and block scales, as on the CPU).  cudaErrorInvalidValue for an
 * invalid model (exmy_accum_model_check), ldc < n, a leading dimension too
 * small, or a size over INT32_MAX; no cuBLAS is used. */
cudaError_t exmy_cuda_qgemm_accum(exmy_cuda_gemm *g, bool trans_a, bool trans_b, size_t m,
                                  size_t n, size_t k, float alpha, const float *a, size_t lda,
                                  const exmy_cuda_operand_quant *qa, const float *b,
                                  size_t ldb, const exmy_cuda_operand_quant *qb, float beta,
                                  float *c, size_t ldc, const exmy_cuda_operand_quant *qc,
                                  const struct exmy_accum_model *model, cudaStream_t stream);

/* exmy_cuda_qgemm_accum for operands already quantized with a power-of-two
 * per-tensor scale s = 2^k (y = c / s, c FP8 codes): scale_a non-NULL, a
 * device pointer to A's s, makes model->emin_a the format's emin of the
 * codes, and the model clamps at exmy_accum_scaled_emin(emin_a, *scale_a)
 * (format emin - k, computed on the device: where the tensor core clamps the
 * codes); likewise scale_b.  NULL: emin used as given.  An operand that qa /
 * qb quantize here with pow2 TENSOR or DELAYED scaling gets its emin from
 * the scale used, in both functions, as exmy_qgemm_accum on the CPU. */
cudaError_t exmy_cuda_qgemm_accum_scaled(
    exmy_cuda_gemm *g, bool trans_a, bool trans_b, size_t m, size_t n, size_t k, float alpha,
    const float *a, size_t lda, const exmy_cuda_operand_quant *qa, const float *scale_a,
    const float *b, size_t ldb, const exmy_cuda_operand_quant *qb, const float *scale_b,
    float beta, float *c, size_t ldc, const exmy_cuda_operand_quant *qc,
    const struct exmy_accum_model *model, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* EXMY_CUDA_H */
