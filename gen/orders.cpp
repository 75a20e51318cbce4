// The named-order table: a stable name, one line of description, and the Order it means.
// Adding an order is one row here; gen/ and the backends do not change.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "gen/blocks/warp.hpp"
#include "gen/gen.hpp"
#include "gen/host.hpp"
#include "ir/error.hpp"

namespace ordo::gen {

using namespace ordo::ir;
using K = MomentsOrder::Kind;
using S = SumOrder::Kind;
using F = AffineOrder::Form;

namespace {

constexpr ScalarType f32 = ScalarType::f32, bf16 = ScalarType::bf16, f16 = ScalarType::f16, f64 = ScalarType::f64;
const std::vector<OpKind> kNormOps = {OpKind::layer_norm, OpKind::rms_norm, OpKind::var_mean};
const std::vector<ScalarType> kAllStorage = {f32, bf16, f16};
const std::vector<OpKind> kSoftmaxOps = {OpKind::softmax, OpKind::log_softmax};
const std::vector<OpKind> kAllOps = {OpKind::layer_norm, OpKind::rms_norm, OpKind::var_mean, OpKind::softmax, OpKind::log_softmax,
                                     OpKind::attention, OpKind::layer_norm_backward, OpKind::rms_norm_backward,
                                     OpKind::softmax_backward, OpKind::log_softmax_backward, OpKind::attention_backward};

// PyTorch 1.13 CPU softmax/log_softmax over the last dim (docs/research/softmax-torch1.13.md).
// float: reduce_all trees over 8 lanes (avx2: a halving tree; default: lanes in order), exp and
// log from Sleef u10 (avx2) or glibc's expf/logf (default), y = e * (1/s) and (x - max) - log(s).
// bf16 softmax: the staged kernel, whose scalar tail always calls glibc's expf. The avx512 build has
// 16 float lanes and the same halving tree (its VecReduceAllSIMD in the installed headers; measured
// on an AVX-512 CPU).
enum class Capability { base, avx2, avx512 };
SoftmaxOrder torch113_softmax(ScalarType storage, Capability cap) {
  SoftmaxOrder s;
  s.kind = storage == f32 ? SoftmaxOrder::Kind::TwoPass : SoftmaxOrder::Kind::Staged;
  s.lanes = cap == Capability::avx512 ? 16 : 8;
  s.fold = cap == Capability::base ? LaneFold::Sequential : LaneFold::Halving;
  s.exp = s.log = cap == Capability::base ? MathImpl::Glibc : MathImpl::SleefU10;
  s.tail_exp = MathImpl::Glibc;
  return s;
}

// PyTorch 1.13 CPU layer_norm: RowwiseMoments is linked from the portable build, so the
// statistics never use fma; a vector is 32 bytes (8 f32 lanes, 16 bf16 lanes). 1.13 registers
// its layer_norm kernel with REGISTER_DISPATCH, which leaves the AVX-512 slot empty, so
// ATEN_CPU_CAPABILITY=avx512 runs the avx2 kernel: measured on an AVX-512 CPU, where torch's
// layer_norm bits are the same under avx2 and avx512 while its softmax's differ.
Order torch113_layer_norm(ScalarType storage, Capability cap) {
  Order o;
  if (cap == Capability::avx512) cap = Capability::avx2;
  o.moments = {K::LaneWelford, f32, storage == f32 ? 8 : 16, 16, false, false, {}};
  o.affine = {F::ScaleBias, cap != Capability::base};
  o.round_stats_to_storage = true;  // only acts on 16-bit storage
  return o;
}

// PyTorch 2.15 CPU (docs/research/torch2.15-cpu.md).
// layer_norm: still registered with REGISTER_DISPATCH, so avx512 runs the avx2 kernel. Its
// RowwiseMoments (2.10+) accumulates in f32 for every input type: 8 lanes, chunks of 16 vectors,
// the update as two explicit fmas, chunk and stack merges in AddMomentsVec's form (ScaledDelta),
// the scalar tail with a true division and unfused (but for f16 input with f32 weight), the lane
// fold fused. A 16-bit vector of 16
// elements is two f32 streams. float output: ((x - mean)*rstd)*gamma + beta as one expression
// with gamma = 1 and beta = 0 substituted when absent (GCC folds the *1, keeps the +0, and
// contracts each a*b + c); 16-bit output: the scale/shift form of 1.13, in f32, rounded once.
// The default build has no fma anywhere, with the same structure.
// softmax/log_softmax: 1.13's orders, unchanged in 2.15 (measured, every capability).
// var_mean: a sequential Welford in f64, as 1.13.
// PyTorch 2.15's CPU sum (SumKernel) as F.rms_norm's `pow(x, 2).mean(-1)` runs it, in f32: the
// squares are rounded (pow is its own op), then summed; mean = sum / N.
SumOrder torch215_mean_sum(Capability) {
  SumOrder s;
  s.kind = S::LevelCascade;
  s.lanes = 8;
  s.accumulators = 4;
  return s;
}

// scaled_dot_product_attention: the CPU flash kernel (gen/torch_cpu/cpu_flash_attention.cpp), compiled per
// capability: avx512 and avx2 take exp_u20 on 16 and 8 lanes, their sums folded by halving, and
// a fused rescale of the sum; default takes glibc's expf per lane, a sequential fold, no fma. The
// scores past the last whole vector take glibc's double exp in every build. The block products
// are MKL's, which PyTorch's wheel links whatever the capability: GemmOrder names the host.
AttentionOrder torch215_attention(ScalarType storage, Capability cap) {
  AttentionOrder a;
  a.kind = AttentionOrder::Kind::CpuFlash;
  a.key_block = 512;
  a.softmax.lanes = cap == Capability::avx512 ? 16 : 8;
  a.softmax.fold = cap == Capability::base ? LaneFold::Sequential : LaneFold::Halving;
  const bool reduced = storage != f32;
  a.softmax.exp = cap == Capability::base ? MathImpl::Glibc : reduced ? MathImpl::TorchFexpU20 : MathImpl::TorchExpU20;
  a.paired_exp_sum = reduced;
  a.softmax.tail_exp = MathImpl::GlibcDouble;
  a.softmax.log = MathImpl::Glibc;
  a.rescale_fma = cap != Capability::base;
  a.round_to_storage = storage != f32;
  a.gemm.kind = GemmOrder::Kind::MklIntelAvx512;
  return a;
}

// scaled_dot_product_attention's autograd: the CPU flash backward (gen/torch_cpu/cpu_flash_attention_backward.cpp),
// compiled per capability (docs/research/torch2.15-attention-backward.md): dsum by
// vec::map2_reduce_all on 16 lanes folded by halving (avx512), 8 (avx2), 8 folded in order
// (default), never fused; P's exp is Vectorized<float>::exp (Sleef expf_u10) or, under default,
// glibc's expf. The products are MKL's, measured on AMD hosts and, in f32, on an Intel AVX-512
// host (the MKL model is checked in shape_error). bf16's dq, dk, dv products are ATen's gemm_stub
// (fused under avx2 and avx512) or oneDNN's.
AttentionBackwardOrder torch215_attention_backward(Capability cap) {
  AttentionBackwardOrder a;
  a.kind = AttentionBackwardOrder::Kind::CpuFlash;
  a.key_block = 512;
  a.dsum_lanes = cap == Capability::avx512 ? 16 : 8;
  a.dsum_fold = cap == Capability::base ? LaneFold::Sequential : LaneFold::Halving;
  a.exp = cap == Capability::base ? MathImpl::Glibc : MathImpl::SleefU10;
  a.bf16_stub_fma = cap != Capability::base;
  a.gemm.kind = GemmOrder::Kind::MklAmd;
  return a;
}

// layer_norm_backward (docs/research/torch2.15-backward.md; measured against torch 2.15): like the
// forward, registered with REGISTER_DISPATCH, so avx512 runs the avx2 kernel: 8 lanes, the
// halving tree, and GCC's contractions (the reductions' masked tail, the mixed loop, dx's b2*x,
// the slot update); default: no fma, lanes folded in order. dgamma and dbeta: per-thread slots
// (threads=T), a 16-bit input's slots rounded to its type after every row.
NormBackwardOrder torch215_layer_norm_backward(Capability cap) {
  NormBackwardOrder n;
  n.kind = NormBackwardOrder::Kind::TorchCpu;
  n.lanes = 8;
  n.fold = cap == Capability::base ? LaneFold::Sequential : LaneFold::Halving;
  n.fma = cap != Capability::base;
  n.columns.kind = ColumnSumOrder::Kind::ThreadSlots;
  n.columns.slots = 1;
  n.columns.round_slots = true;  // acts on 16-bit input only
  return n;
}

// softmax_backward / log_softmax_backward over the last dim (read from PyTorch's SoftMaxKernel.cpp;
// measured against torch 2.15 on 1 and 2 threads): registered with ALSO_REGISTER_AVX512_DISPATCH,
// so avx512 runs 16 lanes and avx2 8, both folded by halving and contracted by GCC (the masked tail
// of map2_reduce_all on the inline path only, log_softmax's dx), exp by Sleef's expf_u10; default:
// 8 lanes folded in order, no fma, glibc's expf.
SoftmaxBackwardOrder torch215_softmax_backward(Capability cap) {
  SoftmaxBackwardOrder s;
  s.kind = SoftmaxBackwardOrder::Kind::TorchCpu;
  s.lanes = cap == Capability::avx512 ? 16 : 8;
  s.fold = cap == Capability::base ? LaneFold::Sequential : LaneFold::Halving;
  s.fma_tail = cap == Capability::base ? SoftmaxBackwardOrder::TailFma::Never : SoftmaxBackwardOrder::TailFma::Inline;
  s.fma = cap != Capability::base;
  s.exp = cap == Capability::base ? MathImpl::Glibc : MathImpl::SleefU10;
  return s;
}

// The eager composite softmax(q @ k^T * scale) @ v (gen/torch_cpu/cpu_matmul_attention.cpp): MKL's products
// (the PyPI wheel's, whatever the capability) and the softmax op's order for the capability. Its
// autograd (gen/torch_cpu/cpu_matmul_attention_backward.cpp) recomputes P by that forward and runs
// _softmax_backward_data's order for the capability.
Order torch215_math(ScalarType storage, Capability cap) {
  Order o;
  o.attention.kind = AttentionOrder::Kind::CpuMatmul;
  o.attention.softmax = torch113_softmax(storage, cap);
  // PyTorch registers no AVX-512 gemm_stub: under avx512 the dispatcher runs the avx2 build's.
  o.attention.dot_fold = cap == Capability::base ? LaneFold::Sequential : LaneFold::Halving;
  o.attention.stub_fma = cap != Capability::base;
  o.attention.gemm.kind = GemmOrder::Kind::MklIntelAvx512;
  o.attention_backward.kind = AttentionBackwardOrder::Kind::CpuMatmul;
  o.attention_backward.gemm.kind = GemmOrder::Kind::MklIntelAvx512;
  o.softmax_backward = torch215_softmax_backward(cap);
  return o;
}

// ordo's own softmax backward: s by `sum`, Sleef's exp, log_softmax's dx as one fma.
SoftmaxBackwardOrder summed_softmax_backward(SumOrder sum) {
  SoftmaxBackwardOrder s;
  s.kind = SoftmaxBackwardOrder::Kind::Summed;
  s.sum = sum;
  return s;
}

// rms_norm_backward: F.rms_norm's autograd, a chain of eager ops (measured against torch 2.15,
// every capability on 1 and 2 threads): its two sums are SumKernel's 8-lane cascade under every
// capability (avx512 included), the row sum as the forward's mean of squares, the weight's over
// dim 0 (ColumnSumOrder::LevelCascade); no fma. rstd, when not given, as the forward's.
NormBackwardOrder torch215_rms_norm_backward() {
  NormBackwardOrder n;
  n.kind = NormBackwardOrder::Kind::TorchComposite;
  n.sum = torch215_mean_sum(Capability::base);
  n.columns.kind = ColumnSumOrder::Kind::LevelCascade;
  n.columns.vector = 8;
  n.columns.lanes = 8;  // an instance per vector of SumKernel's columns
  return n;
}

Order torch215(ScalarType storage, Capability cap, const Request& r) {
  Order o;
  if (r.op == OpKind::attention) {
    o.attention = torch215_attention(storage, cap);
    return o;
  }
  if (r.op == OpKind::attention_backward) {
    o.attention_backward = torch215_attention_backward(cap);
    return o;
  }
  if (r.op == OpKind::var_mean) {
    o.moments = {K::SequentialWelford, f64, 1, 1, false, false, {}};
    return o;
  }
  if (r.op == OpKind::layer_norm_backward) {
    o.norm_backward = torch215_layer_norm_backward(cap);
    return o;
  }
  if (r.op == OpKind::softmax_backward || r.op == OpKind::log_softmax_backward) {
    o.softmax_backward = torch215_softmax_backward(cap);
    return o;
  }
  if (r.op == OpKind::rms_norm_backward) {
    o.norm_backward = torch215_rms_norm_backward();
    o.square_sum = torch215_mean_sum(cap);
    return o;
  }
  o.softmax = torch113_softmax(storage, cap);
  o.square_sum = torch215_mean_sum(cap);
  const bool fma = cap != Capability::base;
  o.moments.kind = K::LaneWelford;
  o.moments.acc = f32;
  o.moments.lanes = 8;
  o.moments.chunk = 16;
  o.moments.streams = storage == f32 ? 1 : 2;
  o.moments.fma_update = o.moments.fma_merge = fma;
  o.moments.cascade_merge = WelfordMerge::ScaledDelta;
  // The one instance whose scalar tail GCC contracted: f16 input with f32 weight (measured).
  o.moments.fma_tail = fma && storage == f16 && r.weight_type() == f32;
  if (storage == f32) {
    o.affine = {F::GammaCentered, fma};
    o.affine.missing_bias_as_zero = true;
  } else {
    o.affine = {F::ScaleBias, fma};
  }
  return o;
}

// torch.compile(dynamic=False) of PyTorch 2.15 on the CPU: the C++ Inductor generates and builds
// with -O3 -ffp-contract=off (no fma), read with TORCH_LOGS=output_code and measured
// (docs/research/inductor2.15-cpu.md). Vectors of V = 16 floats on AVX-512, 8 on AVX2; a kernel
// over 16-bit values works on pairs of them (VectorizedN<float, 2>), so its reductions have 2V
// lanes. Sums: Inductor's CascadeSumHelper (ChunkStack). layer_norm: var_mean two-pass for
// N <= 1024 in a launch of several rows, else Welford (WelfordHelper); mean = sum / N, rstd =
// 1 / sqrt(var + eps), y = ((x - mean) * rstd) * weight + bias in f32, rounded once. rms_norm:
// sum(x*x) / N, rstd likewise, y = (x * rstd) * weight. softmax: y = exp(x - max) / sum with
// Sleef's expf_u10, the sum over V lanes (the exponentials go through an f32 buffer);
// log_softmax: (x - max) - log(sum), the sum over the input's lanes, log by Sleef's logf_u10 over
// a vector of rows, or glibc's logf below 4 rows. On T threads (threads=T: torch.get_num_threads())
// a single-row launch of N >= 512 T, and a launch of R rows whose row loop has over 300 R steps,
// split each row between them.
Order inductor215(ScalarType storage, Capability cap, const Request& r) {
  const int V = cap == Capability::avx512 ? 16 : 8;
  const int lanes = storage == f32 ? V : 2 * V;
  SumOrder sum;
  sum.kind = S::ChunkStack;
  sum.lanes = lanes;
  sum.fold = LaneFold::Halving;
  sum.unroll_below = 8;  // torch._inductor.config.unroll_reductions_threshold
  sum.loop_step = lanes;
  Order o;
  o.square_sum = sum;
  o.moments.kind = K::VectorWelford;
  o.moments.acc = f32;
  o.moments.lanes = V;
  o.moments.streams = storage == f32 ? 1 : 2;
  o.moments.chunk = 4096;
  o.moments.two_pass_max_n = 1024;
  o.moments.sum = sum;
  o.affine = {F::CenterScale, false};
  o.softmax.kind = SoftmaxOrder::Kind::Decomposed;
  o.softmax.lanes = lanes;
  o.softmax.exp = o.softmax.log = MathImpl::SleefU10;
  o.softmax.multiply_by_reciprocal = false;
  o.softmax.sum = sum;
  if (r.op == OpKind::softmax) o.softmax.sum.lanes = o.softmax.sum.loop_step = V;
  if (cap == Capability::avx512 && storage == f32) o.softmax.scalar_exp_below = V / 4;  // Inductor's tiling_factor / 4
  o.elementwise_lanes = lanes;
  return o;
}

// Hugging Face transformers 5.23's RMSNorm classes as torch 2.15 eager runs them (read from
// modeling_llama.py and modeling_gemma.py): h = x.float(); h * rsqrt(h.pow(2).mean(-1) + eps),
// the mean as F.rms_norm sums it; then Llama: weight * h.to(x.dtype), whose type torch promotes
// (bf16 x with an f32 weight gives f32); Gemma: (h * (1 + weight.float())).type_as(x).
Order hf_rms_norm(bool gemma, Capability cap) {
  Order o;
  o.square_sum = torch215_mean_sum(cap);
  o.affine.round_before_weight = !gemma;
  o.affine.one_plus_weight = gemma;
  return o;
}

// The capability PyTorch picks at import: ATEN_CPU_CAPABILITY when it names one of the x86
// capabilities, else the best the CPU has (avx512 needs AVX-512 F, BW, VL and DQ; avx2 needs
// AVX2 and FMA), as torch's cpu_capability detection does.
Capability torch_capability(const HostModel& host) {
  if (host.aten_cpu_capability == "default") return Capability::base;
  if (host.aten_cpu_capability == "avx2") return Capability::avx2;
  if (host.aten_cpu_capability == "avx512") return Capability::avx512;
  return host.avx512 ? Capability::avx512 : host.avx2_fma ? Capability::avx2 : Capability::base;
}

// The vector ISA Inductor's C++ backend picks (torch/_inductor/cpu_vec_isa.py): the one
// ATEN_CPU_CAPABILITY names, else the best the CPU has. It has no kernel for `default` (it emits
// scalar C++ there, which ordo does not model), so that resolves to an error.
Capability inductor_capability(const HostModel& host) {
  const Capability cap = torch_capability(host);
  if (cap == Capability::base)
    throw Error("order 'inductor2.15-cpu': Inductor would emit scalar C++ here (ATEN_CPU_CAPABILITY=default or a CPU without "
                "AVX2), which ordo does not model; name inductor2.15-cpu-avx2 or -avx512");
  return cap;
}

// torch.compile's layer_norm decomposition, each op in eager: var_mean (f64 Welford), then
// rsqrt(var + eps), (x - mean) * rstd, * weight, + bias, each rounded to the storage type. In
// bf16, the avx2 build's vector rsqrt (16 bf16 lanes) rounds once and its scalar tail rounds
// sqrt first; the default build's rounds sqrt first everywhere. Exact for torch running
// single-threaded or with fewer than 32768 rows (its grain size: one chunk, one tail).
Order torch_decomposition(int rsqrt_vector_rows) {
  Order o;
  o.moments = {K::SequentialWelford, f64, 1, 1, false, false, {}};
  o.affine = {F::CenterScale, false, true, rsqrt_vector_rows};
  o.round_stats_to_storage = true;
  return o;
}

// `wide` on a CPU target whose CPU has AVX-512 (a 16-float vector in one register), else
// `narrow`: widths that change no bits.
int avx512_cpu_lanes(const Request& r, int wide, int narrow) { return !cuda_target(r) && registers_per_vector(r, 16) == 1 ? wide : narrow; }

// PyTorch 1.13 CPU `torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(D), -1) @ v`
// (docs/research/attention-torch1.13.md). float32: reference-BLAS sgemm, a dot product
// sequential in k without fma, for both matmuls; the divisor (float)sqrt(D); the softmax op's
// order. bfloat16: the scores and scaled scores are rounded to bf16 and the divisor is bf16 too;
// q @ k^T on shapes with Sq*Sk*D < 400 runs a kernel that rounds every product and partial
// sum to bf16, larger ones sum in float (fma on avx2) and round once; p @ v always rounds
// every product and partial sum.
AttentionOrder torch113_attention(ScalarType storage, Capability cap, const Request& r, AttentionOrder::Kind kind) {
  AttentionOrder a;
  a.kind = kind;
  a.softmax = torch113_softmax(storage, cap);
  // exact-tiled recomputes q.k in each of its passes, one query per lane: 16 queries per
  // instance fill an AVX-512 vector (f32, B*H = 8, S = 1024, D = 64: 44 -> 29 ms; bf16 151 -> 98).
  if (kind == AttentionOrder::Kind::ExactTiled) a.query_lanes = avx512_cpu_lanes(r, 16, 8);
  if (kind == AttentionOrder::Kind::Materialized) {
    const int lanes = avx512_cpu_lanes(r, 16, 8);
    if (!cuda_target(r) && int64_t(lanes) * r.seq_k * 4 <= AttentionOrder::kKeptScoresBytes) {
      // On a CPU, where its scores fit the instance's 2 MiB as f32 vectors of 16 (or 8) queries,
      // the materialized order runs as exact-tiled, whose bits are its own, keeping every dot
      // product: the scores stored a vector of queries per key rather than a row per query (which
      // took 16 scattered stores per key), the max, sum and P passes on query vectors. f32,
      // B*H = 8, S = 1024, D = 64, one thread, 4 heads: 25.0 -> 15.6 ms per launch
      // (bench/perf_loops.py --time).
      a.kind = AttentionOrder::Kind::ExactTiled;
      a.query_lanes = lanes;
      a.keep_scores = true;
    } else {
      // Kept as materialized (CUDA, or S_k past the panel): its time is in its p @ v, a row at a
      // time with dims in lanes, where 16 dims per vector on AVX-512 halve its instructions. Its
      // query lanes stay 8 (16 ran no faster).
      a.pv_lanes = lanes;
    }
  }
  if (storage == bf16) {
    a.round_to_storage = true;
    a.qk_round_each_step = r.seq_q * r.seq_k * r.cols < 400;
    a.pv_round_each_step = true;
    a.dot_fma = cap != Capability::base;  // acts on the float-accumulated q @ k^T only
  }
  return a;
}

// FlashAttention-2's order on the CPU: Bc keys per block, scores scaled by multiplication.
AttentionOrder flash(int key_block, bool fma, bool exp2) {
  AttentionOrder a;
  a.kind = AttentionOrder::Kind::Flash;
  a.key_block = key_block;
  a.dot_fma = fma;
  a.exp2 = exp2;
  a.scale_divides = false;
  return a;
}

SumOrder lane_tree(int lanes, int accumulators, bool fma) {
  SumOrder s;
  s.kind = S::LaneTree;
  s.lanes = lanes;
  s.accumulators = accumulators;
  s.fold = LaneFold::Halving;
  s.fma = fma;
  return s;
}

// PyTorch's CUDA kernels (read from aten/src/ATen/native/cuda):
// layer_norm's vectorized kernel (a block of 128 threads per row, Welford over 4-wide vectors,
// shuffle-down warp tree, cross-warp tree, gamma*(rstd*(x - mean)) + beta contracted to an fma),
// which PyTorch runs for N a multiple of 4 up to 2^24 (with aligned buffers), else its two-kernel
// path (a block of 512 threads per row, Welford with a true division, the block reduce of
// cuda_utils::BlockReduce, y = fma((x - mean)*rstd, gamma, beta)); and the persistent warp
// softmax (N <= 1024). `device_math`: rstd by rsqrtf and CUDA's expf/logf, as PyTorch does, so
// the order is device-only; otherwise the same trees with host-exact math (rstd = 1/sqrt, Sleef
// exp/log).
Order torch_cuda(bool device_math, const Request& r) {
  Order o;
  const bool vectorized = r.cols % 4 == 0 && r.cols <= (int64_t(1) << 24);
  o.moments.kind = vectorized ? K::BlockWelford : K::BlockReduceWelford;
  o.moments.acc = f32;
  o.moments.team = vectorized ? 128 : 512;
  o.moments.lanes = vectorized ? 4 : 1;
  o.moments.fma_update = o.moments.fma_merge = true;
  o.affine = vectorized ? AffineOrder{F::GammaCentered, true} : AffineOrder{F::CenterScale, true};
  o.affine.missing_as_identity = !vectorized;
  o.affine.device_rsqrt = device_math;
  o.softmax.kind = SoftmaxOrder::Kind::WarpButterfly;
  o.softmax.exp = o.softmax.log = device_math ? MathImpl::Device : MathImpl::SleefU10;
  o.softmax.multiply_by_reciprocal = false;
  return o;
}

Order two_pass(SumOrder sum, ScalarType acc) {
  Order o;
  o.moments.kind = K::TwoPass;
  o.moments.acc = acc;
  o.moments.sum = sum;
  o.square_sum = sum;
  o.affine = {F::CenterScale, false};
  return o;
}

// ordo's own backward: the centered form (NormBackwardOrder::Kind::Centered) with `sum` for
// the row sums and a block tree over blocks of `block_rows` for the weight gradients.
NormBackwardOrder centered_backward(SumOrder sum, int64_t block_rows) {
  NormBackwardOrder n;
  n.kind = NormBackwardOrder::Kind::Centered;
  n.sum = sum;
  n.columns.kind = ColumnSumOrder::Kind::BlockTree;
  n.columns.block_rows = block_rows;
  return n;
}

// Queries per program instance of `fast`'s flash forward: every key and
// value element loaded serves them all. 32 (two 16-lane registers) on a CPU with AVX-512 and its
// 32 vector registers; 16 (two AVX2 registers) elsewhere, and on CUDA, where the lanes are one
// thread's array. A query's sums are the same at either width, so the bits are too: 32 lanes took
// 0.67 of the FMA peak on an Intel AVX-512 host where 16 took 0.57 (B*H = 8, S = 1024, D = 64).
int fast_query_lanes(const Request& r) { return avx512_cpu_lanes(r, 32, 16); }

std::vector<NamedOrder> make_table() {
  std::vector<NamedOrder> t;
  t.push_back({"fast", "the fastest order ordo has: two-pass, 4x8-lane fma sums, fused affine; attention: flash(bc=64,queries=32 on an AVX-512 CPU else 16,exp2=on,fma=all), S_k at launch; "
               "softmax/log_softmax_backward: s by 4x8-lane fma sums, Sleef exp, log_softmax's dx as one fma; "
               "attention_backward: flash's tiled backward with fma, 16 lanes, lse recomputed by fast's forward (no reference)",
               kAllOps, kAllStorage, false, false, [](ScalarType, ScalarType acc, const Request& r, const HostModel&) {
                 Order o = two_pass(lane_tree(8, 4, true), acc);
                 o.affine = {F::ScaleBias, true};
                 o.softmax.lanes = 16;  // two AVX2 vectors per step: more independent exps in flight
                 o.attention = flash(64, true, true);
                 o.attention.query_lanes = fast_query_lanes(r);
                 o.norm_backward = centered_backward(lane_tree(8, 4, true), 64);
                 o.softmax_backward = summed_softmax_backward(lane_tree(8, 4, true));
                 o.attention_backward.fma = true;
                 // 16 on every CPU: 32 sped bf16 up (35 -> 30 ms, B*H = 8, S = 1024, D = 64) but not f32,
                 // and took 2.5x the compile time (98 ms, over issue 21's 50).
                 o.attention_backward.lanes = 16;
                 return o;
               }});
  t.push_back({"batch-invariant",
               "backward ops: every bit independent of the thread count and of how rows are batched: dx from its own row's "
               "16-lane fma sums; weight gradients summed in blocks of 32 rows, the blocks combined by a fixed binary tree; "
               "softmax/log_softmax_backward: s = sum(dy*y) or sum(dy) as one 16-lane fma sum, halving fold, Sleef exp, "
               "log_softmax's dx = fma(-exp(y), s, dy) (no reference)",
               {OpKind::layer_norm_backward, OpKind::rms_norm_backward, OpKind::softmax_backward, OpKind::log_softmax_backward},
               kAllStorage, false, false, [](ScalarType, ScalarType, const Request&, const HostModel&) {
                 Order o;
                 o.norm_backward = centered_backward(lane_tree(16, 1, true), 32);
                 o.square_sum = lane_tree(16, 1, true);  // rms_norm_backward's rstd when not given: rstd = 1/sqrt(sum(x*x)/N + eps)
                 o.softmax_backward = summed_softmax_backward(lane_tree(16, 1, true));
                 return o;
               }});
  const std::vector<OpKind> torch215_ops = {OpKind::layer_norm,          OpKind::rms_norm,          OpKind::var_mean,
                                            OpKind::softmax,             OpKind::log_softmax,       OpKind::attention,
                                            OpKind::layer_norm_backward, OpKind::rms_norm_backward, OpKind::softmax_backward,
                                            OpKind::log_softmax_backward, OpKind::attention_backward};
  t.push_back({"torch2.15-cpu-default",
               "PyTorch 2.15 CPU, ATEN_CPU_CAPABILITY=default. layer_norm: f32 8-lane Welford cascade (two f32 streams per 16-bit "
               "vector), no fma; rms_norm: F.rms_norm's composite in f32 (SumKernel's 4x8-lane cascade over the rounded squares; "
               "a single row over 32768 long is summed in per-thread chunks, as torch does, given threads=T); "
               "softmax/log_softmax: torch1.13-cpu-default's; var_mean: sequential Welford in f64; attention (f32, bf16): the CPU "
               "flash kernel with glibc expf, MKL's block products (threads=T: torch's thread count; mkl=intel, intel-avx512bf16 or amd: the host whose MKL kernels ran); "
               "softmax/log_softmax_backward: vec::map2_reduce_all/reduce_all on 8 lanes folded in order, no fma, glibc expf; "
               "rms_norm_backward: F.rms_norm's autograd chain in f32 (SumKernel's 8-lane cascades for the row sum and dweight's dim-0 sum; "
               "the same under every capability); attention_backward (f32, bf16, f16, lse given; an AMD or Intel AVX-512 host's MKL): the CPU flash backward "
               "with dsum on 8 lanes folded in order and glibc expf, bf16's dq, dk, dv by gemm_stub without fma or oneDNN",
               torch215_ops, kAllStorage, true, true,
               [](ScalarType s, ScalarType, const Request& r, const HostModel&) { return torch215(s, Capability::base, r); }});
  t.back().takes_environment = true;
  t.push_back({"torch2.15-cpu-avx2",
               "PyTorch 2.15 CPU, ATEN_CPU_CAPABILITY=avx2. layer_norm: the cascade with fma updates and AddMomentsVec merges, "
               "fused affine; rms_norm: as default; softmax/log_softmax: torch1.13-cpu-avx2's; var_mean: sequential Welford in f64; "
               "attention: the CPU flash kernel with 8-lane exp_u20; softmax/log_softmax_backward: 8-lane map2_reduce_all/reduce_all, "
               "halving fold, the masked tail fused when torch runs the rows inline (threads=1 or one row), dx = fma(-exp(y), s, dy) "
               "with Sleef expf_u10; attention_backward (f32, bf16, f16, lse given; an AMD or Intel AVX-512 host's MKL): the CPU flash backward with dsum "
               "on 8 lanes, halving fold, Sleef expf_u10, bf16's dq, dk, dv by gemm_stub with fma or oneDNN",
               torch215_ops, kAllStorage, true, true,
               [](ScalarType s, ScalarType, const Request& r, const HostModel&) { return torch215(s, Capability::avx2, r); }});
  t.back().takes_environment = true;
  t.push_back({"torch2.15-cpu-avx512",
               "PyTorch 2.15 CPU, ATEN_CPU_CAPABILITY=avx512: softmax/log_softmax by its AVX-512 kernels (16 lanes); layer_norm "
               "has no AVX-512 kernel, so it is torch2.15-cpu-avx2's; rms_norm: as default (8 lanes here too); var_mean: "
               "sequential Welford in f64; attention: the CPU flash kernel with 16-lane exp_u20; softmax/log_softmax_backward: "
               "torch2.15-cpu-avx2's on 16 lanes; attention_backward (f32, bf16, f16, lse given; an AMD or Intel AVX-512 host's MKL): the CPU flash "
               "backward with dsum on 16 lanes, halving fold, Sleef expf_u10, bf16's dq, dk, dv by gemm_stub with fma or oneDNN",
               torch215_ops, kAllStorage, true, true,
               [](ScalarType s, ScalarType, const Request& r, const HostModel&) { return torch215(s, Capability::avx512, r); }});
  t.back().takes_environment = true;
  t.push_back({"torch2.15-cpu",
               "torch2.15-cpu-{default,avx2,avx512} for the capability PyTorch picks here: ATEN_CPU_CAPABILITY if set, else the "
               "best this CPU has",
               torch215_ops, kAllStorage, true, true,
               [](ScalarType s, ScalarType, const Request& r, const HostModel& host) { return torch215(s, torch_capability(host), r); }});
  t.back().alias = true;
  t.back().takes_environment = true;
  // The eager composite attention, per capability (its softmax), and its alias.
  const std::vector<std::pair<std::string_view, std::optional<Capability>>> math_rows = {
      {"torch2.15-cpu-math-default", Capability::base}, {"torch2.15-cpu-math-avx2", Capability::avx2},
      {"torch2.15-cpu-math-avx512", Capability::avx512}, {"torch2.15-cpu-math", std::nullopt}};
  for (const auto& [row_name, cap] : math_rows) {
    t.push_back({row_name,
                 cap ? "PyTorch 2.15's eager composite softmax(q @ k.transpose(-2, -1) * scale) @ v. f32: MKL's sgemm kernels for both "
                       "products (PyTorch's own loop below S_q*S_k*D = 400), the softmax op's order; attention_backward: its autograd "
                       "(five bmm products, _softmax_backward_data; an AMD or Intel AVX-512 host's MKL); threads=T: torch's thread count. bf16, f16 "
                       "(default and avx2, a CPU without oneDNN's 16-bit kernels): ATen's gemm_stub, f32 sums rounded once, q @ k^T "
                       "and dout @ v^T by its 8-lane vectorized dot, p @ v and dq by 4 interleaved sums, dv and dk sequential; "
                       "every intermediate rounded to storage"
                     : "torch2.15-cpu-math-{default,avx2,avx512} for the capability PyTorch picks here",
                 {OpKind::attention, OpKind::attention_backward}, kAllStorage, true, true, [cap = cap](ScalarType s, ScalarType, const Request&, const HostModel& host) {
                   return torch215_math(s, cap.value_or(torch_capability(host)));
                 }});
    t.back().alias = !cap;
    t.back().takes_environment = true;
  }
  // torch.compile's CPU kernels, per vector ISA Inductor picks, and the alias.
  const std::vector<OpKind> inductor_ops = {OpKind::layer_norm, OpKind::rms_norm, OpKind::softmax, OpKind::log_softmax};
  t.push_back({"inductor2.15-cpu-avx2",
               "torch.compile (PyTorch 2.15, dynamic=False) on the CPU, Inductor's AVX2 C++: 8-lane vector sums with a masked tail "
               "(16 lanes over 16-bit inputs), halving fold, no fma; layer_norm: two-pass var_mean for N <= 1024 in a launch of "
               "several rows, else Inductor's vector Welford; softmax/log_softmax: Sleef exp/log; threads=T: torch's thread count",
               inductor_ops, kAllStorage, true, true,
               [](ScalarType s, ScalarType, const Request& r, const HostModel&) { return inductor215(s, Capability::avx2, r); }});
  t.back().takes_environment = true;
  t.push_back({"inductor2.15-cpu-avx512",
               "torch.compile (PyTorch 2.15, dynamic=False) on the CPU, Inductor's AVX-512 C++: as inductor2.15-cpu-avx2 with "
               "16-lane vectors (32 over 16-bit inputs)",
               inductor_ops, kAllStorage, true, true,
               [](ScalarType s, ScalarType, const Request& r, const HostModel&) { return inductor215(s, Capability::avx512, r); }});
  t.back().takes_environment = true;
  t.push_back({"inductor2.15-cpu",
               "inductor2.15-cpu-{avx2,avx512} for the vector ISA Inductor picks here: ATEN_CPU_CAPABILITY if set, else the "
               "best this CPU has",
               inductor_ops, kAllStorage, true, true, [](ScalarType s, ScalarType, const Request& r, const HostModel& host) {
                 return inductor215(s, inductor_capability(host), r);
               }});
  t.back().alias = true;
  t.back().takes_environment = true;
  // The Hugging Face RMSNorm classes: one row per class and capability, and an alias per class.
  auto hf_rms_norm_row = [&t](std::string_view name, std::string_view description, bool gemma, std::optional<Capability> cap) {
    t.push_back({name, description, {OpKind::rms_norm}, kAllStorage, true, true, [gemma, cap](ScalarType, ScalarType, const Request&, const HostModel& host) {
                   return hf_rms_norm(gemma, cap.value_or(torch_capability(host)));
                 }});
    t.back().alias = !cap;
    t.back().takes_environment = true;
  };
  hf_rms_norm_row("llama-rmsnorm-torch2.15-cpu-default",
                  "transformers 5.23 LlamaRMSNorm: weight * (x.float() * rstd).to(x.dtype), in the type torch promotes x's and "
                  "the weight's to; torch 2.15 eager, ATEN_CPU_CAPABILITY=default (rstd as torch2.15-cpu's rms_norm)",
                  false, Capability::base);
  hf_rms_norm_row("llama-rmsnorm-torch2.15-cpu-avx2",
                  "transformers 5.23 LlamaRMSNorm as torch 2.15 runs it under ATEN_CPU_CAPABILITY=avx2", false, Capability::avx2);
  hf_rms_norm_row("llama-rmsnorm-torch2.15-cpu-avx512",
                  "transformers 5.23 LlamaRMSNorm as torch 2.15 runs it under ATEN_CPU_CAPABILITY=avx512", false, Capability::avx512);
  hf_rms_norm_row("llama-rmsnorm-torch2.15-cpu", "llama-rmsnorm-torch2.15-cpu-* for the capability PyTorch picks here", false,
                  std::nullopt);
  hf_rms_norm_row("gemma-rmsnorm-torch2.15-cpu-default",
                  "transformers 5.23 GemmaRMSNorm: (x.float() * rstd * (1 + weight.float())).type_as(x); torch 2.15 eager, "
                  "ATEN_CPU_CAPABILITY=default (rstd as torch2.15-cpu's rms_norm)",
                  true, Capability::base);
  hf_rms_norm_row("gemma-rmsnorm-torch2.15-cpu-avx2",
                  "transformers 5.23 GemmaRMSNorm as torch 2.15 runs it under ATEN_CPU_CAPABILITY=avx2", true, Capability::avx2);
  hf_rms_norm_row("gemma-rmsnorm-torch2.15-cpu-avx512",
                  "transformers 5.23 GemmaRMSNorm as torch 2.15 runs it under ATEN_CPU_CAPABILITY=avx512", true, Capability::avx512);
  hf_rms_norm_row("gemma-rmsnorm-torch2.15-cpu", "gemma-rmsnorm-torch2.15-cpu-* for the capability PyTorch picks here", true,
                  std::nullopt);
  using AK = AttentionOrder::Kind;
  t.push_back({"torch1.13-cpu-math",
               "PyTorch 1.13 CPU softmax(q @ k^T / math.sqrt(D)) @ v as eager runs it by default (avx2): "
               "reference-BLAS dot products, the avx2 softmax; scores kept per query row. bf16: PyTorch's own bf16 matmul, "
               "which it skips for oneDNN's on AVX-512 CPUs unless torch.backends.mkldnn is disabled",
               {OpKind::attention}, {f32, bf16}, true, true, [](ScalarType s, ScalarType, const Request& r, const HostModel&) {
                 Order o;
                 o.attention = torch113_attention(s, Capability::avx2, r, AK::Materialized);
                 return o;
               }});
  t.push_back({"torch1.13-cpu-math-default", "the same with ATEN_CPU_CAPABILITY=default (glibc exp, sequential lane fold)",
               {OpKind::attention}, {f32, bf16}, true, true, [](ScalarType s, ScalarType, const Request& r, const HostModel&) {
                 Order o;
                 o.attention = torch113_attention(s, Capability::base, r, AK::Materialized);
                 return o;
               }});
  t.push_back({"exact-tiled",
               "the bits of torch1.13-cpu-math without keeping scores: max, sum and P@v passes recompute q.k (O(D) memory)",
               {OpKind::attention}, {f32, bf16}, true, true, [](ScalarType s, ScalarType, const Request& r, const HostModel&) {
                 Order o;
                 o.attention = torch113_attention(s, Capability::avx2, r, AK::ExactTiled);
                 return o;
               }});
  t.push_back({"exact-tiled-default", "exact-tiled with the ATEN_CPU_CAPABILITY=default softmax",
               {OpKind::attention}, {f32, bf16}, true, true, [](ScalarType s, ScalarType, const Request& r, const HostModel&) {
                 Order o;
                 o.attention = torch113_attention(s, Capability::base, r, AK::ExactTiled);
                 return o;
               }});
  t.push_back({"flash",
               "FlashAttention-2 online softmax over key blocks (default Bc=64; flash(128) or flash(bc=32,exp2=on,fma=all)), "
               "Sleef exp, scores times the scale; one kernel serves every S_k (S_k at launch, no shape classes). attention_backward: FlashAttention-2's backward without atomics, P recomputed "
               "from lse, D_i = rowsum(dout*out); stage 1 per block of keys (lanes) sums dk, dv over the queries in ascending "
               "order, stage 2 per block of queries sums dq over the keys in ascending order, sequential dots "
               "(AttentionBackwardOrder::Tiled; the CPU runs both stages' sums in one kernel per (batch, head), same bits); lse, when not given, recomputed by flash(Bc)'s forward; parameters as flash",
               {OpKind::attention, OpKind::attention_backward}, kAllStorage, false, false, [](ScalarType, ScalarType, const Request&, const HostModel&) {
                 Order o;
                 o.attention = flash(64, false, false);
                 return o;
               }});
  t.push_back({"flash-cuda",
               "flash(Bc) tiled for a CUDA block: 64 threads, a query each, K/V tiles in shared memory; Bc = min(64, 4096/D) "
               "(48 KiB of shared memory); the bits of flash(Bc). Parameters as flash, and threads",
               {OpKind::attention}, kAllStorage, false, false, [](ScalarType, ScalarType, const Request& r, const HostModel&) {
                 Order o;
                 o.attention = flash(static_cast<int>(std::clamp<int64_t>(4096 / std::max<int64_t>(r.cols, 1), 1, 64)), false, false);
                 o.attention.team = 64;
                 return o;
               }});
  t.push_back({"torch1.13-cpu-default",
               "PyTorch 1.13 CPU, ATEN_CPU_CAPABILITY=default. layer_norm: lane Welford cascade, no fma anywhere; "
               "softmax/log_softmax: sequential lane fold, glibc expf/logf",
               {OpKind::layer_norm, OpKind::softmax, OpKind::log_softmax}, {f32, bf16}, true, true,
               [](ScalarType s, ScalarType, const Request&, const HostModel&) {
                 Order o = torch113_layer_norm(s, Capability::base);
                 o.softmax = torch113_softmax(s, Capability::base);
                 return o;
               }});
  t.push_back({"torch1.13-cpu-avx2",
               "PyTorch 1.13 CPU, ATEN_CPU_CAPABILITY=avx2. layer_norm: lane Welford cascade, affine as two fmas; "
               "softmax/log_softmax: halving lane tree, Sleef u10 expf/logf",
               {OpKind::layer_norm, OpKind::softmax, OpKind::log_softmax}, {f32, bf16}, true, true,
               [](ScalarType s, ScalarType, const Request&, const HostModel&) {
                 Order o = torch113_layer_norm(s, Capability::avx2);
                 o.softmax = torch113_softmax(s, Capability::avx2);
                 return o;
               }});
  t.push_back({"torch1.13-cpu-avx512",
               "PyTorch 1.13 CPU, ATEN_CPU_CAPABILITY=avx512 on an AVX-512 CPU: softmax/log_softmax by its AVX-512 kernels "
               "(the avx2 order with 16 float lanes); layer_norm has no AVX-512 kernel in 1.13, so it is torch1.13-cpu-avx2's",
               {OpKind::layer_norm, OpKind::softmax, OpKind::log_softmax}, {f32, bf16}, true, true,
               [](ScalarType s, ScalarType, const Request&, const HostModel&) {
                 Order o = torch113_layer_norm(s, Capability::avx512);
                 o.softmax = torch113_softmax(s, Capability::avx512);
                 return o;
               }});
  t.push_back({"torch1.13-cpu", "PyTorch 1.13 CPU torch.var_mean(unbiased=False): sequential Welford in f64",
               {OpKind::var_mean}, {f32}, true, true, [](ScalarType, ScalarType, const Request&, const HostModel&) {
                 Order o;
                 o.moments = {K::SequentialWelford, f64, 1, 1, false, false, {}};
                 return o;
               }});
  t.push_back({"numpy-two-pass",
               "numpy 1.24 float32 composite: x.mean, x.var (pairwise sums in 8192-element chunks), (x-m)/np.sqrt(v+eps)*w+b",
               {OpKind::layer_norm, OpKind::var_mean}, {f32}, true, true, [](ScalarType, ScalarType, const Request&, const HostModel&) {
                 SumOrder s;
                 s.kind = S::Pairwise;
                 s.fold = LaneFold::Adjacent;
                 s.outer_chunk = 8192;
                 Order o = two_pass(s, f32);
                 o.affine = {F::CenterDivide, false};
                 return o;
               }});
  t.push_back({"torch-decomp-cpu",
               "torch.compile's layer_norm decomposition run op by op in eager (float32; the same on every capability)",
               {OpKind::layer_norm}, {f32}, true, true, [](ScalarType, ScalarType, const Request&, const HostModel&) { return torch_decomposition(0); }});
  t.push_back({"torch-decomp-cpu-default",
               "the decomposition in eager with ATEN_CPU_CAPABILITY=default: bf16 rsqrt rounds sqrt, then 1/x",
               {OpKind::layer_norm}, {f32, bf16}, true, true, [](ScalarType, ScalarType, const Request&, const HostModel&) { return torch_decomposition(0); }});
  t.push_back({"torch-decomp-cpu-avx2",
               "the decomposition in eager with ATEN_CPU_CAPABILITY=avx2: bf16 rsqrt rounds once in 16-row vectors",
               {OpKind::layer_norm}, {f32, bf16}, true, true, [](ScalarType, ScalarType, const Request&, const HostModel&) { return torch_decomposition(16); }});
  t.push_back({"torch-composite-cpu",
               "PyTorch 1.13 CPU x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight (one thread)",
               {OpKind::rms_norm}, {f32}, true, true, [](ScalarType, ScalarType, const Request&, const HostModel&) {
                 Order o;
                 o.square_sum.kind = S::LevelCascade;
                 o.square_sum.lanes = 8;
                 o.square_sum.accumulators = 4;
                 return o;
               }});
  t.push_back({"onnxruntime-cpu",
               "onnxruntime 1.32 CPU LayerNormalization (float32, AVX2 host): N >= 8 the MLAS kernel, f64 4-lane mean "
               "and f32 8-lane fma deviations; N <= 7 a scalar Welford",
               {OpKind::layer_norm}, {f32}, true, true, [](ScalarType, ScalarType, const Request& r, const HostModel&) {
                 Order o;
                 if (r.cols <= 7) {  // the scalar fallback: f32 Welford, then (x - mean) / std
                   o.moments = {K::SequentialWelford, f32, 1, 1, false, false, {}};
                   o.affine = {F::CenterDivide, false};
                   return o;
                 }
                 SumOrder mean_sum = lane_tree(4, 1, false);
                 mean_sum.tail_after_fold = true;
                 SumOrder dev_sum = lane_tree(8, 1, true);
                 dev_sum.tail_after_fold = true;
                 dev_sum.tail_unfused_group = 4;
                 o.moments = {K::TwoPass, f64, 4, 1, false, false, mean_sum, f32, dev_sum};
                 o.affine = {F::CenterScale, true};
                 return o;
               }});
  t.push_back({"torch-cuda",
               "PyTorch 1.13's CUDA kernels (from source; no GPU here to measure): layer_norm's vectorized kernel (N % 4 == 0 and N <= 2^24: 128 "
               "threads per row, 4-wide Welford, shuffle-down warp tree, cross-warp tree, rsqrtf) or else its two-kernel path (512 threads per "
               "row, Welford with division, warp-0 block reduce), the persistent warp softmax (N <= 1024, CUDA expf/logf). Device-only",
               {OpKind::layer_norm, OpKind::softmax, OpKind::log_softmax}, kAllStorage, false, true,
               [](ScalarType, ScalarType, const Request& r, const HostModel&) { return torch_cuda(true, r); }});
  t.back().device_only = true;
  t.push_back({"torch-cuda-tree",
               "torch-cuda's layer_norm with rstd = 1/sqrt(var + eps) instead of rsqrtf: the same two kernels and block trees, on every target",
               {OpKind::layer_norm}, kAllStorage, false, true, [](ScalarType, ScalarType, const Request& r, const HostModel&) { return torch_cuda(false, r); }});
  t.push_back({"warp-butterfly",
               "softmax by one warp per row: torch-cuda's thread max and xor-butterfly trees with Sleef exp/log, y = e/s; "
               "on every target, N <= 8192",
               kSoftmaxOps, kAllStorage, false, true, [](ScalarType, ScalarType, const Request& r, const HostModel&) { return torch_cuda(false, r); }});
  t.push_back({"online", "softmax in one pass: per-lane running max and rescaled sum (flash style), Sleef exp; parameter lanes",
               kSoftmaxOps, kAllStorage, false, false, [](ScalarType, ScalarType, const Request&, const HostModel&) {
                 Order o;
                 o.softmax.kind = SoftmaxOrder::Kind::Online;
                 return o;
               }});
  t.push_back({"lane-welford", "lane-parallel Welford cascade; parameters lanes, chunk, fma=none|update|merge|all, acc, round=each|final, affine",
               {OpKind::layer_norm, OpKind::var_mean}, kAllStorage, false, false, [](ScalarType, ScalarType acc, const Request&, const HostModel&) {
                 Order o;
                 o.moments = {K::LaneWelford, acc, 8, 16, false, false, {}};
                 o.affine = {F::CenterScale, false};
                 return o;
               }});
  t.push_back({"sequential-welford", "one Welford stream in element order with true division; parameter acc",
               {OpKind::layer_norm, OpKind::var_mean}, kAllStorage, false, false, [](ScalarType, ScalarType acc, const Request&, const HostModel&) {
                 Order o;
                 o.moments = {K::SequentialWelford, acc, 1, 1, false, false, {}};
                 o.affine = {F::CenterScale, false};
                 return o;
               }});
  t.push_back({"two-pass-sequential", "sum for the mean, then sum of squared deviations, each left to right",
               kNormOps, kAllStorage, false, false,
               [](ScalarType, ScalarType acc, const Request&, const HostModel&) { return two_pass(SumOrder{}, acc); }});
  t.push_back({"two-pass-pairwise", "two-pass with numpy-style pairwise sums; parameters block, lanes",
               kNormOps, kAllStorage, false, false, [](ScalarType, ScalarType acc, const Request&, const HostModel&) {
                 SumOrder s;
                 s.kind = S::Pairwise;
                 s.fold = LaneFold::Adjacent;
                 return two_pass(s, acc);
               }});
  t.push_back({"two-pass-lanes", "two-pass with lane-tree sums; parameters lanes, accumulators, fma",
               kNormOps, kAllStorage, false, false,
               [](ScalarType, ScalarType acc, const Request&, const HostModel&) { return two_pass(lane_tree(8, 1, false), acc); }});
  t.push_back({"one-pass", "sum and sum of squares in one pass, var = E[x^2]-E[x]^2 clamped at 0; unstable, for study",
               {OpKind::layer_norm, OpKind::var_mean}, kAllStorage, false, false, [](ScalarType, ScalarType acc, const Request&, const HostModel&) {
                 Order o = two_pass(lane_tree(8, 1, false), acc);
                 o.moments.kind = K::OnePass;
                 return o;
               }});
  return t;
}

// "name(key=value,...)": the parameters override fields of the table's Order.
void apply_parameters(Order& o, std::string_view params, std::string_view order_name) {
  size_t pos = 0;
  while (pos < params.size()) {
    size_t comma = params.find(',', pos);
    std::string_view item = params.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos);
    pos = comma == std::string_view::npos ? params.size() : comma + 1;
    size_t eq = item.find('=');
    // flash(64): a bare first parameter is the key block.
    const bool positional_block = eq == std::string_view::npos && order_name.substr(0, 6) == "flash(" && item == params.substr(0, item.size());
    if (eq == std::string_view::npos && !positional_block)
      throw Error(fmt::format("order '{}': parameter '{}' is not key=value", order_name, item));
    std::string key(positional_block ? "bc" : item.substr(0, eq)), value(positional_block ? item : item.substr(eq + 1));
    auto integer = [&](int lo, int hi) {
      int v = 0;
      try {
        size_t used = 0;
        v = std::stoi(value, &used);
        if (used != value.size()) throw std::invalid_argument(value);
      } catch (const std::exception&) {
        throw Error(fmt::format("order '{}': {}={} is not an integer", order_name, key, value));
      }
      if (v < lo || v > hi) throw Error(fmt::format("order '{}': {}={} outside [{}, {}]", order_name, key, v, lo, hi));
      return v;
    };
    auto power_of_two = [&](int v) {
      if (v & (v - 1)) throw Error(fmt::format("order '{}': {}={} must be a power of two", order_name, key, v));
      return v;
    };
    if (key == "lanes") {
      int v = power_of_two(integer(1, 32));
      o.moments.lanes = o.moments.sum.lanes = o.square_sum.lanes = o.softmax.lanes = o.softmax_backward.sum.lanes = v;
    } else if (key == "chunk") {
      o.moments.chunk = integer(1, 64);
    } else if (key == "accumulators") {
      o.moments.sum.accumulators = o.square_sum.accumulators = o.softmax_backward.sum.accumulators = integer(1, 8);
    } else if (key == "outer") {
      o.moments.sum.outer_chunk = o.square_sum.outer_chunk = integer(0, 1 << 30);
    } else if (key == "block") {
      o.moments.sum.block = o.square_sum.block = integer(8, 1 << 20);
    } else if (key == "fma") {
      if (value != "none" && value != "update" && value != "merge" && value != "all")
        throw Error(fmt::format("order '{}': fma={} is not none, update, merge or all", order_name, value));
      o.moments.fma_update = value == "update" || value == "all";
      o.moments.fma_merge = value == "merge" || value == "all";
      o.moments.sum.fma = o.square_sum.fma = o.softmax_backward.sum.fma = o.softmax_backward.fma = value != "none";
      o.attention.dot_fma = value != "none";
      o.attention_backward.fma = value != "none";
    } else if (key == "bc") {
      o.attention.key_block = integer(1, 4096);
    } else if (key == "threads") {  // flash on CUDA: a block of this many threads, a query each
      o.attention.team = power_of_two(integer(32, 1024));
    } else if (key == "queries") {
      o.attention.query_lanes = o.attention_backward.lanes = integer(1, 32);
    } else if (key == "exp2") {
      if (value != "on" && value != "off") throw Error(fmt::format("order '{}': exp2={} is not on or off", order_name, value));
      o.attention.exp2 = value == "on";
    } else if (key == "scale") {
      if (value != "divide" && value != "multiply")
        throw Error(fmt::format("order '{}': scale={} is not divide or multiply", order_name, value));
      o.attention.scale_divides = value == "divide";
    } else if (key == "acc") {
      if (value != "f32" && value != "f64") throw Error(fmt::format("order '{}': acc={} is not f32 or f64", order_name, value));
      o.moments.acc = value == "f32" ? f32 : f64;
    } else if (key == "round") {  // where 16-bit storage rounds the statistics: after every op, or once at the outputs
      if (value != "each" && value != "final") throw Error(fmt::format("order '{}': round={} is not each or final", order_name, value));
      o.round_stats_to_storage = value == "each";
    } else if (key == "affine") {
      if (value == "scale-bias") o.affine.form = F::ScaleBias;
      else if (value == "center-scale") o.affine.form = F::CenterScale;
      else if (value == "center-divide") o.affine.form = F::CenterDivide;
      else throw Error(fmt::format("order '{}': affine={} is not scale-bias, center-scale or center-divide", order_name, value));
    } else {
      throw Error(fmt::format("order '{}': unknown parameter '{}' (lanes, chunk, accumulators, block, outer, fma, acc, round, "
                              "affine; attention: bc, queries, threads, exp2, scale)",
                              order_name, key));
    }
  }
  // A range of more than `block` terms splits at half rounded down to a multiple of `lanes`;
  // below 2*lanes that half is 0 and the split never ends.
  if (o.attention.exp2 && o.attention.scale_divides)
    throw Error(fmt::format("order '{}': exp2=on folds log2(e) into a multiplied scale; it needs scale=multiply", order_name));
  if (o.moments.sum.block < 2 * o.moments.sum.lanes)
    throw Error(fmt::format("order '{}': block {} must be at least twice lanes ({})", order_name, o.moments.sum.block,
                            o.moments.sum.lanes));
}

// The MKL host an order's mkl= parameter names: intel (AVX-512 without avx512_bf16),
// intel-avx512bf16, amd; empty for another value.
std::optional<GemmOrder::Kind> mkl_parameter(std::string_view value) {
  if (value == "intel") return GemmOrder::Kind::MklIntelAvx512;
  if (value == "intel-avx512bf16") return GemmOrder::Kind::MklIntelAvx512Bf16;
  if (value == "amd") return GemmOrder::Kind::MklAmd;
  return std::nullopt;
}

// The MKL model for PyTorch's CPU attention: the one the order names (mkl=...), else the running
// host's. MKL runs other kernels on other CPUs, so a host with no model has none. ordo models an
// Intel CPU with AVX-512, without avx512_bf16 or with it (whose gemm_bf16bf16f32 runs vdpbf16ps
// kernels), and any AMD CPU, where MKL runs its generic kernels (measured on one with AVX-512 and
// avx512_bf16, f32 and bf16; the same bits on one with AVX2 only). In f16 MKL converts to f32 on
// an Intel host and runs its sgemm kernels, with avx512_fp16 too (measured: the flash forward and
// the backward's MKL products give the same bits on a Xeon with avx512_fp16 as the model of one
// without, docs/research/torch2.15-attention-f16.md). Empty when none fits; `why` then says what
// the host lacks.
std::optional<GemmOrder::Kind> mkl_model(const Request& r, const HostModel& host, std::string* why = nullptr) {
  const size_t param = r.order.find("mkl=");
  if (param != std::string::npos) {  // the value is checked by apply_environment
    const size_t end = r.order.find_first_of(",)", param);
    return mkl_parameter(std::string_view(r.order).substr(param + 4, end == std::string::npos ? std::string::npos : end - param - 4))
        .value_or(GemmOrder::Kind::MklIntelAvx512);
  }
  // MKL runs its generic kernels on any AMD CPU: the same bits with and without AVX-512.
  if (host.vendor == HostModel::Vendor::amd) return GemmOrder::Kind::MklAmd;
  if (host.avx512f && host.vendor == HostModel::Vendor::intel)
    return host.avx512_bf16 ? GemmOrder::Kind::MklIntelAvx512Bf16 : GemmOrder::Kind::MklIntelAvx512;
  if (why) *why = "is neither an AMD CPU nor an Intel CPU with AVX-512";
  return std::nullopt;
}

// Whether PyTorch's 16-bit attention gradients (AttentionBackwardOrder::onednn_16bit) go to
// oneDNN, and to which of its kernels: the one the order names (onednn=on, off or emulated), else
// the running host's. PyTorch hands a bf16 gemm to oneDNN when its check for bf16 support passes,
// which needs AVX-512 (or AVX-NE-CONVERT); ordo models oneDNN's avx512_bf16 kernel (vdpbf16ps
// pairs) and its gemm:jit:bf16, which emulates bf16 on AVX-512 without avx512_bf16. An f16 gemm
// goes to oneDNN on a CPU with avx512_fp16, whose brgemm ordo models (measured on a Xeon), or with
// AVX-NE-CONVERT (or AMX-FP16), whose kernel it does not; elsewhere to gemm_stub (measured on an
// AVX2 EPYC and on an AVX-512 Xeon without avx512_fp16).
// Empty where the host's kernel is not modelled, and `why` says so as a clause ("this host has
// ...", or the parameter that asked for it).
std::optional<AttentionBackwardOrder::OneDnn> onednn_16bit_model(const Request& r, const HostModel& host,
                                                                  std::string* why = nullptr) {
  using OneDnn = AttentionBackwardOrder::OneDnn;
  const size_t param = r.order.find("onednn=");
  const bool f16_data = r.x_dtype == ScalarType::f16;
  if (param != std::string::npos) {  // checked by apply_environment
    if (r.order.compare(param, 10, "onednn=off") == 0) return OneDnn::Off;
    const bool on = r.order.compare(param, 9, "onednn=on") == 0;
    if (!f16_data) return on ? OneDnn::Avx512Bf16 : OneDnn::Emulated;
    if (on) return OneDnn::Avx512Fp16;
    if (why) *why = "onednn=emulated names oneDNN's bf16 kernel; f16 gradient products without avx512_fp16 are gemm_stub's";
    return std::nullopt;
  }
  const bool ne_convert = host.avx_ne_convert;
  if (f16_data) {
    // PyTorch's oneDNN f16 check passes with avx512_fp16 or AVX-NE-CONVERT.
    if (host.avx512_fp16) return OneDnn::Avx512Fp16;
    if (!ne_convert) return OneDnn::Off;
    if (why) *why = "this host has AVX-NE-CONVERT without avx512_fp16, where PyTorch's f16 products are oneDNN's, whose kernel is not modelled";
    return std::nullopt;
  }
  if (host.avx512_bf16) return OneDnn::Avx512Bf16;
  if (host.avx512f) return OneDnn::Emulated;
  if (!ne_convert) return OneDnn::Off;
  if (why) *why = "this host has AVX-NE-CONVERT without AVX-512, where oneDNN's bf16 kernel for the attention gradients is not modelled";
  return std::nullopt;
}

bool reproduces_16bit_cpu_attention_backward(const Request& r, const Order& o) {
  return r.op == OpKind::attention_backward && r.x_dtype != ScalarType::f32 &&
         o.attention_backward.kind == AttentionBackwardOrder::Kind::CpuFlash;
}

// Whether the request runs PyTorch's eager composite attention (forward or backward) on 16-bit
// inputs, whose products are ATen's stub or oneDNN's.
bool composite_16bit(const Request& r, const Order& o) {
  if (r.x_dtype == ScalarType::f32) return false;
  if (r.op == OpKind::attention) return o.attention.kind == AttentionOrder::Kind::CpuMatmul;
  return r.op == OpKind::attention_backward && o.attention_backward.kind == AttentionBackwardOrder::Kind::CpuMatmul;
}

// Whether the order runs PyTorch's CPU attention, forward or backward, whose products are MKL's.
bool calls_mkl(const Request& r, const Order& o) {
  using A = AttentionOrder::Kind;
  using B = AttentionBackwardOrder::Kind;
  // The 16-bit composite's bmm never reaches MKL (ATen's own kernels, or oneDNN).
  if (composite_16bit(r, o)) return false;
  if (r.op == OpKind::attention) return o.attention.kind == A::CpuFlash || o.attention.kind == A::CpuMatmul;
  if (r.op == OpKind::attention_backward) return o.attention_backward.kind == B::CpuFlash || o.attention_backward.kind == B::CpuMatmul;
  return false;
}

// Why the 16-bit composite cannot be reproduced here, or empty: its products are modelled as ATen's
// gemm_stub (the avx2 build's under avx512 too) where PyTorch's oneDNN check fails (bf16: a CPU
// without AVX-512 or AVX-NE-CONVERT; f16: without avx512_fp16 or AVX-NE-CONVERT; or onednn=off,
// the parameter of onednn_16bit_model), in bf16 as oneDNN's emulated kernel where the check
// passes on AVX-512 without avx512_bf16 (onednn=emulated), and as its brgemm and gemv kernels on
// a CPU with avx512_bf16 (onednn=on), in f16 as those kernels on a CPU with avx512_fp16 (onednn=on).
// Refused: AVX-NE-CONVERT without the AVX-512 extension (f16: avx512_fp16; bf16: AVX-512).
std::string composite_16bit_error(const Request& r, const HostModel& host) {
  std::string why;
  const std::optional<AttentionBackwardOrder::OneDnn> onednn = onednn_16bit_model(r, host, &why);
  if (onednn == AttentionBackwardOrder::OneDnn::Off || onednn == AttentionBackwardOrder::OneDnn::Emulated ||
      (onednn == AttentionBackwardOrder::OneDnn::Avx512Bf16 && r.x_dtype == ScalarType::bf16) ||
      (onednn == AttentionBackwardOrder::OneDnn::Avx512Fp16 && r.x_dtype == ScalarType::f16))
    return {};
  const std::string base = r.order.substr(0, r.order.find('('));
  if (!onednn)
    return fmt::format("order '{}' with {} inputs: {}; '{}(onednn=off)' gives the bits of a CPU where PyTorch's oneDNN check fails, "
                       "and every product is ATen's own",
                       r.order, name(r.x_dtype), why, base);
  throw Error(fmt::format("internal: order '{}' with {} inputs takes no oneDNN kernel of its type", r.order, name(r.x_dtype)));
}

GemmOrder::Kind mkl_host_model(const Request& r, const HostModel& host) {
  std::string why;
  if (std::optional<GemmOrder::Kind> kind = mkl_model(r, host, &why)) return *kind;
  const std::string base = r.order.substr(0, r.order.find('('));
  throw Error(fmt::format("order '{}': this host {}; PyTorch's attention calls MKL, and ordo models the MKL kernels of an Intel "
                          "AVX-512 host (with or without avx512_bf16) and of an AMD host only. "
                          "'{}(mkl=intel)', '{}(mkl=intel-avx512bf16)' or '{}(mkl=amd)' gives that host's bits",
                          r.order, why, base, base, base));
}

// The parameters of an order that reproduces PyTorch 2.15 (NamedOrder::takes_environment): not
// the order itself but the environment torch ran in. threads: torch.get_num_threads(), which
// changes a single long row's sum and attention's MKL calls; mkl: the host whose MKL kernels ran
// (attention). Ops that depend on neither take them and ignore them.
void apply_environment(Order& o, std::string_view params, std::string_view order_name) {
  size_t pos = 0;
  while (pos < params.size()) {
    size_t comma = params.find(',', pos);
    std::string_view item = params.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos);
    pos = comma == std::string_view::npos ? params.size() : comma + 1;
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) throw Error(fmt::format("order '{}': parameter '{}' is not key=value", order_name, item));
    const std::string key(item.substr(0, eq)), value(item.substr(eq + 1));
    // A count: a positive integer, named with its key when it is not one.
    auto positive = [&] {
      int v = 0;
      size_t used = 0;
      try {
        v = std::stoi(value, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != value.size() || value.empty() || v < 1)
        throw Error(fmt::format("order '{}': {}={} is not a positive integer", order_name, key, value));
      return v;
    };
    if (key == "threads") {
      const int v = positive();
      // MKL's splits were measured with 2 threads: on more, a launch whose products MKL would
      // split is refused (gen/libraries/mkl_gemm.cpp, mkl_threading).
      o.threads = o.attention.gemm.threads = o.attention_backward.gemm.threads = v;
      // Inductor's kernels split a row between threads by their own rule (SumOrder::parts,
      // MomentsOrder::parts), not by PyTorch eager's `threads`.
      for (SumOrder* sum : {&o.square_sum, &o.softmax.sum, &o.moments.sum})
        if (sum->kind == S::ChunkStack) sum->parts = v;
      if (o.moments.kind == K::VectorWelford) o.moments.parts = v;
      if (o.norm_backward.columns.kind == ColumnSumOrder::Kind::ThreadSlots || o.norm_backward.columns.kind == ColumnSumOrder::Kind::LevelCascade)
        o.norm_backward.columns.slots = v;
    } else if (key == "mkl_threads") {
      o.attention.gemm.mkl_threads = o.attention_backward.gemm.mkl_threads = positive();
    } else if (key == "mkl") {
      const std::optional<GemmOrder::Kind> kind = mkl_parameter(value);
      if (!kind) throw Error(fmt::format("order '{}': mkl={} is not intel, intel-avx512bf16 or amd", order_name, value));
      o.attention.gemm.kind = o.attention_backward.gemm.kind = *kind;
    } else if (key == "onednn") {
      using OneDnn = AttentionBackwardOrder::OneDnn;
      if (value != "on" && value != "off" && value != "emulated")
        throw Error(fmt::format("order '{}': onednn={} is not on, off or emulated", order_name, value));
      // "on" is the host's own kernel: avx512_bf16's in bf16, avx512_fp16's in f16 (resolve).
      o.attention_backward.onednn_16bit = value == "on" ? OneDnn::Avx512Bf16 : value == "off" ? OneDnn::Off : OneDnn::Emulated;
    } else {
      throw Error(fmt::format("order '{}' reproduces PyTorch; its parameters are the environment torch ran in: "
                              "threads (torch.get_num_threads()), mkl (intel, intel-avx512bf16 or amd), mkl_threads (MKL's own thread count: "
                              "MKL_NUM_THREADS, else the host's physical cores) and onednn (whether its 16-bit attention "
                              "products went to oneDNN: on, with avx512_bf16; emulated, AVX-512 without avx512_bf16; off), "
                              "not '{}'",
                              order_name, key));
    }
  }
}

