// PyTorch's eager composite softmax(q @ k.transpose(-2, -1) * scale) @ v on the CPU
// (AttentionOrder::Kind::CpuMatmul), the materialized reference users compare fused attention
// with. Read from PyTorch 2.15's dispatch (matmul on 4-D tensors is bmm over batch*heads; bmm takes
// its own loop below K*M*N = 400, else MKL's batched sgemm) and measured against torch 2.15.0
// (docs/research/torch2.15-attention.md).
//
// A program instance is one (batch, head). MKL picks its kernel for the whole S_q x S_k (and
// S_q x D) product; where that is its general kernel, whose every element is its own dot
// product, the rows are computed in chunks of 32 so that the scores take 32 x S_k floats of
// scratch; otherwise (one query, small products) all rows at once. Per chunk: scores by
// gen/libraries/mkl_gemm.cpp, times the scale (f32), causal: key > query set to -inf (masked_fill), the
// softmax op's row order (gen/blocks/row.hpp), then the chunk's output rows = p @ v.
// bf16 and f16: the scores and P are 16-bit scratch, PyTorch's intermediate tensors, and the
// products ATen's own where PyTorch's oneDNN check fails, or (bf16 on AVX-512, in a launch of
// B*H*S_q*S_k*D > 4096) oneDNN's: its emulated kernel without avx512_bf16, its brgemm and gemv
// kernels with it; f16 on a CPU with avx512_fp16, oneDNN's brgemm and gemv kernels over the
// halves converted to f32 (gen/libraries/bf16_out_gemm.hpp). Either way every element is its own sum, so the
// rows always go in chunks of 32 (docs/research/torch2.15-attention-16bit-composite.md,
// docs/research/torch2.15-attention-16bit-composite-f16-avx512fp16.md).
#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "gen/blocks/constants.hpp"
#include "gen/libraries/bf16_out_gemm.hpp"
#include "gen/torch_cpu/composite_attention.hpp"
#include "gen/gen.hpp"
#include "gen/blocks/row.hpp"
#include "ir/error.hpp"

