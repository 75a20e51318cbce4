// PyTorch's eager composite attention, softmax(q @ k.transpose(-2, -1) * scale) @ v, as its
// forward (gen/torch_cpu/cpu_matmul_attention.cpp) and its autograd backward
// (gen/torch_cpu/cpu_matmul_attention_backward.cpp) both compute the probabilities P.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>

#include "gen/libraries/mkl_gemm.hpp"
#include "ir/ir.hpp"
#include "ir/order.hpp"
#include "ordo/request.hpp"

namespace ordo::gen {

// PyTorch's bmm runs its own loop below K*M*N = 400 multiply-adds (every product of the
// composite, forward and backward, has S_q*S_k*D), else MKL's batched sgemm.
bool composite_is_naive(const Request& r);
// What computes the composite's products, for region labels: the loop, MKL's kernels (f32) or
// ATen's gemm_stub (16-bit).
std::string composite_products(const Request& r, const ir::GemmOrder& mkl);

// The scale as the composite multiplies by it: a Python float, converted to the tensor's f32.
inline float composite_scale(const Request& r) {
  return static_cast<float>(r.scale.value_or(1.0 / std::sqrt(static_cast<double>(r.cols))));
}

// Where emit_composite_probs reads and writes: `n` query rows from `first_query`, whose q rows
// start at element q_rows of buffer q; the (batch, head)'s key rows at kv_base of buffer k; P's
// rows (S_k floats each) at probs_base of buffer probs.
struct CompositeRows {
  int q = -1, k = -1, probs = -1;
  ir::ExprRef q_rows, kv_base, probs_base, first_query;
  int64_t n = 0;
};

// Rows of P = softmax(q @ k^T * scale) (causal: masked_fill(-inf) where key > query) into
// `probs`: the product by MKL's kernel for the whole S_q x S_k call (o.gemm; `threaded`: MKL on
// its threads, a launch of one (batch, head)), the scale in f32, the softmax op's row order
// (o.softmax). The call's kernel takes every dot product whole, so any split into rows gives
// the same bits where gemm_nt_splits_rows allows one. 16-bit inputs: `probs` has their type, the
// product is ATen's vectorized dot (or its loop), and s*scale is rounded to it; where
// `onednn` takes the 16-bit products, they are oneDNN's (gen/libraries/bf16_out_gemm.hpp).
struct CompositeOneDnn;
void emit_composite_probs(ir::Builder& b, const Request& r, const ir::AttentionOrder& o, const CompositeRows& at, bool threaded,
                          const CompositeOneDnn& onednn);

// Where the 16-bit composite's products go to oneDNN (bf16 with the order's
// AttentionBackwardOrder::onednn_16bit Emulated or Avx512Bf16, f16 with Avx512Fp16; the forward
// shares it): `taken`,
// a bool of the launch (B*H*S_q*S_k*D > 4096; constant when the shape decides alone), null where
// they never do; `threads`, PyTorch's thread count, the primitive's; `kind`, which oneDNN kernels.
struct CompositeOneDnn {
  ir::ExprRef taken;
  int threads = 1;
  ir::AttentionBackwardOrder::OneDnn kind = ir::AttentionBackwardOrder::OneDnn::Off;
  // oneDNN's brgemm and gemv kernels (emit_brgemm_bmm), not its emulated bf16 gemm.
  bool brgemm() const {
    return kind == ir::AttentionBackwardOrder::OneDnn::Avx512Bf16 || kind == ir::AttentionBackwardOrder::OneDnn::Avx512Fp16;
  }
};
CompositeOneDnn composite_onednn(const Request& r, const ir::Order& order, int threads);
// Emits onednn() where `d` takes the products and otherwise() where it does not (an If on the
// launch only around each product, so the softmax between them is emitted once).
void emit_by_dispatch(ir::Builder& b, const CompositeOneDnn& d, const std::function<void()>& onednn, const std::function<void()>& otherwise);
// For region labels: what computes a product under `d`, ATen's or MKL's being `products`.
std::string dispatch_label(const CompositeOneDnn& d, const std::string& products);

}  // namespace ordo::gen
