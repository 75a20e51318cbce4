// gen/: pure functions from a Request and an Order to a Kernel, and the named-order table.
#pragma once

#include <functional>
#include <string_view>
#include <utility>
#include <vector>

#include "gen/host.hpp"
#include "ir/ir.hpp"
#include "ir/order.hpp"
#include "ordo/request.hpp"

namespace ordo::gen {

// One row of the named-order table.
// An op that an order defines for fewer storage types than the order's own list, and why.
struct OpDtypes {
  OpKind op;
  std::vector<ScalarType> dtypes;  // the storage types of x the order has for this op
  std::string_view why;            // what the others would need, as the refusal says it
};

struct NamedOrder {
  std::string_view name;
  std::string_view description;  // one line: what it is and what it reproduces
  std::vector<OpKind> ops;
  std::vector<ScalarType> dtypes;       // storage types of x the order is defined for
  bool reproduces_reference = false;    // claims bit-exactness against a library
  bool pins_acc = false;                // the accumulation type is part of the order
  // The Order for a request: storage type, accumulation type, the request itself for orders
  // whose reference switches algorithm with the shape (onnxruntime below N = 8), and the host the
  // reference ran on for the aliases that pick a row by its capability (torch2.15-cpu).
  std::function<ir::Order(ScalarType storage, ScalarType acc, const Request& r, const HostModel& host)> make;
  // Claims a reference, but the claim could not be measured on the machines ordo is tested on
  // (the reference needs hardware they lack). `ordo orders` prints it as "unverified".
  bool unverified = false;
  // Calls CUDA's own approximations (rsqrtf, expf, logf), which have no definition off the GPU:
  // only target cuda runs it. `ordo orders` prints it as "device-only".
  bool device_only = false;
  // Resolves to another row of the table, chosen by the environment (torch2.15-cpu: the
  // capability PyTorch would pick). Left out of default order sets, which list each kernel once.
  bool alias = false;
  // Takes the parameters of the environment the reference ran in (threads=T, mkl=intel) rather
  // than parameters of the order: the PyTorch 2.15 rows.
  bool takes_environment = false;
  // Ops the order has for fewer of `dtypes` (the torch2.15 rows' sum: f32 only). A request for
  // another dtype of such an op is refused with the entry's reason.
  std::vector<OpDtypes> fewer_dtypes = {};
};
// The storage types `n` has for op: `n.dtypes`, or fewer where `n.fewer_dtypes` says so.
const std::vector<ScalarType>& dtypes_for(const NamedOrder& n, OpKind op);

const std::vector<NamedOrder>& named_orders();
const NamedOrder* find_order(std::string_view name);

// Checks the request against the order table and returns the Order it resolves to on `host`
// (the libraries an order reproduces pick their kernels by the host: PyTorch's capability, MKL's
// and oneDNN's kernels, MKL's thread count). A pure function of its arguments.
// Throws ordo::Error naming the bad field.
ir::Order resolve(const Request& r, const HostModel& host = HostModel::running());

// Whether resolve(r, host) succeeds: the request's shape is one its order is defined for (an order
// reproducing one kernel of a library takes only that kernel's shapes: torch-cuda's persistent
// warp softmax needs N <= 1024) and the host has the kernels it models. Sweeps use it to skip
// the others; resolve() throws for them, naming the limit.
bool takes_shape(const Request& r, const HostModel& host = HostModel::running());

// Builds the op's kernels (its stages): one for a forward op; a backward op whose weight
// gradients sum over the rows adds a column stage (Kernel::grid_over_rows false). Every stage
// takes the same arguments, in one order; they run one after another, each over the whole
// launch. The request must have passed resolve().
std::vector<ir::Kernel> build_stages(const Request& r, const ir::Order& order);
// The first stage (the only one of a forward op).
ir::Kernel build(const Request& r, const ir::Order& order);

// Per op.
ir::Kernel build_layer_norm(const Request& r, const ir::Order& order);
ir::Kernel build_rms_norm(const Request& r, const ir::Order& order);
ir::Kernel build_var_mean(const Request& r, const ir::Order& order);
ir::Kernel build_row_sum(const Request& r, const ir::Order& order);  // sum and mean
ir::Kernel build_silu(const Request& r, const ir::Order& order);  // and silu_backward
ir::Kernel build_gelu_tanh(const Request& r, const ir::Order& order);  // and gelu_tanh_backward
ir::Kernel build_gelu_erf(const Request& r, const ir::Order& order);   // gelu and gelu_backward
ir::Kernel build_softmax(const Request& r, const ir::Order& order);  // softmax and log_softmax
// One kernel, or for 16-bit K and V under a flash order on the CPU two: K and V widened to f32
// once per launch into workspaces, then the attention over them (gen/ops/attention.cpp).
std::vector<ir::Kernel> build_attention(const Request& r, const ir::Order& order);
// attention_backward's two stages (gen/ops/attention_backward.cpp).
std::vector<ir::Kernel> build_attention_backward(const Request& r, const ir::Order& order);
// Whether the flash orders' attention_backward runs as one fused CPU kernel (an instance per
// (batch, head)) rather than two stages: on a CPU target, where its scratch that grows with S_q
// fits. Only the fused kernel takes S_k at launch.
bool attention_backward_fused(const Request& r);
// The log-sum-exp the forward order `o` (kind Flash) writes, for the queries in the lanes of
// `query` (an i64 vector) of the (batch, head) program_id(0), from the q and k buffers.
class MaskInput;  // gen/blocks/attention_mask.hpp
ir::ExprRef emit_attention_lse(ir::Builder& b, const Request& r, const ir::AttentionOrder& o, int q, int k, ir::ExprRef query,
                               const MaskInput* mask = nullptr);
std::vector<ir::Kernel> build_layer_norm_backward(const Request& r, const ir::Order& order);
ir::Kernel build_softmax_backward(const Request& r, const ir::Order& order);  // and log_softmax_backward
// cross_entropy's two stages (log_softmax over the rows, then the loss over them) and
// cross_entropy_backward's one (gen/ops/cross_entropy.cpp).
std::vector<ir::Kernel> build_cross_entropy(const Request& r, const ir::Order& order);
std::vector<ir::Kernel> build_rms_norm_backward(const Request& r, const ir::Order& order);
// AttentionOrder::Kind::CpuFlash (gen/torch_cpu/cpu_flash_attention.cpp), and its query block for S_q rows.
ir::Kernel build_cpu_flash_attention(const Request& r, const ir::Order& order);
int64_t cpu_flash_query_block(int64_t seq_q);
// Every (query rows, key rows) block shape PyTorch's CPU flash kernels run for S_q queries in
// blocks of qS and S_k keys in blocks of kS: the full blocks and the shorter last ones.
std::vector<std::pair<int64_t, int64_t>> cpu_flash_block_shapes(int64_t seq_q, int64_t qS, int64_t seq_k, int64_t kS);
// AttentionBackwardOrder::Kind::CpuFlash (gen/torch_cpu/cpu_flash_attention_backward.cpp): one stage.
ir::Kernel build_cpu_flash_attention_backward(const Request& r, const ir::Order& order);
// AttentionOrder::Kind::CpuMatmul (gen/torch_cpu/cpu_matmul_attention.cpp).
ir::Kernel build_cpu_matmul_attention(const Request& r, const ir::Order& order);
// AttentionBackwardOrder::Kind::CpuMatmul (gen/torch_cpu/cpu_matmul_attention_backward.cpp): one stage.
ir::Kernel build_cpu_matmul_attention_backward(const Request& r, const ir::Order& order);
// The CUDA-native orders (gen/ops/team.cpp): a team of threads per row.
ir::Kernel build_layer_norm_team(const Request& r, const ir::Order& order);  // MomentsOrder::BlockWelford, BlockReduceWelford
ir::Kernel build_softmax_warp(const Request& r, const ir::Order& order);     // SoftmaxOrder::WarpButterfly

}  // namespace ordo::gen