namespace ordo::gen {

using namespace ordo::ir;

namespace {
}  // namespace

bool composite_is_naive(const Request& r) { return r.seq_q * r.seq_k * r.cols < 400; }

std::string composite_products(const Request& r, const GemmOrder& mkl) {
  if (composite_is_naive(r)) return "PyTorch's bmm loop";
  return r.x_dtype == ScalarType::f32 ? describe(mkl) : "ATen's gemm_stub";
}

CompositeOneDnn composite_onednn(const Request& r, const Order& order, int threads) {
  using OneDnn = AttentionBackwardOrder::OneDnn;
  const OneDnn kind = order.attention_backward.onednn_16bit;
  const bool modelled = r.x_dtype == ScalarType::bf16 ? kind == OneDnn::Emulated || kind == OneDnn::Avx512Bf16
                                                     : r.x_dtype == ScalarType::f16 && kind == OneDnn::Avx512Fp16;
  if (!modelled) return {};
  return {onednn_bmm_taken(r.seq_q * r.seq_k * r.cols), threads, kind};
}

void emit_by_dispatch(Builder& b, const CompositeOneDnn& d, const std::function<void()>& onednn, const std::function<void()>& otherwise) {
  if (!d.taken) return otherwise();
  if (d.taken->op == Op::Const) return d.taken->imm_i ? onednn() : otherwise();
  b.if_else(d.taken, onednn, otherwise);
}

std::string dispatch_label(const CompositeOneDnn& d, const std::string& products) {
  if (!d.taken || (d.taken->op == Op::Const && !d.taken->imm_i)) return products;
  using OneDnn = AttentionBackwardOrder::OneDnn;
  const std::string kernel = d.kind == OneDnn::Avx512Bf16   ? "oneDNN's brg_matmul:avx512_core_bf16"
                             : d.kind == OneDnn::Avx512Fp16 ? "oneDNN's brg_matmul:avx10_1_512 (f16 as f32)"
                                                            : "oneDNN's gemm:jit:bf16";
  if (d.taken->op == Op::Const) return kernel;
  return kernel + " where B*H*S_q*S_k*D > 4096, else " + products;
}

void emit_composite_probs(Builder& b, const Request& r, const AttentionOrder& o, const CompositeRows& at, bool threaded,
                          const CompositeOneDnn& onednn) {
  const int64_t D = r.cols, Sq = r.seq_q, Sk = r.seq_k;
  const float scale = composite_scale(r);
  const bool f32_inputs = r.x_dtype == ScalarType::f32;
  const Matrix q_rows{at.q, at.q_rows, D}, k_rows{at.k, at.kv_base, D}, s{at.probs, at.probs_base, Sk};
  const std::string how = dispatch_label(onednn, composite_products(r, o.gemm));
  b.region("q@k^T", fmt::format("{} of {} rows x {} keys, K = {}: {}", at.n, Sq, Sk, D, how), [&] {
    // oneDNN: k^T's view is copied row-major (untransposed) when B*H is 1.
    const OneDnnBmm call{Sq, Sk, D, false, binary(Op::Ne, grid_extent(0), idx(1)), onednn.threads};
    const Matrix k_t{at.k, at.kv_base, 1, 0, D};
    auto by_onednn = [&] {
      if (onednn.brgemm()) emit_brgemm_bmm(b, BrgemmBmm{Sq, Sk, D, false, false, true, onednn.threads}, at.n, q_rows, k_t, s);
      else emit_onednn_bf16_bmm(b, call, at.first_query, at.n, q_rows, k_t, s);
    };
    emit_by_dispatch(b, onednn, by_onednn, [&] {
      if (!f32_inputs)
        emit_stub_dot_rows(b, composite_is_naive(r) ? StubSum::Sequential : StubSum::VectorDot, o.dot_fold, o.stub_fma, at.n, Sk, D, q_rows,
                           k_rows, s);
      else if (composite_is_naive(r)) emit_naive_nt(b, at.n, Sk, D, q_rows, k_rows, s);
      else emit_gemm_nt(b, o.gemm, GemmInputs::f32, at.n, Sk, D, q_rows, k_rows, s, threaded, Sq);
    });
  });
  const ScalarType stored = b.kernel().buffers[size_t(at.probs)].elem;
  b.for_range("r", idx(0), idx(at.n), 1, [&](ExprRef j) {
    const ExprRef first = b.let("score_row", add(at.probs_base, mul(j, idx(Sk))));
    const ExprRef query = b.let("query", add(at.first_query, j));
    b.region("scale", r.causal ? "s * scale, then -inf where key > query" : "s * scale", [&] {
      b.for_range("i", idx(0), idx(Sk), 1, [&](ExprRef i) {
        ExprRef x = load(b.kernel(), at.probs, add(first, i));
        if (!f32_inputs) x = cast(x, ScalarType::f32);
        ExprRef sc = mul(x, constant(Type{ScalarType::f32, 1}, static_cast<double>(scale)));
        if (r.causal) sc = select(binary(Op::Lt, query, i), constant(Type{ScalarType::f32, 1}, -std::numeric_limits<double>::infinity()), sc);
        b.store(at.probs, add(first, i), f32_inputs ? sc : cast(sc, stored));
      });
    });
    b.region("softmax", describe(o.softmax), [&] { softmax_row(b, o.softmax, Row(b, Sk, first), at.probs, at.probs); });
  });
}

Kernel build_cpu_matmul_attention(const Request& r, const Order& order) {
  const AttentionOrder& o = order.attention;
  const int64_t D = r.cols, Sq = r.seq_q, Sk = r.seq_k;
  Kernel kernel;
  kernel.name = "attention";
  Builder b(kernel);
  const int q = b.buffer("q", r.x_dtype, false, Extent::rows_by_fixed, Sq * D);
  const int k = b.buffer("k", r.x_dtype, false, Extent::rows_by_fixed, Sk * D);
  const int v = b.buffer("v", r.x_dtype, false, Extent::rows_by_fixed, Sk * D);
  const int out = b.buffer("out", r.x_dtype, true, Extent::rows_by_fixed, Sq * D);
  const bool naive = composite_is_naive(r);
  const bool f32_inputs = r.x_dtype == ScalarType::f32;
  // ATen's 16-bit kernels take every element whole, whatever the call's shape.
  const bool in_chunks = Sq > 32 && (!f32_inputs || (!naive && gemm_nt_splits_rows(o.gemm, GemmInputs::f32, Sq, Sk, D) &&
                                                      gemm_nn_splits_rows(o.gemm, GemmInputs::f32, Sq, D, Sk)));
  const int64_t R = in_chunks ? 32 : Sq;
  // The scores, then P, in the inputs' type: PyTorch's intermediate tensors.
  const int scores = b.buffer("scores", r.x_dtype, true, Extent::scratch, R * Sk);

  b.region("attention", describe(o), [&] {
    const ExprRef q_base = b.let("q_base", mul(program_id(0), idx(Sq * D)));
    const ExprRef kv_base = b.let("kv_base", mul(program_id(0), idx(Sk * D)));
    const CompositeOneDnn onednn = composite_onednn(r, order, o.gemm.threads);
    auto rows = [&](ExprRef c0, int64_t n, bool threaded) {
      const ExprRef q_at = b.let("q_at", add(q_base, mul(c0, idx(D))));
      emit_composite_probs(b, r, o, CompositeRows{q, k, scores, q_at, kv_base, idx(0), c0, n}, threaded, onednn);
      const Matrix s{scores, idx(0), Sk}, v_rows{v, kv_base, D}, out_rows{out, q_at, D};
      const std::string how = dispatch_label(onednn, composite_products(r, o.gemm));
      b.region("p@v", fmt::format("{} of {} rows x {} keys, D = {}: {}", n, Sq, Sk, D, how), [&] {
        const OneDnnBmm call{Sq, D, Sk, false, constant(Type{ScalarType::boolean, 1}, 0), onednn.threads};
        auto by_onednn = [&] {
          if (onednn.brgemm()) emit_brgemm_bmm(b, BrgemmBmm{Sq, D, Sk, false, true, false, onednn.threads}, n, s, v_rows, out_rows);
          else emit_onednn_bf16_bmm(b, call, c0, n, s, v_rows, out_rows);
        };
        emit_by_dispatch(b, onednn, by_onednn, [&] {
          // 16-bit: the loop's sequential sum, or the 'N','N' stub's ilp4 (transb false).
          if (!f32_inputs)
            emit_bf16_out_gemm(b, naive, o.stub_fma && !naive, AttentionBackwardOrder::OneDnn::Off, n, D, Sk, s, v_rows, out_rows, 1.0f, true);
          else if (naive) emit_naive_nn(b, n, D, Sk, s, v_rows, out_rows);
          else emit_gemm_nn(b, o.gemm, GemmInputs::f32, n, D, Sk, s, v_rows, out_rows, false, threaded, idx(0), Sq);
        });
      });
    };
    auto body = [&](bool threaded) {
      const int64_t full = Sq / R * R;
      if (full > 0) b.for_range("c0", idx(0), idx(full), R, [&](ExprRef c0) { rows(c0, R, threaded); });
      if (Sq > full) rows(idx(full), Sq - full, threaded);
    };
    // bmm over a single (batch, head) calls MKL with all its threads.
    if (o.gemm.threads > 1 && f32_inputs) b.if_else(binary(Op::Eq, grid_extent(0), idx(1)), [&] { body(true); }, [&] { body(false); });
    else body(false);
  });
  return kernel;
}

}  // namespace ordo::gen
