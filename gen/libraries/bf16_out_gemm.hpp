// PyTorch 2.x's cpublas::gemm with bf16 operands and a bf16 C (beta = 1), as its CPU attention
// backward calls it for dQ, dK and dV: on an x86-64 host with AVX-512, ATen's own gemm_stub
// (BlasKernel.cpp, compiled per CPU capability) when m*n*k <= 4096, else oneDNN's matmul with a
// sum post-op; on a host without AVX-512, gemm_stub at every size (PyTorch's oneDNN bf16 check
// fails there). Measured against torch 2.15.0 on AMD EPYCs, one with avx512_bf16 and one with
// AVX2 only, and on an Intel Xeon with AVX-512 but no avx512_bf16, where oneDNN emulates bf16
// (docs/research/torch2.15-attention-backward.md §5.2, §5.4, §5.5). f16 operands and C take
// the same stub orders with half roundings (a host without avx512_fp16, where PyTorch's f16 gemm
// is always gemm_stub's: docs/research/torch2.15-attention-f16.md); C's buffer type decides. The
// eager composite's bmm on a CPU with avx512_bf16 (bf16) or avx512_fp16 (f16) is oneDNN's brgemm
// and gemv kernels: emit_brgemm_bmm below.
#pragma once

#include <cstdint>

#include "gen/libraries/mkl_gemm.hpp"
#include "ir/ir.hpp"
#include "ir/order.hpp"

