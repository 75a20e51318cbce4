// The block products of PyTorch 2.x's CPU attention as a BLAS library computes them: for each
// shape, the kernel the library picks and that kernel's order of every dot product, written out
// as IR (GemmOrder in ir/order.hpp names the library and host).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "ir/ir.hpp"
#include "ir/order.hpp"

namespace ordo::gen {

// A matrix in a buffer: element (row, col) at base + row*stride + col*step (step 1: row-major;
// a transposed operand, which MKL reads as 'T', has stride 1 and step > 1). Elements of a
// 16-bit type are read as their (exact) f32 values. `align`: where PyTorch's matrix starts
// relative to a 16-byte boundary, in elements (0 .. 3), which the AMD model's kernels peel by.
// Only the nn products' P may have step > 1 (its elements are read one at a time).
// `ld`: the row stride MKL is handed, where it differs from `stride`: PyTorch's tensor may be laid
// out otherwise than ordo's buffer (the flash backward's gradients are (B, S, H, D) there, so MKL
// sees H*D), and MKL's choice of kernel reads it. 0: `stride`.
struct Matrix {
  int buffer = -1;
  ir::ExprRef base;
  int64_t stride = 0;
  int64_t align = 0;
  int64_t step = 1;
  int64_t ld = 0;
  int64_t mkl_ld() const { return ld ? ld : stride; }
};

// The operands of a product: f32 (sgemm), bf16 values (gemm_bf16bf16f32, whose products are
// exact in f32; its gemv kernels are other ones) or f16 values (gemm_f16f16f32, measured on an
// AMD host only: MKL's sgemm on the operands converted into its own aligned buffers, with no gemv
// kernel (one query or key takes the small-matrix one), and on several threads q @ k^T's keys cut
// at floor(m/2) (m >= 4) and p @ v's columns cut at floor(m/2) (m > 8; up to 8, one sequential
// sum per element from C0), each part a one-thread call).
enum class GemmInputs { f32, bf16, f16 };

// How MKL runs the products of one launch of PyTorch's CPU attention. `outside_loop`: PyTorch's
// parallel loop has a single iteration, so PyTorch calls MKL from its own thread, with
// GemmOrder::threads threads; else the loop's threads call it, the first with that count and the
// others with GemmOrder::mkl_threads. On an Intel host sgemm then runs threaded (measured: on 2
// threads of a 2-core host every f32 call inside the loop runs by MKL's 2-thread rules), while
// gemm_bf16bf16f32 and gemm_f16f16f32 give one thread's bits there (measured: their 2-thread key
// cut does not happen inside the loop). On an AMD host every call inside the loop gives one
// thread's bits (measured).
//   one_thread   MKL's one-thread kernels;
//   two_threads  its 2-thread rules (the `threaded` of the calls below);
//   unmeasured   more than 2 threads, or threads that differ between the loop's threads: a launch
//                whose products MKL would run otherwise than on one thread is refused.
enum class MklThreading { one_thread, two_threads, unmeasured };
MklThreading mkl_threading(const ir::GemmOrder& order, GemmInputs inputs, bool outside_loop);
// Whether one call runs by MKL's threaded rules in a launch whose calls do (`launch_threaded`):
// inside PyTorch's loop MKL runs its gemv kernels (a product of one row, n == 1, or one column,
// m == 1) on one thread (measured on the Intel host: one query row's p @ v gives one thread's bits
// there, and 2 threads' outside).
bool gemm_call_threaded(bool launch_threaded, bool outside_loop, int64_t n, int64_t m);
// Why a launch from the loop's threads is refused where mkl_threading says unmeasured.
std::string unmeasured_loop_threads(const ir::GemmOrder& order);

// C[j][i] = sum_k A[j][k] * B[i][k] for j < n, i < m, k < K: PyTorch's q @ k^T, the call
// sgemm('T', 'N', m, n, K, 1, B, A, 0, C) (A the query rows, B the key rows, both contiguous in k).
// `threaded`: MKL runs on order.threads threads (mkl_threading's two_threads; more than 2 refuse a
// launch of one row).
// `n_call`: the rows of the call MKL sees when this emits only some of them (rows 0 .. n-1 of a
// product of n_call rows, starting at a's and c's bases); MKL chooses its kernel by n_call. Only the
// general kernel, whose every element is its own dot product, can be emitted in part.
// `alpha`: the call's alpha (C = alpha * A.B), applied where the kernel applies it. AMD model: the
// general kernel packs the key rows (MKL's A) times alpha, each product fl(alpha*B_i[k]) * A_j[k]
// in its fma chain; the small-matrix kernel and sgemm's gemv multiply each finished dot product
// by alpha; gemm_bf16bf16f32's gemv multiplies each element of its matrix operand (the key rows
// when n_call == 1, else the query rows) by alpha first. Intel model (sgemm): gemv, smalln and pst
// multiply the finished dot product; the general kernel packs the key rows times alpha when it
// copies them (by m, n, K, and on 2 threads by its own rule), else multiplies each K block's sum.
// Intel model, gemm_bf16bf16f32: as sgemm, but its gemv scales the matrix operand first and fuses
// each product with its sum, and its general kernel copies by the one-thread rule in each
// threaded part (docs/research/torch2.15-attention-backward.md §5.5).
// `packed`: the caller's transposed copy of every key of a (batch, head), shared by the products
// of its query blocks. The Intel model's general kernel with vector chains copies each group of
// keys k-major before its fmas (general_nt_vectors); given `packed`, it copies them there, only
// when `fill` is true, and reads them from there, so a later call over the same keys skips the
// copy. The values are the same, so are the bits. Ignored where the keys would be scaled as
// copied (alpha != 1) and by the other kernels and the AMD model.
struct PackedKeys {
  int buffer = -1;       // f32 scratch: element k of key j at k * stride + j
  int64_t stride = 0;
  ir::ExprRef first_key;  // i64: the key of the call's first row of B
  ir::ExprRef fill;       // bool: this call is the first over its keys, and fills them in
};
void emit_gemm_nt(ir::Builder& b, const ir::GemmOrder& order, GemmInputs inputs, int64_t n, int64_t m, int64_t K, const Matrix& a,
                  const Matrix& bm, const Matrix& c, bool threaded, int64_t n_call = 0, float alpha = 1.0f,
                  const PackedKeys* packed = nullptr);

// C[j][e] = (accumulate ? C[j][e] : nothing) + sum_k P[j][k] * V[k][e] for j < n, e < m, k < K:
// PyTorch's p @ v, the call sgemm('N', 'N', m, n, K, 1, V, P, beta, C) with beta = 1 when
// accumulating. c_align: the distance of PyTorch's C (its first element) from a 64-byte boundary,
// in floats, an i64 expression that may depend on program_id (which of PyTorch's threads owns the
// scratch): the Intel model's threaded gemv splits by it (it must then be a constant), the AMD
// model's gemv and small-matrix kernels peel each row of C to a 16-byte boundary.
// `alpha` (C = beta*C + alpha * P.V; measured in f32): AMD model: the general kernel packs V
// (MKL's A) times alpha, each product fl(alpha*V[k][e]) * P[j][k] in its fma chain; gemv and the
// small-matrix kernel first multiply each element of P (MKL's B) by alpha, then run as with
// alpha = 1. Intel model: gemv 'N' and the K = 1 step multiply P's elements first; the general
// kernel packs V times alpha when it copies, else adds each K block's sum times alpha to C in
// turn. On both hosts the same kernels serve PyTorch's 'N','T' calls (P given transposed,
// Matrix::step).
void emit_gemm_nn(ir::Builder& b, const ir::GemmOrder& order, GemmInputs inputs, int64_t n, int64_t m, int64_t K, const Matrix& p,
                  const Matrix& v, const Matrix& c, bool accumulate, bool threaded, const ir::ExprRef& c_align, int64_t n_call = 0,
                  float alpha = 1.0f);

// The C0 with which p @ v with beta = 1 gives the bits of the same call with beta = 0, where its
// kernel is the same for both: -0 for the Intel general kernel (which leaves C0 out; -0 + x is x
// for every x), +0 for the AMD one (which starts its sums from +0). nullopt where beta selects
// another kernel or order (gemv, the small-matrix kernels, K = 1, a threaded K split). alpha = 1.
// A caller that keeps its C in that value may run its first product as it runs the others.
std::optional<float> gemm_nn_beta0_start(const ir::GemmOrder& order, GemmInputs inputs, int64_t n, int64_t m, int64_t K, bool threaded);

// Whether MKL on order.threads threads runs this product otherwise than on one (when not, a caller
// need not emit both): q @ k^T (nt) or p @ v, n rows of C, m columns, K terms.
bool gemm_threads_matter(const ir::GemmOrder& order, GemmInputs inputs, bool nt, int64_t n, int64_t m, int64_t K);

// Whether emit_gemm_nt / emit_gemm_nn may emit rows 0..n-1 of a call of n_call rows (its general
// kernel) rather than the whole call.
bool gemm_nt_splits_rows(const ir::GemmOrder& order, GemmInputs inputs, int64_t n_call, int64_t m, int64_t K);
bool gemm_nn_splits_rows(const ir::GemmOrder& order, GemmInputs inputs, int64_t n_call, int64_t m, int64_t K);

// avx512_bf16's treatment of subnormals outside vdpbf16ps (ir::Op::Bf16PairDot, which flushes
// its own operands and sums): a value whose exponent field is zero (a subnormal, or a zero)
// becomes the zero of its sign, as vcvtneps2bf16 reads its f32 input (oneDNN's conversion of a
// bf16 output), whatever MXCSR says.
ir::ExprRef flush_subnormal(ir::Builder& b, ir::ExprRef x);

// PyTorch's bmm below K*M*N = 400 (baddbmm_cpu_kernel): every element a sequential sum from +0 of
// rounded products, no fma. C[j][i] = sum_k A[j][k] * B[i][k] (nt) or sum_k P[j][k] * V[k][i] (nn).
void emit_naive_nt(ir::Builder& b, int64_t n, int64_t m, int64_t K, const Matrix& a, const Matrix& bm, const Matrix& c);
void emit_naive_nn(ir::Builder& b, int64_t n, int64_t m, int64_t K, const Matrix& p, const Matrix& v, const Matrix& c);

}  // namespace ordo::gen
