// cross_entropy and cross_entropy_backward: PyTorch's F.cross_entropy(x, target, ignore_index=,
// reduction=) over [rows, N] logits with int64 class indices, which eager runs as
// nll_loss(log_softmax(x, 1), target) (docs/research/torch2.15-cross-entropy.md).
//
// cross_entropy, two stages over the same arguments (x, target, logp, loss, total_weight):
//   1. over rows: logp = log_softmax(x), the order's SoftmaxOrder exactly as the log_softmax op;
//   2. one instance: the negative log-likelihood -logp[b, t_b] of each row b, reduced over the
//      rows by the order's LossOrder (mean or sum), or stored per row (none).
// cross_entropy_backward, one stage over rows (dloss, logp, target, total_weight, dx): the
// log_softmax_backward of g, where g is nll_loss_backward's gradient (g[b, t_b] = -dloss/total_weight
// under mean, -dloss under sum, -dloss[b] under none, 0 elsewhere and on ignored rows), rounded to
// the storage type as eager stores it. g is computed where the row's dy would be loaded, never stored.
//
// Targets are data, so where a row reads depends on them. A target outside [0, N) that is not
// ignore_index (PyTorch raises an IndexError; ordo's callers refuse it before a launch) reads
// column 0 and makes its row's loss, the reduced loss and its row of dx NaN: never a read outside x.
#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <vector>

#include "gen/blocks/constants.hpp"
#include "gen/blocks/norm_backward.hpp"
#include "gen/blocks/row.hpp"
#include "gen/gen.hpp"

