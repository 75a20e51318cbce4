// The named-order table: a stable name, one line of description, and the Order it means.
// Adding an order is one row here; resolving a request against it is gen/resolve.cpp's.
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
const std::vector<OpKind> kNormOps = {OpKind::layer_norm, OpKind::rms_norm, OpKind::var_mean, OpKind::sum, OpKind::mean};
const std::vector<ScalarType> kAllStorage = {f32, bf16, f16};
const std::vector<OpKind> kSoftmaxOps = {OpKind::softmax, OpKind::log_softmax};
const std::vector<OpKind> kAllOps = {OpKind::layer_norm, OpKind::rms_norm, OpKind::var_mean, OpKind::softmax, OpKind::log_softmax,
                                     OpKind::attention, OpKind::layer_norm_backward, OpKind::rms_norm_backward,
                                     OpKind::softmax_backward, OpKind::log_softmax_backward, OpKind::attention_backward,
                                     OpKind::sum, OpKind::mean, OpKind::silu, OpKind::silu_backward, OpKind::gelu_tanh,
                                     OpKind::gelu_tanh_backward, OpKind::gelu, OpKind::gelu_backward, OpKind::cross_entropy, OpKind::cross_entropy_backward};

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

// silu and silu_backward (PyTorch 2.15's cpu_kernel_vec, gen/ops/pointwise.cpp): Sleef's expf_u10 in
// the AVX2 and AVX-512 vector functions, glibc's expf in the scalar one and everywhere under
// default; a step is two vectors: 8 or 16 f32 lanes, 16 or 32 over 16-bit inputs; the backward's
// 1 + x*(1 - s) fused where the build has fma.
PointwiseOrder torch215_silu(ScalarType storage, Capability cap) {
  if (cap == Capability::base) return {MathImpl::Glibc, MathImpl::Glibc, 0, false};
  const int lanes = (cap == Capability::avx512 ? 16 : 8) * (storage == f32 ? 1 : 2);
  return {MathImpl::SleefU10, MathImpl::Glibc, 2 * lanes, true};
}

// gelu_tanh (GeluKernelImpl's tanh form): silu's structure with Sleef's tanhf_u10 and glibc's
// tanhf, x + 0.044715 x^3 fused where the build has fma (in the scalar function too: the file is
// built with -mfma), and above 16384 elements a grain of elements / threads.
PointwiseOrder torch215_gelu_tanh(ScalarType storage, Capability cap) {
  PointwiseOrder p = torch215_silu(storage, cap);
  p.threads_grain_above = 16384;
  return p;
}

// gelu and gelu_backward (GELU's erf form): PyTorch hands a contiguous tensor of more than one
// element to oneDNN's eltwise_gelu_erf when oneDNN takes its dtype (f32 always; bf16 with AVX-512
// BW/VL/DQ or avx_ne_convert; f16 with avx512_fp16 or avx_ne_convert: mkldnn_bf16_device_check and
// mkldnn_fp16_device_check), else to ATen's own erf kernel, which is not modelled. oneDNN's code
// follows the host's ISA, not ATEN_CPU_CAPABILITY: the minimax forward with AVX-512 (measured on an
// Intel Xeon and an AMD EPYC Zen 4), Abramowitz and Stegun without it; bf16 results stored by
// avx512_bf16's vcvtneps2bf16, which flushes subnormals (measured on both). Modelled: f32 on a host
// with AVX2 and FMA, bf16 with AVX-512 and avx512_bf16, f16 with AVX-512 and avx512_fp16.
PointwiseOrder torch215_gelu_erf(ScalarType storage, const HostModel& host) {
  if (!host.avx2_fma) throw Error(fmt::format("gelu: oneDNN's code for a CPU without AVX2 and FMA ({}) is not modelled", host.describe()));
  if (storage == bf16 && !(host.avx512 && host.avx512_bf16))
    throw Error(fmt::format("gelu: bf16 on a CPU without AVX-512 and avx512_bf16 ({}) is not modelled (PyTorch takes ATen's erf kernel or "
                            "oneDNN's emulated bf16 store there); f32 is",
                            host.describe()));
  if (storage == f16 && !(host.avx512 && host.avx512_fp16))
    throw Error(fmt::format("gelu: f16 on a CPU without AVX-512 and avx512_fp16 ({}) is not modelled (PyTorch takes ATen's erf kernel, "
                            "not oneDNN, there); f32 is",
                            host.describe()));
  PointwiseOrder p;
  p.gelu_erf = host.avx512 ? PointwiseOrder::GeluErf::OneDnnMinimax : PointwiseOrder::GeluErf::OneDnnAbramowitzStegun;
  p.bf16_flushes_subnormals = true;
  return p;
}

