/*
 * Hopper's warpgroup matrix multiply (wgmma.mma_async, sm_90a), the few forms
 * the fused attention uses: m64n64k16, bf16 operands, float32 accumulators.
 *
 * A warpgroup is 4 consecutive warps (128 threads).  Its accumulator of a
 * 64 x 64 product is, warp by warp, the m16n8k16 C layout of mma.sync over
 * the warp's 16 rows (warp w of the group rows 16 w .. 16 w + 15): d[4 n + e]
 * is element (16 w + g + 8 (e >> 1), 8 n + 2 t + (e & 1)), lane = 4 g + t.
 * An A operand from registers is, likewise, the m16n8k16 A fragment of the
 * warp's 16 rows.
 *
 * Operands in shared memory are described by a 64-bit descriptor.  Every
 * tile here is a 64-column bf16 tile (rows of 128 bytes) in the 128-byte
 * swizzle: the 16-byte chunk c of row r sits at chunk c ^ (r & 7), tiles
 * start on 1024-byte boundaries.  Such a tile is K-major (rows = M or N, the
 * k index contiguous: Q, K for Q K^T) or MN-major (rows = k: V for P V, read
 * transposed, imm-trans-b = 1).  K-major: 8-row groups 1024 bytes apart
 * (stride byte offset); the k step of 16 elements moves the start by 32
 * bytes inside the swizzled row.  MN-major: 8 k-rows a group, groups 1024
 * bytes apart; the k step of 16 rows moves the start by 2048 bytes.
 * (PTX ISA, "Matrix Descriptor Format" and "Shared Memory Matrix Layout";
 * CUTLASS cute/arch/mma_sm90_desc.hpp.)
 *
 * The instructions exist only where the code is compiled for sm_90a
 * (__CUDA_ARCH_FEAT_SM90_ALL); elsewhere (the compute_90 PTX that other GPUs
 * compile at load time) these functions trap, and the host must not launch
 * kernels that use them (flash_attention.cu asks for a compute capability
 * of exactly 9.0).
 */
#ifndef EXPERIMENTS_GPU_WGMMA_CUH
#define EXPERIMENTS_GPU_WGMMA_CUH

#include <stdint.h>

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define EXMY_WGMMA 1
#else
#define EXMY_WGMMA 0
#endif

/* Before the first wgmma that reads registers written by other instructions
 * (accumulators, A fragments). */
__device__ __forceinline__ void wgmma_fence() {
#if EXMY_WGMMA
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#if EXMY_WGMMA
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
/* Waits until at most N committed groups are pending. */
template <int N>
__device__ __forceinline__ void wgmma_wait() {
#if EXMY_WGMMA
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#else
  __trap();
#endif
}
/* After a wait: keeps the compiler from moving uses of the accumulators
 * above it (the asm that wrote them completed at the wait, not at issue). */
template <int N>
__device__ __forceinline__ void wgmma_settle(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; i++) asm volatile("" : "+f"(d[i])::"memory");
}
/* Shared-memory writes by ordinary stores or cp.async, made visible to the
 * wgmma's reads (the async proxy); then a barrier. */
__device__ __forceinline__ void wgmma_fence_smem() {
#if EXMY_WGMMA
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

/* The descriptor of a 128-byte-swizzled tile at shared address `saddr`. */
__device__ __forceinline__ uint64_t wgmma_desc_sw128(uint32_t saddr, uint32_t lbo, uint32_t sbo) {
  return (uint64_t)((saddr & 0x3FFFF) >> 4) | ((uint64_t)((lbo >> 4) & 0x3FFF) << 16) |
         ((uint64_t)((sbo >> 4) & 0x3FFF) << 32) | (1ull << 62);
}

/* The descriptor of the tile `bytes` further on (bytes % 16 == 0): the start
 * address is the low 14 bits, in 16-byte units, and shared addresses are
 * below 2^18, so the sum cannot carry into the other fields.  One addition
 * where wgmma_desc_sw128 of the moved address would be several. */
__device__ __forceinline__ uint64_t wgmma_desc_add(uint64_t desc, uint32_t bytes) {
  return desc + (bytes >> 4);
}

/* The 32 accumulator registers of an m64n64 product as asm operands %0..%31,
 * read and written, and their list in the instruction. */
#define EXMY_WGMMA_ACC32(d)                                                                    \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),          \
      "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),  \
      "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]),            \
      "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]),            \
      "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])

#define EXMY_WGMMA_ACC32_LIST                                                                  \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"

/* d = A B (accumulate 0) or d += A B, A and B in shared memory, m64n64k16;
 * B transposed (MN-major) when kTransB. */
template <int kTransB>
__device__ __forceinline__ void wgmma_ss_m64n64k16(float (&d)[32], uint64_t a, uint64_t b,
                                                   int accumulate) {
#if EXMY_WGMMA
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      EXMY_WGMMA_ACC32_LIST ", "
      "%32, %33, p, 1, 1, 0, %35;\n}\n"
      : EXMY_WGMMA_ACC32(d)
      : "l"(a), "l"(b), "r"(accumulate), "n"(kTransB));
#else
  __trap();
#endif
}

/* d += A B, A from registers (a), B in shared memory, m64n64k16; B
 * transposed (MN-major) when kTransB. */
template <int kTransB>
__device__ __forceinline__ void wgmma_rs_m64n64k16(float (&d)[32], const uint32_t (&a)[4],
                                                   uint64_t b) {
#if EXMY_WGMMA
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      EXMY_WGMMA_ACC32_LIST ", "
      "{%32, %33, %34, %35}, %36, 1, 1, 1, %37;\n"
      : EXMY_WGMMA_ACC32(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(kTransB));
#else
  __trap();
#endif
}

#endif /* EXPERIMENTS_GPU_WGMMA_CUH */