namespace ordo::gen {

using namespace ordo::ir;

namespace {

constexpr ScalarType f32 = ScalarType::f32, i64 = ScalarType::i64;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

ExprRef eq(ExprRef a, ExprRef b) { return binary(Op::Eq, std::move(a), std::move(b)); }
ExprRef ne(ExprRef a, ExprRef b) { return binary(Op::Ne, std::move(a), std::move(b)); }
ExprRef lt(ExprRef a, ExprRef b) { return binary(Op::Lt, std::move(a), std::move(b)); }
ExprRef both(ExprRef a, ExprRef b) { return binary(Op::And, std::move(a), std::move(b)); }

// v converted to t (nothing when it is already t).
ExprRef as(ExprRef v, ScalarType t) { return v->type.scalar == t ? v : cast(std::move(v), t); }
// An f32 value rounded to `storage` and widened back: PyTorch's scalar_t arithmetic, which
// rounds every result of a 16-bit type.
ExprRef round_to(ExprRef v, ScalarType storage) { return as(as(std::move(v), storage), f32); }

// Row b's target and what it means: ignored (ignore_index) or counted, and if counted, out of
// [0, N) or not (read as column 0 when it is).
struct Target {
  ExprRef t, ignored, counted, out_of_range, column;
};
Target row_target(Builder& b, const Request& r, int target, ExprRef row) {
  Target x;
  x.t = b.let("t", load(b.kernel(), target, std::move(row)));
  x.ignored = b.let("ignored", eq(x.t, idx(r.ignore_index)));
  x.counted = b.let("counted", ne(x.t, idx(r.ignore_index)));
  const ExprRef outside = binary(Op::Or, lt(x.t, idx(0)), binary(Op::Le, idx(r.cols), x.t));
  x.out_of_range = b.let("out_of_range", both(x.counted, outside));
  x.column = b.let("column", select(outside, idx(0), x.t));
  return x;
}

struct ForwardBuffers {
  int x, target, logp, loss, total_weight;
};
ForwardBuffers forward_buffers(Builder& b, const Request& r) {
  ForwardBuffers f;
  f.x = b.buffer("x", r.x_dtype, false, Extent::rows_by_cols);
  f.target = b.buffer("target", i64, false, Extent::rows);
  f.logp = b.buffer("logp", r.x_dtype, true, Extent::rows_by_cols);
  f.loss = r.reduction == LossReduction::none ? b.buffer("loss", r.x_dtype, true, Extent::rows)
                                              : b.buffer("loss", r.x_dtype, true, Extent::fixed, 1);
  f.total_weight = b.buffer("total_weight", r.x_dtype, true, Extent::fixed, 1);
  return f;
}

// Stage 2: PyTorch's nll_loss_out_frame over the rows of logp, in one instance.
Kernel loss_stage(const Request& r, const Order& order) {
  const LossOrder& lo = order.loss;
  Kernel k;
  k.name = "cross_entropy_loss";
  Builder b(k);
  const ForwardBuffers f = forward_buffers(b, r);
  k.grid_over_rows = false;
  k.grid_rank = 1;
  k.grid_fixed = {1};
  k.runs_without_rows = true;  // an empty batch: mean 0/0 = NaN, sum 0, total_weight 0 (PyTorch's)
  const ScalarType storage = r.x_dtype;
  // PyTorch's level_bits, max(4, ceil(log2(rows)) / 8), stays the order's up to 2^(8(level_bits+1) - 1) rows.
  const int max_rows_log2 = std::min(8 * (lo.level_bits + 1) - 1, 62);
  b.refuse_launches(Kernel::RefusedLaunch::When::rows_at_least, (int64_t(1) << max_rows_log2) + 1,
                    fmt::format("PyTorch's nll_loss takes {} rows per cascade level up to 2^{} rows and more above", int64_t(1) << lo.level_bits,
                                max_rows_log2));
  const ExprRef rows = b.let("rows", launch_rows());
  // -logp[b, t_b], the row's term: NaN for a target out of range.
  auto term = [&](const Target& t, ExprRef row) {
    ExprRef v = as(load(k, f.logp, add(mul(row, idx(r.cols)), t.column)), f32);
    return select(t.out_of_range, f32c(kNaN), std::move(v));
  };
  if (r.reduction == LossReduction::none) {
    b.region("nll_loss", "reduction=none: -logp[b, t_b] per row, 0 where ignored", [&] {
      b.for_range("b", idx(0), rows, 1, [&](ExprRef row) {
        const Target t = row_target(b, r, f.target, row);
        b.store(f.loss, row, as(select(t.ignored, f32c(0.0), unary(Op::Neg, term(t, row))), storage));
      });
      b.store(f.total_weight, idx(0), as(f32c(0.0), storage));
    });
    return k;
  }
  b.region("nll_loss", describe(lo), [&] {
    std::vector<int> s;
    for (int j = 0; j < lo.levels; ++j) {
      s.push_back(b.local(fmt::format("s{}", j), Type{f32, 1}));
      b.assign(s.back(), f32c(0.0));
    }
    const int ignored_rows = b.local("ignored_rows", Type{i64, 1});
    b.assign(ignored_rows, idx(0));
    b.for_range("b", idx(0), rows, 1, [&](ExprRef row) {
      const Target t = row_target(b, r, f.target, row);
      b.assign(ignored_rows, add(b.get(ignored_rows), select(t.ignored, idx(1), idx(0))));
      b.assign(s[0], select(t.ignored, b.get(s[0]), round_to(sub(b.get(s[0]), term(t, row)), storage)));
      const ExprRef& counted = t.counted;
      // Level j+1 takes level j when the low (j+1)*level_bits bits of b are zero: nested, since
      // each condition implies the ones before it (PyTorch's loop breaks at the first nonzero).
      std::function<void(int)> carry = [&](int j) {
        if (j + 1 >= lo.levels) return;
        const int64_t low_bits = (int64_t(1) << ((j + 1) * lo.level_bits)) - 1;
        b.if_(eq(binary(Op::BitAnd, row, idx(low_bits)), idx(0)), [&] {
          b.assign(s[size_t(j) + 1], select(counted, round_to(add(b.get(s[size_t(j) + 1]), b.get(s[size_t(j)])), storage),
                                            b.get(s[size_t(j) + 1])));
          b.assign(s[size_t(j)], select(counted, f32c(0.0), b.get(s[size_t(j)])));
          carry(j + 1);
        });
      };
      carry(0);
    });
    ExprRef total = f32c(0.0);
    for (int j = 0; j < lo.levels; ++j) total = b.let("total", round_to(add(total, b.get(s[size_t(j)])), storage));
    const ExprRef counted_rows = b.let("total_weight", round_to(cast(sub(rows, b.get(ignored_rows)), f32), storage));
    const ExprRef out = r.reduction == LossReduction::mean ? round_to(div(total, counted_rows), storage) : total;
    b.store(f.loss, idx(0), as(out, storage));
    b.store(f.total_weight, idx(0), as(counted_rows, storage));
  });
  return k;
}

Kernel log_softmax_stage(const Request& r, const Order& order) {
  Kernel k;
  k.name = "cross_entropy_log_softmax";
  Builder b(k);
  const ForwardBuffers f = forward_buffers(b, r);
  const Row row(b, r.cols);
  b.region("log_softmax", describe(order.softmax), [&] { softmax_row(b, order.softmax, row, f.x, f.logp, /*log=*/true); });
  return k;
}

Kernel backward_stage(const Request& r, const Order& order) {
  Kernel k;
  k.name = "cross_entropy_backward";
  Builder b(k);
  const bool per_row = r.reduction == LossReduction::none;
  const int dloss = per_row ? b.buffer("dloss", r.x_dtype, false, Extent::rows) : b.buffer("dloss", r.x_dtype, false, Extent::fixed, 1);
  const int logp = b.buffer("logp", r.x_dtype, false, Extent::rows_by_cols);
  const int target = b.buffer("target", i64, false, Extent::rows);
  const int total_weight = b.buffer("total_weight", r.x_dtype, false, Extent::fixed, 1);
  const int dx = b.buffer("dx", r.x_dtype, true, Extent::rows_by_cols);
  const ScalarType storage = r.x_dtype;
  const Row row(b, r.cols);
  ExprRef g, hot, cold;
  b.region("nll_loss_backward", fmt::format("reduction={}: the gradient at the row's target, rounded to {}", name(r.reduction), name(storage)),
           [&] {
             const Target t = row_target(b, r, target, program_id(0));
             // nll_loss_backward's value: -(dloss / total_weight) (mean), -dloss (sum), -1 * dloss[b] (none).
             g = as(load(k, dloss, per_row ? program_id(0) : idx(0)), f32);
             if (r.reduction == LossReduction::mean) g = round_to(div(g, as(load(k, total_weight, idx(0)), f32)), storage);
             g = b.let("g", unary(Op::Neg, g));
             // The column that holds g (-1, none, on an ignored row), and what every other column
             // holds: 0, or NaN on a row whose target is out of range.
             hot = b.let("hot", select(t.ignored, idx(-1), t.t));
             cold = b.let("cold", select(t.out_of_range, f32c(kNaN), f32c(0.0)));
           });
  const ValueFn dy = [&](ExprRef col, int lanes) {
    if (lanes == 1) return select(eq(col, hot), g, cold);
    return select(eq(add(iota(lanes), broadcast(col, lanes)), broadcast(hot, lanes)), broadcast(g, lanes), broadcast(cold, lanes));
  };
  b.region("log_softmax_backward", describe(order.softmax_backward), [&] { softmax_backward_row(b, r, order, /*log=*/true, row, dy, logp, dx); });
  return k;
}

}  // namespace

std::vector<Kernel> build_cross_entropy(const Request& r, const Order& order) {
  if (r.op == OpKind::cross_entropy_backward) return {backward_stage(r, order)};
  return {log_softmax_stage(r, order), loss_stage(r, order)};
}

}  // namespace ordo::gen
