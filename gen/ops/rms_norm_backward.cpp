// rms_norm_backward: dx and dweight from dy, x, the weight and the forward's rstd (f32, the
// forward's opmath value), or with Request::saved_stats false from rstd recomputed as the order's
// forward computes it (gen/ops/rms_norm.hpp).
//
// Stages over the same arguments (gen/gen.hpp, build_stages):
//  1. the rows: dx of each row from its own sum; without a saved rstd it also writes the
//     recomputed rstd, an output then, which the column stages read. On the CPU the block-tree
//     orders (fast, batch-invariant) take the one-pass schedule instead (gen/blocks/norm_backward.hpp,
//     emit_block_rows): an instance per block of rows, which also leaves each block's dweight
//     sums in a workspace that the column stage combines;
//  2. with a weight, the columns (column stages, Kernel::grid_over_rows false): dweight, a sum over
//     every row of the launch in the NormBackwardOrder's ColumnSumOrder, one stage per span of
//     columns that walk the rows alike (gen/blocks/norm_backward.hpp, column_spans).
#include <fmt/format.h>

#include "gen/blocks/constants.hpp"
#include "gen/gen.hpp"
#include "gen/blocks/norm_backward.hpp"
#include "gen/ops/rms_norm.hpp"
#include "gen/blocks/row.hpp"
#include "gen/blocks/warp.hpp"