std::string known_orders(OpKind op) {
  std::string s;
  for (const NamedOrder& n : named_orders())
    for (OpKind o : n.ops)
      if (o == op) s += (s.empty() ? "" : ", ") + std::string(n.name);
  return s;
}

// The shapes an order is defined for, beyond the op's own limits: an order that reproduces one
// kernel of a library takes the shapes that kernel runs. Empty when `r` is one of them.
std::string shape_error(const Request& r, const Order& o, const NamedOrder& n, const HostModel& host) {
  // Row strides other than D reach a library's kernels only through PyTorch's flash kernels
  // (Request::q_row_stride); its composites copy strided operands first, k^T among them, which
  // changes the product MKL sees. Orders that reproduce no library are the same on any layout.
  const bool strided = (r.q_row_stride && r.q_row_stride != r.cols) || (r.k_row_stride && r.k_row_stride != r.cols) ||
                       (r.v_row_stride && r.v_row_stride != r.cols);
  const bool flash = (r.op == OpKind::attention && o.attention.kind == AttentionOrder::Kind::CpuFlash) ||
                     (r.op == OpKind::attention_backward && o.attention_backward.kind == AttentionBackwardOrder::Kind::CpuFlash);
  if (strided && n.reproduces_reference && !flash)
    return fmt::format("order '{}' reproduces its library for q, k and v with rows D = {} apart; with other row strides ({}, {}, {}) "
                       "PyTorch's composite copies them first, which is not modelled",
                       r.order, r.cols, r.q_row_stride, r.k_row_stride, r.v_row_stride);
  if (r.op == OpKind::attention_backward && o.attention_backward.kind == AttentionBackwardOrder::Kind::CpuFlash) {
    if (!r.saved_stats)
      return fmt::format("order '{}' reproduces PyTorch's backward, which reads the forward's saved logsumexp: give lse", r.order);
  }
  if (composite_16bit(r, o)) {
    if (std::string why = composite_16bit_error(r, host); !why.empty()) return why;
    // P and its gradient (backward) or 32 rows of scores (forward), 16-bit, per instance.
    // The backward with oneDNN's products also keeps dk^T (D x S_k), whose rows oneDNN sums.
    const bool dk_t = r.op == OpKind::attention_backward && onednn_16bit_model(r, host) == AttentionBackwardOrder::OneDnn::Emulated;
    const int64_t scratch_bytes =
        ((r.op == OpKind::attention ? std::min<int64_t>(r.seq_q, 32) : 2 * r.seq_q) * r.seq_k + (dk_t ? r.cols * r.seq_k : 0)) * 2;
    if (r.op == OpKind::attention && r.lse_output)
      return fmt::format("order '{}' is a composite of matmul and softmax, which makes no log-sum-exp", r.order);
    if (scratch_bytes > (int64_t(2) << 20))
      return fmt::format("order '{}' keeps {} per instance: {} bytes, over 2 MiB of stack (S_q = {}, S_k = {})", r.order,
                         r.op == OpKind::attention ? "32 rows of scores" : dk_t ? "P, its gradient and dk^T (2 x S_q x S_k + D x S_k)" : "P and its gradient (2 x S_q x S_k)", scratch_bytes,
                         r.seq_q, r.seq_k);
    return {};
  }
  if (r.op == OpKind::attention_backward && o.attention_backward.kind == AttentionBackwardOrder::Kind::CpuMatmul) {
    // The AMD model peels each row of C to a 16-byte boundary; q^T @ grad has rows of S_k floats.
    if (o.attention_backward.gemm.kind == GemmOrder::Kind::MklAmd && r.seq_q * r.seq_k * r.cols >= 400 &&
        (r.cols % 4 != 0 || r.seq_k % 4 != 0))
      return fmt::format("order '{}' with an AMD host's MKL takes D and S_k multiples of 4 (rows of its products' outputs start at "
                         "16-byte boundaries only then, and the kernels peel by them), got D = {}, S_k = {}",
                         r.order, r.cols, r.seq_k);
    const int64_t scratch_bytes = (2 * r.seq_q * r.seq_k + r.cols * r.seq_k) * 4;
    if (scratch_bytes > (int64_t(2) << 20))
      return fmt::format("order '{}' keeps P and its gradient (2 x S_q x S_k floats) and q^T @ grad (D x S_k) per instance: {} bytes, "
                         "over 2 MiB of stack (S_q = {}, S_k = {}, D = {})",
                         r.order, scratch_bytes, r.seq_q, r.seq_k, r.cols);
  }
  const bool cpu_blas = r.op == OpKind::attention &&
                        (o.attention.kind == AttentionOrder::Kind::CpuFlash || o.attention.kind == AttentionOrder::Kind::CpuMatmul);
  if (cpu_blas && o.attention.gemm.kind == GemmOrder::Kind::MklAmd && r.cols % 4 != 0)
    return fmt::format("order '{}' with an AMD host's MKL: its gemv and small-matrix kernels peel each row up to a 16-byte boundary, "
                       "and with D = {} (not a multiple of 4) rows start at alignments that change from row to row, block to block "
                       "and (batch, head) to (batch, head); ordo's model takes D a multiple of 4",
                       r.order, r.cols);
  if (r.op == OpKind::attention && o.attention.kind == AttentionOrder::Kind::CpuMatmul) {
    if (r.lse_output) return fmt::format("order '{}' is a composite of matmul and softmax, which makes no log-sum-exp", r.order);
    // Rows of scores in scratch: 32 (or S_q when fewer, or when MKL's kernel takes the whole product) x S_k.
    const int64_t rows = r.seq_q <= 32 ? r.seq_q : 32;
    if (rows * r.seq_k * 4 > (int64_t(2) << 20))
      return fmt::format("order '{}' keeps {} x S_k = {} scores per instance, over 2 MiB of stack; S_k up to {} fits", r.order, rows,
                         r.seq_k, (int64_t(2) << 20) / 4 / rows);
  }
  if ((r.op == OpKind::softmax || r.op == OpKind::log_softmax) && o.softmax.kind == SoftmaxOrder::Kind::WarpButterfly) {
    // torch-cuda: PyTorch's persistent warp kernel runs N <= 1024 only. warp-butterfly keeps a
    // row's exponentials in 32 * I floats of shared memory: N <= 8192 is 32 KiB.
    const int64_t limit = n.device_only ? 1024 : 8192;
    if (r.cols > limit)
      return fmt::format("order '{}' runs rows of N <= {} ({}), got N = {}", r.order, limit,
                         n.device_only ? "PyTorch's persistent warp softmax; longer rows take its block kernel" : "a warp's shared memory",
                         r.cols);
  }
  return {};
}

}  // namespace

