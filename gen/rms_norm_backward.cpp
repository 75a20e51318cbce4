// rms_norm_backward: dx and dweight from dy, x, the weight and the forward's rstd (f32, the
// forward's opmath value), or with Request::saved_stats false from rstd recomputed as the order's
// forward computes it (gen/rms_norm.hpp).
//
// Stages over the same arguments (gen/gen.hpp, build_stages):
//  1. the rows: dx of each row from its own sum; without a saved rstd it also writes the
//     recomputed rstd, an output then, which the column stages read;
//  2. with a weight, the columns (column stages, Kernel::grid_over_rows false): dweight, a sum over
//     every row of the launch in the NormBackwardOrder's ColumnSumOrder, one stage per span of
//     columns that walk the rows alike (gen/norm_backward.hpp, column_spans).
#include <fmt/format.h>

#include "gen/gen.hpp"
#include "gen/norm_backward.hpp"
#include "gen/rms_norm.hpp"
#include "gen/row.hpp"
#include "gen/warp.hpp"

namespace ordo::gen {

using namespace ordo::ir;

namespace {

constexpr ScalarType f32 = ScalarType::f32;

struct Buffers {
  int dy, x, weight, rstd, dx, dweight;
};

// The arguments, in the order every stage takes them: dy, x, weight?, rstd (an input when saved,
// else an output), dx, dweight?.
Buffers declare(Builder& b, const Request& r) {
  Buffers out;
  out.dy = b.buffer("dy", r.x_dtype, false, Extent::rows_by_cols);
  out.x = b.buffer("x", r.x_dtype, false, Extent::rows_by_cols);
  out.weight = r.has_weight ? b.buffer("weight", r.weight_type(), false, Extent::cols) : -1;
  out.rstd = b.buffer("rstd", f32, !r.saved_stats, Extent::rows);
  out.dx = b.buffer("dx", r.x_dtype, true, Extent::rows_by_cols);
  out.dweight = r.has_weight ? b.buffer("dweight", r.weight_type(), true, Extent::cols) : -1;
  return out;
}

ExprRef f32c(double v, int lanes = 1) {
  ExprRef c = constant(Type{f32, 1}, v);
  return lanes > 1 ? broadcast(c, lanes) : c;
}
ExprRef bc(ExprRef s, int lanes) { return lanes > 1 ? broadcast(std::move(s), lanes) : s; }

// Stage 1: rstd, loaded or recomputed (and then stored).
ExprRef row_rstd(Builder& b, const Request& r, const Order& order, const Row& row, const Buffers& buf) {
  if (r.saved_stats) return b.let("rstd", load(b.kernel(), buf.rstd, program_id(0)));
  ExprRef rstd = rms_norm_rstd(b, r, order, rms_norm_square_sum(b, r, order, row, buf.x));
  store_stat(b, buf.rstd, rstd);
  return rstd;
}

// Stage 1, PyTorch 2.15's composite (NormBackwardOrder::Kind::TorchComposite).
void torch_composite_dx(Builder& b, const Request& r, const Order& order, const Buffers& buf) {
  const NormBackwardOrder& o = order.norm_backward;
  Row row(b, r.cols);
  auto ld = [&](int buffer, ExprRef col, int lanes) { return row.load_as(buffer, std::move(col), lanes, f32); };
  ExprRef rstd = row_rstd(b, r, order, row, buf);
  auto gz = [&](ExprRef col, int lanes) {
    ExprRef g = ld(buf.dy, col, lanes);
    return r.has_weight ? mul(g, ld(buf.weight, col, lanes)) : g;
  };
  const Arith ar{f32, std::nullopt};
  // sum(gz*u) is its own op over the rounded products.
  ExprRef gr = torch_threaded_sum(
      b, o.sum, order.threads, ar, r.cols, [&](ExprRef col, int lanes) { return Term{mul(gz(col, lanes), ld(buf.x, col, lanes)), nullptr}; },
      "sum(gz*u)");
  ExprRef r3 = b.let("rstd_cubed", mul(mul(rstd, rstd), rstd));
  ExprRef ga = b.let("grad_rsqrt_arg", mul(mul(gr, f32c(-0.5)), r3));
  ExprRef gm = b.let("grad_mean", div(ga, f32c(static_cast<double>(r.cols))));
  row.for_each(order.elementwise_lanes, [&](ExprRef col, int lanes) {
    ExprRef u = ld(buf.x, col, lanes);
    ExprRef direct = mul(gz(col, lanes), bc(rstd, lanes));
    ExprRef through_mean = mul(bc(gm, lanes), mul(f32c(2.0, lanes), u));
    row.store_as(buf.dx, col, add(direct, through_mean));
  });
}

// Stage 1, ordo's centered form with mean 0 (NormBackwardOrder::Kind::Centered).
void centered_dx(Builder& b, const Request& r, const Order& order, const Buffers& buf) {
  const NormBackwardOrder& o = order.norm_backward;
  Row row(b, r.cols);
  auto ld = [&](int buffer, ExprRef col, int lanes) { return row.load_as(buffer, std::move(col), lanes, f32); };
  ExprRef rstd = row_rstd(b, r, order, row, buf);
  auto xhat = [&](ExprRef col, int lanes) { return mul(ld(buf.x, col, lanes), bc(rstd, lanes)); };
  auto wdy = [&](ExprRef col, int lanes) {
    ExprRef dy = ld(buf.dy, col, lanes);
    return r.has_weight ? mul(dy, ld(buf.weight, col, lanes)) : dy;
  };
  const Arith ar{f32, std::nullopt};
  ExprRef s2 = emit_sum(b, o.sum, ar, r.cols, [&](ExprRef col, int lanes) { return Term{wdy(col, lanes), xhat(col, lanes)}; },
                        "sum(dy*w*xhat)");
  ExprRef c2 = b.let("c2", mul(s2, div(f32c(1.0), f32c(static_cast<double>(r.cols)))));
  row.for_each(o.columns.lanes, [&](ExprRef col, int lanes) {
    ExprRef h = xhat(col, lanes), w = wdy(col, lanes);
    ExprRef inner = o.fma_dx ? fma(unary(Op::Neg, h), bc(c2, lanes), w) : sub(w, mul(h, bc(c2, lanes)));
    row.store_as(buf.dx, col, mul(inner, bc(rstd, lanes)));
  });
}

}  // namespace

std::vector<Kernel> build_rms_norm_backward(const Request& r, const Order& order) {
  const NormBackwardOrder& o = order.norm_backward;
  const bool composite = o.kind == NormBackwardOrder::Kind::TorchComposite;
  std::vector<Kernel> stages(1);
  stages[0].name = "rms_norm_backward_dx";
  {
    Builder b(stages[0]);
    const Buffers buf = declare(b, r);
    if (composite) torch_composite_dx(b, r, order, buf);
    else centered_dx(b, r, order, buf);
  }
  if (!r.has_weight) return stages;

  const std::vector<ColumnSpan> spans = column_spans(o.columns, r.cols);
  for (size_t i = 0; i < spans.size(); ++i) {
    Kernel& k = stages.emplace_back();
    k.name = spans.size() > 1 ? fmt::format("rms_norm_backward_dweight{}", i) : "rms_norm_backward_dweight";
    Builder b(k);
    const Buffers buf = declare(b, r);
    ColumnSum s;
    s.out = buf.dweight;
    s.label = "dweight";
    if (composite) {
      // The rounded g*(u*r), added.
      s.accumulate = [&](const ColumnRow& cr, ExprRef acc) {
        return add(acc, mul(cr.load(buf.dy), mul(cr.load(buf.x), cr.stat_lanes(buf.rstd))));
      };
    } else {
      s.accumulate = [&, fused = o.columns.fma](const ColumnRow& cr, ExprRef acc) {
        ExprRef xhat = mul(cr.load(buf.x), cr.stat_lanes(buf.rstd));
        return fused ? fma(cr.load(buf.dy), xhat, acc) : add(acc, mul(cr.load(buf.dy), xhat));
      };
    }
    emit_column_sums(b, o.columns, r.cols, spans[i], r.x_dtype, {s}, cuda_target(r));
  }
  return stages;
}

}  // namespace ordo::gen
