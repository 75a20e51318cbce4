// softmax_backward and log_softmax_backward over the last dim: dx from dy and the forward's output
// y, one program instance per row. One stage: there are no weight gradients.
//   softmax:     s = sum(dy*y),  dx = (dy - s)*y
//   log_softmax: s = sum(dy),    dx = dy - exp(y)*s
// The SoftmaxBackwardOrder (ir/order.hpp) decides how s is summed, which exp runs and whether
// log_softmax's dx is one fma. Arithmetic is f32; 16-bit storage is widened on load and dx is
// rounded once at the store. s stays f32.
#include "gen/gen.hpp"
#include "gen/blocks/math.hpp"
#include "gen/blocks/norm_backward.hpp"
#include "gen/blocks/row.hpp"

namespace ordo::gen {

using namespace ordo::ir;

namespace {
constexpr ScalarType f32 = ScalarType::f32;
}  // namespace

// PyTorch's vec::map2_reduce_all / reduce_all (SoftmaxBackwardOrder::Kind::TorchCpu), or ordo's
// own SumOrder (Summed). The masked tail's products are fused by the rule of `fma_tail`; under
// TailFma::Inline on several threads that depends on whether the loop has a single row, so both
// forms are emitted, chosen by `one_row_launch`.
ExprRef softmax_backward_sum(Builder& b, const SoftmaxBackwardOrder& o, int threads, int64_t n, bool split16, bool products,
                             const TermFn& term, const ExprRef& one_row_launch) {
  const char* label = products ? "sum(dy*y)" : "sum(dy)";
  if (o.kind != SoftmaxBackwardOrder::Kind::TorchCpu) return emit_sum(b, o.sum, Arith{f32, std::nullopt}, n, term, label);
  using Tail = SoftmaxBackwardOrder::TailFma;
  auto sum = [&](bool fused_tail) {
    VecReduceAll v{o.lanes, o.fold, split16};
    v.fma_tail = fused_tail;
    return emit_vec_reduce_all(b, v, n, term, label);
  };
  const int64_t block = split16 ? 2 * o.lanes : o.lanes;
  const bool product_tail = products && n >= block && n % block != 0;
  if (!product_tail || o.fma_tail == Tail::Never) return sum(false);
  if (o.fma_tail == Tail::Always || threads == 1) return sum(true);
  if (!one_row_launch) return sum(false);
  const int s = b.local("s", Type{f32, 1});
  b.if_else(one_row_launch, [&] { b.assign(s, sum(true)); }, [&] { b.assign(s, sum(false)); });
  return b.get(s);
}

void softmax_backward_row(Builder& b, const Request& r, const Order& order, bool log, const Row& row, const ValueFn& dy, int y, int dx) {
  const SoftmaxBackwardOrder& o = order.softmax_backward;
  auto ld = [&](int buffer, ExprRef col, int lanes) { return row.load_as(buffer, std::move(col), lanes, f32); };
  const TermFn term = [&](ExprRef col, int lanes) {
    return log ? Term{dy(col, lanes), nullptr} : Term{dy(col, lanes), ld(y, col, lanes)};
  };
  // PyTorch's row loop has a single row when the launch does.
  ExprRef s = softmax_backward_sum(b, o, order.threads, r.cols, size_bytes(r.x_dtype) == 2, !log, term,
                                   binary(Op::Eq, grid_extent(0), index_const(1)));
  s = b.let("s", s);
  row.for_each(order.elementwise_lanes, [&](ExprRef col, int lanes) {
    ExprRef g = dy(col, lanes), sv = lanes > 1 ? broadcast(s, lanes) : s;
    if (!log) {
      row.store_as(dx, col, mul(sub(g, sv), ld(y, col, lanes)));
      return;
    }
    ExprRef e = exp_f32(b, o.exp, ld(y, col, lanes));
    row.store_as(dx, col, o.fma ? fma(unary(Op::Neg, e), sv, g) : sub(g, mul(e, sv)));
  });
}

Kernel build_softmax_backward(const Request& r, const Order& order) {
  const bool log = r.op == OpKind::log_softmax_backward;
  Kernel k;
  k.name = log ? "log_softmax_backward" : "softmax_backward";
  Builder b(k);
  const int dy = b.buffer("dy", r.x_dtype, false, Extent::rows_by_cols);
  const int y = b.buffer("y", r.x_dtype, false, Extent::rows_by_cols);
  const int dx = b.buffer("dx", r.x_dtype, true, Extent::rows_by_cols);
  const Row row(b, r.cols);
  const ValueFn load_dy = [&](ExprRef col, int lanes) { return row.load_as(dy, std::move(col), lanes, f32); };
  b.region(k.name, describe(order.softmax_backward), [&] { softmax_backward_row(b, r, order, log, row, load_dy, y, dx); });
  return k;
}

}  // namespace ordo::gen
