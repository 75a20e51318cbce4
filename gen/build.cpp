// From a resolved Order to the op's kernels: dispatch to the op generators (gen/ops/), and each
// kernel's one-line description.
#include <fmt/format.h>

#include <vector>

#include "gen/gen.hpp"

namespace ordo::gen {

using namespace ordo::ir;


std::vector<Kernel> build_stages(const Request& r, const Order& o) {
  std::vector<Kernel> ks;
  switch (r.op) {
    case OpKind::layer_norm: ks.push_back(build_layer_norm(r, o)); break;
    case OpKind::rms_norm: ks.push_back(build_rms_norm(r, o)); break;
    case OpKind::var_mean: ks.push_back(build_var_mean(r, o)); break;
    case OpKind::sum:
    case OpKind::mean: ks.push_back(build_row_sum(r, o)); break;
    case OpKind::silu:
    case OpKind::silu_backward: ks.push_back(build_silu(r, o)); break;
    case OpKind::gelu_tanh:
    case OpKind::gelu_tanh_backward: ks.push_back(build_gelu_tanh(r, o)); break;
    case OpKind::gelu:
    case OpKind::gelu_backward: ks.push_back(build_gelu_erf(r, o)); break;
    case OpKind::softmax:
    case OpKind::log_softmax: ks.push_back(build_softmax(r, o)); break;
    case OpKind::attention: ks = build_attention(r, o); break;
    case OpKind::layer_norm_backward: ks = build_layer_norm_backward(r, o); break;
    case OpKind::rms_norm_backward: ks = build_rms_norm_backward(r, o); break;
    case OpKind::softmax_backward:
    case OpKind::log_softmax_backward: ks.push_back(build_softmax_backward(r, o)); break;
    case OpKind::attention_backward: ks = build_attention_backward(r, o); break;
    case OpKind::cross_entropy:
    case OpKind::cross_entropy_backward: ks = build_cross_entropy(r, o); break;
  }
  for (size_t i = 0; i < ks.size(); ++i) {
    Kernel& k = ks[i];
    k.description = forward_of(r.op) == OpKind::attention
                        ? fmt::format("{} D={} Sq={} Sk={}{} x={} order={}", name(r.op), r.cols, r.seq_q, r.seq_k_at_launch ? std::string("launch") : fmt::format("{}", r.seq_k), r.causal ? " causal" : "",
                                      name(r.x_dtype), r.order)
                    : forward_of(r.op) == OpKind::cross_entropy
                        ? fmt::format("{} N={} x={} ignore_index={} reduction={} order={}", name(r.op), r.cols, name(r.x_dtype), r.ignore_index,
                                      name(r.reduction), r.order)
                        : fmt::format("{} N={} x={} weight={} order={}", name(r.op), r.cols_at_launch ? std::string("launch") : fmt::format("{}", r.cols),
                                      name(r.x_dtype), name(r.weight_type()), r.order);
    if (ks.size() > 1) k.description += fmt::format(" (stage {} of {})", i + 1, ks.size());
  }
  return ks;
}

Kernel build(const Request& r, const Order& o) { return build_stages(r, o).at(0); }

}  // namespace ordo::gen