bool takes_shape(const Request& r, const HostModel& host) {
  try {
    (void)resolve(r, host);
    return true;
  } catch (const Error&) {
    return false;
  }
}

const std::vector<NamedOrder>& named_orders() {
  static const std::vector<NamedOrder> table = make_table();
  return table;
}

const NamedOrder* find_order(std::string_view name) {
  std::string_view base = name.substr(0, name.find('('));
  for (const NamedOrder& n : named_orders())
    if (n.name == base) return &n;
  return nullptr;
}

// Attention's own fields: shapes and scale. Checked before any order is built.
void check_attention_request(const Request& r) {
  if (forward_of(r.op) != OpKind::attention) {
    if (r.seq_q || r.seq_k || r.seq_k_at_launch || r.causal || r.scale || r.lse_output || r.heads != 1 || r.q_row_stride || r.k_row_stride ||
        r.v_row_stride)
      throw Error(fmt::format("seq lengths, heads, row strides, causal, scale and lse are attention's; {} takes none of them", name(r.op)));
    return;
  }
  if (r.heads < 1 || r.heads > (int64_t(1) << 24)) throw Error(fmt::format("attention heads H = {} outside [1, 2^24]", r.heads));
  for (auto [name, stride] : {std::pair{"q", r.q_row_stride}, {"k", r.k_row_stride}, {"v", r.v_row_stride}})
    if (stride != 0 && (stride < r.cols || stride > (int64_t(1) << 40)))
      throw Error(fmt::format("attention: {}'s row stride {} is neither 0 (contiguous) nor in [D = {}, 2^40]", name, stride, r.cols));
  if (r.cols < 8 || r.cols > 512 || r.cols % 8)
    throw Error(fmt::format("attention head dim D = {} must be a multiple of 8 in [8, 512] (32, 64, 128, 256 are the tested ones)", r.cols));
  if (r.seq_q < 1 || r.seq_q > (int64_t(1) << 24)) throw Error(fmt::format("attention query length S_q = {} outside [1, 2^24]", r.seq_q));
  if (r.seq_k_at_launch) {
    if (r.seq_k != 0) throw Error(fmt::format("attention: S_k is given at launch, so seq_k must be 0, got {}", r.seq_k));
    if (r.op == OpKind::attention_backward)
      throw Error("attention_backward builds its kernels for one S_k; S_k at launch is the forward attention's");
  } else if (r.seq_k < 1 || r.seq_k > (int64_t(1) << 24)) {
    throw Error(fmt::format("attention key length S_k = {} outside [1, 2^24]", r.seq_k));
  }
  if (r.scale && !(std::isfinite(*r.scale) && *r.scale > 0))
    throw Error(fmt::format("attention scale must be finite and > 0, got {}", *r.scale));
  if (r.acc_dtype && *r.acc_dtype != f32) throw Error(fmt::format("attention accumulates in f32; --acc {} is not supported", name(*r.acc_dtype)));
  if (r.op == OpKind::attention_backward && r.lse_output)
    throw Error("attention_backward writes dq, dk and dv; lse is one of its inputs (Request::saved_stats), not an output");
  // Recomputing lse keeps every query's in an instance's scratch (stage 1).
  if (r.op == OpKind::attention_backward && !r.saved_stats && r.seq_q > (int64_t(1) << 18))
    throw Error(fmt::format("attention_backward without lse keeps S_q = {} recomputed values per instance, over 1 MiB; give lse (S_q up to "
                            "{} without it)",
                            r.seq_q, int64_t(1) << 18));
}

