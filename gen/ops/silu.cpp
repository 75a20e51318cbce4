// silu, elementwise: y = x / (1 + exp(-x)) in f32 (x widened from its storage type, y rounded
// once to it), the exp of each element the one Order::pointwise gives its position.
//
// PyTorch 2.15's CPU kernel (cpu_kernel_vec over the flattened tensor) takes Sleef's expf_u10 in
// its vector function under the AVX2 and AVX-512 capabilities and glibc's expf in its scalar one
// (under `default` both are glibc's); the scalar function runs the last (n mod 2V) elements of
// each chunk a thread gets, V the vector's lanes (PointwiseOrder). Measured against torch 2.15.0
// with Sleef's own expf8/expf16 and glibc's expf (f32, bf16, f16; 1 and 2 threads; every
// capability): docs/research/torch2.15-silu.md.
//
// The kernel runs every element of its row through the vector function, then, where the order
// has scalar tails, runs the tail elements that fall in its row again through the scalar one (a
// per-instance loop: which columns those are depends on the row).
#include <fmt/format.h>

#include "gen/blocks/math.hpp"
#include "gen/blocks/row.hpp"
#include "gen/gen.hpp"

namespace ordo::gen {

using namespace ordo::ir;

namespace {

constexpr int64_t kGrain = 32768;  // at::internal::GRAIN_SIZE

ExprRef silu_of(Builder& b, ExprRef x, MathImpl exp) {
  const int lanes = x->type.lanes;
  const Arith f32{ScalarType::f32, std::nullopt};
  ExprRef e = exp_f32(b, exp, unary(Op::Neg, x));
  return f32.div(std::move(x), f32.add(f32.constant(1.0, lanes), e));
}

}  // namespace

Kernel build_silu(const Request& r, const Order& o) {
  Kernel k;
  k.name = "silu";
  Builder b(k);
  const Length n = row_length(b, r);
  const int x = b.buffer("x", r.x_dtype, false, Extent::rows_by_cols);
  const int y = b.buffer("y", r.x_dtype, true, Extent::rows_by_cols);
  Row row(b, n);
  const PointwiseOrder& p = o.pointwise;
  row.for_each(o.elementwise_lanes, [&](ExprRef col, int lanes) {
    row.store_as(y, col, silu_of(b, row.load_as(x, col, lanes, ScalarType::f32), p.vector_exp));
  });
  if (p.vector_elements == 0 || p.scalar_exp == p.vector_exp) return k;

  // The chunks at::parallel_for makes of the launch's elements (uniform), and in each the
  // scalar tail [tail_first, chunk_end).
  const int64_t T = o.threads;
  ExprRef numel = b.let("elements", mul(launch_rows(), n.expr()));
  ExprRef chunks = index_const(1);
  if (T > 1) {
    ExprRef split = binary(Op::Le, index_const(kGrain), numel);
    chunks = b.let("chunks", select(split, binary(Op::Min, index_const(T), div(add(numel, index_const(kGrain - 1)), index_const(kGrain))),
                                    index_const(1)));
  }
  ExprRef chunk = b.let("chunk", div(sub(add(numel, chunks), index_const(1)), chunks));
  ExprRef row_first = mul(program_id(0), n.expr());  // read directly: per-instance loop bounds may
  for (int64_t t = 0; t < T; ++t) {
    ExprRef first = b.let(fmt::format("chunk{}.first", t), binary(Op::Min, mul(index_const(t), chunk), numel));
    ExprRef end = b.let(fmt::format("chunk{}.end", t),
                        select(binary(Op::Lt, index_const(t), chunks), binary(Op::Min, numel, add(first, chunk)), first));
    ExprRef tail = b.let(fmt::format("chunk{}.tail", t),
                         sub(end, binary(Op::Rem, sub(end, first), index_const(p.vector_elements))));
    // This row's columns of the tail: [max(tail, row_first), min(end, row_first + N)) - row_first, empty when they do not meet.
    ExprRef lo = sub(binary(Op::Max, tail, row_first), row_first);
    ExprRef hi = binary(Op::Max, lo, sub(binary(Op::Min, end, add(row_first, n.expr())), row_first));
    b.for_per_instance("tail.col", lo, hi, 1, [&](ExprRef col) {
      row.store_as(y, col, silu_of(b, row.load_as(x, col, 1, ScalarType::f32), p.scalar_exp));
    });
  }
  return k;
}

}  // namespace ordo::gen
