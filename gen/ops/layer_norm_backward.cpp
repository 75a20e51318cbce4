// layer_norm_backward: dx, dweight, dbias from dy, x, weight and the forward's mean and rstd.
//
// Two schedules, over the same arguments in every stage (gen/gen.hpp, build_stages):
//  * Two passes over dy and x (CUDA, and the orders that reproduce PyTorch's buffers):
//    1. the rows: dx of each row, from the row's own sums (ds, db or s1, s2);
//    2. the columns (a column stage, Kernel::grid_over_rows false): dweight and dbias, each a sum
//       over every row of the launch, in the NormBackwardOrder's ColumnSumOrder.
//    Both read only inputs, so stage 2 does not depend on stage 1; they are separate kernels
//    because each parallelizes over another axis.
//  * One pass, on the CPU for ordo's centered orders whose weight gradients sum by a block tree
//    (ColumnSumOrder::BlockTree): an instance per block of rows computes each row's dx and adds
//    the row's terms into the block's sums in a workspace (Extent::row_blocks), in row order from
//    +0, as stage 2 above sums a block; the column stage then combines the blocks' sums by the
//    tree. The same operations on the same values, so the same bits (tests/backend/
//    test_cuda_emu.cpp runs one against the other); dy and x are read once instead of twice.
#include <fmt/format.h>

#include "gen/blocks/constants.hpp"
#include "gen/gen.hpp"
#include "gen/blocks/norm_backward.hpp"
#include "gen/blocks/row.hpp"
#include "gen/blocks/warp.hpp"
#include "ir/error.hpp"

