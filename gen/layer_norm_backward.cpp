// layer_norm_backward: dx, dweight, dbias from dy, x, weight and the forward's mean and rstd.
//
// Two stages over the same arguments (gen/gen.hpp, build_stages):
//  1. the rows: dx of each row, from the row's own sums (ds, db or s1, s2);
//  2. the columns (a column stage, Kernel::grid_over_rows false): dweight and dbias, each a sum
//     over every row of the launch, in the NormBackwardOrder's ColumnSumOrder.
// Both read only inputs, so stage 2 does not depend on stage 1; they are separate kernels because
// each parallelizes over another axis.
#include <fmt/format.h>

#include "gen/gen.hpp"
#include "gen/norm_backward.hpp"
#include "gen/row.hpp"
#include "gen/warp.hpp"
#include "ir/error.hpp"

namespace ordo::gen {

using namespace ordo::ir;

namespace {

constexpr ScalarType f32 = ScalarType::f32;

struct Buffers {
  int dy, x, weight, mean, rstd, dx, dweight, dbias;
};

// The arguments, in the order every layer_norm_backward stage takes them. mean and rstd have the
// forward's statistics type (f32 for PyTorch's mixed 16-bit x with f32 weight, else x's type).
Buffers declare(Builder& b, const Request& r) {
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
  return out;
}

ExprRef f32c(double v, int lanes = 1) {
  ExprRef c = constant(Type{f32, 1}, v);
  return lanes > 1 ? broadcast(c, lanes) : c;
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

// Stage 1, ordo's centered form (NormBackwardOrder::Kind::Centered).
void centered_dx(Builder& b, const Request& r, const NormBackwardOrder& o, const Buffers& buf) {
  const int64_t N = r.cols;
  Row row(b, N);
  auto ld = [&](int buffer, ExprRef col, int lanes) { return row.load_as(buffer, std::move(col), lanes, f32); };
  ExprRef rstd = b.let("rstd", to_f32(load(b.kernel(), buf.rstd, program_id(0))));
  ExprRef mean = b.let("mean", to_f32(load(b.kernel(), buf.mean, program_id(0))));
  auto xhat = [&](ExprRef col, int lanes) { return mul(sub(ld(buf.x, col, lanes), bc(mean, lanes)), bc(rstd, lanes)); };
  auto wdy = [&](ExprRef col, int lanes) {
    ExprRef dy = ld(buf.dy, col, lanes);
    return r.has_weight ? mul(dy, ld(buf.weight, col, lanes)) : dy;
  };
  const Arith ar{f32, std::nullopt};
  ExprRef s1 = emit_sum(b, o.sum, ar, N, [&](ExprRef col, int lanes) { return Term{wdy(col, lanes), nullptr}; }, "sum(dy*w)");
  ExprRef s2 = emit_sum(b, o.sum, ar, N, [&](ExprRef col, int lanes) { return Term{wdy(col, lanes), xhat(col, lanes)}; },
                        "sum(dy*w*xhat)");
  ExprRef inv_n = b.let("inv_n", div(f32c(1.0), f32c(static_cast<double>(N))));
  ExprRef c1 = b.let("c1", mul(s1, inv_n));
  ExprRef c2 = b.let("c2", mul(s2, inv_n));
  row.for_each(o.columns.lanes, [&](ExprRef col, int lanes) {
    ExprRef inner = mul_add(xhat(col, lanes), bc(c2, lanes), bc(c1, lanes), o.fma_dx);
    row.store_as(buf.dx, col, mul(sub(wdy(col, lanes), inner), bc(rstd, lanes)));
  });
}

}  // namespace

std::vector<Kernel> build_layer_norm_backward(const Request& r, const Order& order) {
  const NormBackwardOrder& o = order.norm_backward;
  std::vector<Kernel> stages(1);
  Kernel& rows = stages[0];
  rows.name = "layer_norm_backward_dx";
  {
    Builder b(rows);
    const Buffers buf = declare(b, r);
    if (o.kind == NormBackwardOrder::Kind::TorchCpu) torch_cpu_dx(b, r, o, buf);
    else centered_dx(b, r, o, buf);
  }
  if (!r.has_weight && !r.has_bias) return stages;

  // Stage 2: a program instance per vector of columns.
  Kernel& cols = stages.emplace_back();
  cols.name = "layer_norm_backward_dweight";
  Builder b(cols);
  const Buffers buf = declare(b, r);
  const bool reduced = size_bytes(r.x_dtype) == 2;
  std::vector<ColumnSum> sums;
  if (r.has_weight) {
    ColumnSum s;
    s.out = buf.dweight;
    s.label = "dweight";
    if (o.kind == NormBackwardOrder::Kind::TorchCpu) {
      // gbuf = fma(dy, fma(a, x, (-a)*mean), gbuf): the term and the accumulation in one.
      s.accumulate = [&, fused = o.fma](const ColumnRow& cr, ExprRef acc) {
        ExprRef a = bc(cr.stat(buf.rstd), cr.lanes);
        ExprRef shift = bc(mul(unary(Op::Neg, cr.stat(buf.rstd)), cr.stat(buf.mean)), cr.lanes);
        return mul_add(cr.load(buf.dy), mul_add(a, cr.load(buf.x), shift, fused), acc, fused);
      };
    } else {
      s.accumulate = [&, fused = o.columns.fma](const ColumnRow& cr, ExprRef acc) {
        ExprRef xhat = mul(sub(cr.load(buf.x), bc(cr.stat(buf.mean), cr.lanes)), bc(cr.stat(buf.rstd), cr.lanes));
        return mul_add(cr.load(buf.dy), xhat, acc, fused);
      };
    }
    sums.push_back(std::move(s));
  }
  if (r.has_bias) {
    ColumnSum s;
    s.out = buf.dbias;
    s.label = "dbias";
    s.accumulate = [&](const ColumnRow& cr, ExprRef acc) { return add(acc, cr.load(buf.dy)); };
    sums.push_back(std::move(s));
  }
  ColumnSumOrder columns = o.columns;
  if (columns.kind == ColumnSumOrder::Kind::ThreadSlots) columns.round_slots = columns.round_slots && reduced;
  emit_column_sums(b, columns, r.cols, r.x_dtype, sums, cuda_target(r));
  return stages;
}

}  // namespace ordo::gen