namespace {

// A reduction whose loops gen/ can build for a length given at launch: a sequential sum, a lane
// tree or PyTorch's level cascade, without outer chunks (gen/blocks/reductions.cpp, *_at_launch).
std::string sum_at_launch_error(const SumOrder& s) {
  if (s.kind != S::Sequential && s.kind != S::LaneTree && s.kind != S::LevelCascade)
    return fmt::format("its sum ({}) has blocks fixed by N", describe(s));
  if (s.outer_chunk > 0) return fmt::format("its sum is cut into chunks of {}", s.outer_chunk);
  if (s.tail_unfused_group > 0) return fmt::format("its tail splits into groups of {} by N", s.tail_unfused_group);
  return {};
}

// Why the resolved order `o` cannot take N at launch for r's op ("" when it can): every reduction
// must be one of the loops above.
std::string cols_at_launch_error(const Request& r, const Order& o) {
  switch (r.op) {
    case OpKind::layer_norm:
    case OpKind::var_mean:
      // PyTorch's cascade, its chunks and carries counted from N; one Welford stream in element order.
      if (o.moments.kind == K::LaneWelford || o.moments.kind == K::SequentialWelford) return {};
      if (o.moments.kind != K::TwoPass) return fmt::format("its moments ({}) are laid out for one N", describe(o.moments));
      if (std::string why = sum_at_launch_error(o.moments.sum); !why.empty()) return why;
      return sum_at_launch_error(o.moments.dev_sum.value_or(o.moments.sum));
    case OpKind::rms_norm:
      // PyTorch's split of a long row between its threads (gen/ops/rms_norm.cpp) is computed from N at launch.
      return sum_at_launch_error(o.square_sum);
    case OpKind::softmax:
    case OpKind::log_softmax:
      if (o.softmax.kind != SoftmaxOrder::Kind::TwoPass && o.softmax.kind != SoftmaxOrder::Kind::Staged)
        return fmt::format("its reductions ({}) are laid out for one N", describe(o.softmax));
      return {};
    default: return fmt::format("{} is not a row op's forward", name(r.op));
  }
}

// The parts of an Order a row op's forward reads.
bool same_row_arithmetic(const Order& a, const Order& b) {
  return a.moments == b.moments && a.square_sum == b.square_sum && a.affine == b.affine && a.softmax == b.softmax &&
         a.round_stats_to_storage == b.round_stats_to_storage && a.threads == b.threads;
}

// N at launch (Request::cols_at_launch). The order is resolved for lengths on both sides of every
// boundary a named order's table tests (onnxruntime's N <= 7, PyTorch's vector widths, its grain
// of 32768) and must come out the same at each, with reductions whose loops gen/ builds for any N.
Order resolve_cols_at_launch(const Request& r, const HostModel& host) {
  if (r.op != OpKind::layer_norm && r.op != OpKind::rms_norm && r.op != OpKind::var_mean && r.op != OpKind::softmax &&
      r.op != OpKind::log_softmax)
    throw Error(fmt::format("{}: N at launch is for the row ops' forward (layer_norm, rms_norm, var_mean, softmax, log_softmax)",
                            name(r.op)));
  if (r.cols != 0) throw Error(fmt::format("N is given at launch, so cols must be 0, got {}", r.cols));
  // A request the order refuses at N = 1 is a bad request whatever N is: its error as it stands.
  auto at = [&](int64_t n) {
    Request fixed = r;
    fixed.cols_at_launch = false;
    fixed.cols = n;
    return resolve(fixed, host);
  };
  const Order first = at(1);
  for (int64_t n : {int64_t(7), int64_t(8), int64_t(33), int64_t(1000), int64_t(32768), int64_t(32769), int64_t(1) << 24}) {
    Order o;
    try {
      o = at(n);
    } catch (const Error& e) {
      throw FixedLengthError(fmt::format("order '{}' builds its {} for one N; at N = {}: {}", r.order, name(r.op), n, e.what()));
    }
    if (!same_row_arithmetic(first, o))
      throw FixedLengthError(fmt::format("order '{}' builds its {} for one N (its arithmetic at N = {} is not that at N = 1); give N",
                                         r.order, name(r.op), n));
  }
  if (std::string why = cols_at_launch_error(r, first); !why.empty())
    throw FixedLengthError(fmt::format("order '{}' builds its {} for one N ({}); give N", r.order, name(r.op), why));
  return first;
}

}  // namespace

