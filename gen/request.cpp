// Request: names of ops and targets, and the canonical key.
#include <fmt/format.h>

#include "ordo/request.hpp"

namespace ordo {

std::string_view name(OpKind op) {
  switch (op) {
    case OpKind::layer_norm: return "layer_norm";
    case OpKind::rms_norm: return "rms_norm";
    case OpKind::var_mean: return "var_mean";
    case OpKind::softmax: return "softmax";
    case OpKind::log_softmax: return "log_softmax";
    case OpKind::attention: return "attention";
    case OpKind::layer_norm_backward: return "layer_norm_backward";
    case OpKind::rms_norm_backward: return "rms_norm_backward";
    case OpKind::softmax_backward: return "softmax_backward";
    case OpKind::log_softmax_backward: return "log_softmax_backward";
    case OpKind::attention_backward: return "attention_backward";
    case OpKind::sum: return "sum";
    case OpKind::mean: return "mean";
    case OpKind::silu: return "silu";
    case OpKind::silu_backward: return "silu_backward";
    case OpKind::gelu_tanh: return "gelu_tanh";
    case OpKind::gelu_tanh_backward: return "gelu_tanh_backward";
    case OpKind::gelu: return "gelu";
    case OpKind::gelu_backward: return "gelu_backward";
    case OpKind::cross_entropy: return "cross_entropy";
    case OpKind::cross_entropy_backward: return "cross_entropy_backward";
  }
  return "?";
}
std::optional<OpKind> parse_op(std::string_view s) {
  for (OpKind o : {OpKind::layer_norm, OpKind::rms_norm, OpKind::var_mean, OpKind::softmax, OpKind::log_softmax, OpKind::attention,
                   OpKind::layer_norm_backward, OpKind::rms_norm_backward, OpKind::softmax_backward, OpKind::log_softmax_backward,
                   OpKind::attention_backward, OpKind::sum, OpKind::mean, OpKind::silu, OpKind::silu_backward, OpKind::gelu_tanh,
                   OpKind::gelu_tanh_backward, OpKind::gelu, OpKind::gelu_backward, OpKind::cross_entropy, OpKind::cross_entropy_backward})
    if (s == name(o)) return o;
  return std::nullopt;
}
bool is_backward(OpKind op) { return forward_of(op) != op; }
OpKind forward_of(OpKind op) {
  switch (op) {
    case OpKind::layer_norm_backward: return OpKind::layer_norm;
    case OpKind::rms_norm_backward: return OpKind::rms_norm;
    case OpKind::softmax_backward: return OpKind::softmax;
    case OpKind::log_softmax_backward: return OpKind::log_softmax;
    case OpKind::attention_backward: return OpKind::attention;
    case OpKind::silu_backward: return OpKind::silu;
    case OpKind::gelu_tanh_backward: return OpKind::gelu_tanh;
    case OpKind::gelu_backward: return OpKind::gelu;
    case OpKind::cross_entropy_backward: return OpKind::cross_entropy;
    default: return op;
  }
}
std::string_view name(Target t) {
  switch (t) {
    case Target::cpu: return "cpu";
    case Target::interpreter: return "interpreter";
    case Target::cuda: return "cuda";
    case Target::cuda_emu: return "cuda-emu";
  }
  return "?";
}
std::optional<Target> parse_target(std::string_view s) {
  for (Target t : {Target::cpu, Target::interpreter, Target::cuda, Target::cuda_emu})
    if (s == name(t)) return t;
  return std::nullopt;
}

std::string Request::key() const {
  std::string k = fmt::format("{}|N={}|x={}|w={}|acc={}|weight={}|bias={}|mixed={}|eps={:a}|order={}|target={}|rif={}", name(op),
                              cols_at_launch ? fmt::format("{}@launch", cols) : fmt::format("{}", cols), name(x_dtype), name(weight_type()), acc_dtype ? name(*acc_dtype) : "default", has_weight,
                              has_bias, allow_mixed_dtypes, eps, order, name(target), rows_in_flight);
  if (target == Target::cuda) k += fmt::format("|arch=sm_{}", cuda_arch);
  if (is_backward(op)) k += fmt::format("|saved_stats={}", saved_stats);
  // Attention's fields, also where another op was given any (resolve refuses them there; an equal
  // key would serve the op's cached kernel instead).
  const bool attention_fields = seq_q || seq_k || seq_k_at_launch || heads != 1 || kv_group != 1 || q_row_stride || k_row_stride ||
                                v_row_stride || causal || scale || lse_output;
  if (forward_of(op) == OpKind::attention || attention_fields)
    k += fmt::format("|sq={}|sk={}|heads={}|kv_group={}|strides={},{},{}|causal={}|scale={}|lse={}", seq_q,
                     seq_k_at_launch ? fmt::format("{}@launch", seq_k) : fmt::format("{}", seq_k), heads, kv_group, q_row_stride, k_row_stride,
                     v_row_stride, causal, scale ? fmt::format("{:a}", *scale) : "default",
                     lse_output);
  if (mask) k += "|mask=" + mask->text();
  // Also where they are not the defaults on another op, so that such a request is resolved (and
  // refused) rather than served from the cache by an equal key.
  if (forward_of(op) == OpKind::cross_entropy || ignore_index != -100 || reduction != LossReduction::mean)
    k += fmt::format("|ignore_index={}|reduction={}", ignore_index, name(reduction));
  return k;
}

std::string_view name(LossReduction r) {
  switch (r) {
    case LossReduction::mean: return "mean";
    case LossReduction::sum: return "sum";
    case LossReduction::none: return "none";
  }
  return "?";
}
std::optional<LossReduction> parse_loss_reduction(std::string_view s) {
  for (LossReduction r : {LossReduction::mean, LossReduction::sum, LossReduction::none})
    if (s == name(r)) return r;
  return std::nullopt;
}

std::string AttentionMask::text() const {
  return fmt::format("{}:{}{}{}{}", name(dtype), per_batch ? 'B' : '1', per_head ? 'H' : '1', per_query ? 'Q' : '1', per_key ? 'K' : '1');
}

std::optional<AttentionMask> AttentionMask::parse(std::string_view text) {
  const size_t colon = text.find(':');
  if (colon == std::string_view::npos) return std::nullopt;
  const std::optional<ScalarType> dtype = parse_scalar_type(text.substr(0, colon));
  const std::string_view dims = text.substr(colon + 1);
  if (!dtype || dims.size() != 4) return std::nullopt;
  AttentionMask m;
  m.dtype = *dtype;
  bool* spans[] = {&m.per_batch, &m.per_head, &m.per_query, &m.per_key};
  for (size_t i = 0; i < 4; ++i) {
    if (dims[i] != "BHQK"[i] && dims[i] != '1') return std::nullopt;
    *spans[i] = dims[i] != '1';
  }
  return m;
}

}  // namespace ordo
