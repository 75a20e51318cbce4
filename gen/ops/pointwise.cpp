// The elementwise ops PyTorch runs through cpu_kernel_vec, each element in f32 (x widened from its
// storage type, y rounded once to it) with the library function Order::pointwise gives its
// position. silu: y = x / (1 + exp(-x)).
//
// PyTorch 2.15's CPU kernel (cpu_kernel_vec over the flattened tensor) takes Sleef's expf_u10 in
// its vector function under the AVX2 and AVX-512 capabilities and glibc's expf in its scalar one
// (under `default` both are glibc's); the scalar function runs the last (n mod 2V) elements of
// each chunk a thread gets, V the vector's lanes (PointwiseOrder). Measured against torch 2.15.0
// with Sleef's own expf8/expf16 and glibc's expf (f32, bf16, f16; 1 and 2 threads; every
// capability): docs/research/torch2.15-silu.md.
//
// silu_backward: dx = (dy * s) * (1 + x * (1 - s)), s = 1 / (1 + exp(-x)), each step rounded to
// f32 but 1 + x * (1 - s), one fma where the order says (PointwiseOrder::fma); the same split
// between the two functions.
//
// gelu_tanh (F.gelu(x, approximate="tanh")): inner = kBeta * (x + kKappa * x^3), x^3 = (x*x)*x,
// the inner sum one fma where the order says (GCC contracts it in PyTorch's AVX2 and AVX-512
// builds, the scalar function included); y = (0.5*x) * (1 + tanh(inner)), tanh Sleef's
// tanhf_u10 or glibc's tanhf by position; kBeta = sqrt(2/pi) and kKappa = 0.044715 rounded to
// f32. Its forward cuts launches of more than 16384 elements between the threads with a grain of
// elements / threads (PointwiseOrder::threads_grain_above). gelu_tanh_backward (dy, x) -> dx:
// t = tanh(inner) as above, dx = dy * (0.5*(1 + t) + ((0.5*x) * (1 - t*t)) * (kBeta * (1 +
// 3kKappa * (x*x)))), 1 - t*t and 1 + 3kKappa*x^2 fused where x + kKappa x^3 is, the final sum
// not; 3kKappa rounded to f32 (0x3e095d4e). Measured against torch 2.15.0:
// docs/research/torch2.15-gelu.md.
//
// The kernel runs every element of its row through the vector function, then, where the order
// has scalar tails, runs the tail elements that fall in its row again through the scalar one (a
// per-instance loop: which columns those are depends on the row).
#include <fmt/format.h>

#include <bit>
#include <cstdint>
#include <functional>

#include "gen/blocks/math.hpp"
#include "gen/blocks/row.hpp"
#include "gen/gen.hpp"
#include "ir/error.hpp"