Order resolve(const Request& r, const HostModel& host) {
  if (r.cols_at_launch) return resolve_cols_at_launch(r, host);
  check_attention_request(r);
  if (r.cols <= 0) throw Error(fmt::format("N (the last dim) must be at least 1, got {}", r.cols));
  if (r.cols > (int64_t(1) << 31)) throw Error(fmt::format("N = {} exceeds the supported 2^31 columns", r.cols));
  if (!(r.eps >= 0) || !std::isfinite(r.eps)) throw Error(fmt::format("eps must be finite and >= 0, got {}", r.eps));
  if (r.x_dtype != f32 && r.x_dtype != bf16 && r.x_dtype != f16)
    throw Error(fmt::format("x dtype {} is not a storage type (f32, bf16, f16)", name(r.x_dtype)));
  const ScalarType wt = r.weight_type();
  if (wt != f32 && wt != bf16 && wt != f16) throw Error(fmt::format("weight dtype {} is not a storage type (f32, bf16, f16)", name(wt)));
  if (wt != r.x_dtype && !r.allow_mixed_dtypes)
    throw Error(fmt::format("x is {} but weight is {}; mixed dtypes need --allow-mixed-dtypes (Request::allow_mixed_dtypes)",
                            name(r.x_dtype), name(wt)));
  if (r.op == OpKind::layer_norm_backward && !r.has_weight && r.has_bias && wt != r.x_dtype)
    throw Error(fmt::format("layer_norm_backward: x is {} but bias is {}; without a weight PyTorch takes no mixed dtypes, give the bias "
                            "x's dtype",
                            name(r.x_dtype), name(wt)));
  if (r.op == OpKind::rms_norm_backward && r.has_bias) throw Error("rms_norm_backward: rms_norm has no bias, so there is no dbias");
  if (r.rows_in_flight < 0 || r.rows_in_flight > 16)
    throw Error(fmt::format("rows in flight {} outside [0, 16]", r.rows_in_flight));
  if (r.target == Target::cuda && r.cuda_arch != 80 && r.cuda_arch != 86 && r.cuda_arch != 89 && r.cuda_arch != 90)
    throw Error(fmt::format("CUDA arch sm_{} is not supported; arch: sm_80, sm_86, sm_89, sm_90", r.cuda_arch));
  if (r.acc_dtype && *r.acc_dtype != f32 && *r.acc_dtype != f64)
    throw Error(fmt::format("accumulation dtype {} is not f32 or f64", name(*r.acc_dtype)));

  const NamedOrder* n = find_order(r.order);
  if (!n) throw Error(fmt::format("unknown order '{}' for {}; known: {}", r.order, name(r.op), known_orders(r.op)));
  bool op_ok = false;
  for (OpKind o : n->ops) op_ok |= o == r.op;
  if (!op_ok) throw Error(fmt::format("order '{}' is not defined for {}; known: {}", n->name, name(r.op), known_orders(r.op)));
  bool dtype_ok = false;
  for (ScalarType t : n->dtypes) dtype_ok |= t == r.x_dtype;
  if (!dtype_ok) {
    std::string list;
    for (ScalarType t : n->dtypes) list += (list.empty() ? "" : ", ") + std::string(name(t));
    throw Error(fmt::format("order '{}' is defined for x dtype {} only, not {}", n->name, list, name(r.x_dtype)));
  }
  Order probe = n->make(r.x_dtype, f32, r, host);
  if (n->pins_acc && r.acc_dtype && *r.acc_dtype != probe.moments.acc)
    throw Error(fmt::format("order '{}' accumulates in {}; --acc {} would be a different order", n->name,
                            name(probe.moments.acc), name(*r.acc_dtype)));
  Order o = n->pins_acc ? probe : n->make(r.x_dtype, r.acc_dtype.value_or(f32), r, host);
  size_t open = r.order.find('(');
  // The backward's forward recomputes P with the same MKL (CpuMatmul).
  if (calls_mkl(r, o)) o.attention.gemm.kind = o.attention_backward.gemm.kind = mkl_host_model(r, host);
  o.attention.gemm.mkl_threads = o.attention_backward.gemm.mkl_threads = host.physical_cores;  // mkl_threads=N overrides
  o.attention.gemm.vector_chains = o.attention_backward.gemm.vector_chains = !cuda_target(r);
  o.attention.gemm.register_floats = o.attention_backward.gemm.register_floats = 16 / registers_per_vector(r, 16);
  if (reproduces_16bit_cpu_attention_backward(r, o)) {
    std::string why;
    std::optional<AttentionBackwardOrder::OneDnn> onednn = onednn_16bit_model(r, host, &why);
    if (!onednn)
      throw Error(fmt::format("order '{}': {}; '{}(onednn=off)' gives the bits of a host without it (every gradient "
                              "product by ATen's gemm_stub){}",
                              r.order, why, r.order.substr(0, r.order.find('(')),
                              r.x_dtype == ScalarType::f16 ? ""
                                                           : ", '(onednn=on)' those of a host whose oneDNN has avx512_bf16, "
                                                             "'(onednn=emulated)' those of an AVX-512 host without it"));
    o.attention_backward.onednn_16bit = *onednn;
  }
  // The composite's kernel choice (checked by shape_error, which refuses a host without a model).
  if (composite_16bit(r, o))
    o.attention_backward.onednn_16bit = onednn_16bit_model(r, host).value_or(AttentionBackwardOrder::OneDnn::Off);
  if (open != std::string::npos && n->takes_environment) {
    if (r.order.back() != ')') throw Error(fmt::format("order '{}': missing ')'", r.order));
    apply_environment(o, std::string_view(r.order).substr(open + 1, r.order.size() - open - 2), r.order);
    if (r.x_dtype == ScalarType::f16 && o.attention_backward.onednn_16bit == AttentionBackwardOrder::OneDnn::Avx512Bf16)
      o.attention_backward.onednn_16bit = AttentionBackwardOrder::OneDnn::Avx512Fp16;  // onednn=on names the host's own kernel
  } else if (open != std::string::npos) {
    if (n->reproduces_reference)
      throw Error(fmt::format("order '{}' reproduces a reference and takes no parameters (got '{}')", n->name,
                              r.order.substr(open + 1, r.order.size() - open - 2)));
    if (r.order.back() != ')') throw Error(fmt::format("order '{}': missing ')'", r.order));
    // The block kernels of PyTorch's CUDA layer_norm are fixed trees (gen/ops/team.cpp): no parameter
    // of the CPU orders (lanes, fma, affine, ...) has a meaning there.
    if (r.op == OpKind::layer_norm && (o.moments.kind == K::BlockWelford || o.moments.kind == K::BlockReduceWelford))
      throw Error(fmt::format("order '{}' is PyTorch's CUDA layer_norm tree and takes no parameters (got '{}')", n->name,
                              r.order.substr(open + 1, r.order.size() - open - 2)));
    apply_parameters(o, std::string_view(r.order).substr(open + 1, r.order.size() - open - 2), r.order);
  }
  if (r.seq_k_at_launch && (o.attention.kind != AttentionOrder::Kind::Flash || o.attention.team > 0))
    throw FixedLengthError(fmt::format("order '{}' builds its attention for one S_k ({}); S_k at launch needs a flash order whose program instance is "
                            "one thread (fast, flash): give seq_k",
                            r.order, o.attention.kind != AttentionOrder::Kind::Flash ? "the key blocks and tails of its reference are fixed then"
                                                                                   : "a team stages whole key blocks in shared memory"));
  if (n->device_only && r.target != Target::cuda)
    throw Error(fmt::format("order '{}' is device-only: it calls CUDA's rsqrtf/expf/logf, which have no definition off the GPU, so "
                            "it runs on target cuda only, not {}{}",
                            n->name, name(r.target), r.op == OpKind::layer_norm ? "; torch-cuda-tree is the same tree on every target"
                                                                                : "; warp-butterfly is the same tree on every target"));
  if (std::string why = shape_error(r, o, *n, host); !why.empty()) throw Error(why);
  if (r.op == OpKind::attention && o.attention.team > 0) {
    // K and V tiles of Bc rows and the block's scores (Bc per thread), as f32 in shared memory.
    const AttentionOrder& a = o.attention;
    if (a.kind != AttentionOrder::Kind::Flash) throw Error(fmt::format("order '{}': threads applies to flash orders only", r.order));
    const int64_t bc = std::min<int64_t>(a.key_block, r.seq_k);
    const int64_t bytes = 4 * (2 * bc * r.cols + bc * a.team);
    if (bytes > 48 * 1024)
      throw Error(fmt::format("order '{}' needs {} bytes of shared memory per block (K and V tiles of {} x D = {}, {} scores per thread), "
                              "over CUDA's 48 KiB; use a smaller bc or threads",
                              r.order, bytes, bc, r.cols, bc));
  }
  if (r.op == OpKind::attention && o.attention.kind == AttentionOrder::Kind::Materialized) {
    // The scores of an instance's query rows live on the stack of the thread running it.
    const int64_t bytes = int64_t(o.attention.query_lanes) * r.seq_k * size_bytes(r.x_dtype);
    if (bytes > AttentionOrder::kKeptScoresBytes)
      throw Error(fmt::format("order '{}' keeps {} x S_k = {} scores per instance ({} bytes, over 2 MiB); use exact-tiled for the same bits "
                              "in O(D) memory", r.order, o.attention.query_lanes, r.seq_k, bytes));
  }
  return o;
}