namespace ordo::gen {

// C[j][e] = bf16(C[j][e] + alpha * sum_k P[j][k] V[k][e]) for j < n, e < m, k < K, C a bf16 matrix
// read as its f32 value. `transb`: PyTorch's 'N','T' call (dV, dK: P given transposed) rather
// than 'N','N' (dQ); the stub runs them differently. `stub_fma`: the stub's build fuses its
// multiply-adds (avx2, avx512; not the default build, nor PyTorch's own bmm loop). `onednn`:
// products over 4096 multiply-adds go to oneDNN, to the kernel it names (Off: to the stub too).
// The orders, per element:
//   stub 'N','N':  dot = ilp4 (s[k mod 4] += P*V for k < 4*(K/4), fused or not; the rest into
//                  s[0], each product rounded first under every build; ((s0+s1)+s2)+s3), then
//                  C0 + fl(alpha*dot) under every build;
//   stub 'N','T':  acc = C0; per k ascending acc += fl(alpha*P[j][k]) * V[k][e] (fused or not);
//   oneDNN:        acc = +0; per k ascending in pairs acc = (acc + P_{k+1}V) + P_kV (vdpbf16ps;
//                  an odd K's last product alone); n == 1: acc + P_kV in plain k order;
//                  then C0 + fl(alpha*acc);
//   oneDNN emulated (gemm:jit:bf16 on AVX-512 without avx512_bf16): K <= 384 as oneDNN above;
//                  K > 384: the pairs over k < s = ceil(K/2) (B0) and from s on (B1), each from
//                  +0, C = fma(alpha, B1, fl(alpha*B0)); a one-row call: the pairs per 8-k block
//                  B_i, y = fl(alpha*B0), y = fma(alpha, B_i, y) for i = 1, 2, ...; then C0 + C.
//                  On `threads` > 1 (MKL and oneDNN threaded: one (batch, head)) the rows a
//                  range of the cut output holds alone or in part (an odd n's middle row on 2
//                  threads, every row of n = 2, 3) are one-row calls.
// Every product of two bf16 values is exact in f32; only alpha's products round.
// `beta_zero`: beta = 0, C is not read and C0 counts as +0 (bmm); an exact zero result is +0.
void emit_bf16_out_gemm(ir::Builder& b, bool transb, bool stub_fma, ir::AttentionBackwardOrder::OneDnn onednn, int64_t n, int64_t m,
                        int64_t K, const Matrix& p, const Matrix& v, const Matrix& c, float alpha, bool beta_zero = false, int threads = 1);

// Whether `threads` threads compute the product above otherwise than one (the emulated oneDNN
// kernel's one-row calls).
bool bf16_out_gemm_threads_matter(ir::AttentionBackwardOrder::OneDnn onednn, int64_t n, int64_t m, int64_t K, int threads);

// torch.bmm over 16-bit tensors (alpha 1, beta 0) where PyTorch's oneDNN check fails (a CPU
// without AVX-512): below S_q*S_k*D = 400 multiply-adds its own loop, else cpublas::gemm per
// matrix, i.e. gemm_stub, with a float accumulator and one rounding to the storage type at the
// store (measured against torch 2.15.0 on an AVX2 EPYC, docs/research/torch2.15-attention-16bit-composite.md).
// Products of two 16-bit values are exact in f32 unless they fall below 2^-126, where the fused
// steps (`fused`: the avx2 build's gemm_stub, which avx512 runs too) keep what a rounded product
// loses, the sign of a product that rounds to zero included.
//   Sequential: acc = +0, acc += a_k*b_k for k ascending (the loop: never fused; gemm_stub 'N','T':
//               fused where `fused`);
//   Ilp4:       as the 'N','N' stub above (emit_bf16_out_gemm with transb false);
//   VectorDot:  ATen's vectorized bf16/f16 dot ('T','N': q @ k^T, dout @ v^T), 8 float lanes:
//               64 accumulators a[t] (+0) take k = t, t + 64, ... below K - K mod 64, folded
//               register-wise ((r0+r4)+(r2+r6))+((r1+r5)+(r3+r7)) lane by lane (a register is 8
//               lanes t = 8r + l), then across lanes by `fold`; one 8-lane sum (+0) takes the
//               16-element blocks up to K - K mod 16 (low 8, then high 8) and its lane fold is
//               added; the last K mod 16 products are added in order. Where `fused`, the 64-
//               and 16-element steps are fmas; the last K mod 16 never are.
enum class StubSum { Sequential, Ilp4, VectorDot };

// C[j][i] = sum_k A[j][k] * B[i][k] for j < n, i < m (both operands read along k), by `sum`
// (Sequential or VectorDot; `fold` the VectorDot's lane fold; `fused` its fused steps).
void emit_stub_dot_rows(ir::Builder& b, StubSum sum, ir::LaneFold fold, bool fused, int64_t n, int64_t m, int64_t K, const Matrix& a,
                        const Matrix& bm, const Matrix& c);

// torch.bmm over bf16 tensors where PyTorch's oneDNN check passes on a CPU with AVX-512 but no
// avx512_bf16 (AttentionBackwardOrder::OneDnn::Emulated), for the products of the eager composite:
// B*H*M*K*N > 4096 over the whole batch (the batch count is in the product) makes one batched
// oneDNN matmul, `gemm:jit:bf16`, alpha 1, beta 0, no post-op. Its threads split the B*H*M*N
// outputs, row-major with the batch outermost, into balance211 ranges (the first W mod T threads
// take ceil(W/T), the rest floor(W/T)); each thread walks its range in one-thread calls: a whole
// matrix, a run of whole rows, or one row (a row begun in the middle, or the columns left). Every
// output element is one sum in f32 from +0, rounded to bf16 once, by the kernel of its call:
//   gemm (a call of 2 or more rows and columns): K blocks (one up to 384; two split at ceil(K/2)
//        below 1536; else blocks of 768), each a pair chain (acc + p[k+1]) + p[k] from the block's
//        first k (an odd count's last product alone); the blocks added in order;
//   gemv 'N' (one row, weights untransposed; or one column of a transposed src): 8-k blocks, each
//        a pair chain, added in order;
//   gemv 'T' (one row, transposed weights; or one column of an untransposed src): 16 lanes over
//        32-k chunks, lane l taking (acc + p[32c+2l+1]) + p[32c+2l]; then t_l = lane_l +
//        lane_{l+8} and ((t0+t1)+(t2+t3))+((t4+t5)+(t6+t7)).
// oneDNN's transposition flags are its own: a src (weights) of one row (K = 1) counts as
// transposed. Measured against torch 2.15.0 on an Intel Xeon
// (docs/research/torch2.15-attention-16bit-composite.md, "An AVX-512 host").
struct OneDnnBmm {
  int64_t M = 0, N = 0, K = 0;  // one (batch, head)'s C[M][N] = sum_k A[M][K] B[K][N]
  bool src_transposed = false;  // A is a transposed view (P^T, q^T)
  ir::ExprRef wei_transposed;   // bool: B is a transposed view oneDNN takes as it is
  int threads = 1;              // PyTorch's thread count, the primitive's
};
// Rows [0, rows) of `a` and `c`, which are rows first_row + j of the instance's (batch, head)
// product (the thread split is over the whole launch: program_id(0) of grid_extent(0) matrices).
// `bm` may be read with any step (a transposed view); `a` is read along k with its step.
void emit_onednn_bf16_bmm(ir::Builder& b, const OneDnnBmm& call, const ir::ExprRef& first_row, int64_t rows, const Matrix& a,
                          const Matrix& bm, const Matrix& c);
// torch.bmm over 16-bit tensors by oneDNN's brgemm and gemv kernels, for the composite's products
// where B*H*M*K*N > 4096: one batched oneDNN matmul, no scale or post-op. C's type names the kernels:
//   bf16 (on a CPU with avx512_bf16, brg_matmul:avx512_core_bf16): vdpbf16ps pairs;
//     every output flushed (a subnormal reads as the zero of its sign) and rounded to bf16 by
//     vcvtneps2bf16;
//   f16 (on a CPU with avx512_fp16, brg_matmul:avx10_1_512): the halves converted to
//     f32 (exactly) and oneDNN's f32 kernels, one k per step; every output rounded to f16 (RNE,
//     subnormals kept, overflow to inf).
// The kernel, by the shapes and layouts oneDNN sees:
//   N == 1: an fma chain if K > 1, M > 1 and A is K-major (n1_A_trans), else the lane gemv;
//   else M == 1: an fma chain if K > 1 and B is row-major (m1_B_plain), else the lane gemv;
//   else blocked: per K block a chain from +0, the blocks added in order: one block up to K = 512;
//        A row-major: [512, K - 512] up to 1024, then 1024-blocks; A K-major: 512-blocks. The
//        chain is acc = (acc + p[k+1]) + p[k] in bf16 (an odd count's last product after a zero
//        pair), acc = fma(a_k, b_k, acc) in f16.
//   lane gemv: 16 lanes, then t_l = L_l + L_{l+8}, u_l = t_l + t_{l+4}, (u0 + u1) + (u2 + u3). bf16
//        (pairs16): lane l takes the pair (32c + 2l + 1, 32c + 2l) of every 32-k chunk (the last
//        chunk's missing k as zero products, a step still taken); f16 (lanes16): lane l takes
//        every k = l mod 16 by fma.
//   fma chain: acc = fma(a_k, b_k, acc) from +0, k ascending, IEEE (no flush).
// Both gemv kernels sum k < 16384 * floor(K / 16384) and the rest as two calls, added. Thread
// effects, both needing B*H == 1 (the launch's grid_extent(0)) and 2 or more threads: the fma chain
// with 2*Mv bytes a power of two (Mv = N, or M for N == 1), Mv*K*2 > 2 MiB and ceil(Mv/16) <= 2T
// splits K over min(T, 4) threads; blocked with A K-major ('bwd_w'), K >= 2048 (in bf16 only K =
// 2^n) and T > ceil(N/64) deals its 512-blocks (balance211) to the thread count oneDNN's imbalance
// score picks (bwd_w_k_threads; in bf16 with K = 2^n that is 2 whenever N <= 64 on 2 threads). Each
// thread's part is summed alone and the parts are added in order to +0. Measured against torch
// 2.15.0 on an Intel Xeon on 2, 3 and 4 threads (bf16: docs/research/torch2.15-attention-16bit-
// composite.md, "A host with avx512_bf16"; f16: docs/research/torch2.15-attention-16bit-composite-
// f16-avx512fp16.md). A launch of one (batch, head) whose product may split is refused with torch on
// more than 4 threads.
struct BrgemmBmm {
  int64_t M = 0, N = 0, K = 0;    // one (batch, head)'s C[M][N] = sum_k A[M][K] B[K][N]
  bool a_k_major = false;         // A is a transposed view (P^T, q^T)
  bool b_row_major = true;        // B is K x N row-major (else a transposed view: k^T, v^T)
  bool b_copied_alone = false;    // PyTorch copies B row-major when B*H == 1 (k^T: its batch stride is D)
  int threads = 1;                // PyTorch's thread count, the primitive's
};
// Rows [0, rows) of `a` and `c` (rows of the product: row j of C is element j of `a`'s rows).
// `bm` and `c` may have any column step; `a` is read along k with its step.
void emit_brgemm_bmm(ir::Builder& b, const BrgemmBmm& call, int64_t rows, const Matrix& a, const Matrix& bm, const Matrix& c);

// The threads oneDNN's brgemm on `threads` threads gives the K of a 'bwd_w' product (A K-major,
// one (batch, head), K >= 2048 (in bf16 a power of two: the caller's condition), threads >
// ceil(N/64); else 1): the candidate nthr_k = min(T, 4), ..., 1 with the least imbalance score (a
// later one only when strictly less), each scored by its best n-chunk size and M block
// (docs/research/torch2.15-attention-16bit-composite-f16-avx512fp16.md §4; bf16 the same, measured
// on 2 to 4 threads in docs/research/torch2.15-attention-16bit-composite.md).
int bwd_w_k_threads(int64_t M, int64_t N, int64_t K, int threads);

// Whether B*H*M*K*N > 4096 for a launch of grid_extent(0) (batch, head) matrices, as a bool
// expression (constant when M*K*N alone decides).
ir::ExprRef onednn_bmm_taken(int64_t mkn);

}  // namespace ordo::gen
