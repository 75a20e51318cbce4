// Orders: how a reduction is carried out, as plain data, kept apart from the op's math.
// gen/ expands an Order into explicit IR loops; a named order (gen/order_table.cpp) is one row
// of a table that maps a stable name to an Order. Nothing here knows about a backend.
#pragma once

#include <optional>
#include <string>

#include "ordo/scalar_type.hpp"

namespace ordo::ir {

// How lanes of a vector accumulator fold to one value.
enum class LaneFold : uint8_t {
  Sequential,  // ((a0 + a1) + a2) + ... + a(V-1)
  Halving,     // fold the upper half onto the lower half until one lane is left:
               // for 8 lanes ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7))
  Adjacent,    // add neighbours until one lane is left: ((a0+a1)+(a2+a3)) + ((a4+a5)+(a6+a7))
};

// How a sequence of terms t_0 .. t_{N-1} is summed. A term is a value or a product a*b.
struct SumOrder {
  enum class Kind : uint8_t {
    Sequential,  // acc = 0; acc = acc + t_i for i = 0..N-1
    Pairwise,    // numpy's pairwise sum: leaves of at most `block` terms summed with `lanes`
                 // accumulators (started from the first `lanes` terms, folded by `fold`,
                 // then the leftovers added in order); larger ranges split at
                 // floor(n/2) rounded down to a multiple of `lanes`, and the halves added.
                 // A range of fewer than `lanes` terms is summed Sequential.
    LaneTree,    // `accumulators` vector accumulators of `lanes` lanes; full vector k is
                 // added into accumulator k mod A (the first A vectors initialise them); the
                 // accumulators fold in order 0..A-1; the N mod lanes tail terms are added
                 // into lanes 0..r-1; the lanes fold by `fold`. N < lanes: Sequential from t_0.
    LevelCascade,  // PyTorch's CPU sum (SumKernel): groups of `accumulators` vectors of `lanes`
                   // go into accumulators A0[0..a-1]; after every L groups A1 += A0 (A0 = 0), after
                   // every L^2 also A2 += A1, after every L^3 also A3 += A2, with L = 2^P and
                   // P = max(4, ceil(log2 groups) / 4). Then per accumulator ((A0+A1)+A2)+A3,
                   // leftover vectors into accumulator 0, accumulators folded in order, the tail
                   // terms summed from 0 first, then the lanes added in order, and finally 0 + that.
                   // N < lanes: `accumulators` scalar accumulators take terms round robin, the
                   // N mod a leftovers go into the first, folded in order; 0 + that.
    ChunkStack,    // Inductor's C++ vector sum (torch/csrc/inductor/cpp_prefix.h, CascadeSumHelper):
                   // one accumulator S0 of `lanes` lanes from +0, each full vector added lane-wise.
                   // With c = ceil(nvec / stack_chunk) chunks and depth = ceil(log2 c), after chunk
                   // j (from 1), for levels l = 1 .. depth-1 while bit l-1 of j is 0: S_l += S_(l-1),
                   // S_(l-1) = 0; at the end S = ((S0 + S1) + ...) + S_(depth-1). The N mod lanes tail
                   // terms go into lanes 0..r-1 of a second vector from +0, added lane-wise to S; the
                   // lanes fold by `fold`; the result is 0 + that. N < lanes: only the tail vector.
                   // N < unroll_below in a launch of more than one row, and N = 1: Inductor unrolls
                   // the reduction into ((t0 + t1) + t2) + ...
                   // `parts` is the thread count Inductor's kernel runs on. A launch of R rows splits
                   // each row between the threads (the loop-nest heuristic of Inductor's C++
                   // backend) when R = 1 and N / parts >= 512, or R > 1 and 300 R < N / loop_step
                   // (its loop over the row has 300 times the steps of the loop over the rows)
                   // and R N / parts >= 512: the ceil(N / lanes) vector steps, the tail step last,
                   // are cut as OpenMP's static schedule cuts them;
                   // each part sums its own steps as above (its stack sized for ceil(nvec / parts)
                   // vectors), and the parts' S and tail vectors are added lane-wise, in part order,
                   // into vectors from +0 before the tail is added and the lanes fold.
  };
  Kind kind = Kind::Sequential;
  int lanes = 8;
  int block = 128;
  int accumulators = 1;
  LaneFold fold = LaneFold::Halving;
  bool fma = false;  // a product term is accumulated as acc = fma(a, b, acc)
  // > 0: the terms are cut into chunks of this many, each summed as above (indices from the
  // chunk's start), and the chunk sums added left to right into 0. numpy's ufunc buffer: 8192.
  int64_t outer_chunk = 0;
  // LaneTree: the N mod lanes tail terms are added in order to the folded sum instead of into
  // lanes 0..r-1 (onnxruntime's MLAS kernels).
  bool tail_after_fold = false;
  // With tail_after_fold and fma: the first r - r mod g tail product terms are rounded and
  // added (a compiler-vectorized loop of g lanes without fma); the rest use fma. 0: all fused.
  int tail_unfused_group = 0;
  int64_t stack_chunk = 4096;  // ChunkStack: vectors per chunk
  int parts = 1;               // ChunkStack: thread parts of one row
  int64_t unroll_below = 0;  // ChunkStack
  int loop_step = 0;         // ChunkStack: elements per step of the kernel's loop over a row (0: lanes)
  friend bool operator==(const SumOrder&, const SumOrder&) = default;
};

// How a Welford merge of a partial result B = (nb, mb, Mb) into an accumulator A = (na, ma, Ma)
// rounds. Both start from n = na + nb, c = (n == 0 ? 0 : float(nb) / float(n)), d = mb - ma,
// with the counts converted to the compute type; afterwards na = n.
enum class WelfordMerge : uint8_t {
  MeanFirst,    // ma = ma + c*d; Ma = Ma + (Mb + ((d*d)*c)*na). With fma: ma = fma(c, d, ma),
                // Ma = Ma + fma((d*d)*c, na, Mb). PyTorch 1.13's AddMoments and, in 2.x, its lane fold.
  ScaledDelta,  // PyTorch 2.10+'s AddMomentsVec: cd = c*d; ma = ma + cd (never fused);
                // Ma = (d*na)*cd + (Ma + Mb). With fma the last is fma(d*na, cd, Ma + Mb).
};

// How mean and variance (M2) of a row are computed.
struct MomentsOrder {
  enum class Kind : uint8_t {
    LaneWelford,        // PyTorch CPU RowwiseMoments: `lanes` lane-parallel Welford streams in
                        // chunks of `chunk` vectors (update with precomputed 1/(j+1)), chunk
                        // results merged through a binary-counter cascade, a scalar Welford for
                        // the N mod lanes tail, then the lanes merged into the tail one by one.
    SequentialWelford,  // one Welford stream in element order with true division (torch.var_mean)
    TwoPass,            // mean = sum(x)/N, then M2 = sum((x-mean)^2), both summed by `sum`
    OnePass,            // sum(x) and sum(x*x) by `sum`; var = max(E[x^2] - E[x]^2, 0). Unstable; for study.
    BlockWelford,       // PyTorch's vectorized CUDA layer_norm: a team of `team` threads per row;
                        // thread t runs one f32 Welford stream over vectors of `lanes` elements
                        // t, t+team, ... (update: n += 1; mean = fma(d, 1/n, mean);
                        // m2 = fma(d, x - mean, m2)); the streams merge by a shuffle-down tree over
                        // each warp (offsets 16, 8, 4, 2, 1), then a tree over the warps through
                        // team memory (offsets W/2, ..., 1). Merge of own B with other A:
                        // n = nA + nB; if n > 0: c = 1/n, mean = fma(A.mean, nA*c, B.mean*(nB*c)),
                        // m2 = fma((delta*delta)*nA, nB*c, A.m2 + B.m2) with delta = B.mean - A.mean;
                        // else 0, 0. var = m2 / N.
    BlockReduceWelford, // PyTorch's other CUDA layer_norm (RowwiseMomentsCUDAKernel, then
                        // LayerNormForwardCUDAKernel), for the rows its vectorized kernel does not
                        // take: a team of `team` threads per row; thread t runs one f32 Welford
                        // stream over the elements t, t+team, ... with a true division
                        // (n += 1; mean = mean + d/n; m2 = fma(d, x - mean, m2)). The block
                        // reduce: a shuffle-down tree over each warp (offsets 16..1); lane 0 of
                        // warp w publishes its stream as entry w; warp 0's lane l takes entry l
                        // (an empty stream for l >= warps) and runs the shuffle-down tree again.
                        // Merge of own A with other B: A empty: B; B empty: A; else
                        // d = B.mean - A.mean, n = nA + nB, c = nB/n, mean = fma(d, c, A.mean),
                        // m2 = fma((d*d)*nA, c, A.m2 + B.m2). var = m2 / n.
    VectorWelford,      // Inductor's C++ Welford (torch/csrc/inductor/cpp_prefix.h, welford_combine):
                        // lanes*streams lane streams, each with a float weight w. A step of vector x:
                        // d = x - mean; mean = mean + d*r_j (r_j = float(1/(j+1)), j the step's index
                        // in its chunk of `chunk` vectors); m2 = m2 + d*(x - mean); w = w + 1. With
                        // more than one chunk (depth = ceil(log2 chunks)), a full chunk is merged into
                        // stack level 0 before the next step, then carried up as ChunkStack carries;
                        // at the end acc = merge(acc, level i) for i = 0..depth-1. The N mod
                        // (lanes*streams) tail is a one-step stream in lanes 0..r-1 (w = 1; the other
                        // lanes w = 0). Merge(A, B): an empty side gives the other; d = B.mean - A.mean
                        // (0 where the means are equal); r = wB / (wA + wB) (0 where that is 0);
                        // mean = A.mean + d*r; m2 = (A.m2 + B.m2) + ((d*d)*wA)*r; w = wA + wB. A
                        // vector folds to lane 0: stream 1 into stream 0 lane-wise, then in each
                        // group of four lanes merge(merge(l0, l3), merge(l2, l1)), then groups
                        // pairwise as a halving tree (AVX's vec_shuffle_down). The row: merge(merge(
                        // empty, fold(tail)), fold(full vectors)); var = m2 / N. No fma anywhere.
                        // `two_pass_max_n` > 0: a row of N <= two_pass_max_n in a launch of more than
                        // one row is TwoPass with `sum` instead (Inductor's var_mean lowering).
                        // `parts`: the thread count, splitting a single-row launch as ChunkStack's does;
                        // each part runs its own streams from weight 0, and the parts' vectors merge
                        // lane-wise in part order into an empty one.
  };
  Kind kind = Kind::LaneWelford;
  ScalarType acc = ScalarType::f32;  // the type the reduction accumulates in (f32 or f64)
  int lanes = 8;
  int chunk = 16;
  bool fma_update = false;  // LaneWelford chunk update: mu = fma(d, 1/(j+1), mu); m2 = fma(d, x - mu, m2)
  bool fma_merge = false;   // Welford merges: the fused form of `cascade_merge` and of the lane fold
  SumOrder sum{};           // TwoPass and OnePass
  // TwoPass: the deviation pass may run in another type with another sum. The mean is then
  // rounded to that type before x - mean, and var = M2 / N is computed in it.
  std::optional<ScalarType> dev_acc{};
  std::optional<SumOrder> dev_sum{};
  int team = 128;  // BlockWelford, BlockReduceWelford: threads per row (a power-of-two number of warps)
  // LaneWelford: how a chunk's streams merge into the stack and the stack levels into each other.
  // The lane fold into the tail accumulator is always MeanFirst.
  WelfordMerge cascade_merge = WelfordMerge::MeanFirst;
  // LaneWelford: a chunk step reads `streams` consecutive vectors of `lanes` elements (PyTorch
  // 2.x splits a vector of 16-bit values, 2*lanes of them, into two f32 halves). Each stream runs
  // its own (mu, s) over the chunk with the same 1/(j+1); after the chunk they merge into stack
  // level 0 in stream order, each with the chunk's length as its count. The full-vector count is
  // N / (lanes*streams); the scalar tail starts after them.
  int streams = 1;
  // LaneWelford's scalar tail: m2 = fma(d, x - mean, m2). GCC contracted it in one instance of
  // PyTorch 2.15's kernel (f16 input, f32 weight) and left it unfused in the others (measured).
  bool fma_tail = false;
  int64_t two_pass_max_n = 0;  // VectorWelford
  int parts = 1;               // VectorWelford: split between threads as SumOrder::ChunkStack, loop step lanes*streams
  friend bool operator==(const MomentsOrder&, const MomentsOrder&) = default;
};

// How y is formed from x, the statistics and the optional weight (gamma) and bias (beta).
struct AffineOrder {
  enum class Form : uint8_t {
    ScaleBias,     // scale = rstd, shift = (-rstd)*mean; y = (x*scale + shift)*gamma + beta.
                   // Without weight or bias, gamma = 1 and beta = 0 still take part (PyTorch CPU).
    CenterScale,   // y = ((x - mean)*rstd)*gamma + beta; missing gamma/beta are left out
                   // (unless missing_as_identity)
    CenterDivide,  // y = ((x - mean)/sqrt(var + eps))*gamma + beta (the numpy composite)
    GammaCentered, // y = gamma*(rstd*(x - mean)) + beta (PyTorch's CUDA kernel); missing gamma/beta
                   // are left out. With fma: fma(gamma, rstd*(x - mean), beta), and without a
                   // weight fma(rstd, x - mean, beta) (what the CUDA compiler contracts)
  };
  Form form = Form::ScaleBias;
  bool fma = false;  // each "a*b + c" above is one fma
  // Every step above rounds to the storage type, as separate eager ops do; otherwise y is
  // computed in f32 and rounded once.
  bool round_each_op = false;
  // rstd = 1/sqrt(var + eps) as one operation (torch.rsqrt on its own). With storage rounding,
  // rows inside whole vectors of `rsqrt_vector_rows` rows (counted over the launch) round only
  // the result: the eager op's vector loop. The remaining rows, and every row when this is 0,
  // round sqrt and the divide separately, like its scalar tail and PyTorch's fused kernels.
  int rsqrt_vector_rows = 0;
  // rstd = CUDA's rsqrtf(var + eps) (rsqrt.approx.f32): device-only, no definition off the GPU.
  bool device_rsqrt = false;
  // A missing gamma or beta still takes part, as 1 and 0 (a kernel that loads them behind a null
  // check): with fma, y = fma(t, gamma, beta) always, so without beta a -0 product becomes +0.
  bool missing_as_identity = false;
  // A missing beta still takes part as +0 (so a -0 result becomes +0), while a missing gamma is
  // left out; with GammaCentered and fma: fma(gamma, t, +0), fma(rstd, x - mean, +0). PyTorch 2.x's
  // CPU float kernel, which writes the affine as one expression with gamma = 1 and beta = 0
  // substituted, where the compiler folds the * 1 and keeps the + 0.
  bool missing_bias_as_zero = false;
  // rms_norm's weight. t = x*rstd in f32. Plain: y = t*weight. Hugging Face's RMSNorm classes:
  // `round_before_weight` rounds t to x's storage type before the multiply (Llama's
  // h.to(x.dtype)), and y then has the type torch promotes x's and the weight's types to;
  // `one_plus_weight` multiplies by (1 + weight), formed in f32 (Gemma). y is rounded once, to its type.
  bool round_before_weight = false;
  bool one_plus_weight = false;
  friend bool operator==(const AffineOrder&, const AffineOrder&) = default;
};

// Which implementation of exp and log an order uses. Each is a fixed algorithm, so the choice is
// part of the order just like a summation tree.
enum class MathImpl : uint8_t {
  SleefU10,  // Sleef 3.5's expf_u10 / logf_u10 (FMA build), expanded into IR (gen/blocks/math.cpp)
  Glibc,     // glibc 2.28+'s expf / logf (the FMA build x86-64 selects), expanded into IR (gen/blocks/math.cpp):
             // what eager code calling libm computes on such a machine
  Device,    // CUDA's expf / logf (libdevice): device-only, no definition off the GPU
  GlibcDouble,  // exp only: glibc's double exp of the argument widened to f64, rounded to f32
                // (C++ that calls exp on a float promoted to double)
  TorchExpU20,  // exp only: PyTorch 2.x's Vectorized<float>::exp_u20 (AVX2/AVX-512 builds)
  TorchFexpU20, // exp only: PyTorch 2.x's Vectorized<float>::fexp_u20 (AVX2/AVX-512 builds), the
                // cruder exp its reduced-precision kernels take
};

// How softmax / log_softmax over a row are computed. In every kind the max is exact (only ±0 and
// NaN payloads can differ); the orders differ in the sum of exponentials and in where exp, log
// and the final divide happen.
struct SoftmaxOrder {
  enum class Kind : uint8_t {
    TwoPass,    // PyTorch's float kernel: mx = reduce(max, x); s = reduce(+, exp(x - mx)), both as
                // a lane tree (the first vector initialises the lanes, the N mod lanes tail goes
                // into lanes 0..r-1, lanes fold by `fold`; N < lanes: sequential); then
                // softmax y = exp(x - mx) * (1/s) (or / s), log_softmax y = (x - mx) - log(s).
    Staged,     // PyTorch 1.13's bf16 kernels. softmax: max over pairs of vectors from -inf lanes,
                // folded, then the N mod 2*lanes tail by std::max; sum from zero lanes over full
                // vectors, folded, then the N mod lanes tail added in order with `tail_exp`.
                // log_softmax: max and sum over pairs of vectors (gen/ops/softmax.cpp,
                // reduce_all_pairs), each rounded to bf16, as is log(sum).
    Online,     // one pass: each lane keeps a running max m and sum s (s = s*exp(m - m') +
                // exp(x - m')), lanes merge into lane 0 in order, the tail updates it; then y.
    WarpButterfly,  // PyTorch 1.13's persistent warp softmax (CUDA, N <= 1024 there; later versions
                // changed the max functor and log_softmax's last step): a team of one
                // warp per row; thread l owns columns l + 32*i, i < I = max(1, 2^ceil(log2 N)/32),
                // a missing column counting as -inf. Thread max: m = e_0, then m = m > e_i ? m : e_i;
                // warp max by xor butterfly (16, ..., 1) with m = m < o ? o : m; e = exp(x - m)
                // summed per thread from 0 in i order, then a butterfly sum s = s + o; softmax
                // y = e / s, log_softmax y = (x - m) - log(s).
    Decomposed, // Inductor's C++ for the decomposition exp(x - max) / sum(...) and (x - max) - log(sum):
                // max from -inf lanes with a masked tail, folded (exact); e = exp(x - mx) by `exp`,
                // summed by `sum` (a ChunkStack); softmax y = e / s; log_softmax y = (x - mx) - log(s),
                // log by `log` when the launch has at least `vector_log_rows` rows (Inductor
                // vectorizes the loop over rows), else by glibc's logf. A log_softmax sum that
                // `sum` unrolls (N < sum.unroll_below, several rows) takes glibc's expf and logf,
                // and so does a softmax of such rows with N < scalar_exp_below.
  };
  Kind kind = Kind::TwoPass;
  int lanes = 8;
  LaneFold fold = LaneFold::Halving;
  MathImpl exp = MathImpl::SleefU10;
  MathImpl tail_exp = MathImpl::Glibc;  // Staged only
  MathImpl log = MathImpl::SleefU10;
  bool multiply_by_reciprocal = true;  // softmax: y = e * (1/s); otherwise y = e / s
  SumOrder sum{};                      // Decomposed
  int vector_log_rows = 4;             // Decomposed
  // Decomposed: a softmax of several rows with 1 < N < scalar_exp_below (and N < sum.unroll_below,
  // where its sums are unrolled into pointwise code) is scalar code, exp by glibc's expf. Inductor
  // leaves a pointwise loop of fewer than a quarter of its f32 vector's lanes, with few ops,
  // unvectorized (measured: f32 under AVX-512, N = 2 and 3; bf16, f16 and AVX2 stay vectorized).
  int scalar_exp_below = 0;
  friend bool operator==(const SoftmaxOrder&, const SoftmaxOrder&) = default;
};

// Which kernels a BLAS library runs for the small matrix products inside an attention block.
// The library picks a kernel by the shape (and, on some hosts, by alignment and thread count);
// each kernel has its own dot-product order. gen/libraries/mkl_gemm.cpp writes out each kernel's order and
// the choice between them.
struct GemmOrder {
  enum class Kind : uint8_t {
    // oneMKL as PyTorch 2.15's x86-64 wheels link it, on an Intel CPU with AVX-512 (its avx512
    // sgemm and sgemv kernels; measured, see docs/research/torch2.15-attention.md, and for the
    // backward's calls (alpha, 'N','T') torch2.15-attention-backward.md section 4.6).
    MklIntelAvx512,
    // The same on an Intel CPU with AVX-512 and avx512_bf16: MklIntelAvx512's sgemm (f32, and f16
    // converted to f32), but gemm_bf16bf16f32 runs its vdpbf16ps kernels: every dot product steps
    // through k in pairs, (acc + p[k+1]) + p[k], with no smalln or pst kernel (measured,
    // docs/research/torch2.15-attention.md; gen/libraries/mkl_gemm.cpp emit_intel_bf16_nt/_nn).
    MklIntelAvx512Bf16,
    // oneMKL as PyTorch 2.15's x86-64 wheels link it, on an AMD CPU: MKL takes its generic
    // ('def') kernels there, with or without AVX-512 (measured on an EPYC with AVX-512 and
    // avx512_bf16, and checked on an EPYC with AVX2 only). gemv ('T' and 'N') and
    // the small-matrix kernel (m < 12, n < 4 or K <= 1) are SSE code without fma: every product
    // rounded, 4-lane sums, and a scalar peel up to each row's 16-byte boundary, so the bits
    // depend on where a row starts (gen/libraries/mkl_gemm.cpp); the general kernel is one fma chain per K
    // block (one block up to 192, two of floor(K/2) (and one of 1 for odd K) up to 384, else
    // 192-blocks and the rest), the block sums added in order after C. On 2 threads a product of
    // 5..11 rows (not a multiple of 4) runs its first rows in fours by the general kernel and the
    // rest by the small-matrix one.
    MklAmd,
  };
  Kind kind = Kind::MklIntelAvx512;
  // Code generation only, no numerical effect: the general kernel's scalar chains for 16 keys at a
  // time run as 16-lane vectors over a transposed copy of those keys (CPU targets; CUDA keeps the
  // scalar chains, whose copy would be per-thread local memory).
  bool vector_chains = true;
  // Code generation only: floats per vector register of the CPU the kernel is built for (16 with
  // AVX-512, else 8), which sizes the general kernel's register blocks (rows of C per k loop).
  int register_floats = 8;
  // Threads MKL runs on when it is called outside a parallel region: torch.get_num_threads(), which
  // torch.set_num_threads gives MKL as the calling thread's own count. PyTorch calls MKL that way
  // when its own parallel loop has a single iteration; MKL then splits a call between threads.
  int threads = 1;
  // MKL's global thread count (MKL_NUM_THREADS, else the host's physical cores), which the other
  // threads of PyTorch's parallel loop run MKL with when threads > 1 (torch.set_num_threads sets
  // the calling thread's count only, and turns MKL's dynamic mode off, so MKL does not drop to one
  // thread inside the loop). Measured on an Intel host (docs/research/torch2.15-attention.md); on
  // an AMD host the loop's calls give one thread's bits (measured), and this is not read.
  int mkl_threads = 2;
};

// How scaled-dot-product attention over one (batch, head) is computed. Every kind holds
// `query_lanes` query rows per program instance, one per vector lane, so every per-query value
// (score, max, sum, probability) is a vector with one lane per query and is computed lane by
// lane; the order of each dot product and reduction is what this struct states.
struct AttentionOrder {
  enum class Kind : uint8_t {
    Materialized,  // eager `softmax(q @ k^T / sqrt(D)) @ v`: the scores of the instance's query
                   // rows are computed once and kept (scratch, query_lanes x S_k), softmax runs
                   // on each row exactly as the softmax op with `softmax`, then out = P @ v.
    ExactTiled,    // the same bits as Materialized with O(D) scratch: pass 1 reduces the max,
                   // pass 2 the sum of exponentials, pass 3 forms P and accumulates P @ v, each
                   // pass recomputing the scores. The max and sum follow `softmax`'s lane tree
                   // (key j in tree lane j mod lanes), so they equal the row-wise reductions.
    CpuFlash,      // PyTorch 2.x's CPU flash attention (FlashAttentionKernel.cpp): a program instance
                   // per block of qS query rows (qS = 256 if S_q >= 768, 64 if S_q >= 192, else 32;
                   // at most S_q); key blocks of `key_block` (512) keys; scores and P @ v by the
                   // BLAS kernels `gemm` picks for each block's shape; per row: s = score*scale,
                   // m' = max(m, max s), the first floor(n/lanes)*lanes exponentials by
                   // `softmax.exp` on vectors of `softmax.lanes`, their sum from zero lanes folded
                   // by `softmax.fold`, the rest by `softmax.tail_exp` added in order; then
                   // l = fma(e, l, block sum) with e = expf(m - m') (glibc), and the output rows
                   // so far times e before P @ v adds the block (beta = 1). out = acc * (1/l);
                   // lse = m + logf(l). gen/torch_cpu/cpu_flash_attention.cpp.
    CpuMatmul,     // PyTorch's eager composite softmax(q @ k^T * scale) @ v on the CPU: per (batch,
                   // head), s = q @ k^T by the BLAS kernels `gemm` picks for the whole S_q x S_k
                   // product (PyTorch's own loop of rounded products and sums, no fma, where
                   // S_q*S_k*D < 400), s*scale rounded, causal: masked_fill(-inf) of key > query,
                   // the softmax op's order on each row (`softmax`), out = p @ v likewise.
                   // 16-bit inputs (a CPU without oneDNN's bf16/f16 kernels): every product is
                   // ATen's (gemm_stub, or its loop below 400), each element summed in f32 and
                   // rounded once to storage, q @ k^T by its vectorized dot with `dot_fold`; s,
                   // s*scale and p are rounded to storage (gen/libraries/bf16_out_gemm.hpp, StubSum).
                   // gen/torch_cpu/cpu_matmul_attention.cpp.
    Flash,         // FlashAttention-2 style online softmax over blocks of `key_block` keys: per
                   // query a running max m and sum l; per block m' = max(m, block max),
                   // l = l*exp(m - m') + sum_j exp(s_j - m'), acc = acc*exp(m - m') + sum_j p_j v_j
                   // (keys in order); out = acc / l (or * (1/l)). Causal: an instance visits
                   // only the blocks up to the one holding its last query's last key, as
                   // FlashAttention-2 does; a later block would leave m, l and a finite acc
                   // exactly as they were, but adds 0 * v, which is NaN where v is Inf or NaN.
  };
  Kind kind = Kind::Materialized;
  int query_lanes = 8;       // query rows per instance; no numerical effect
  int pv_lanes = 8;          // Materialized: dims per vector of p @ v (8 or 16); no numerical effect
  // ExactTiled on a CPU: pass 1's dot products are kept for passes 2 and 3 (a panel of S_k
  // vectors) up to kKeptScoresBytes per instance, where without it they are kept up to 256 KiB and
  // computed again beyond. No numerical effect.
  bool keep_scores = false;
  static constexpr int64_t kKeptScoresBytes = int64_t(2) << 20;
  // Flash on CUDA: > 0 maps an instance to a block (team) of this many threads, one query row
  // each, with every key block's K and V rows staged in team memory by the whole team; the
  // per-query operations and their order are flash's, so the bits equal query_lanes' mapping.
  int team = 0;
  int key_block = 64;        // Flash: Bc
  // Scores: s = sum_d q_d k_d sequentially from +0; with dot_fma each step is one fma. The same
  // holds for out = sum_j p_j v_j.
  bool dot_fma = false;
  // The scaling: s / (float)(1/scale) (eager `/ math.sqrt(D)`; the divisor is (float)sqrt(D)
  // when the scale is the default), or s * (float)scale. They round differently.
  bool scale_divides = true;
  // Flash: exponentials as 2^x with log2(e) folded into the scale (one multiply per score
  // instead of one inside exp); ordo's own exp2 polynomial (gen/blocks/math.cpp).
  bool exp2 = false;
  // 16-bit storage, eager PyTorch 1.13 (docs/research/attention-torch1.13.md section 4): the
  // scores and scaled scores are rounded to storage; q.k accumulates in storage precision with
  // each product rounded when `qk_round_each_step` (its small-shape kernel), else in f32
  // rounded once; p.v accumulates in storage precision with each product rounded when
  // `pv_round_each_step`. Off for f32.
  bool round_to_storage = false;
  bool qk_round_each_step = false;
  bool pv_round_each_step = false;
  SoftmaxOrder softmax;      // Materialized, ExactTiled: the row softmax (TwoPass or Staged); CpuFlash: see there
  // CpuFlash: the block products. Its `threads` is PyTorch's intra-op thread count
  // (torch.get_num_threads()), which changes bits only when a launch is a single query block
  // (batch*heads = 1 and S_q <= qS): PyTorch then calls MKL outside its parallel loop.
  GemmOrder gemm;
  bool rescale_fma = true;   // CpuFlash: l = fma(e, l, block sum) (else e*l, then + block sum)
  // CpuFlash, 16-bit inputs: the vector exponentials are summed two vectors at a time into
  // accumulators A and B, a last single vector into C, and the block sum is fold((A + C) + B).
  // The probabilities go to P @ v rounded to the storage type; the sum takes them unrounded.
  bool paired_exp_sum = false;
  // CpuMatmul, 16-bit inputs: the lane fold of ATen's vectorized dot (q @ k^T; the backward's
  // dout @ v^T), per CPU capability: Sequential under the default build, Halving under avx2 and
  // avx512 (which runs the avx2 build's: PyTorch registers no AVX-512 gemm_stub).
  LaneFold dot_fold = LaneFold::Halving;
  // CpuMatmul, 16-bit inputs: whether ATen's gemm_stub fuses its multiply-adds (the avx2 build,
  // which avx512 runs too; not the default build): ilp4's main loop, the 'N','T' chain and the
  // vectorized dot's vector steps, never their tails nor PyTorch's own loop below 400. Products of
  // two 16-bit values are exact, so this shows only for products below 2^-126.
  bool stub_fma = true;
};

// How the backward of attention over one (batch, head) forms dq, dk and dv from q, k, v, the
// forward's out and lse, and dout. With lse not given (Request::saved_stats false) it is
// recomputed exactly as the forward order (Order::attention) writes it.
struct AttentionBackwardOrder {
  enum class Kind : uint8_t {
    // FlashAttention-2's backward, deterministic (no atomics). The sums below are the order; how
    // they are scheduled is the target's (gen/ops/attention_backward.cpp): CUDA runs the two stages
    // as stated, the CPU one kernel per (batch, head) that adds each key block's dS terms to dq
    // as it goes, with the same bits. c = (float)scale; a dot product is a sequential sum over d from +0, each step
    // fma(a, b, acc) with `fma`, else acc + a*b rounded; masked means causal and key j > query i.
    //   D_i  = dot(dout_i, out_i)
    //   s_ij = dot(q_i, k_j) * c;  P_ij = masked ? 0 : exp(s_ij - lse_i)  (Sleef expf_u10)
    //   dP_ij = dot(dout_i, v_j);  dS_ij = masked ? 0 : P_ij * (dP_ij - D_i)  (sub, then mul)
    // Stage 1, a program instance per (batch*head, block of `lanes` keys, a key per lane):
    //   dv_j[d] = sum_i P_ij dout_i[d],  dk_j[d] = (sum_i dS_ij q_i[d]) * c,
    //   each sum one chain from +0 over the queries i = 0, 1, ..., S_q-1 in ascending order
    //   (the query blocks in order, every term added, masked ones as 0).
    // Stage 2, a program instance per (batch*head, block of `lanes` queries, a query per lane):
    //   dq_i[d] = (sum_j dS_ij k_j[d]) * c, one chain from +0 over keys j = 0 .. S_k-1 ascending.
    // P and dS are recomputed in each stage by the same operations, so both stages use the same
    // bits. Outputs are rounded once to the storage type. The launch split changes no bit.
    Tiled,
    // PyTorch 2.x's CPU flash backward (cpu_flash_attention_backward in FlashAttentionKernel.cpp;
    // measured against torch 2.15.0 on an AMD AVX-512 host, docs/research/torch2.15-attention-backward.md).
    // A program instance per (batch, head), lse given. c = (float)scale. Query blocks of qB rows
    // (qS = 256 if S_q >= 768, 64 if S_q >= 192, else 32, at most S_q) ascending; per block:
    //   D_r = sum_d dout_r[d]*out_r[d], each product rounded (no fma): D < dsum_lanes: in order
    //     from the first product; else lanes from the first vector, each further vector added
    //     lane-wise, the D mod dsum_lanes tail into lanes 0.., then folded by dsum_fold;
    //   key blocks of kvB keys (key_block, the last shorter; causal: those starting below
    //     min(m0 + qB, S_k)) ascending; per block five products by the BLAS order `gemm`
    //     (gen/libraries/mkl_gemm.cpp, each its own kernel choice, K blocks and place of alpha):
    //     A = c * Q_m K_n^T;  P = exp(A - lse_r) (`exp`), causal: P = 0 where key > query;
    //     dV_n += P^T dout_m;  GA = dout_m V_n^T;  G = P * (GA - D_r) (sub, then mul);
    //     dQ_m += c * G K_n;  dK_n += c * G^T Q_m.
    // dq, dk, dv start at +0 and every product adds into them (beta = 1), so dq sums over key
    // blocks ascending and dk, dv over query blocks ascending.
    // bf16: A and GA are gemm_bf16bf16f32's (f32 results); P is rounded to bf16 for dV and G for
    // dQ and dK (G itself uses the f32 P). dQ, dK, dV are bf16 tensors: each of their products
    // computes C0 + alpha * sum in f32 (C0 the stored bf16 value) and rounds it to bf16, by
    // ATen's gemm_stub when m*n*k <= 4096, else by oneDNN (gen/libraries/bf16_out_gemm.cpp)
    // (`onednn_16bit` false: by gemm_stub whatever the size):
    //   stub dQ:     ilp4 dot (sum[k mod 4], the K mod 4 tail into sum 0, ((s0+s1)+s2)+s3),
    //                then C0 + fl(alpha*dot);
    //   stub dV, dK: from C0, per k ascending acc += fl(alpha*P[j][k]) * V[k][e], fused when
    //                `bf16_stub_fma`, else product and sum each rounded;
    //   oneDNN:      per output row one chain from +0 over k ascending, in pairs
    //                (acc + p[k+1]) + p[k] (one row of C: plain k order), then C0 + fl(alpha*acc);
    //   oneDNN emulated (`onednn_16bit` Emulated): the same pairs over K <= 384; K > 384: two
    //                chains, k < ceil(K/2) and the rest, C = fma(alpha, B1, fl(alpha*B0)); a
    //                one-row call: 8-k blocks B_i (pairs inside), y = fl(alpha*B0), then
    //                y = fma(alpha, B_i, y); each output C0 + C. Threaded (one (batch, head)), the
    //                row-major M x N output is cut into `threads` equal ranges and a row a range
    //                holds alone or in part is a one-row call.
    CpuFlash,
    // Autograd through PyTorch's eager composite softmax(q @ k^T * scale) @ v (f32; measured
    // against torch 2.15.0 on an AMD AVX-512 host, docs/research/torch2.15-attention-backward.md).
    // A program instance per (batch, head); lse and out are not read. c = (float)scale.
    //   P = the forward's probabilities, recomputed by Order::attention (AttentionOrder::CpuMatmul);
    //   dV = P^T dout;  GP = dout V^T;                 (bmm's backward: MKL 'N','T' and 'T','N')
    //   s_r = sum_k GP[r][k] * P[r][k]                 (`softmax_backward`, Order::softmax_backward:
    //                                                   _softmax_backward_data's row sum)
    //   G = (GP - s_r) * P; causal: G = +0 where key > query (masked_fill's backward); G = G * c;
    //   dQ = G K;  dK = (Q^T G)^T                      (MKL 'N','N' and 'N','T', alpha 1, beta 0)
    // each product by the kernel MKL picks for the whole S x S call (`gemm`), or PyTorch's own
    // loop when S_q*S_k*D < 400. PyTorch's row loop of _softmax_backward_data has B*H*S_q rows.
    CpuMatmul,
  };
  Kind kind = Kind::Tiled;
  int lanes = 8;     // Tiled: keys (stage 1) or queries (stage 2) per program instance; no numerical effect
  bool fma = false;  // Tiled: every dot-product and accumulation step is one fma
  int key_block = 512;                   // CpuFlash: kvS
  int dsum_lanes = 16;                   // CpuFlash: vec::map2_reduce_all's vector of floats
  LaneFold dsum_fold = LaneFold::Halving;  // CpuFlash
  MathImpl exp = MathImpl::SleefU10;     // CpuFlash: P's exp
  bool bf16_stub_fma = true;             // CpuFlash, bf16 and f16: ATen's gemm_stub fuses its steps (avx2, avx512 builds)
  // CpuFlash, bf16 and f16: whether PyTorch's mkldnn_bf16_gemm hands dQ, dK, dV products of
  // m*n*k > 4096 to oneDNN, and which oneDNN kernel then runs (bf16 only).
  enum class OneDnn : uint8_t {
    // Every such product is gemm_stub's: a CPU without AVX-512, where PyTorch's oneDNN bf16 check
    // fails, and f16 on a CPU without avx512_fp16 (both measured on an AVX2 EPYC).
    Off,
    // oneDNN's kernel on a CPU with avx512_bf16 (vdpbf16ps pairs; measured on an AMD EPYC).
    Avx512Bf16,
    // oneDNN's gemm:jit:bf16 on AVX-512 without avx512_bf16, bf16 emulated (measured on an Intel
    // Xeon, docs/research/torch2.15-attention-backward.md section 5.5).
    Emulated,
    // f16: oneDNN's brgemm on a CPU with avx512_fp16 (brg_matmul:avx10_1_512): the halves
    // converted to f32, every output one chain over K in order from +0, then C0 + fl(alpha * sum)
    // (measured on an Intel Xeon, docs/research/torch2.15-attention-f16.md); the composite's bmm
    // (CpuMatmul) by oneDNN's f32 brgemm blocks, gemv kernels and K splits (gen/libraries/bf16_out_gemm.hpp,
    // docs/research/torch2.15-attention-16bit-composite-f16-avx512fp16.md).
    Avx512Fp16,
  };
  OneDnn onednn_16bit = OneDnn::Avx512Bf16;
  // CpuFlash, CpuMatmul: the products. Its `threads` is PyTorch's intra-op thread count, which
  // changes bits only when a launch is one (batch, head): PyTorch then calls MKL outside its
  // parallel loop (CpuFlash), or bmm has a single matrix (CpuMatmul).
  GemmOrder gemm{GemmOrder::Kind::MklAmd, 1};
};

// How a weight gradient sums its per-row terms over the rows of the launch (a column
// reduction: every row contributes to each column). Each column is independent; the order is
// the same for every column.
struct ColumnSumOrder {
  enum class Kind : uint8_t {
    // PyTorch's CPU backward kernels (at::parallel_for over the rows, grain 1): the M rows are
    // cut for `slots` threads as nt = min(slots, M), chunks of ceil(M / nt) rows, thread t taking
    // rows [t*chunk, min(M, (t+1)*chunk)); each slot accumulates its rows in row order into its
    // own buffer from +0, rounded to x's storage type after every row when `round_slots` (a 16-bit
    // buffer); then, per column, the `slots` buffers (unused ones +0) are added in slot order to +0.
    ThreadSlots,
    // Rows in blocks of `block_rows`, each block accumulated in row order from +0. The block sums
    // combine by a binary counter: after block j (from 0) the carry starts as its sum and, for
    // level l = 0, 1, ... while bit l of j is 1, becomes S_l + carry (S_l emptied); the first level
    // whose bit is 0 keeps the carry. At the end the levels held (the set bits of the block count)
    // are added from the highest (the earliest rows) down: (S_top + ...) + S_0. The tree depends on
    // the row count alone: neither the threads nor how a launch is split change a bit.
    BlockTree,
    // PyTorch's CPU sum (SumKernel) over dim 0 of the contiguous rows x N terms, as `.sum(0)` runs
    // it (measured against torch 2.15). Every step is an f32 add. Its level cascade over m rows
    // (multi_row_sum): L = 2^P, P = max(4, ceil(log2 m) / 4) (ceil(log2 m) = 1 for m <= 2);
    // A0 += row in order; after every L rows A1 += A0 (A0 = +0), after every L^2 also A2 += A1
    // (A1 = +0), after every L^3 also A3 += A2 (A2 = +0); the m mod L leftover rows into A0;
    // result ((A0 + A1) + A2) + A3. The interleaved form (row_sum): rows 4i + k, i < floor(m/4),
    // go into partial k by the cascade over floor(m/4) rows; the m mod 4 leftovers into partial 0;
    // ((P0 + P1) + P2) + P3. With V = `vector` and W = 4V if N >= V else 4, column j takes the
    // cascade over the M rows when j < W*floor(N/W), else the interleaved form; the column's
    // result is +0 + that. N = 1 makes the rows contiguous, and the sum is SumOrder::LevelCascade
    // (V lanes, 4 accumulators) over the M terms; on `slots` threads with M > 32768 it is cut
    // into nt = min(slots, ceil(M / 32768)) chunks of ceil(M / nt) rows, each summed so, slot t
    // of `slots` (+0 when unused), and the slots summed likewise as `slots` terms. For N > 1 the
    // threads split the columns at multiples of 32, which keeps every column's order: no bit
    // depends on `slots`.
    LevelCascade,
  };
  Kind kind = Kind::BlockTree;
  int slots = 1;       // ThreadSlots, LevelCascade: the reference's thread count
  int vector = 8;      // LevelCascade: SumKernel's vector width V (8 lanes under every capability)
  bool round_slots = false;
  int64_t block_rows = 32;
  bool fma = true;  // BlockTree: a product term accumulates as fma(a, b, acc)
  int lanes = 16;   // columns per program instance (a vector each); no numerical effect
};

// How the backward of a normalization (layer_norm, rms_norm) forms dx and its row sums.
struct NormBackwardOrder {
  enum class Kind : uint8_t {
    // PyTorch 2.x's CPU LayerNormBackwardKernel (aten/src/ATen/native/cpu/layer_norm_kernel.cpp;
    // docs/research/torch2.15-backward.md). Row sums ds = sum(dy*x*g) and db = sum(dy*g) (raw x)
    // by vec::map*_reduce_all on vectors of `lanes` f32 (a 16-bit vector of 2*lanes elements is two
    // accumulators); b2 = ((((db*mean - ds)*a)*a)*a)*(1/N), c = (-b2)*mean - (db*a)*(1/N),
    // dx = ((a*dy)*g + b2*x) + c with a = rstd. dgamma's term dy*(a*x + (-a)*mean), dbeta's dy,
    // summed by `columns` (ThreadSlots). `fma`: GCC's contractions in the x86 AVX2 build.
    TorchCpu,
    // ordo's own: xhat = (x - mean)*rstd, wdy = dy*g; s1 = sum(wdy), s2 = sum(wdy*xhat) by `sum`;
    // dx = (wdy - (xhat*(s2/N) + s1/N))*rstd; dgamma sums dy*xhat and dbeta dy by `columns`.
    // rms_norm_backward: mean = 0 and no s1: xhat = x*rstd, dx = (wdy - xhat*(s2/N))*rstd, with
    // fma_dx as fma(-xhat, s2/N, wdy).
    Centered,
    // PyTorch 2.15's F.rms_norm autograd on the CPU (rms_norm_backward only): a chain of
    // TensorIterator ops, every result rounded to f32, with r = rstd and u = x, g = dy in f32:
    // gz = g*w (g without a weight); gr = sum(gz*u) over the row by `sum` (a single row of more
    // than 32768 terms on Order::threads threads in per-thread chunks, as the forward's sum of
    // squares); ga = (gr*(-0.5))*((r*r)*r); gm = ga / N; dx = gz*r + gm*(2*u), rounded once to
    // x's type. dweight sums the rounded g*(u*r) by `columns` (LevelCascade), rounded once to
    // the weight's type. No fma anywhere.
    TorchComposite,
  };
  Kind kind = Kind::Centered;
  int lanes = 8;                     // TorchCpu
  LaneFold fold = LaneFold::Halving;  // TorchCpu: the horizontal sum of a vector accumulator
  bool fma = true;                   // TorchCpu: the build contracts (the default capability does not)
  // TorchCpu, f16 input with an f16 weight: GCC also contracted the reductions' steady loop and
  // their short-row path (lanes < N < 2*lanes) there (measured; bf16 and the weightless f16 kernel
  // keep both unfused).
  bool fma_half_weighted = true;
  SumOrder sum{};                    // Centered, TorchComposite: the row sums
  bool fma_dx = true;                // Centered: xhat*c2 + c1 as one fma
  ColumnSumOrder columns{};
};

// How the backward of softmax and log_softmax over the last dim forms dx from dy and the
// forward's output y (one row per program instance; no weight gradients):
//   softmax_backward:     s = sum(dy*y),  dx = (dy - s)*y
//   log_softmax_backward: s = sum(dy),    dx = dy - exp(y)*s
// s is an f32 scalar, also for 16-bit storage (it is not rounded to the storage type); dx is
// computed in f32 on the widened inputs and rounded once, at the store.
struct SoftmaxBackwardOrder {
  enum class Kind : uint8_t {
    // PyTorch 2.x's CPU _vec_host_softmax_backward_lastdim (ATen/native/cpu/SoftMaxKernel.cpp;
    // measured against torch 2.15, docs/research/torch2.15-softmax-backward.md): s by
    // vec::map2_reduce_all (softmax) or vec::reduce_all (log_softmax) on vectors of `lanes` f32, a
    // 16-bit vector of 2*lanes elements feeding two accumulators (gen/blocks/norm_backward.hpp,
    // VecReduceAll): the first vector's products rounded,
    // the steady loop's products rounded then added, the masked tail's as `fma_tail` says, the
    // lanes folded by `fold`. dx by `exp`; log_softmax's dx = fma(-exp(y), s, dy) when `fma`.
    TorchCpu,
    // ordo's own: s by `sum` (a SumOrder over the terms dy*y or dy), dx as above by `exp`,
    // log_softmax's as one fma when `fma`.
    Summed,
  };
  // TorchCpu: whether the masked tail's products accumulate as fma(dy, y, lane). PyTorch runs the
  // row loop through at::parallel_for, inline when it has one thread (Order::threads == 1) or the
  // launch has one row, else in OpenMP's outlined copy of the loop; GCC contracted the tail in the
  // inline copy only (measured: torch 2.15 on 1 and 2 threads). `Inline` is that rule. A product
  // of two widened 16-bit values is exact in f32, so for 16-bit storage the choice changes no bit.
  enum class TailFma : uint8_t { Never, Always, Inline };
  Kind kind = Kind::Summed;
  int lanes = 8;                       // TorchCpu
  LaneFold fold = LaneFold::Halving;   // TorchCpu
  TailFma fma_tail = TailFma::Inline;  // TorchCpu
  bool fma = true;                     // log_softmax's dx as one fma
  MathImpl exp = MathImpl::SleefU10;   // log_softmax's exp(y)
  SumOrder sum{};                      // Summed
};

// An elementwise op as PyTorch's CPU kernels run it (cpu_kernel_vec over the tensor flattened):
// for a launch of at least 32768 elements on T = Order::threads > 1 threads, at::parallel_for
// cuts the rows*N elements into nt = min(T, ceil(rows*N / 32768)) chunks of ceil(rows*N / nt)
// (the last shorter); otherwise the launch is one chunk. In each chunk the elements go in steps
// of `vector_elements` (two of PyTorch's vectors) through the vector function, which takes
// `vector_exp`, and the chunk's last (length mod vector_elements) through the scalar function,
// which takes `scalar_exp`. vector_elements = 0: every element takes the vector function.
struct PointwiseOrder {
  MathImpl vector_exp = MathImpl::SleefU10;
  MathImpl scalar_exp = MathImpl::Glibc;
  int vector_elements = 0;
  // silu_backward: 1 + x*(1 - s) as one fma, in both functions (GCC contracts it in PyTorch's
  // AVX2 and AVX-512 builds; its default build has no fma). gelu_tanh: x + 0.044715 x^3 as one.
  bool fma = false;
  // > 0: a launch of more elements than this is cut between the threads with a grain of
  // elements / threads instead of 32768 (PyTorch's GELU forward: 16384).
  int64_t threads_grain_above = 0;
  // Whether each row of the launch is one of PyTorch's inner loops (TensorIterator over a strided
  // input whose rows it cannot coalesce, such as a chunk of a wider tensor): then every part of a
  // row that a chunk holds ends in its own scalar tail of (its length mod vector_elements)
  // elements. Otherwise (a contiguous tensor, one loop over the whole launch) only each chunk's
  // end does.
  bool tail_per_row = false;
  // gelu and gelu_backward (GELU's erf form), as oneDNN's eltwise_gelu_erf computes them: PyTorch's
  // CPU GELU hands a contiguous f32, bf16 or f16 tensor of more than one element to oneDNN, which
  // picks its code by the CPU, not by ATEN_CPU_CAPABILITY (docs/research/torch2.15-gelu.md). Every
  // element alike; no chunks or tails.
  enum class GeluErf : uint8_t {
    // The forward on a CPU with AVX-512 (avx512_core): erf(x/sqrt 2) by a piecewise minimax
    // polynomial of |x|, an interval of 32 picked from the bits of |x|; y = (x * (1 + erf)) / 2.
    OneDnnMinimax,
    // The forward on a CPU without it: Abramowitz and Stegun 7.1.26 with oneDNN's exp;
    // y = fma(erf, x/2, x/2).
    OneDnnAbramowitzStegun,
  };
  GeluErf gelu_erf = GeluErf::OneDnnMinimax;  // the forward; the backward is Abramowitz and Stegun on every CPU
  // A bf16 result whose f32 value is subnormal is stored as the zero of its sign (oneDNN's store
  // by vcvtneps2bf16 on a CPU with avx512_bf16, which flushes). Other storage types never flush.
  bool bf16_flushes_subnormals = false;
  bool operator==(const PointwiseOrder&) const = default;
};

// The whole order of a normalization-family op.
// How a loss sums its rows' terms into one value (cross_entropy under reduction mean or sum), as
// PyTorch's CPU nll_loss does (ATen/native/LossNLL.cpp, nll_loss_out_frame; measured against torch
// 2.15 and 1.13, docs/research/torch2.15-cross-entropy.md): `levels` partial sums s[0..levels-1],
// each rounded to the loss's storage type at every step. Row b's term goes into s[0]
// (s[0] = s[0] - logp[b, t_b]); then, unless b's target was ignored (PyTorch's `continue` skips
// both), for j = 0, 1, ..., levels-2 while the low (j+1)*level_bits bits of b are all zero:
// s[j+1] = s[j+1] + s[j], s[j] = 0. The total is (((0 + s[0]) + s[1]) + ...) + s[levels-1]; mean
// divides it by the rows counted, converted int64 -> f32 -> storage. PyTorch's level_bits is
// max(4, ceil(log2(rows)) / 8), which is 4 for every launch of up to 2^39 rows; kernels refuse larger.
struct LossOrder {
  int levels = 8;
  int level_bits = 4;
  friend bool operator==(const LossOrder&, const LossOrder&) = default;
};

struct Order {
  MomentsOrder moments;      // layer_norm, var_mean
  SumOrder row_sum;          // the sum over a row: rms_norm's of x*x, sum's and mean's of x
  AffineOrder affine;        // layer_norm, rms_norm (rms_norm uses only gamma)
  SoftmaxOrder softmax;      // softmax, log_softmax
  AttentionOrder attention;  // attention; attention_backward: the forward that recomputes lse
  AttentionBackwardOrder attention_backward;  // attention_backward
  NormBackwardOrder norm_backward;  // layer_norm_backward, rms_norm_backward
  SoftmaxBackwardOrder softmax_backward;  // softmax_backward, log_softmax_backward
  PointwiseOrder pointwise;  // silu, silu_backward, gelu_tanh, gelu_tanh_backward
  // cross_entropy: its log_softmax is `softmax`'s, its sum over rows `loss`; cross_entropy_backward's
  // log_softmax_backward is `softmax_backward`'s.
  LossOrder loss;
  // PyTorch 1.13's bf16 kernels round every intermediate of the statistics and of rstd to
  // the storage type. When set and the storage type is 16-bit, every such f32 result is
  // followed by a Cast to storage and back, visible in the IR. An f64 accumulation is
  // rounded only at its results.
  bool round_stats_to_storage = false;
  int elementwise_lanes = 8;  // vector width of elementwise passes; has no numerical effect
  // The reference library's intra-op thread count, for the reductions whose order depends on it:
  // PyTorch 2.x sums a single row of more than 32768 elements in per-thread chunks (rms_norm's
  // mean of squares, gen/ops/rms_norm.cpp); its CPU attention calls MKL threaded (AttentionOrder::gemm);
  // its softmax backward contracts differently on one thread (SoftmaxBackwardOrder::TailFma::Inline).
  int threads = 1;
};

std::string describe(const SumOrder& s);
std::string describe(const MomentsOrder& m);
std::string describe(const AffineOrder& a);
std::string describe(const SoftmaxOrder& s);
std::string describe(const GemmOrder& g);
std::string describe(const AttentionOrder& a);
std::string describe(const AttentionBackwardOrder& a);
std::string describe(const ColumnSumOrder& c);
std::string describe(const NormBackwardOrder& n);
std::string describe(const SoftmaxBackwardOrder& s);
std::string describe(const PointwiseOrder& p);
std::string describe_gelu_erf(const PointwiseOrder& p);  // the fields gelu and gelu_backward read
std::string describe(const LossOrder& l);

}  // namespace ordo::ir