namespace ordo::gen {

using namespace ordo::ir;

namespace {

constexpr ScalarType f32 = ScalarType::f32;

struct Buffers {
  int dy, x, weight, rstd, dx, dweight;
  int block_sums = -1;  // the one-pass schedule's workspace: [block][column], f32
};

// Whether the request runs the one-pass schedule (gen/blocks/norm_backward.hpp, emit_block_rows).
bool one_pass(const Request& r, const NormBackwardOrder& o) { return one_pass_weight_gradients(r, o, r.has_weight); }

// The arguments, in the order every stage takes them: dy, x, weight?, rstd (an input when saved,
// else an output), dx, dweight?, and the one-pass schedule's workspace.
Buffers declare(Builder& b, const Request& r, const NormBackwardOrder& o) {
  Buffers out;
  out.dy = b.buffer("dy", r.x_dtype, false, Extent::rows_by_cols);
  out.x = b.buffer("x", r.x_dtype, false, Extent::rows_by_cols);
  out.weight = r.has_weight ? b.buffer("weight", r.weight_type(), false, Extent::cols) : -1;
  out.rstd = b.buffer("rstd", f32, !r.saved_stats, Extent::rows);
  out.dx = b.buffer("dx", r.x_dtype, true, Extent::rows_by_cols);
  out.dweight = r.has_weight ? b.buffer("dweight", r.weight_type(), true, Extent::cols) : -1;
  if (one_pass(r, o)) out.block_sums = b.workspace("block_sums", f32, o.columns.block_rows, r.cols);
  return out;
}

ExprRef bc(ExprRef s, int lanes) { return lanes > 1 ? broadcast(std::move(s), lanes) : s; }

// Stage 1: rstd of row `row_index`, loaded or recomputed (and then stored).
ExprRef row_rstd(Builder& b, const Request& r, const Order& order, const Row& row, const Buffers& buf, const ExprRef& row_index) {
  if (r.saved_stats) return b.let("rstd", load(b.kernel(), buf.rstd, row_index));
  ExprRef rstd = rms_norm_rstd(b, r, order, rms_norm_square_sum(b, r, order, row, buf.x), r.cols);
  store_stat(b, buf.rstd, rstd, row_index);
  return rstd;
}

// Stage 1, PyTorch 2.15's composite (NormBackwardOrder::Kind::TorchComposite).
void torch_composite_dx(Builder& b, const Request& r, const Order& order, const Buffers& buf) {
  const NormBackwardOrder& o = order.norm_backward;
  Row row(b, r.cols);
  auto ld = [&](int buffer, ExprRef col, int lanes) { return row.load_as(buffer, std::move(col), lanes, f32); };
  ExprRef rstd = row_rstd(b, r, order, row, buf, program_id(0));
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

// Stage 1, ordo's centered form with mean 0 (NormBackwardOrder::Kind::Centered), for row
// `row_index`: its rstd and c2 = sum(dy*w*xhat)/N, and dx = (dy*w - xhat*c2) * rstd at any columns.
struct CenteredRow {
  Row row;
  ExprRef rstd, c2;
};

CenteredRow centered_row(Builder& b, const Request& r, const Order& order, const Buffers& buf, const ExprRef& row_index) {
  const NormBackwardOrder& o = order.norm_backward;
  CenteredRow c{Row(b, r.cols, b.let("row", mul(row_index, index_const(r.cols)))), nullptr, nullptr};
  const Row& row = c.row;
  auto ld = [&](int buffer, ExprRef col, int lanes) { return row.load_as(buffer, std::move(col), lanes, f32); };
  c.rstd = row_rstd(b, r, order, row, buf, row_index);
  auto xhat = [&](ExprRef col, int lanes) { return mul(ld(buf.x, col, lanes), bc(c.rstd, lanes)); };
  auto wdy = [&](ExprRef col, int lanes) {
    ExprRef dy = ld(buf.dy, col, lanes);
    return r.has_weight ? mul(dy, ld(buf.weight, col, lanes)) : dy;
  };
  const Arith ar{f32, std::nullopt};
  ExprRef s2 = emit_sum(b, o.sum, ar, r.cols, [&](ExprRef col, int lanes) { return Term{wdy(col, lanes), xhat(col, lanes)}; },
                        "sum(dy*w*xhat)");
  c.c2 = b.let("c2", mul(s2, div(f32c(1.0), f32c(static_cast<double>(r.cols)))));
  return c;
}

ExprRef centered_dx_at(const Request& r, const NormBackwardOrder& o, const Buffers& buf, const CenteredRow& c, const ExprRef& col, int lanes) {
  auto ld = [&](int buffer) { return c.row.load_as(buffer, col, lanes, f32); };
  ExprRef h = mul(ld(buf.x), bc(c.rstd, lanes));
  ExprRef w = r.has_weight ? mul(ld(buf.dy), ld(buf.weight)) : ld(buf.dy);
  ExprRef inner = o.fma_dx ? fma(unary(Op::Neg, h), bc(c.c2, lanes), w) : sub(w, mul(h, bc(c.c2, lanes)));
  return mul(inner, bc(c.rstd, lanes));
}

void centered_dx(Builder& b, const Request& r, const Order& order, const Buffers& buf) {
  const CenteredRow c = centered_row(b, r, order, buf, program_id(0));
  c.row.for_each(order.norm_backward.columns.lanes,
                 [&](ExprRef col, int lanes) { c.row.store_as(buf.dx, col, centered_dx_at(r, order.norm_backward, buf, c, col, lanes)); });
}

// dweight's terms, as the column stage (or the one-pass schedule's first stage) adds them.
ColumnSum dweight_sum(const NormBackwardOrder& o, const Buffers& buf) {
  ColumnSum s;
  s.out = buf.dweight;
  s.label = "dweight";
  if (o.kind == NormBackwardOrder::Kind::TorchComposite) {
    // The rounded g*(u*r), added.
    s.accumulate = [buf](const ColumnRow& cr, ExprRef acc) { return add(acc, mul(cr.load(buf.dy), mul(cr.load(buf.x), cr.stat_lanes(buf.rstd)))); };
  } else {
    s.accumulate = [buf, fused = o.columns.fma](const ColumnRow& cr, ExprRef acc) {
      ExprRef xhat = mul(cr.load(buf.x), cr.stat_lanes(buf.rstd));
      return fused ? fma(cr.load(buf.dy), xhat, acc) : add(acc, mul(cr.load(buf.dy), xhat));
    };
  }
  return s;
}

}  // namespace

std::vector<Kernel> build_rms_norm_backward(const Request& r, const Order& order) {
  const NormBackwardOrder& o = order.norm_backward;
  const bool composite = o.kind == NormBackwardOrder::Kind::TorchComposite;
  std::vector<Kernel> stages(1);
  {
    Builder b(stages[0]);
    const Buffers buf = declare(b, r, o);
    if (one_pass(r, o)) {
      // An instance per block of rows: dx, and each block's dweight sums in the workspace.
      stages[0].name = "rms_norm_backward_dx_and_block_sums";
      emit_block_rows(b, o.columns, r.cols, buf.dx, buf.block_sums, {dweight_sum(o, buf)}, [&](const ExprRef& i) {
        auto c = std::make_shared<const CenteredRow>(centered_row(b, r, order, buf, i));
        return BlockRow{c->row, [&, c](const ExprRef& col, int lanes) { return centered_dx_at(r, o, buf, *c, col, lanes); }};
      });
    } else {
      stages[0].name = "rms_norm_backward_dx";
      if (composite) torch_composite_dx(b, r, order, buf);
      else centered_dx(b, r, order, buf);
    }
  }
  if (!r.has_weight) return stages;

  const std::vector<ColumnSpan> spans = column_spans(o.columns, r.cols);
  for (size_t i = 0; i < spans.size(); ++i) {
    Kernel& k = stages.emplace_back();
    k.name = spans.size() > 1 ? fmt::format("rms_norm_backward_dweight{}", i) : "rms_norm_backward_dweight";
    Builder b(k);
    const Buffers buf = declare(b, r, o);
    if (buf.block_sums >= 0) emit_column_sums(b, o.columns, r.cols, r.x_dtype, {dweight_sum(o, buf)}, cuda_target(r), buf.block_sums);
    else emit_column_sums(b, o.columns, r.cols, spans[i], r.x_dtype, {dweight_sum(o, buf)}, cuda_target(r));
  }
  return stages;
}

}  // namespace ordo::gen
