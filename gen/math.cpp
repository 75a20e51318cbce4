// Sleef's single-precision exp and log, written as IR. The operation sequence was measured
// bit-exact against the installed libsleef 3.5.1 over every input in the softmax and
// log_softmax domains (docs/research/softmax-torch1.13.md, sections 4, 5 and 9); constants
// are given by their bit patterns so no decimal conversion can move them.
#include "gen/math.hpp"

#include <bit>
#include <cstdint>
#include <limits>

namespace ordo::gen {

using namespace ordo::ir;

namespace {

struct F32 {
  int lanes;
  ExprRef c(float v) const {
    ExprRef k = constant(Type{ScalarType::f32, 1}, static_cast<double>(v));
    return lanes > 1 ? broadcast(k, lanes) : k;
  }
  ExprRef bits(uint32_t b) const { return c(std::bit_cast<float>(b)); }
  ExprRef i(int32_t v) const {
    ExprRef k = constant(Type{ScalarType::i32, 1}, static_cast<double>(v));
    return lanes > 1 ? broadcast(k, lanes) : k;
  }
};

ExprRef lt(ExprRef a, ExprRef b) { return binary(Op::Lt, std::move(a), std::move(b)); }
ExprRef eq(ExprRef a, ExprRef b) { return binary(Op::Eq, std::move(a), std::move(b)); }
ExprRef neg(ExprRef a) { return unary(Op::Neg, std::move(a)); }
// a*b - c and -(a*b) + c with one rounding: negation is exact, so these are plain fmas.
ExprRef fms(ExprRef a, ExprRef b, ExprRef c) { return fma(std::move(a), std::move(b), neg(std::move(c))); }
ExprRef fnma(ExprRef a, ExprRef b, ExprRef c) { return fma(neg(std::move(a)), std::move(b), std::move(c)); }

// The argument is read several times; bind it once.
ExprRef bound(Builder& b, ExprRef d, const char* name) { return d->op == Op::Var ? d : b.let(name, std::move(d)); }

}  // namespace

ExprRef sleef_expf_u10(Builder& b, ExprRef d) {
  const F32 k{d->type.lanes};
  d = bound(b, std::move(d), "exp.d");
  // q = round(d / ln 2) with ties to even (cvtps2dq); s = d - q*ln 2 in two fmas (hi, lo parts).
  ExprRef q = b.let("exp.q", cast(mul(d, k.bits(0x3fb8aa3b)), ScalarType::i32));
  ExprRef qf = b.let("exp.qf", cast(q, ScalarType::f32));
  ExprRef s = fma(qf, neg(k.bits(0x3f317200)), d);
  s = b.let("exp.s", fma(qf, neg(k.bits(0x35bfbe8e)), s));
  ExprRef u = k.bits(0x39502bda);
  for (uint32_t c : {0x3ab696c9u, 0x3c0888a6u, 0x3d2aaa7au, 0x3e2aaaabu, 0x3f000000u}) u = fma(u, s, k.bits(c));
  u = b.let("exp.u", add(k.c(1.0f), fma(mul(s, s), u, s)));
  // u * 2^q as two multiplies by powers of two built in the exponent field, so that q up to
  // 2^8 in magnitude never overflows the field: 2^(q>>1) * 2^(q - (q>>1)).
  ExprRef qh = b.let("exp.qh", binary(Op::Shr, q, k.i(1)));
  ExprRef p1 = bitcast(binary(Op::Shl, add(qh, k.i(127)), k.i(23)), ScalarType::f32);
  ExprRef p2 = bitcast(binary(Op::Shl, add(sub(q, qh), k.i(127)), k.i(23)), ScalarType::f32);
  u = mul(mul(u, p1), p2);
  u = select(lt(d, k.c(-104.0f)), k.c(0.0f), u);
  return select(lt(k.c(100.0f), d), k.c(std::numeric_limits<float>::infinity()), u);
}

ExprRef sleef_logf_u10(Builder& b, ExprRef d) {
  const F32 k{d->type.lanes};
  d = bound(b, std::move(d), "log.d");
  const ExprRef one = k.c(1.0f), minus_one = k.c(-1.0f);
  // Subnormal inputs are scaled by 2^64 first, and 64 is taken off the exponent later.
  ExprRef tiny = b.let("log.tiny", lt(d, k.bits(0x00800000)));
  ExprRef x = b.let("log.x", select(tiny, mul(d, k.bits(0x5f800000)), d));
  // e = ilogb(x * 4/3): the exponent that puts the mantissa m in [0.75, 1.5).
  ExprRef e = b.let("log.e", sub(binary(Op::BitAnd, binary(Op::Shr, bitcast(mul(x, k.bits(0x3faaaaab)), ScalarType::i32), k.i(23)), k.i(0xff)), k.i(127)));
  ExprRef m = b.let("log.m", bitcast(add(bitcast(x, ScalarType::i32), binary(Op::Shl, sub(k.i(0), e), k.i(23))), ScalarType::f32));
  ExprRef ef = b.let("log.ef", cast(select(tiny, sub(e, k.i(64)), e), ScalarType::f32));
  // (sx, sy) = e * ln 2 as a double-float.
  ExprRef ln2_hi = k.bits(0x3f317218), ln2_lo = k.bits(0xb102e308);
  ExprRef sx = b.let("log.sx", mul(ln2_hi, ef));
  ExprRef sy = b.let("log.sy", fma(ln2_lo, ef, fms(ln2_hi, ef, sx)));
  // (nx, ny) = m - 1 and (dx, dy) = m + 1, each as an exact two-sum.
  ExprRef nx = b.let("log.nx", add(minus_one, m));
  ExprRef v = b.let("log.v", sub(nx, minus_one));
  ExprRef ny = b.let("log.ny", add(sub(minus_one, sub(nx, v)), sub(m, v)));
  ExprRef dx = b.let("log.dx", add(one, m));
  ExprRef w = b.let("log.w", sub(dx, one));
  ExprRef dy = b.let("log.dy", add(sub(one, sub(dx, w)), sub(m, w)));
  // (xx, xy) = n / d in double-float arithmetic, with fma residuals.
  ExprRef t = b.let("log.t", div(one, dx));
  ExprRef xx = b.let("log.xx", mul(nx, t));
  ExprRef uu = fms(t, nx, xx);
  ExprRef qy = fnma(dy, t, fnma(dx, t, one));
  ExprRef xy = b.let("log.xy", fma(xx, qy, fma(ny, t, uu)));
  ExprRef x2 = b.let("log.x2", mul(xx, xx));
  ExprRef poly = fma(fma(k.bits(0x3e9aff5c), x2, k.bits(0x3ecc99ca)), x2, k.bits(0x3f2aaada));
  // log = e ln 2 + 2x + x^3 * poly, summed as double-floats, then rounded once.
  ExprRef yx = mul(xx, k.c(2.0f)), yy = mul(xy, k.c(2.0f));
  ExprRef rx = b.let("log.rx", add(sx, yx));
  ExprRef ry = b.let("log.ry", add(add(add(sub(sx, rx), yx), sy), yy));
  ExprRef cubic = b.let("log.cubic", mul(mul(x2, xx), poly));
  ExprRef r2x = b.let("log.r2x", add(rx, cubic));
  ExprRef r = b.let("log.r", add(r2x, add(add(sub(rx, r2x), cubic), ry)));
  const float inf = std::numeric_limits<float>::infinity();
  r = select(eq(d, k.c(inf)), k.c(inf), r);
  r = select(binary(Op::Or, lt(d, k.c(0.0f)), binary(Op::Ne, d, d)), k.c(std::numeric_limits<float>::quiet_NaN()), r);
  return select(eq(d, k.c(0.0f)), k.c(-inf), r);
}


// ordo's own 2^x (no library's algorithm; used by orders that claim no reference). x is clamped
// to [-125, 128]; n = that rounded to an integer (ties to even) and f = x - n in [-1/2, 1/2],
// exact; 2^f by its degree-7 Taylor polynomial in Horner form with fmas (truncation below 6e-9
// relative, so the result is within about 2 ulp); then (2 * 2^f) * 2^(n-1), the power built
// from exponent bits. x < -125 gives +0 (no subnormal results), x >= 128 gives +inf, NaN gives NaN.
ExprRef exp2_f32(Builder& b, ExprRef x) {
  const F32 k{x->type.lanes};
  x = bound(b, std::move(x), "exp2.x");
  ExprRef xc = b.let("exp2.xc", select(lt(x, k.c(-125.0f)), k.c(-125.0f), select(lt(k.c(128.0f), x), k.c(128.0f), x)));
  ExprRef n = b.let("exp2.n", cast(xc, ScalarType::i32));
  ExprRef f = b.let("exp2.f", sub(xc, cast(n, ScalarType::f32)));
  // c_k = ln(2)^k / k!, rounded to f32 (bit patterns).
  ExprRef p = k.bits(0x377fe5fe);
  p = fma(p, f, k.bits(0x39218489));
  p = fma(p, f, k.bits(0x3aaec3ff));
  p = fma(p, f, k.bits(0x3c1d955b));
  p = fma(p, f, k.bits(0x3d635847));
  p = fma(p, f, k.bits(0x3e75fdf0));
  p = fma(p, f, k.bits(0x3f317218));
  p = fma(p, f, k.bits(0x3f800000));
  ExprRef scale = bitcast(binary(Op::Shl, add(n, k.i(126)), k.i(23)), ScalarType::f32);  // 2^(n-1)
  ExprRef r = mul(mul(p, k.c(2.0f)), scale);
  r = select(lt(x, k.c(-125.0f)), k.c(0.0f), r);
  return select(binary(Op::Le, k.c(128.0f), x), k.c(std::numeric_limits<float>::infinity()), r);
}

ExprRef exp_f32(Builder& b, MathImpl impl, ExprRef d) {
  switch (impl) {
    case MathImpl::SleefU10: return sleef_expf_u10(b, std::move(d));
    case MathImpl::Libm: return call(MathFn::expf, std::move(d));
    case MathImpl::Device: return call(MathFn::device_expf, std::move(d));
  }
  return nullptr;
}
ExprRef log_f32(Builder& b, MathImpl impl, ExprRef d) {
  switch (impl) {
    case MathImpl::SleefU10: return sleef_logf_u10(b, std::move(d));
    case MathImpl::Libm: return call(MathFn::logf, std::move(d));
    case MathImpl::Device: return call(MathFn::device_logf, std::move(d));
  }
  return nullptr;
}

}  // namespace ordo::gen