namespace ordo::gen {

using namespace ordo::ir;

namespace {

constexpr int64_t kGrain = 32768;  // at::internal::GRAIN_SIZE
const Arith kF32{ScalarType::f32, std::nullopt};

// 1 + exp(-x), the exp by `exp`.
ExprRef one_plus_exp_neg(Builder& b, const ExprRef& x, MathImpl exp) {
  return kF32.add(kF32.constant(1.0, x->type.lanes), exp_f32(b, exp, unary(Op::Neg, x)));
}

// The op's value at elements [col, col + lanes) of the row, in f32, with `exp`.
using ElementFn = std::function<ExprRef(ExprRef col, int lanes, MathImpl fn)>;

// Every element of the row through PyTorch's vector function, then the elements of the
// launch's chunk tails that fall in this row through its scalar function (PointwiseOrder).
void emit_pointwise(Builder& b, const Order& o, const Row& row, const Length& n, int y, const ElementFn& value) {
  const PointwiseOrder& p = o.pointwise;
  row.for_each(o.elementwise_lanes, [&](ExprRef col, int lanes) { row.store_as(y, col, value(col, lanes, p.vector_exp)); });
  if (p.vector_elements == 0 || p.scalar_exp == p.vector_exp) return;
  // The chunks at::parallel_for makes of the launch's elements (uniform), and in each the
  // scalar tail [tail, end): min(T, ceil(elements / grain)) chunks when the launch has at least
  // a grain of elements, one otherwise.
  const int64_t T = o.threads;
  ExprRef numel = b.let("elements", mul(launch_rows(), n.expr()));
  ExprRef chunks = index_const(1);
  if (T > 1) {
    ExprRef grain = index_const(kGrain);
    if (p.threads_grain_above > 0)
      grain = b.let("grain", select(binary(Op::Lt, index_const(p.threads_grain_above), numel), div(numel, index_const(T)), grain));
    ExprRef split = binary(Op::Le, grain, numel);
    chunks = b.let("chunks", select(split, binary(Op::Min, index_const(T), div(sub(add(numel, grain), index_const(1)), grain)),
                                    index_const(1)));
  }
  ExprRef chunk = b.let("chunk", div(sub(add(numel, chunks), index_const(1)), chunks));
  // Read directly, not through the row's local: a per-instance loop's bounds may read program_id.
  ExprRef row_first = mul(program_id(0), n.expr());
  for (int64_t t = 0; t < T; ++t) {
    ExprRef first = b.let(fmt::format("chunk{}.first", t), binary(Op::Min, mul(index_const(t), chunk), numel));
    ExprRef end = b.let(fmt::format("chunk{}.end", t),
                        select(binary(Op::Lt, index_const(t), chunks), binary(Op::Min, numel, add(first, chunk)), first));
    ExprRef tail = b.let(fmt::format("chunk{}.tail", t), sub(end, binary(Op::Rem, sub(end, first), index_const(p.vector_elements))));
    // This row's columns of the tail: [max(tail, row_first), min(end, row_first + N)) - row_first, empty when they do not meet.
    ExprRef lo = sub(binary(Op::Max, tail, row_first), row_first);
    ExprRef hi = binary(Op::Max, lo, sub(binary(Op::Min, end, add(row_first, n.expr())), row_first));
    b.for_per_instance("tail.col", lo, hi, 1, [&](ExprRef col) { row.store_as(y, col, value(col, 1, p.scalar_exp)); });
  }
}

}  // namespace

Kernel build_silu(const Request& r, const Order& o) {
  Kernel k;
  const bool backward = r.op == OpKind::silu_backward;
  k.name = backward ? "silu_backward" : "silu";
  Builder b(k);
  const Length n = row_length(b, r);
  // silu_backward(dy, x) -> dx, as PyTorch's silu_backward(grad_output, self).
  const int dy = backward ? b.buffer("dy", r.x_dtype, false, Extent::rows_by_cols) : -1;
  const int x = b.buffer("x", r.x_dtype, false, Extent::rows_by_cols);
  const int y = b.buffer(backward ? "dx" : "y", r.x_dtype, true, Extent::rows_by_cols);
  Row row(b, n);
  const bool fused = o.pointwise.fma;
  emit_pointwise(b, o, row, n, y, [&](ExprRef col, int lanes, MathImpl exp) {
    ExprRef v = row.load_as(x, col, lanes, ScalarType::f32);
    if (!backward) return kF32.div(v, one_plus_exp_neg(b, v, exp));
    // s = 1 / (1 + exp(-x)); dx = (dy * s) * (1 + x * (1 - s)).
    ExprRef s = kF32.div(kF32.constant(1.0, lanes), one_plus_exp_neg(b, v, exp));
    ExprRef one_minus_s = kF32.sub(kF32.constant(1.0, lanes), s);
    ExprRef factor = kF32.mul_add(v, one_minus_s, kF32.constant(1.0, lanes), fused);
    return kF32.mul(kF32.mul(row.load_as(dy, col, lanes, ScalarType::f32), s), factor);
  });
  return k;
}

Kernel build_gelu_tanh(const Request& r, const Order& o) {
  Kernel k;
  const bool backward = r.op == OpKind::gelu_tanh_backward;
  k.name = backward ? "gelu_tanh_backward" : "gelu_tanh";
  Builder b(k);
  const Length n = row_length(b, r);
  // gelu_tanh_backward(dy, x) -> dx, as PyTorch's gelu_backward(grad_output, self, "tanh").
  const int dy = backward ? b.buffer("dy", r.x_dtype, false, Extent::rows_by_cols) : -1;
  const int x = b.buffer("x", r.x_dtype, false, Extent::rows_by_cols);
  const int y = b.buffer(backward ? "dx" : "y", r.x_dtype, true, Extent::rows_by_cols);
  Row row(b, n);
  const bool fused = o.pointwise.fma;
  emit_pointwise(b, o, row, n, y, [&](ExprRef col, int lanes, MathImpl tanh_impl) {
    ExprRef v = b.let("gelu.x", row.load_as(x, col, lanes, ScalarType::f32));
    const auto c = [&](uint32_t bits) { return kF32.constant(static_cast<double>(std::bit_cast<float>(bits)), lanes); };
    ExprRef square = b.let("gelu.xx", kF32.mul(v, v));
    ExprRef cube = kF32.mul(square, v);
    // kBeta * (x + kKappa * x^3): kKappa = 0x3d372713 (0.044715), kBeta = 0x3f4c422a (sqrt(2/pi)).
    ExprRef inner = b.let("gelu.inner", kF32.mul(c(0x3f4c422a), kF32.mul_add(c(0x3d372713), cube, v, fused)));
    if (tanh_impl != MathImpl::Glibc && tanh_impl != MathImpl::SleefU10)
      throw Error("gelu_tanh: the order's function is neither Sleef's nor glibc's; gelu_tanh has only their tanh");
    ExprRef t = b.let("gelu.t", tanh_impl == MathImpl::Glibc ? glibc_tanhf(b, inner) : sleef_tanhf_u10(b, inner));
    if (!backward) return kF32.mul(kF32.mul(c(0x3f000000), v), kF32.add(c(0x3f800000), t));
    ExprRef left = kF32.mul(c(0x3f000000), v);
    ExprRef left_derivative = kF32.mul(c(0x3f000000), kF32.add(c(0x3f800000), t));
    ExprRef tanh_derivative = kF32.mul_add(unary(Op::Neg, t), t, c(0x3f800000), fused);  // 1 - t*t
    ExprRef inner_derivative = kF32.mul(c(0x3f4c422a), kF32.mul_add(c(0x3e095d4e), square, c(0x3f800000), fused));
    ExprRef right_derivative = kF32.mul(kF32.mul(left, tanh_derivative), inner_derivative);
    return kF32.mul(row.load_as(dy, col, lanes, ScalarType::f32), kF32.add(left_derivative, right_derivative));
  });
  return k;
}

}  // namespace ordo::gen