std::vector<Kernel> build_stages(const Request& r, const Order& o) {
  std::vector<Kernel> ks;
  switch (r.op) {
    case OpKind::layer_norm: ks.push_back(build_layer_norm(r, o)); break;
    case OpKind::rms_norm: ks.push_back(build_rms_norm(r, o)); break;
    case OpKind::var_mean: ks.push_back(build_var_mean(r, o)); break;
    case OpKind::softmax:
    case OpKind::log_softmax: ks.push_back(build_softmax(r, o)); break;
    case OpKind::attention: ks = build_attention(r, o); break;
    case OpKind::layer_norm_backward: ks = build_layer_norm_backward(r, o); break;
    case OpKind::rms_norm_backward: ks = build_rms_norm_backward(r, o); break;
    case OpKind::softmax_backward:
    case OpKind::log_softmax_backward: ks.push_back(build_softmax_backward(r, o)); break;
    case OpKind::attention_backward: ks = build_attention_backward(r, o); break;
  }
  for (size_t i = 0; i < ks.size(); ++i) {
    Kernel& k = ks[i];
    k.description = forward_of(r.op) == OpKind::attention
                        ? fmt::format("{} D={} Sq={} Sk={}{} x={} order={}", name(r.op), r.cols, r.seq_q, r.seq_k_at_launch ? std::string("launch") : fmt::format("{}", r.seq_k), r.causal ? " causal" : "",
                                      name(r.x_dtype), r.order)
                        : fmt::format("{} N={} x={} weight={} order={}", name(r.op), r.cols_at_launch ? std::string("launch") : fmt::format("{}", r.cols),
                                      name(r.x_dtype), name(r.weight_type()), r.order);
    if (ks.size() > 1) k.description += fmt::format(" (stage {} of {})", i + 1, ks.size());
  }
  return ks;
}

Kernel build(const Request& r, const Order& o) { return build_stages(r, o).at(0); }

}  // namespace ordo::gen
