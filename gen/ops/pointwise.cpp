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
// gelu (F.gelu(x), GELU's erf form) and gelu_backward: PyTorch's CPU kernel hands a contiguous
// tensor of more than one element to oneDNN's eltwise_gelu_erf, whose code is chosen by the CPU
// (PointwiseOrder::gelu_erf); every element alike, no chunks. Its arithmetic, read from oneDNN's
// jit_uni_eltwise_injector and measured against torch 2.15.0 (docs/research/torch2.15-gelu.md):
// - forward, minimax (AVX-512): p = the degree-5 polynomial of interval i in |x| by Horner's fmas,
//   i from the bits of |x| (below); y = (x * (1 + (p with x's sign))) * 0.5.
// - forward, Abramowitz and Stegun (without AVX-512): z = x/sqrt 2 (a product), t = 1/fma(a, |z|,
//   1), e = -exp(-(z*z)) * t, erf = fma(e, P(t), 1) with x's sign, P degree 4 by Horner's fmas;
//   y = fma(erf, x/2, x/2) (x/2 the product x * 0.5).
// - backward (every CPU): z = x/sqrt 2, q = exp(-(z*z)), T = (z * (1/sqrt pi)) * q, erf as above
//   from -q * t; g = fma(erf, 0.5, T + 0.5); dx = g * dy.
// exp is oneDNN's (gen/blocks/math.hpp, onednn_exp). A bf16 result that is subnormal in f32 is
// stored as a zero where the order says (PointwiseOrder::bf16_flushes_subnormals).
//
// The kernel runs every element of its row through the vector function, then, where the order
// has scalar tails, runs the tail elements that fall in its row again through the scalar one (a
// per-instance loop: which columns those are depends on the row). Where torch loops over each row
// of a strided input (PointwiseOrder::tail_per_row), every row's part of a chunk has its own tail.
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
    ExprRef lo, hi;
    if (!p.tail_per_row) {
      ExprRef tail = b.let(fmt::format("chunk{}.tail", t), sub(end, binary(Op::Rem, sub(end, first), index_const(p.vector_elements))));
      // This row's columns of the tail: [max(tail, row_first), min(end, row_first + N)) - row_first, empty when they do not meet.
      lo = sub(binary(Op::Max, tail, row_first), row_first);
      hi = binary(Op::Max, lo, sub(binary(Op::Min, end, add(row_first, n.expr())), row_first));
    } else {
      // The chunk's part of this row, [a, e) (empty when they do not meet), ends in its own tail.
      // Expressions, not locals: they read program_id, which a per-instance loop's bounds may read only directly.
      ExprRef a = binary(Op::Max, first, row_first);
      ExprRef e = binary(Op::Max, a, binary(Op::Min, end, add(row_first, n.expr())));
      lo = sub(sub(e, binary(Op::Rem, sub(e, a), index_const(p.vector_elements))), row_first);
      hi = sub(e, row_first);
    }
    b.for_per_instance("tail.col", lo, hi, 1, [&](ExprRef col) { row.store_as(y, col, value(col, 1, p.scalar_exp)); });
  }
}