int avx512_cpu_lanes(const Request& r, int wide, int narrow);

bool is_pointwise(OpKind op) {
  return op == OpKind::silu || op == OpKind::silu_backward || op == OpKind::gelu_tanh || op == OpKind::gelu_tanh_backward ||
         op == OpKind::gelu || op == OpKind::gelu_backward;
}

Order torch215(ScalarType storage, Capability cap, const Request& r, const HostModel& host) {
  Order o;
  if (is_pointwise(r.op)) {
    if (r.op == OpKind::gelu || r.op == OpKind::gelu_backward) o.pointwise = torch215_gelu_erf(storage, host);
    else if (r.op == OpKind::gelu_tanh) o.pointwise = torch215_gelu_tanh(storage, cap);
    else o.pointwise = torch215_silu(storage, cap);  // gelu_tanh_backward: cpu_kernel_vec's default grain, as silu's
    // A register of floats per step on an AVX-512 CPU (the vector function's lanes; no bit changes):
    // the minimax table's lookups by permutes, the rest twice as wide.
    o.elementwise_lanes = avx512_cpu_lanes(r, 16, 8);
    return o;
  }
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
  if (r.op == OpKind::softmax_backward || r.op == OpKind::log_softmax_backward || r.op == OpKind::cross_entropy_backward) {
    o.softmax_backward = torch215_softmax_backward(cap);
    return o;
  }
  if (r.op == OpKind::rms_norm_backward) {
    o.norm_backward = torch215_rms_norm_backward();
    o.row_sum = torch215_mean_sum(cap);
    return o;
  }
  o.softmax = torch113_softmax(storage, cap);
  o.row_sum = torch215_mean_sum(cap);
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
  o.row_sum = sum;
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
  o.row_sum = torch215_mean_sum(cap);
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
  o.row_sum = sum;
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
               "attention_backward: flash's tiled backward with fma, 16 lanes, lse recomputed by fast's forward; a mask as flash's; sum/mean: 4x8-lane fma "
               "sums; silu, silu_backward: Sleef's expf_u10 at every element, the backward's 1 + x(1 - s) fused; gelu_tanh: Sleef's "
               "tanhf_u10 at every element, x + 0.044715 x^3 fused, and in gelu_tanh_backward 1 - t^2 and 1 + 3*0.044715 x^2 too; "
               "gelu, gelu_backward: torch2.15-cpu's on an AVX-512 CPU (oneDNN's minimax erf; the backward Abramowitz and Stegun), bf16 "
               "subnormals kept; "
               "cross_entropy: fast's log_softmax, the rows' losses summed as PyTorch's nll_loss does (a cascade of 8 partial sums "
               "in the storage type, 16 rows per level: O(rows), nothing to gain from another order); cross_entropy_backward: fast's "
               "log_softmax_backward of the one-hot gradient (no reference)",
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
                 o.pointwise = {MathImpl::SleefU10, MathImpl::SleefU10, 0, true};
                 if (is_pointwise(r.op)) o.elementwise_lanes = avx512_cpu_lanes(r, 16, 8);
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
                 o.row_sum = lane_tree(16, 1, true);  // rms_norm_backward's rstd when not given: rstd = 1/sqrt(sum(x*x)/N + eps)
                 o.softmax_backward = summed_softmax_backward(lane_tree(16, 1, true));
                 return o;
               }});
  const std::vector<OpKind> torch215_ops = {OpKind::layer_norm,          OpKind::rms_norm,          OpKind::var_mean,
                                            OpKind::softmax,             OpKind::log_softmax,       OpKind::attention,
                                            OpKind::layer_norm_backward, OpKind::rms_norm_backward, OpKind::softmax_backward,
                                            OpKind::log_softmax_backward, OpKind::attention_backward, OpKind::sum,
                                            OpKind::mean, OpKind::silu, OpKind::silu_backward, OpKind::gelu_tanh,
                                            OpKind::gelu_tanh_backward, OpKind::gelu, OpKind::gelu_backward, OpKind::cross_entropy,
                                            OpKind::cross_entropy_backward};
  // x.sum(-1) of a 16-bit x: PyTorch keeps its partial sums (a thread's, a split row's) in the
  // 16-bit output type, which is not modelled (measured: f16 rows of 4095 and of 40000 differ from
  // the f32 sum rounded once); x.mean(-1) sums x.float() and is.
  const OpDtypes kTorch215SumF32{OpKind::sum, {ScalarType::f32},
                                 "PyTorch rounds the partial sums of a 16-bit sum to the 16-bit output type, which is not modelled "
                                 "(sum x.float(), or take mean, which PyTorch sums in f32)"};
  t.push_back({"torch2.15-cpu-default",
               "PyTorch 2.15 CPU, ATEN_CPU_CAPABILITY=default. layer_norm: f32 8-lane Welford cascade (two f32 streams per 16-bit "
               "vector), no fma; rms_norm: F.rms_norm's composite in f32 (SumKernel's 4x8-lane cascade over the rounded squares; "
               "a single row over 32768 long is summed in per-thread chunks, as torch does, given threads=T); "
               "softmax/log_softmax: torch1.13-cpu-default's; var_mean: sequential Welford in f64; attention (f32, bf16): the CPU "
               "flash kernel with glibc expf, MKL's block products (threads=T: torch's thread count; mkl=intel, intel-avx512bf16 or amd: the host whose MKL kernels ran); "
               "softmax/log_softmax_backward: vec::map2_reduce_all/reduce_all on 8 lanes folded in order, no fma, glibc expf; "
               "rms_norm_backward: F.rms_norm's autograd chain in f32 (SumKernel's 8-lane cascades for the row sum and dweight's dim-0 sum; "
               "the same under every capability); attention_backward (f32, bf16, f16, lse given; an AMD or Intel AVX-512 host's MKL): the CPU flash backward "
               "with dsum on 8 lanes folded in order and glibc expf, bf16's dq, dk, dv by gemm_stub without fma or oneDNN, "
               "grouped-query (kv_group=G) an instance per (batch, K/V head) running its G query heads in order, dk and dv one "
               "chain across them; attention and attention_backward with a mask (PyTorch's additive attn_mask, f32 or the "
               "inputs' dtype, any dims broadcast): fma(q.k, scale, mask) forward, scale*q.k + mask backward; "
               "sum/mean: x.sum(-1) and x.mean(-1), SumKernel's 4x8-lane cascade as in rms_norm (a single row over 32768 long "
               "in per-thread chunks), mean = sum / N; 16-bit x: mean only, of x.float(), rounded once; "
               "silu: x / (1 + expf(-x)) with glibc's expf; silu_backward: dy*s*(1 + x*(1 - s)), s = 1/(1 + expf(-x)), no fma; "
               "gelu_tanh: (0.5x)(1 + tanhf(k(x + 0.044715 x^3))) with glibc's tanhf, no fma, above 16384 elements cut between the "
               "threads by a grain of elements/threads; gelu_tanh_backward: its gradient with glibc's tanhf, no fma; "
               "gelu, gelu_backward (F.gelu's erf form, every capability alike): oneDNN's eltwise_gelu_erf for the host's ISA, "
               "the forward a piecewise minimax erf with AVX-512 and Abramowitz and Stegun without, the backward Abramowitz and Stegun, "
               "bf16 subnormal results flushed to zero (avx512_bf16); "
               "cross_entropy (F.cross_entropy with class indices, ignore_index, reduction mean, sum or none): log_softmax as above, "
               "then nll_loss's cascade of 8 partial sums in the storage type, 16 rows per level, mean = total / rows counted; "
               "cross_entropy_backward: nll_loss_backward's one-hot gradient rounded to the storage type, then log_softmax_backward as above",
               torch215_ops, kAllStorage, true, true,
               [](ScalarType s, ScalarType, const Request& r, const HostModel& host) { return torch215(s, Capability::base, r, host); }});
  t.back().fewer_dtypes = {kTorch215SumF32};
  t.back().takes_environment = true;
  t.push_back({"torch2.15-cpu-avx2",
               "PyTorch 2.15 CPU, ATEN_CPU_CAPABILITY=avx2. layer_norm: the cascade with fma updates and AddMomentsVec merges, "
               "fused affine; rms_norm: as default; softmax/log_softmax: torch1.13-cpu-avx2's; var_mean: sequential Welford in f64; "
               "attention: the CPU flash kernel with 8-lane exp_u20; softmax/log_softmax_backward: 8-lane map2_reduce_all/reduce_all, "
               "halving fold, the masked tail fused when torch runs the rows inline (threads=1 or one row), dx = fma(-exp(y), s, dy) "
               "with Sleef expf_u10; attention_backward (f32, bf16, f16, lse given; an AMD or Intel AVX-512 host's MKL): the CPU flash backward with dsum "
               "on 8 lanes, halving fold, Sleef expf_u10, bf16's dq, dk, dv by gemm_stub with fma or oneDNN, grouped-query and masks as "
               "default's; sum/mean: as default; "
               "silu, silu_backward: Sleef's expf_u10 in steps of 16 elements (32 over 16-bit inputs) per thread's chunk, glibc's expf "
               "for the rest, the backward's 1 + x(1 - s) fused; gelu_tanh: Sleef's tanhf_u10 in silu's steps, glibc's tanhf for the "
               "rest, x + 0.044715 x^3 fused, above 16384 elements a grain of elements/threads; gelu_tanh_backward: as silu_backward's "
               "steps, x + 0.044715 x^3, 1 - t^2 and 1 + 3*0.044715 x^2 fused; gelu, gelu_backward: as default's (oneDNN's)",
               torch215_ops, kAllStorage, true, true,
               [](ScalarType s, ScalarType, const Request& r, const HostModel& host) { return torch215(s, Capability::avx2, r, host); }});
  t.back().fewer_dtypes = {kTorch215SumF32};
  t.back().takes_environment = true;
  t.push_back({"torch2.15-cpu-avx512",
               "PyTorch 2.15 CPU, ATEN_CPU_CAPABILITY=avx512: softmax/log_softmax by its AVX-512 kernels (16 lanes); layer_norm "
               "has no AVX-512 kernel, so it is torch2.15-cpu-avx2's; rms_norm: as default (8 lanes here too); var_mean: "
               "sequential Welford in f64; attention: the CPU flash kernel with 16-lane exp_u20; softmax/log_softmax_backward: "
               "torch2.15-cpu-avx2's on 16 lanes; attention_backward (f32, bf16, f16, lse given; an AMD or Intel AVX-512 host's MKL): the CPU flash "
               "backward with dsum on 16 lanes, halving fold, Sleef expf_u10, bf16's dq, dk, dv by gemm_stub with fma or oneDNN; "
               "sum/mean: as default (8 lanes); silu, silu_backward, gelu_tanh, gelu_tanh_backward: as avx2's in steps of 32 elements (64 over 16-bit "
               "inputs); gelu, gelu_backward: as default's (oneDNN's)",
               torch215_ops, kAllStorage, true, true,
               [](ScalarType s, ScalarType, const Request& r, const HostModel& host) { return torch215(s, Capability::avx512, r, host); }});
  t.back().fewer_dtypes = {kTorch215SumF32};
  t.back().takes_environment = true;
  t.push_back({"torch2.15-cpu",
               "torch2.15-cpu-{default,avx2,avx512} for the capability PyTorch picks here: ATEN_CPU_CAPABILITY if set, else the "
               "best this CPU has",
               torch215_ops, kAllStorage, true, true,
               [](ScalarType s, ScalarType, const Request& r, const HostModel& host) { return torch215(s, torch_capability(host), r, host); }});
  t.back().fewer_dtypes = {kTorch215SumF32};
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
               "(AttentionBackwardOrder::Tiled; the CPU runs both stages' sums in one kernel per (batch, head), same bits); lse, when not given, recomputed by flash(Bc)'s forward; parameters as flash. "
               "A mask (attn_mask) is added to the finished score (times log2(e) under exp2); a query whose every key is masked gets "
               "out 0, lse -inf and no gradient",
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
               "softmax/log_softmax: sequential lane fold, glibc expf/logf; cross_entropy: that log_softmax, then nll_loss's cascade as "
               "torch2.15-cpu's",
               {OpKind::layer_norm, OpKind::softmax, OpKind::log_softmax, OpKind::cross_entropy}, {f32, bf16}, true, true,
               [](ScalarType s, ScalarType, const Request&, const HostModel&) {
                 Order o = torch113_layer_norm(s, Capability::base);
                 o.softmax = torch113_softmax(s, Capability::base);
                 return o;
               }});
  t.push_back({"torch1.13-cpu-avx2",
               "PyTorch 1.13 CPU, ATEN_CPU_CAPABILITY=avx2. layer_norm: lane Welford cascade, affine as two fmas; "
               "softmax/log_softmax: halving lane tree, Sleef u10 expf/logf; cross_entropy: that log_softmax, then nll_loss's cascade as "
               "torch2.15-cpu's",
               {OpKind::layer_norm, OpKind::softmax, OpKind::log_softmax, OpKind::cross_entropy}, {f32, bf16}, true, true,
               [](ScalarType s, ScalarType, const Request&, const HostModel&) {
                 Order o = torch113_layer_norm(s, Capability::avx2);
                 o.softmax = torch113_softmax(s, Capability::avx2);
                 return o;
               }});
  t.push_back({"torch1.13-cpu-avx512",
               "PyTorch 1.13 CPU, ATEN_CPU_CAPABILITY=avx512 on an AVX-512 CPU: softmax/log_softmax by its AVX-512 kernels "
               "(the avx2 order with 16 float lanes); layer_norm has no AVX-512 kernel in 1.13, so it is torch1.13-cpu-avx2's; "
               "cross_entropy: that log_softmax, then nll_loss's cascade as torch2.15-cpu's",
               {OpKind::layer_norm, OpKind::softmax, OpKind::log_softmax, OpKind::cross_entropy}, {f32, bf16}, true, true,
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
                 o.row_sum.kind = S::LevelCascade;
                 o.row_sum.lanes = 8;
                 o.row_sum.accumulators = 4;
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

}  // namespace

const std::vector<NamedOrder>& named_orders() {
  static const std::vector<NamedOrder> table = make_table();
  return table;
}

const std::vector<ScalarType>& dtypes_for(const NamedOrder& n, OpKind op) {
  for (const OpDtypes& d : n.fewer_dtypes)
    if (d.op == op) return d.dtypes;
  return n.dtypes;
}

const NamedOrder* find_order(std::string_view name) {
  std::string_view base = name.substr(0, name.find('('));
  for (const NamedOrder& n : named_orders())
    if (n.name == base) return &n;
  return nullptr;
}

}  // namespace ordo::gen