namespace ordo::gen {

using namespace ordo::ir;

namespace {

constexpr ScalarType f32 = ScalarType::f32;

struct Buffers {
  int dy, x, weight, mean, rstd, dx, dweight, dbias;
  int block_sums = -1;  // the one-pass schedule's workspace: [block][sum][column], f32
};

// Whether the request runs the one-pass schedule (the top of this file).
bool one_pass(const Request& r, const NormBackwardOrder& o) { return one_pass_weight_gradients(r, o, r.has_weight || r.has_bias); }
int weight_gradients(const Request& r) { return int(r.has_weight) + int(r.has_bias); }

// The arguments, in the order every layer_norm_backward stage takes them. mean and rstd have the
// forward's statistics type (f32 for PyTorch's mixed 16-bit x with f32 weight, else x's type).
Buffers declare(Builder& b, const Request& r, const NormBackwardOrder& o) {
  const ScalarType wt = r.weight_type();
  const bool mixed = size_bytes(r.x_dtype) == 2 && wt == f32 && r.has_weight;
  const ScalarType stats = mixed ? f32 : r.x_dtype;
  Buffers out;
  out.dy = b.buffer("dy", r.x_dtype, false, Extent::rows_by_cols);
  out.x = b.buffer("x", r.x_dtype, false, Extent::rows_by_cols);
  out.weight = r.has_weight ? b.buffer("weight", wt, false, Extent::cols) : -1;
  out.mean = b.buffer("mean", stats, false, Extent::rows);
  out.rstd = b.buffer("rstd", stats, false, Extent::rows);
  out.dx = b.buffer("dx", r.x_dtype, true, Extent::rows_by_cols);
  out.dweight = r.has_weight ? b.buffer("dweight", wt, true, Extent::cols) : -1;
  out.dbias = r.has_bias ? b.buffer("dbias", wt, true, Extent::cols) : -1;
  if (one_pass(r, o)) out.block_sums = b.workspace("block_sums", f32, o.columns.block_rows, weight_gradients(r) * r.cols);
  return out;
}

ExprRef bc(ExprRef s, int lanes) { return lanes > 1 ? broadcast(std::move(s), lanes) : s; }

// a*b + c: one fma, or a rounded product then a rounded sum.
ExprRef mul_add(ExprRef a, ExprRef b, ExprRef c, bool fused) {
  return fused ? fma(std::move(a), std::move(b), std::move(c)) : add(mul(std::move(a), std::move(b)), std::move(c));
}

// Stage 1, PyTorch's CPU kernel (NormBackwardOrder::Kind::TorchCpu).
void torch_cpu_dx(Builder& b, const Request& r, const NormBackwardOrder& o, const Buffers& buf) {
  const int64_t N = r.cols;
  const bool fused = o.fma;
  const bool reduced = size_bytes(r.x_dtype) == 2;
  const bool mixed = reduced && r.has_weight && r.weight_type() == f32;
  Row row(b, N);
  auto ld = [&](int buffer, ExprRef col, int lanes) { return row.load_as(buffer, std::move(col), lanes, f32); };
  ExprRef a = b.let("a", to_f32(load(b.kernel(), buf.rstd, program_id(0))));
  ExprRef mean = b.let("mean", to_f32(load(b.kernel(), buf.mean, program_id(0))));

  // The row sums, by the dtype path PyTorch's kernel takes.
  VecReduceAll red{o.lanes, o.fold, reduced, false, fused, false};
  TermFn ds_term, db_term;
  if (mixed) {
    // The mixed loop: q = dy*g (rounded, two uses), ds += x*q, db += q; loop and tail fused, and
    // 8 < N < 16 folds by the tree.
    red.fma_loop = fused;
    red.small_fold_by_tree = true;
    if (r.x_dtype == ScalarType::f16 && o.fma_half_weighted) red.fma_small = fused;
    auto q = [&](ExprRef col, int lanes) { return mul(ld(buf.dy, col, lanes), ld(buf.weight, col, lanes)); };
    ds_term = [&, q](ExprRef col, int lanes) { return Term{ld(buf.x, col, lanes), q(col, lanes)}; };
    db_term = [&, q](ExprRef col, int lanes) { return Term{q(col, lanes), nullptr}; };
  } else if (r.has_weight) {
    if (r.x_dtype == ScalarType::f16 && o.fma_half_weighted) red.fma_loop = red.fma_small = fused;
    ds_term = [&](ExprRef col, int lanes) { return Term{mul(ld(buf.dy, col, lanes), ld(buf.x, col, lanes)), ld(buf.weight, col, lanes)}; };
    db_term = [&](ExprRef col, int lanes) { return Term{ld(buf.dy, col, lanes), ld(buf.weight, col, lanes)}; };
  } else {
    ds_term = [&](ExprRef col, int lanes) { return Term{ld(buf.dy, col, lanes), ld(buf.x, col, lanes)}; };
    db_term = [&](ExprRef col, int lanes) { return Term{ld(buf.dy, col, lanes), nullptr}; };
  }
  const std::vector<ExprRef> sums = emit_vec_reduce_all(b, red, N, {{ds_term, "ds"}, {db_term, "db"}});
  const ExprRef ds = sums[0], db = sums[1];

  ExprRef scale = b.let("scale", div(f32c(1.0), f32c(static_cast<double>(N))));
  ExprRef t = b.let("t", mul_add(db, mean, unary(Op::Neg, ds), fused));
  ExprRef b2 = b.let("b2", mul(mul(mul(mul(t, a), a), a), scale));
  ExprRef dba = b.let("db_a", mul(mul(db, a), scale));
  ExprRef c = b.let("c", mul_add(unary(Op::Neg, b2), mean, unary(Op::Neg, dba), fused));
  row.for_each(8, [&](ExprRef col, int lanes) {
    ExprRef dy = ld(buf.dy, col, lanes), x = ld(buf.x, col, lanes);
    ExprRef u = mul(bc(a, lanes), dy);
    if (r.has_weight) u = mul(u, ld(buf.weight, col, lanes));
    ExprRef v = mul_add(bc(b2, lanes), x, u, fused);
    row.store_as(buf.dx, col, add(v, bc(c, lanes)));
  });
}

// One row of ordo's centered form (NormBackwardOrder::Kind::Centered): its statistics and the
// coefficients of its two sums, c1 = sum(dy*w)/N and c2 = sum(dy*w*xhat)/N.
struct CenteredRow {
  Row row;
  ExprRef rstd, mean, c1, c2;
};

CenteredRow centered_row(Builder& b, const Request& r, const NormBackwardOrder& o, const Buffers& buf, const ExprRef& row_index) {
  const int64_t N = r.cols;
  CenteredRow c{Row(b, N, b.let("row", mul(row_index, index_const(N)))), nullptr, nullptr, nullptr, nullptr};
  const Row& row = c.row;
  auto ld = [&](int buffer, ExprRef col, int lanes) { return row.load_as(buffer, std::move(col), lanes, f32); };
  c.rstd = b.let("rstd", to_f32(load(b.kernel(), buf.rstd, row_index)));
  c.mean = b.let("mean", to_f32(load(b.kernel(), buf.mean, row_index)));
  auto xhat = [&](ExprRef col, int lanes) { return mul(sub(ld(buf.x, col, lanes), bc(c.mean, lanes)), bc(c.rstd, lanes)); };
  auto wdy = [&](ExprRef col, int lanes) {
    ExprRef dy = ld(buf.dy, col, lanes);
    return r.has_weight ? mul(dy, ld(buf.weight, col, lanes)) : dy;
  };
  const Arith ar{f32, std::nullopt};
  const std::vector<ExprRef> s = emit_sums(b, o.sum, ar, N,
                                           {{[&](ExprRef col, int lanes) { return Term{wdy(col, lanes), nullptr}; }, "sum(dy*w)"},
                                            {[&](ExprRef col, int lanes) { return Term{wdy(col, lanes), xhat(col, lanes)}; }, "sum(dy*w*xhat)"}});
  const ExprRef &s1 = s[0], &s2 = s[1];
  ExprRef inv_n = b.let("inv_n", div(f32c(1.0), f32c(static_cast<double>(N))));
  c.c1 = b.let("c1", mul(s1, inv_n));
  c.c2 = b.let("c2", mul(s2, inv_n));
  return c;
}

// dx = (dy*w - (xhat*c2 + c1)) * rstd at columns [col, col + lanes) of the row, in f32.
ExprRef centered_dx_at(const Request& r, const NormBackwardOrder& o, const Buffers& buf, const CenteredRow& c, const ExprRef& col, int lanes) {
  auto ld = [&](int buffer) { return c.row.load_as(buffer, col, lanes, f32); };
  ExprRef xhat = mul(sub(ld(buf.x), bc(c.mean, lanes)), bc(c.rstd, lanes));
  ExprRef wdy = r.has_weight ? mul(ld(buf.dy), ld(buf.weight)) : ld(buf.dy);
  ExprRef inner = mul_add(xhat, bc(c.c2, lanes), bc(c.c1, lanes), o.fma_dx);
  return mul(sub(wdy, inner), bc(c.rstd, lanes));
}

// Stage 1 of the two-pass schedule, the centered form: an instance per row.
void centered_dx(Builder& b, const Request& r, const NormBackwardOrder& o, const Buffers& buf) {
  const CenteredRow c = centered_row(b, r, o, buf, program_id(0));
  c.row.for_each(o.columns.lanes, [&](ExprRef col, int lanes) { c.row.store_as(buf.dx, col, centered_dx_at(r, o, buf, c, col, lanes)); });
}

// The weight gradients as column sums: dweight = sum(dy * xhat), dbias = sum(dy).
std::vector<ColumnSum> weight_gradient_sums(const NormBackwardOrder& o, const Buffers& buf) {
  std::vector<ColumnSum> sums;
  if (buf.dweight >= 0) {
    ColumnSum s;
    s.out = buf.dweight;
    s.label = "dweight";
    if (o.kind == NormBackwardOrder::Kind::TorchCpu) {
      // gbuf = fma(dy, fma(a, x, (-a)*mean), gbuf): the term and the accumulation in one.
      s.accumulate = [buf, fused = o.fma](const ColumnRow& cr, ExprRef acc) {
        ExprRef a = bc(cr.stat(buf.rstd), cr.lanes);
        ExprRef shift = bc(mul(unary(Op::Neg, cr.stat(buf.rstd)), cr.stat(buf.mean)), cr.lanes);
        return mul_add(cr.load(buf.dy), mul_add(a, cr.load(buf.x), shift, fused), acc, fused);
      };
    } else {
      s.accumulate = [buf, fused = o.columns.fma](const ColumnRow& cr, ExprRef acc) {
        ExprRef xhat = mul(sub(cr.load(buf.x), bc(cr.stat(buf.mean), cr.lanes)), bc(cr.stat(buf.rstd), cr.lanes));
        return mul_add(cr.load(buf.dy), xhat, acc, fused);
      };
    }
    sums.push_back(std::move(s));
  }
  if (buf.dbias >= 0) {
    ColumnSum s;
    s.out = buf.dbias;
    s.label = "dbias";
    s.accumulate = [buf](const ColumnRow& cr, ExprRef acc) { return add(acc, cr.load(buf.dy)); };
    sums.push_back(std::move(s));
  }
  return sums;
}

}  // namespace

std::vector<Kernel> build_layer_norm_backward(const Request& r, const Order& order) {
  const NormBackwardOrder& o = order.norm_backward;
  std::vector<Kernel> stages(1);
  Kernel& rows = stages[0];
  {
    Builder b(rows);
    const Buffers buf = declare(b, r, o);
    if (one_pass(r, o)) {
      rows.name = "layer_norm_backward_dx_and_block_sums";
      emit_block_rows(b, o.columns, r.cols, buf.dx, buf.block_sums, weight_gradient_sums(o, buf), [&](const ExprRef& i) {
        auto c = std::make_shared<const CenteredRow>(centered_row(b, r, o, buf, i));
        return BlockRow{c->row, [&, c](const ExprRef& col, int lanes) { return centered_dx_at(r, o, buf, *c, col, lanes); }};
      });
    } else {
      rows.name = "layer_norm_backward_dx";
      if (o.kind == NormBackwardOrder::Kind::TorchCpu) torch_cpu_dx(b, r, o, buf);
      else centered_dx(b, r, o, buf);
    }
  }
  if (!r.has_weight && !r.has_bias) return stages;

  // Stage 2: a program instance per vector of columns.
  Kernel& cols = stages.emplace_back();
  cols.name = "layer_norm_backward_dweight";
  Builder b(cols);
  const Buffers buf = declare(b, r, o);
  const bool reduced = size_bytes(r.x_dtype) == 2;
  ColumnSumOrder columns = o.columns;
  if (columns.kind == ColumnSumOrder::Kind::ThreadSlots) columns.round_slots = columns.round_slots && reduced;
  emit_column_sums(b, columns, r.cols, r.x_dtype, weight_gradient_sums(o, buf), cuda_target(r), buf.block_sums);
  return stages;
}

}  // namespace ordo::gen