// oneDNN's piecewise minimax polynomials for erf(x/sqrt 2) on AVX-512 (gelu_erf_minimax_pol in
// jit_uni_eltwise_injector.cpp): coefficient d of interval i is kGeluErfMinimax[d][i] (f32 bits).
// Intervals 1..22 follow from |x|'s bits; 23 (p = 1) is |x| > kGeluErfRbound, infinities
// included; 24 (p = |x|) is where NaN's bits clamp to; 0 and 25..31 are never picked.
constexpr uint32_t kGeluErfMinimax[6][32] = {
    {0xa6f2cb94, 0x32827792, 0x3381cc0c, 0x34523d4a, 0x351ac44d, 0x35f36d88, 0x36ee8229, 0x37b8a3bb, 0x3867a213, 0x3940033b, 0x3a2a5a1d,
     0x3ae35863, 0x3b7828f2, 0x3c08b14b, 0x3c515ed3, 0xbb503236, 0xbd8d8e5e, 0xbe8abcd9, 0xbf0c19a2, 0xbeccb328, 0x3e176ced, 0x3f470d99,
     0x3f7abb28, 0x3f800000, 0, 0, 0, 0, 0, 0, 0, 0},
    {0x3f4c422a, 0x3f4c421f, 0x3f4c4207, 0x3f4c41cb, 0x3f4c413b, 0x3f4c3fad, 0x3f4c3a2f, 0x3f4c2d40, 0x3f4c146a, 0x3f4bc341, 0x3f4ad08c,
     0x3f48f8cf, 0x3f45fac7, 0x3f404e07, 0x3f3b980f, 0x3f48dff3, 0x3f78b21b, 0x3fbb0704, 0x40019c32, 0x3fe536d6, 0x3f81331e, 0x3e6c8684,
     0x3c98f936, 0, 0x3f800000, 0, 0, 0, 0, 0, 0, 0},
    {0xb62173f4, 0x3735e4cf, 0x37f2ff89, 0x388c23be, 0x3917535c, 0x39ab2ab0, 0x3a60fadb, 0x3af9b960, 0x3b6e5491, 0x3c0a4ec5, 0x3ca5aa8c,
     0x3d2138d9, 0x3d8737d4, 0x3ddfb660, 0x3e0f27ab, 0x3d94004b, 0xbe0efdeb, 0xbf1d96c3, 0xbf89db58, 0xbf6d9897, 0xbef69fb8, 0xbdc4f8a8,
     0xbbde6422, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {0xbe081a19, 0xbe084570, 0xbe08639b, 0xbe089837, 0xbe08f409, 0xbe09ab95, 0xbe0b66d0, 0xbe0e400a, 0xbe124df8, 0xbe1bde02, 0xbe2f19c9,
     0xbe4931bf, 0xbe685fbc, 0xbe89c95f, 0xbe96cbca, 0xbe8044aa, 0xbe0550f2, 0x3dcfd6a1, 0x3e94c826, 0x3e79345f, 0x3decec91, 0x3ca46568,
     0x3aa1e00a, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {0xba3d61db, 0x39f097a3, 0x3a5845dc, 0x3ab1fa35, 0x3b0cefb8, 0x3b653ab6, 0x3bcae527, 0x3c221712, 0x3c6c5840, 0x3cc0a703, 0x3d1dcc19,
     0x3d63656d, 0x3d955907, 0x3dbf9910, 0x3dd53f69, 0x3db7dcef, 0x3d639ebe, 0xba6ede48, 0xbd22be69, 0xbd041cf1, 0xbc64f5ab, 0xbb097a32,
     0xb8ebf380, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {0x3cb7d80c, 0x3c9b6050, 0x3c978d11, 0x3c92e850, 0x3c8d058b, 0x3c848454, 0x3c6cd623, 0x3c4c824b, 0x3c2a7935, 0x3be0b390, 0x3b0651ac,
     0xbb232f53, 0xbbd42fa0, 0xbc2c5366, 0xbc492c9e, 0xbc2a7aa6, 0xbbd55d04, 0xba823a76, 0x3b102aa8, 0x3ae25a7e, 0x3a31f792, 0x38b84375,
     0x3689bb5a, 0, 0, 0, 0, 0, 0, 0, 0, 0},
};
constexpr uint32_t kGeluErfRbound = 0x40b15cee;  // 5.5426; above it erf(x/sqrt 2) is 1 in f32
// Abramowitz and Stegun 7.1.26: erf(z) ~ 1 - t (p1 + p2 t + ... + p5 t^4) exp(-z^2), t = 1/(1 + a|z|).
constexpr uint32_t kAsA = 0x3ea7ba05;                                                          // a = 0.3275911
constexpr uint32_t kAsP[5] = {0x3e827906, 0xbe91a98e, 0x3fb5f0e3, 0xbfba00e3, 0x3f87dc22};  // p1..p5
constexpr uint32_t kOneOverSqrt2 = 0x3f3504f3, kOneOverSqrtPi = 0x3f106eba;

ExprRef f32_bits(uint32_t bits, int lanes) { return kF32.constant(static_cast<double>(std::bit_cast<float>(bits)), lanes); }
ExprRef i32_const(int32_t v, int lanes) {
  ExprRef c = constant(Type{ScalarType::i32, 1}, static_cast<double>(v));
  return lanes > 1 ? broadcast(c, lanes) : c;
}
ExprRef i64_const(int64_t v, int lanes) { return lanes > 1 ? broadcast(index_const(v), lanes) : index_const(v); }
// The sign bit of v alone (as i32 bits: 0 or INT32_MIN).
ExprRef sign_bits(const ExprRef& v) { return binary(Op::BitAnd, bitcast(v, ScalarType::i32), i32_const(INT32_MIN, v->type.lanes)); }
ExprRef abs_f32(const ExprRef& v) {
  return bitcast(binary(Op::BitAnd, bitcast(v, ScalarType::i32), i32_const(INT32_MAX, v->type.lanes)), ScalarType::f32);
}
ExprRef xor_sign(const ExprRef& v, const ExprRef& sign) {
  // v's bits with `sign` (0 or the sign bit) toggled: xor as (v & ~sign) | (~v & sign), which for
  // one bit is v + sign with the carry out of bit 31 dropped (i32 arithmetic wraps).
  return bitcast(add(bitcast(v, ScalarType::i32), sign), ScalarType::f32);
}

// erf(z) ~ sign(z) * (1 + e * P(t)), e = -exp(-(z*z)) * t, t = 1/fma(a, |z|, 1) (oneDNN's
// Abramowitz and Stegun; `minus_exp` is -exp(-(z*z)), computed by the caller).
ExprRef erf_abramowitz_stegun(Builder& b, const ExprRef& z, const ExprRef& minus_exp, const ExprRef& sign) {
  const int lanes = z->type.lanes;
  const ExprRef t = b.let("gelu.t", kF32.div(f32_bits(0x3f800000, lanes), kF32.fma(f32_bits(kAsA, lanes), abs_f32(z), f32_bits(0x3f800000, lanes))));
  ExprRef p = f32_bits(kAsP[4], lanes);
  for (int i = 3; i >= 0; --i) p = kF32.fma(p, t, f32_bits(kAsP[i], lanes));
  return b.let("gelu.erf", xor_sign(kF32.fma(kF32.mul(minus_exp, t), p, f32_bits(0x3f800000, lanes)), sign));
}

// erf(|x|/sqrt 2) by oneDNN's AVX-512 minimax polynomials, with x's sign.
ExprRef erf_minimax(Builder& b, const ExprRef& x) {
  const int lanes = x->type.lanes;
  const ExprRef pos = b.let("gelu.abs", abs_f32(x));
  // The interval: (bits(|x|) + 0xc21fffff) >> 21 (arithmetic, i32 wrapping: the exponent and two
  // mantissa bits, less a bias), clamped to [1, 24]; 23 above the right bound.
  ExprRef i = binary(Op::Shr, add(bitcast(pos, ScalarType::i32), i32_const(static_cast<int32_t>(0xc21fffffu), lanes)), i32_const(21, lanes));
  i = binary(Op::Min, binary(Op::Max, cast(i, ScalarType::i64), i64_const(1, lanes)), i64_const(24, lanes));
  i = b.let("gelu.interval", select(binary(Op::Lt, f32_bits(kGeluErfRbound, lanes), pos), i64_const(23, lanes), i));
  const auto coefficient = [&](int d) {
    std::vector<int64_t> entries;
    for (uint32_t c : kGeluErfMinimax[d]) entries.push_back(std::bit_cast<int64_t>(static_cast<double>(std::bit_cast<float>(c))));
    return cast(bitcast(table(b.table(std::move(entries)), i), ScalarType::f64), ScalarType::f32);
  };
  ExprRef p = coefficient(5);
  for (int d = 4; d >= 0; --d) p = kF32.fma(p, pos, coefficient(d));
  return xor_sign(p, sign_bits(x));
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
    const auto c = [&](uint32_t bits) { return f32_bits(bits, lanes); };
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

Kernel build_gelu_erf(const Request& r, const Order& o) {
  Kernel k;
  const bool backward = r.op == OpKind::gelu_backward;
  k.name = backward ? "gelu_backward" : "gelu";
  Builder b(k);
  const Length n = row_length(b, r);
  // gelu_backward(dy, x) -> dx, as PyTorch's gelu_backward(grad_output, self).
  const int dy = backward ? b.buffer("dy", r.x_dtype, false, Extent::rows_by_cols) : -1;
  const int x = b.buffer("x", r.x_dtype, false, Extent::rows_by_cols);
  const int y = b.buffer(backward ? "dx" : "y", r.x_dtype, true, Extent::rows_by_cols);
  Row row(b, n);
  const PointwiseOrder& p = o.pointwise;
  const bool flush = p.bf16_flushes_subnormals && r.x_dtype == ScalarType::bf16;
  b.region(k.name, describe_gelu_erf(p), [&] {
    row.for_each(o.elementwise_lanes, [&](ExprRef col, int lanes) {
      const auto c = [&](uint32_t bits) { return f32_bits(bits, lanes); };
      ExprRef v = b.let("gelu.x", row.load_as(x, col, lanes, ScalarType::f32));
      ExprRef out;
      if (!backward && p.gelu_erf == PointwiseOrder::GeluErf::OneDnnMinimax) {
        out = kF32.mul(kF32.mul(v, kF32.add(erf_minimax(b, v), c(0x3f800000))), c(0x3f000000));
      } else {
        ExprRef z = b.let("gelu.z", kF32.mul(v, c(kOneOverSqrt2)));
        ExprRef q = b.let("gelu.q", onednn_exp(b, unary(Op::Neg, kF32.mul(z, z))));
        if (!backward) {
          ExprRef erf = erf_abramowitz_stegun(b, z, unary(Op::Neg, q), sign_bits(v));
          ExprRef half_x = b.let("gelu.half_x", kF32.mul(v, c(0x3f000000)));
          out = kF32.fma(erf, half_x, half_x);
        } else {
          ExprRef pdf_term = kF32.mul(kF32.mul(z, c(kOneOverSqrtPi)), q);
          ExprRef erf = erf_abramowitz_stegun(b, z, unary(Op::Neg, q), sign_bits(z));
          ExprRef g = kF32.fma(erf, c(0x3f000000), kF32.add(pdf_term, c(0x3f000000)));
          out = kF32.mul(g, row.load_as(dy, col, lanes, ScalarType::f32));
        }
      }
      if (flush) {
        // vcvtneps2bf16 reads an f32 subnormal as the zero of its sign.
        ExprRef tiny = binary(Op::Lt, abs_f32(out), c(0x00800000));
        out = select(tiny, bitcast(sign_bits(out), ScalarType::f32), out);
      }
      row.store_as(y, col, out);
    });
  });
  return k;
}

}  // namespace ordo::gen
