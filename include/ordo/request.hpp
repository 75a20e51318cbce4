// A request: everything that determines a generated kernel. Plain data, hashable, printable.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "ordo/scalar_type.hpp"

namespace ordo {

enum class OpKind : uint8_t {
  layer_norm, rms_norm, var_mean, softmax, log_softmax, attention,
  // The gradients of the forward ops: given the forward's inputs, its saved outputs and dy, they
  // compute dx and the weight gradients (summed over every row of the launch).
  layer_norm_backward, rms_norm_backward, softmax_backward, log_softmax_backward, attention_backward,
  // Reductions of each row to one value: x.sum(-1) and x.mean(-1) (the sum divided by N),
  // summed as the order's row_sum.
  sum, mean,
  // Elementwise: y = x / (1 + exp(-x)) (torch.nn.functional.silu), with the order's exp at each
  // element (Order::pointwise); its gradient dx = dy * s * (1 + x * (1 - s)), s = 1 / (1 + exp(-x)).
  silu, silu_backward,
  // Elementwise: y = (x/2) * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))), GELU's tanh form
  // (torch.nn.functional.gelu(x, approximate="tanh")), with the order's tanh at each element; its
  // gradient dx = dy * (0.5 (1 + t) + (0.5 x (1 - t^2)) * sqrt(2/pi) (1 + 3 * 0.044715 x^2)).
  gelu_tanh, gelu_tanh_backward,
  // Elementwise: GELU's erf form, y = (x/2) * (1 + erf(x / sqrt(2))) (torch.nn.functional.gelu(x)),
  // with the erf the order names (Order::pointwise.gelu_erf: oneDNN's, which PyTorch's CPU GELU
  // runs); its gradient dx = dy * (cdf + x * pdf), cdf = (1 + erf(x / sqrt(2)))/2, pdf the
  // standard normal density at x.
  gelu, gelu_backward,
  // The cross-entropy loss of each row's logits x against its class index, PyTorch's
  // F.cross_entropy(x, target, ignore_index=, reduction=) over [rows, N] logits and int64 targets:
  // logp = log_softmax(x) (an output: the backward reads it, as eager autograd saves it), then the
  // negative log-likelihood -logp[t] of each row, reduced over the rows (Request::reduction) in the
  // order's LossOrder. A row whose target is ignore_index counts for nothing. Outputs: logp, loss
  // (one element, or a row each under reduction none) and total_weight (the rows counted).
  cross_entropy,
  // Its gradient: dx = log_softmax_backward(g, logp), g the negative log-likelihood's gradient
  // (-dloss/total_weight at each row's target under mean, -dloss under sum, -dloss[row] under none;
  // 0 elsewhere and on ignored rows), with g rounded to x's dtype as eager's nll_loss_backward does.
  cross_entropy_backward,
};
// How a loss reduces its rows (PyTorch's reduction=).
enum class LossReduction : uint8_t { mean, sum, none };
std::string_view name(LossReduction r);
std::optional<LossReduction> parse_loss_reduction(std::string_view s);
std::string_view name(OpKind op);
std::optional<OpKind> parse_op(std::string_view s);
bool is_backward(OpKind op);
// The forward op a backward op differentiates (the op itself for a forward op).
OpKind forward_of(OpKind op);

enum class Target : uint8_t {
  cpu,          // LLVM, ORC JIT for the host CPU
  interpreter,  // the IR interpreter: the specification, slow
  cuda,         // CUDA C++ -> NVRTC -> cubin for sm_<cuda_arch>, launched through the driver
  cuda_emu,     // the same CUDA C++, compiled by the host C++ compiler over a SIMT emulation
};
std::string_view name(Target t);
std::optional<Target> parse_target(std::string_view s);

// attention, attention_backward: an additive mask on the scaled scores, PyTorch's float attn_mask
// (SDPA turns a boolean one into 0 / -inf in the query's dtype before its kernel). Its shape is
// PyTorch's [B, H, S_q, S_k] with any dims broadcast (size 1); ordo's input "mask" holds it
// contiguous in that reduced shape, as f32 or the inputs' dtype. The CPU flash kernel adds it as
// fma(q.k, scale, mask) in the forward and scale*q.k + mask in the backward.
struct AttentionMask {
  ScalarType dtype = ScalarType::f32;
  // Which of B, H, S_q, S_k the mask spans (false: broadcast, one element along that dim).
  bool per_batch = false, per_head = false, per_query = true, per_key = true;
  // Its text, "<dtype>:<dims>" with dims the four of B, H, Q (S_q), K (S_k), each a letter where
  // the mask spans it and 1 where it is broadcast: "bf16:B1QK" is [B, 1, S_q, S_k] in bf16.
  std::string text() const;
  static std::optional<AttentionMask> parse(std::string_view text);
};

struct Request {
  OpKind op = OpKind::layer_norm;
  // Shape class: the reduced (last) dim N is fixed at compile time; the number of rows is a
  // launch argument, so one kernel serves every row count.
  int64_t cols = 0;
  // The row ops' forward (layer_norm, rms_norm, var_mean, softmax, log_softmax): N is an argument
  // of each launch (CompiledKernel::run_with_sizes's sizes, {N}) rather than part of the kernel,
  // so one kernel serves every row length with the bits a kernel built for that N gives. cols is
  // then 0. Orders whose reductions are the same loops at every N take it (gen::resolve says why
  // the others do not).
  bool cols_at_launch = false;
  ScalarType x_dtype = ScalarType::f32;               // storage of x and y
  std::optional<ScalarType> weight_dtype;             // storage of weight and bias; default x_dtype
  std::optional<ScalarType> acc_dtype;                // accumulation; default: the order's
  bool has_weight = true;
  bool has_bias = true;
  bool allow_mixed_dtypes = false;  // weight_dtype may differ from x_dtype only when set
  double eps = 1e-5;
  // attention: q is [rows, seq_q, cols], k and v are [rows, seq_k, cols] and out is like q, where
  // rows = batch*heads is the launch argument and cols = D, the head dim.
  int64_t seq_q = 0, seq_k = 0;
  // attention: S_k is an argument of each launch (CompiledKernel::run's sizes, {S_k}) rather than
  // part of the kernel, so one kernel serves every key length (a decode loop's growing K and V)
  // with the bits a kernel built for that length gives. seq_k is then 0. The flash orders (fast,
  // flash and their parameters) take it, attention_backward too on the CPU given the forward's
  // lse (saved_stats); the others fix S_k when they are built.
  bool seq_k_at_launch = false;
  // attention: H of PyTorch's (B, H, S, D) layout, which launches rows = B*H (a multiple of H;
  // 3-D inputs [N, S, D] are (1, N, S, D) to PyTorch, so H = N). Only the row strides PyTorch
  // hands its BLAS depend on it (its flash backward keeps the gradients as (B, S, H, D)), and
  // only an order that reproduces those BLAS calls reads it.
  int64_t heads = 1;
  // attention_backward: query heads per K/V head (grouped-query attention, PyTorch's enable_gqa; 1:
  // none). A launch's rows are then batch * K/V heads, k, v, dk and dv hold a K/V head per row,
  // and q, out, dout, lse and dq hold that head's group of kv_group query heads one after another
  // (PyTorch's contiguous (B, H, S, D), H = heads). Only the orders that reproduce PyTorch's CPU
  // flash backward take it: its K/V gradients sum the group's query heads in one chain.
  int64_t kv_group = 1;
  // attention: the row strides of q, k and v in the tensors PyTorch was given (0: D, contiguous).
  // ordo's buffers are contiguous, but PyTorch's flash kernels hand MKL the tensors' own strides,
  // and MKL's choice of kernel reads them: a [B, S, H, D] projection viewed as [B, H, S, D] has
  // rows H*D apart, a fused qkv projection 3*H*D.
  int64_t q_row_stride = 0, k_row_stride = 0, v_row_stride = 0;
  bool causal = false;            // key j is visible to query i when j <= i (top-left aligned)
  std::optional<AttentionMask> mask;  // none: no mask (AttentionMask above)
  std::optional<double> scale;    // default 1/sqrt(D)
  bool lse_output = false;        // also write the log-sum-exp of each query row
  // Backward ops: the forward's saved statistics are inputs (rms_norm_backward's rstd,
  // attention_backward's lse). When false the kernel recomputes them as the order's forward does.
  bool saved_stats = true;
  // cross_entropy, cross_entropy_backward: the target value that marks a row as not counted
  // (PyTorch's ignore_index; transformers' labels use -100), and how the rows' losses reduce.
  int64_t ignore_index = -100;
  LossReduction reduction = LossReduction::mean;
  std::string order = "fast";
  Target target = Target::cpu;
  // Program instances the CPU backend runs in lock step (0: its choice). Never changes bits.
  int rows_in_flight = 0;
  // Target cuda: the GPU architecture, sm_<cuda_arch>: 80, 86, 89 or 90.
  int cuda_arch = 90;

  ScalarType weight_type() const { return weight_dtype.value_or(x_dtype); }
  // Canonical text of every field; the in-memory cache key.
  std::string key() const;
};

}  // namespace ordo
