// Sleef's and glibc's single-precision exp and log, written as IR. Sleef's operation sequence was
// measured bit-exact against the installed libsleef 3.5.1 over every input in the softmax and
// log_softmax domains (docs/research/softmax-torch1.13.md, sections 4, 5 and 9); glibc's against
// the installed libm over every f32 (docs/research/glibc-expf-logf.md). Constants are given by
// their bit patterns or as hexadecimal floats, so no decimal conversion can move them.
#include "gen/blocks/math.hpp"


#include <bit>
#include <cstdint>
#include <iterator>
#include <limits>
#include <vector>

#include "ir/error.hpp"

namespace ordo::gen {

using namespace ordo::ir;

namespace {

// Constants at a value's lane count: f32 (c, bits), i32 (i), and for glibc's double-precision
// algorithms f64 (d) and i64 (i64).
struct Consts {
  int lanes;
  ExprRef splat(ExprRef k) const { return lanes > 1 ? broadcast(std::move(k), lanes) : k; }
  ExprRef c(float v) const { return splat(constant(Type{ScalarType::f32, 1}, static_cast<double>(v))); }
  ExprRef bits(uint32_t b) const { return c(std::bit_cast<float>(b)); }
  ExprRef i(int32_t v) const { return splat(constant(Type{ScalarType::i32, 1}, static_cast<double>(v))); }
  ExprRef d(double v) const { return splat(constant(Type{ScalarType::f64, 1}, v)); }
  ExprRef i64(int64_t v) const { return splat(index_const(v)); }
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
  const Consts k{d->type.lanes};
  d = bound(b, std::move(d), "exp.d");
  // q = round(d / ln 2) with ties to even (cvtps2dq); s = d - q*ln 2 in two fmas (hi, lo parts).
  ExprRef q = b.let("exp.q", cast(mul(d, k.bits(0x3fb8aa3b)), ScalarType::i32));
  ExprRef qf = b.let("exp.qf", cast(q, ScalarType::f32));
  ExprRef s = fma(qf, neg(k.bits(0x3f317200)), d);
  s = b.let("exp.s", fma(qf, neg(k.bits(0x35bfbe8e)), s));
  ExprRef u = k.bits(0x39502bda);
  for (uint32_t c : {0x3ab696c9u, 0x3c0888a6u, 0x3d2aaa7au, 0x3e2aaaabu, 0x3f000000u}) u = fma(u, s, k.bits(c));
  u = b.let("exp.u", add(k.c(1.0f), fma(mul(s, s), u, s)));
  // u * 2^q: Sleef multiplies by 2^(q>>1), then by 2^(q - (q>>1)), each built in the exponent
  // field. For every d the selects below keep (d in [-104, 100], or NaN), |s| <= 0.35, so u is in
  // [0.70, 1.42] and q in [-150, 145]: u * 2^(q>>1) is a normal number, exact, and the second
  // product is the only rounding. That is the IR's ldexp, inside its domain (ir.hpp), which a
  // CPU with AVX-512 runs as one instruction. A NaN d gives a NaN u, and ldexp keeps it.
  u = binary(Op::Ldexp, u, q);
  u = select(lt(d, k.c(-104.0f)), k.c(0.0f), u);
  return select(lt(k.c(100.0f), d), k.c(std::numeric_limits<float>::infinity()), u);
}

ExprRef sleef_logf_u10(Builder& b, ExprRef d) {
  const Consts k{d->type.lanes};
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


namespace {

// Sleef's double-float arithmetic, FMA build (src/common/df.h under ENABLE_FMA_SP): a value as
// an unevaluated sum hi + lo of two f32. Each helper is named after the Sleef function it writes
// out; every intermediate is bound once.
struct DF {
  ExprRef x, y;
};

struct DFOps {
  Builder& b;
  const Consts& k;
  std::string prefix;
  int n = 0;
  ExprRef let(ExprRef e) { return b.let(prefix + std::to_string(n++), std::move(e)); }
  DF let(DF d) { return {let(std::move(d.x)), let(std::move(d.y))}; }
  // x*y - z and -(x*y) + z, each one fma (vfmapn, vfmanp).
  static ExprRef fmapn(ExprRef x, ExprRef y, ExprRef z) { return fma(std::move(x), std::move(y), neg(std::move(z))); }
  static ExprRef fmanp(ExprRef x, ExprRef y, ExprRef z) { return fma(neg(std::move(x)), std::move(y), std::move(z)); }
  // dfadd2_vf2_vf2_vf: x + y with the exact two-sum of the high parts.
  DF add2(const DF& x, ExprRef y) {
    const ExprRef s = let(add(x.x, y));
    const ExprRef v = let(sub(s, x.x));
    const ExprRef t = add(sub(x.x, sub(s, v)), sub(y, v));
    return let(DF{s, add(t, x.y)});
  }
  // dfadd2_vf2_vf2_vf2
  DF add2(const DF& x, const DF& y) {
    const ExprRef s = let(add(x.x, y.x));
    const ExprRef v = let(sub(s, x.x));
    const ExprRef t = add(sub(x.x, sub(s, v)), sub(y.x, v));
    return let(DF{s, add(t, add(x.y, y.y))});
  }
  // dfadd_vf2_vf_vf2 (|x| >= |y|): ((x - s) + y.x) + y.y as the low part.
  DF sum(ExprRef x, const DF& y) {
    const ExprRef s = let(add(x, y.x));
    return let(DF{s, add(add(sub(x, s), y.x), y.y)});
  }
  // dfadd_vf2_vf2_vf2 (|x| >= |y|): (((x.x - s) + y.x) + x.y) + y.y as the low part.
  DF sum(const DF& x, const DF& y) {
    const ExprRef s = let(add(x.x, y.x));
    return let(DF{s, add(add(add(sub(x.x, s), y.x), x.y), y.y)});
  }
  // dfmul_vf2_vf2_vf
  DF prod(const DF& x, ExprRef y) {
    const ExprRef s = let(mul(x.x, y));
    return let(DF{s, fma(x.y, y, fmapn(x.x, y, s))});
  }
  // dfmul_vf2_vf2_vf2
  DF prod(const DF& x, const DF& y) {
    const ExprRef s = let(mul(x.x, y.x));
    return let(DF{s, fma(x.x, y.y, fma(x.y, y.x, fmapn(x.x, y.x, s)))});
  }
  // dfsqu_vf2_vf2
  DF squ(const DF& x) {
    const ExprRef s = let(mul(x.x, x.x));
    return let(DF{s, fma(add(x.x, x.x), x.y, fmapn(x.x, x.x, s))});
  }
  // dfrec_vf2_vf2: 1/d, the reciprocal by a division (vrec on AVX2 and AVX-512).
  DF rec(const DF& d) {
    const ExprRef s = let(div(k.c(1.0f), d.x));
    return let(DF{s, mul(s, fmanp(d.y, s, fmanp(d.x, s, k.c(1.0f))))});
  }
  // dfdiv_vf2_vf2_vf2
  DF div2(const DF& n, const DF& d) {
    const ExprRef t = let(div(k.c(1.0f), d.x));
    const ExprRef s = let(mul(n.x, t));
    const ExprRef u = fmapn(t, n.x, s);
    const ExprRef v = fmanp(d.y, t, fmanp(d.x, t, k.c(1.0f)));
    return let(DF{s, fma(s, v, fma(n.y, t, u))});
  }
};

}  // namespace

ExprRef sleef_tanhf_u10(Builder& b, ExprRef x) {
  const Consts k{x->type.lanes};
  x = bound(b, std::move(x), "tanh.x");
  DFOps df{b, k, "tanh.t"};
  const ExprRef a = b.let("tanh.a", bitcast(binary(Op::BitAnd, bitcast(x, ScalarType::i32), k.i(0x7fffffff)), ScalarType::f32));
  // expk2f((a, 0)): q = rint(a / ln 2); s = a - q ln 2 in two double-float steps (the products
  // rounded first, as Sleef multiplies before adding).
  const ExprRef q = b.let("tanh.q", cast(mul(add(a, k.c(0.0f)), k.bits(0x3fb8aa3b)), ScalarType::i32));
  const ExprRef qf = b.let("tanh.qf", cast(q, ScalarType::f32));
  DF s = df.add2(DF{a, k.c(0.0f)}, mul(qf, k.bits(0xbf317200)));  // -L2Uf
  s = df.add2(s, mul(qf, k.bits(0xb5bfbe8e)));                      // -L2Lf
  ExprRef u = k.bits(0x394fb7ff);
  for (uint32_t c : {0x3ab6bf7cu, 0x3c08890du, 0x3d2aaa5cu}) u = fma(u, s.x, k.bits(c));
  DF t = df.add2(df.prod(s, df.let(u)), k.bits(0x3e2aaaaa));
  t = df.add2(df.prod(s, t), k.c(0.5f));
  t = df.add2(s, df.prod(df.squ(s), t));
  t = df.sum(k.c(1.0f), t);
  // Both parts times 2^q, each as Sleef's vldexp2: d * 2^(q>>1) * 2^(q - (q>>1)), the powers of
  // two built in the exponent field. q >= 0 here (a >= 0), so no part underflows.
  const ExprRef half_q = b.let("tanh.q1", binary(Op::Shr, q, k.i(1)));
  const ExprRef p1 = b.let("tanh.p1", bitcast(binary(Op::Shl, add(half_q, k.i(0x7f)), k.i(23)), ScalarType::f32));
  const ExprRef p2 = b.let("tanh.p2", bitcast(binary(Op::Shl, add(sub(q, half_q), k.i(0x7f)), k.i(23)), ScalarType::f32));
  const DF e = df.let(DF{mul(mul(t.x, p1), p2), mul(mul(t.y, p1), p2)});
  // (e - 1/e) / (e + 1/e)
  const DF r = df.rec(e);
  const DF quotient = df.div2(df.sum(e, DF{neg(r.x), neg(r.y)}), df.sum(e, r));
  ExprRef y = b.let("tanh.y", add(quotient.x, quotient.y));
  y = select(binary(Op::Or, lt(k.bits(0x410aa123), a), binary(Op::Ne, y, y)), k.c(1.0f), y);  // |x| > 8.664339742
  // The sign of x (Sleef xors its sign bit into y >= 0: a negation), then all bits set for a NaN x.
  y = select(lt(cast(bitcast(x, ScalarType::i32), ScalarType::i64), k.i64(0)), neg(y), y);
  return select(binary(Op::Ne, x, x), bitcast(k.i(-1), ScalarType::f32), y);
}

namespace {

// glibc's 2^(i/32) table for expf: entry i is the bits of 2^(i/32) less i << 47, so that adding
// k << 47 for k = 32 m + i gives the bits of 2^(k/32) (m lands in the exponent field).
constexpr int64_t kExp2fTable[32] = {
    0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51, 0x3fef72b83c7d517b, 0x3fef54873168b9aa,
    0x3fef387a6e756238, 0x3fef1e9df51fdee1, 0x3fef06fe0a31b715, 0x3feef1a7373aa9cb, 0x3feedea64c123422, 0x3feece086061892d,
    0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429, 0x3feea47eb03a5585, 0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74,
    0x3feea11473eb0187, 0x3feea589994cce13, 0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d,
    0x3feee89f995ad3ad, 0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069, 0x3fef5818dcfba487, 0x3fef7c97337b9b5f,
    0x3fefa4afa2a490da, 0x3fefd0765b6e4540};

// glibc's logf table: for the 16 subintervals of [0x3f330000, 2 * 0x3f330000) as f32 bits, a
// c near the centre as 1/c and log(c).
constexpr double kLogfInvC[16] = {
    0x1.661ec79f8f3bep+0, 0x1.571ed4aaf883dp+0, 0x1.49539f0f010bp+0,  0x1.3c995b0b80385p+0, 0x1.30d190c8864a5p+0, 0x1.25e227b0b8eap+0,
    0x1.1bb4a4a1a343fp+0, 0x1.12358f08ae5bap+0, 0x1.0953f419900a7p+0, 0x1p+0,               0x1.e608cfd9a47acp-1, 0x1.ca4b31f026aap-1,
    0x1.b2036576afce6p-1, 0x1.9c2d163a1aa2dp-1, 0x1.886e6037841edp-1, 0x1.767dcf5534862p-1};
constexpr double kLogfLogC[16] = {
    -0x1.57bf7808caadep-2, -0x1.2bef0a7c06ddbp-2, -0x1.01eae7f513a67p-2, -0x1.b31d8a68224e9p-3, -0x1.6574f0ac07758p-3, -0x1.1aa2bc79c81p-3,
    -0x1.a4e76ce8c0e5ep-4, -0x1.1973c5a611cccp-4, -0x1.252f438e10c1ep-5, 0x0p+0,                0x1.aa5aa5df25984p-5,  0x1.c5e53aa362eb4p-4,
    0x1.526e57720db08p-3,  0x1.bc2860d22477p-3,   0x1.1058bc8a07ee1p-2,  0x1.4043057b6ee09p-2};

template <size_t N>
std::vector<int64_t> double_bits(const double (&values)[N]) {
  std::vector<int64_t> out;
  for (double v : values) out.push_back(std::bit_cast<int64_t>(v));
  return out;
}

}  // namespace

ExprRef glibc_expf(Builder& b, ExprRef x) {
  const Consts k{x->type.lanes};
  x = bound(b, std::move(x), "expf.x");
  const ExprRef xd = b.let("expf.xd", cast(x, ScalarType::f64));
  // z = x * 32/ln 2 = k + r, k an integer by the shift 1.5 * 2^52 (ties to even), r in [-1/2, 1/2].
  // The shifted sum and r are each one fma with the product x * 32/ln 2.
  const ExprRef inv_ln2_n = k.d(0x1.71547652b82fep+5), shift = k.d(0x1.8p+52);
  const ExprRef shifted = b.let("expf.shifted", fma(inv_ln2_n, xd, shift));
  const ExprRef ki = b.let("expf.ki", bitcast(shifted, ScalarType::i64));
  const ExprRef r = b.let("expf.r", fms(inv_ln2_n, xd, sub(shifted, shift)));
  // s = 2^(k/32): the table entry for k mod 32 plus k in the exponent field.
  const int tab = b.table(std::vector<int64_t>(std::begin(kExp2fTable), std::end(kExp2fTable)));
  const ExprRef entry = table(tab, binary(Op::BitAnd, ki, k.i64(31)));
  const ExprRef s = bitcast(add(entry, binary(Op::Shl, ki, k.i64(47))), ScalarType::f64);
  // 2^(r/32) ~ 1 + c2 r + c1 r^2 + c0 r^3, as (c0 r + c1) r^2 + (c2 r + 1).
  const ExprRef r2 = mul(r, r);
  const ExprRef hi = fma(k.d(0x1.c6af84b912394p-20), r, k.d(0x1.ebfce50fac4f3p-13));
  const ExprRef lo = fma(k.d(0x1.62e42ff0c52d6p-6), r, k.d(1.0));
  ExprRef y = cast(mul(fma(hi, r2, lo), s), ScalarType::f32);
  // |x| >= 88, infinities and NaN; between the thresholds the polynomial path above stands.
  const float inf = std::numeric_limits<float>::infinity();
  y = select(lt(x, k.c(-0x1.9d1d9ep6f)), k.c(0x1p-149f), y);  // exp(x) < 2^-149: the least subnormal
  y = select(lt(x, k.c(-0x1.9fe368p6f)), k.c(0.0f), y);       // exp(x) < 2^-150 (and -inf): +0
  y = select(lt(k.c(0x1.62e42ep6f), x), k.c(inf), y);         // exp(x) > FLT_MAX (and +inf)
  return select(binary(Op::Ne, x, x), add(x, x), y);
}

namespace {
// glibc's double exp table, 128 pairs for k = 0..127: the bits of H_k = 2^(k/128) rounded to
// double, less k << 45 (so that adding i << 45 for i = 128 m + k gives the bits of 2^(i/128)),
// and the bits of the tail T_k = (2^(k/128) - H_k) / H_k rounded to double. Computed from that
// definition with 80-digit arithmetic; they equal the installed libm's data.
constexpr uint64_t kExpTable[128][2] = {
    {0x3ff0000000000000, 0x0000000000000000}, {0x3feff63da9fb3335, 0x3c9b3b4f1a88bf6e}, {0x3fefec9a3e778061, 0xbc7160139cd8dc5d},
    {0x3fefe315e86e7f85, 0xbc905e7a108766d1}, {0x3fefd9b0d3158574, 0x3c8cd2523567f613}, {0x3fefd06b29ddf6de, 0xbc8bce8023f98efa},
    {0x3fefc74518759bc8, 0x3c60f74e61e6c861}, {0x3fefbe3ecac6f383, 0x3c90a3e45b33d399}, {0x3fefb5586cf9890f, 0x3c979aa65d837b6d},
    {0x3fefac922b7247f7, 0x3c8eb51a92fdeffc}, {0x3fefa3ec32d3d1a2, 0x3c3ebe3d702f9cd1}, {0x3fef9b66affed31b, 0xbc6a033489906e0b},
    {0x3fef9301d0125b51, 0xbc9556522a2fbd0e}, {0x3fef8abdc06c31cc, 0xbc5080ef8c4eea55}, {0x3fef829aaea92de0, 0xbc91c923b9d5f416},
    {0x3fef7a98c8a58e51, 0x3c80d3e3e95c55af}, {0x3fef72b83c7d517b, 0xbc801b15eaa59348}, {0x3fef6af9388c8dea, 0xbc8f1ff055de323d},
    {0x3fef635beb6fcb75, 0x3c8b898c3f1353bf}, {0x3fef5be084045cd4, 0xbc96d99c7611eb26}, {0x3fef54873168b9aa, 0x3c9aecf73e3a2f60},
    {0x3fef4d5022fcd91d, 0xbc8fe782cb86389d}, {0x3fef463b88628cd6, 0x3c8a6f4144a6c38d}, {0x3fef3f49917ddc96, 0x3c807a05b0e4047d},
    {0x3fef387a6e756238, 0x3c968efde3a8a894}, {0x3fef31ce4fb2a63f, 0x3c875e18f274487d}, {0x3fef2b4565e27cdd, 0x3c80472b981fe7f2},
    {0x3fef24dfe1f56381, 0xbc96b87b3f71085e}, {0x3fef1e9df51fdee1, 0x3c82f7e16d09ab31}, {0x3fef187fd0dad990, 0xbc3d219b1a6fbffa},
    {0x3fef1285a6e4030b, 0x3c8b3782720c0ab4}, {0x3fef0cafa93e2f56, 0x3c6e149289cecb8f}, {0x3fef06fe0a31b715, 0x3c834d754db0abb6},
    {0x3fef0170fc4cd831, 0x3c864201e2ac744c}, {0x3feefc08b26416ff, 0x3c8fdd395dd3f84a}, {0x3feef6c55f929ff1, 0xbc86a3803b8e5b04},
    {0x3feef1a7373aa9cb, 0xbc924aedcc4b5068}, {0x3feeecae6d05d866, 0xbc9907f81b512d8e}, {0x3feee7db34e59ff7, 0xbc71d1e83e9436d2},
    {0x3feee32dc313a8e5, 0xbc991919b3ce1b15}, {0x3feedea64c123422, 0x3c859f48a72a4c6d}, {0x3feeda4504ac801c, 0xbc9312607a28698a},
    {0x3feed60a21f72e2a, 0xbc58a78f4817895b}, {0x3feed1f5d950a897, 0xbc7c2c9b67499a1b}, {0x3feece086061892d, 0x3c4363ed60c2ac11},
    {0x3feeca41ed1d0057, 0x3c9666093b0664ef}, {0x3feec6a2b5c13cd0, 0x3c6ecce1daa10379}, {0x3feec32af0d7d3de, 0x3c93ff8e3f0f1230},
    {0x3feebfdad5362a27, 0x3c7690cebb7aafb0}, {0x3feebcb299fddd0d, 0x3c931dbdeb54e077}, {0x3feeb9b2769d2ca7, 0xbc8f94340071a38e},
    {0x3feeb6daa2cf6642, 0xbc87deccdc93a349}, {0x3feeb42b569d4f82, 0xbc78dec6bd0f385f}, {0x3feeb1a4ca5d920f, 0xbc861246ec7b5cf6},
    {0x3feeaf4736b527da, 0x3c93350518fdd78e}, {0x3feead12d497c7fd, 0x3c7b98b72f8a9b05}, {0x3feeab07dd485429, 0x3c9063e1e21c5409},
    {0x3feea9268a5946b7, 0x3c34c7855019c6ea}, {0x3feea76f15ad2148, 0x3c9432e62b64c035}, {0x3feea5e1b976dc09, 0xbc8ce44a6199769f},
    {0x3feea47eb03a5585, 0xbc8c33c53bef4da8}, {0x3feea34634ccc320, 0xbc845378892be9ae}, {0x3feea23882552225, 0xbc93cedd78565858},
    {0x3feea155d44ca973, 0x3c5710aa807e1964}, {0x3feea09e667f3bcd, 0xbc93b3efbf5e2228}, {0x3feea012750bdabf, 0xbc6a12ad8734b982},
    {0x3fee9fb23c651a2f, 0xbc6367efb86da9ee}, {0x3fee9f7df9519484, 0xbc80dc3d54e08851}, {0x3fee9f75e8ec5f74, 0xbc781f647e5a3ecf},
    {0x3fee9f9a48a58174, 0xbc86ee4ac08b7db0}, {0x3fee9feb564267c9, 0xbc8619321e55e68a}, {0x3feea0694fde5d3f, 0x3c909ccb5e09d4d3},
    {0x3feea11473eb0187, 0xbc7b32dcb94da51d}, {0x3feea1ed0130c132, 0x3c94ecfd5467c06b}, {0x3feea2f336cf4e62, 0x3c65ebe1abd66c55},
    {0x3feea427543e1a12, 0xbc88a1c52fb3cf42}, {0x3feea589994cce13, 0xbc9369b6f13b3734}, {0x3feea71a4623c7ad, 0xbc805e843a19ff1e},
    {0x3feea8d99b4492ed, 0xbc94d450d872576e}, {0x3feeaac7d98a6699, 0x3c90ad675b0e8a00}, {0x3feeace5422aa0db, 0x3c8db72fc1f0eab4},
    {0x3feeaf3216b5448c, 0xbc65b6609cc5e7ff}, {0x3feeb1ae99157736, 0x3c7bf68359f35f44}, {0x3feeb45b0b91ffc6, 0xbc93091fa71e3d83},
    {0x3feeb737b0cdc5e5, 0xbc5da9b88b6c1e29}, {0x3feeba44cbc8520f, 0xbc6c23f97c90b959}, {0x3feebd829fde4e50, 0xbc92434322f4f9aa},
    {0x3feec0f170ca07ba, 0xbc85ca6cd7668e4b}, {0x3feec49182a3f090, 0x3c71affc2b91ce27}, {0x3feec86319e32323, 0x3c6dd235e10a73bb},
    {0x3feecc667b5de565, 0xbc87c50422622263}, {0x3feed09bec4a2d33, 0x3c8b1c86e3e231d5}, {0x3feed503b23e255d, 0xbc91bbd1d3bcbb15},
    {0x3feed99e1330b358, 0x3c90cc319cee31d2}, {0x3feede6b5579fdbf, 0x3c8469846e735ab3}, {0x3feee36bbfd3f37a, 0xbc82dfcd978e9db4},
    {0x3feee89f995ad3ad, 0x3c8c1a7792cb3387}, {0x3feeee07298db666, 0xbc907b8f4ad1d9fa}, {0x3feef3a2b84f15fb, 0xbc55c3d956dcaeba},
    {0x3feef9728de5593a, 0xbc90a40e3da6f640}, {0x3feeff76f2fb5e47, 0xbc68d6f438ad9334}, {0x3fef05b030a1064a, 0xbc91eee26b588a35},
    {0x3fef0c1e904bc1d2, 0x3c74ffd70a5fddcd}, {0x3fef12c25bd71e09, 0xbc91bdfbfa9298ac}, {0x3fef199bdd85529c, 0x3c736eae30af0cb3},
    {0x3fef20ab5fffd07a, 0x3c8ee3325c9ffd94}, {0x3fef27f12e57d14b, 0x3c84e08fd10959ac}, {0x3fef2f6d9406e7b5, 0x3c63cdaf384e1a67},
    {0x3fef3720dcef9069, 0x3c676b2c6c921968}, {0x3fef3f0b555dc3fa, 0xbc808a1883ccb5d2}, {0x3fef472d4a07897c, 0xbc8fad5d3ffffa6f},
    {0x3fef4f87080d89f2, 0xbc900dae3875a949}, {0x3fef5818dcfba487, 0x3c74a385a63d07a7}, {0x3fef60e316c98398, 0xbc82919e2040220f},
    {0x3fef69e603db3285, 0x3c8e5a50d5c192ac}, {0x3fef7321f301b460, 0x3c843a59ac016b4b}, {0x3fef7c97337b9b5f, 0xbc82d52107b43e1f},
    {0x3fef864614f5a129, 0xbc892ab93b470dc9}, {0x3fef902ee78b3ff6, 0x3c74b604603a88d3}, {0x3fef9a51fbc74c83, 0x3c83c5ec519d7271},
    {0x3fefa4afa2a490da, 0xbc8ff7128fd391f0}, {0x3fefaf482d8e67f1, 0xbc8dae98e223747d}, {0x3fefba1bee615a27, 0x3c8ec3bc41aa2008},
    {0x3fefc52b376bba97, 0x3c842b94c3a9eb32}, {0x3fefd0765b6e4540, 0x3c8a64a931d185ee}, {0x3fefdbfdad9cbe14, 0xbc8e37bae43be3ed},
    {0x3fefe7c1819e90d8, 0x3c77893b4d91cd9d}, {0x3feff3c22b8f71f1, 0x3c5305c14160cc89},
};
}  // namespace

ExprRef glibc_exp_f64(Builder& b, ExprRef x) {
  const Consts k{x->type.lanes};
  x = bound(b, std::move(x), "exp.x");
  // x * 128/ln 2 = i + r', i an integer by the shift 1.5 * 2^52 (one fma); r = x - i ln2/128 in
  // two fmas with ln2/128 split in a high and a low part.
  const ExprRef shift = k.d(0x1.8p52);
  const ExprRef shifted = b.let("exp.shifted", fma(x, k.d(0x1.71547652b82fep7), shift));
  const ExprRef ki = b.let("exp.ki", bitcast(shifted, ScalarType::i64));
  const ExprRef kd = b.let("exp.kd", sub(shifted, shift));
  const ExprRef r = b.let("exp.r", fma(kd, k.d(-0x1.cf79abc9e3b3ap-47), fma(kd, k.d(-0x1.62e42fefa0000p-8), x)));
  // 2^(i/128) = H_(i mod 128) (1 + T_(i mod 128)), with i / 128 added to the exponent field.
  std::vector<int64_t> scales, tails;
  for (const auto& e : kExpTable) {
    scales.push_back(static_cast<int64_t>(e[0]));
    tails.push_back(static_cast<int64_t>(e[1]));
  }
  const ExprRef slot = b.let("exp.slot", binary(Op::BitAnd, ki, k.i64(127)));
  const ExprRef tail = bitcast(table(b.table(std::move(tails)), slot), ScalarType::f64);
  const ExprRef scale = b.let("exp.scale", bitcast(add(table(b.table(std::move(scales)), slot), binary(Op::Shl, ki, k.i64(45))), ScalarType::f64));
  // tmp = T + r + r^2 (c2 + c3 r) + r^4 (c4 + c5 r), each bracket an fma, the sums as fmas.
  const ExprRef r2 = b.let("exp.r2", mul(r, r));
  const ExprRef low = fma(fma(r, k.d(0x1.555555555543cp-3), k.d(0x1.ffffffffffdbdp-2)), r2, add(r, tail));
  const ExprRef tmp = fma(mul(r2, r2), fma(r, k.d(0x1.1111167a4d017p-7), k.d(0x1.55555cf172b91p-5)), low);
  ExprRef y = fma(scale, tmp, scale);
  // |x| < 2^-54: 1 + x. |x| >= 512 (and the infinities): 0 below, +inf above, which is what the
  // library's special path returns once the result is rounded to f32 (its results there are
  // below 2^-700 or above 2^700). NaN: x + 1.
  const double inf = std::numeric_limits<double>::infinity();
  const ExprRef ax = b.let("exp.ax", select(lt(x, k.d(0.0)), neg(x), x));
  y = select(lt(ax, k.d(0x1p-54)), add(x, k.d(1.0)), y);
  y = select(binary(Op::Le, k.d(512.0), ax), select(lt(x, k.d(0.0)), k.d(0.0), k.d(inf)), y);
  return select(binary(Op::Ne, x, x), add(x, k.d(1.0)), y);
}

ExprRef glibc_exp_double_f32(Builder& b, ExprRef x) {
  return cast(glibc_exp_f64(b, cast(std::move(x), ScalarType::f64)), ScalarType::f32);
}

namespace {
// PyTorch's exp_u20 is oneDNN's exp injector ported; the two differ in fx's first step alone.
ExprRef exp_u20_family(Builder& b, ExprRef x, bool fused_fx) {
  const Consts k{x->type.lanes};
  x = bound(b, std::move(x), "exp_u20.x");
  const ExprRef ln_min = k.bits(0xc2aeac50), ln_max = k.bits(0x42b17218);
  // The clamp as the min/max instructions do it: each returns its second operand when the
  // first is NaN, so a NaN argument is clamped to ln_max (no NaN propagates).
  ExprRef src = select(lt(x, ln_max), x, ln_max);
  src = b.let("exp_u20.src", select(lt(ln_min, src), src, ln_min));
  // fx = floor(src log2(e) + 1/2): one fma (PyTorch) or a product then a sum (oneDNN), then a
  // rounding down.
  const ExprRef t = b.let("exp_u20.t", fused_fx ? fma(src, k.bits(0x3fb8aa3b), k.c(0.5f)) : add(mul(src, k.bits(0x3fb8aa3b)), k.c(0.5f)));
  const ExprRef fx = b.let("exp_u20.fx", unary(Op::Floor, t));
  const ExprRef r = b.let("exp_u20.r", fnma(fx, k.bits(0x3f317218), src));
  // Degree-5 Horner polynomial in r, every step an fma.
  ExprRef p = fma(r, k.c(0.00828929059f), k.c(0.0418978221f));
  for (float c : {0.166676521f, 0.499991506f, 0.999999701f, 1.0f}) p = fma(r, p, k.c(c));
  // y = (p * 2^(fx - 1)) * 2, the power built in the exponent field; +0 below ln_min.
  const ExprRef pow = bitcast(binary(Op::Shl, add(cast(sub(fx, k.c(1.0f)), ScalarType::i32), k.i(127)), k.i(23)), ScalarType::f32);
  const ExprRef y = mul(p, select(lt(x, ln_min), k.c(0.0f), pow));
  return mul(y, k.c(2.0f));
}
}  // namespace

ExprRef torch_exp_u20(Builder& b, ExprRef x) { return exp_u20_family(b, std::move(x), /*fused_fx=*/true); }
ExprRef onednn_exp(Builder& b, ExprRef x) { return exp_u20_family(b, std::move(x), /*fused_fx=*/false); }

ExprRef torch_fexp_u20(Builder& b, ExprRef x) {
  const Consts k{x->type.lanes};
  x = bound(b, std::move(x), "fexp.x");
  // 2^(x log2 e): src = x log2(e); the fraction f = src - floor(src) corrects src by a cubic
  // (Horner, fmas): src - c(f); then t = 2^23 src + 127 * 2^23 (one fma) truncated to an integer
  // is the result's bit pattern. Below ln FLT_MIN: +0; above ln FLT_MAX: +inf (NaN: neither,
  // the truncation's 0x80000000, -0).
  // The library floors src by a conversion to int32, which differs from a floor only where |src|
  // >= 2^31, and truncates t, which differs from a floor only where t < 0: x is out of range
  // (below -88 or above 2^31 / log2 e; NaN is NaN either way) in both, and the range selects
  // below replace those results.
  const ExprRef src = b.let("fexp.src", mul(x, k.bits(0x3fb8aa3b)));
  const ExprRef frac = b.let("fexp.frac", sub(src, unary(Op::Floor, src)));
  ExprRef c = fma(frac, k.c(-0.079204240219773236f), k.c(-0.22433836478672356f));
  c = fma(frac, c, k.c(0.30354260500649682f));
  c = fma(frac, c, k.c(0.00010703434948458272f));
  const ExprRef t = b.let("fexp.t", fma(k.c(8388608.0f), sub(src, c), k.c(8388608.0f * 127.0f)));
  // t's integer part (exact: t < 2^31 in range); NaN converts to INT32_MIN.
  ExprRef bits = cast(unary(Op::Floor, t), ScalarType::i32);
  bits = select(lt(x, k.bits(0xc2aeac50)), k.i(0), bits);
  bits = select(lt(k.bits(0x42b17218), x), k.i(0x7F800000), bits);
  return bitcast(bits, ScalarType::f32);
}

ExprRef glibc_logf(Builder& b, ExprRef x) {
  const Consts k{x->type.lanes};
  x = bound(b, std::move(x), "logf.x");
  // A subnormal x is scaled by 2^23 first and 23 taken off its exponent bits.
  const ExprRef subnormal = binary(Op::And, lt(k.c(0.0f), x), lt(x, k.c(0x1p-126f)));
  const ExprRef ix = b.let("logf.ix", select(subnormal, sub(bitcast(mul(x, k.c(0x1p23f)), ScalarType::i32), k.i(23 << 23)),
                                              bitcast(x, ScalarType::i32)));
  // x = 2^e z with z's bits in [0x3f330000, 2 * 0x3f330000): tmp = ix - 0x3f330000 holds e in
  // its top 9 bits and the subinterval of z in the next 4.
  const ExprRef tmp = b.let("logf.tmp", sub(ix, k.i(0x3f330000)));
  const ExprRef i = b.let("logf.i", cast(binary(Op::BitAnd, binary(Op::Shr, tmp, k.i(19)), k.i(15)), ScalarType::i64));
  const ExprRef e = cast(cast(binary(Op::Shr, tmp, k.i(23)), ScalarType::f32), ScalarType::f64);  // |e| < 2^8: exact
  const ExprRef z = cast(bitcast(sub(ix, binary(Op::BitAnd, tmp, k.i(static_cast<int32_t>(0xff800000u)))), ScalarType::f32), ScalarType::f64);
  const ExprRef inv_c = bitcast(table(b.table(double_bits(kLogfInvC)), i), ScalarType::f64);
  const ExprRef log_c = bitcast(table(b.table(double_bits(kLogfLogC)), i), ScalarType::f64);
  // log x = e ln 2 + log c + log1p(r), r = z/c - 1 (one fma), log1p(r) ~ r + a2 r^2 + a1 r^3 + a0 r^4.
  // (glibc returns 0 for x = 1 before all this, for directed rounding; at RNE the path below
  // gives +0 too.)
  const ExprRef y0 = fma(e, k.d(0x1.62e42fefa39efp-1), log_c);
  const ExprRef r = b.let("logf.r", fma(z, inv_c, k.d(-1.0)));
  const ExprRef r2 = b.let("logf.r2", mul(r, r));
  ExprRef p = fma(r, k.d(0x1.5575b0be00b6ap-2), k.d(-0x1.ffffef20a4123p-2));
  p = fma(k.d(-0x1.00ea348b88334p-2), r2, p);
  ExprRef y = cast(fma(p, r2, add(r, y0)), ScalarType::f32);
  const float inf = std::numeric_limits<float>::infinity();
  y = select(binary(Op::Or, lt(x, k.c(0.0f)), binary(Op::Ne, x, x)), k.c(std::numeric_limits<float>::quiet_NaN()), y);
  y = select(eq(x, k.c(inf)), k.c(inf), y);
  return select(eq(x, k.c(0.0f)), k.c(-inf), y);  // +0 and -0
}

// ordo's own 2^x (no library's algorithm; used by orders that claim no reference). x is clamped
// to [-125, 128]; n = that rounded to an integer (ties to even) and f = x - n in [-1/2, 1/2],
// exact; 2^f by its degree-7 Taylor polynomial in Horner form with fmas (truncation below 6e-9
// relative, so the result is within about 2 ulp); then (2 * 2^f) * 2^(n-1), the power built
// from exponent bits. x < -125 gives +0 (no subnormal results), x >= 128 gives +inf, NaN gives NaN.
ExprRef glibc_expm1f(Builder& b, ExprRef x) {
  const Consts k{x->type.lanes};
  x = bound(b, std::move(x), "expm1.x");
  const ExprRef one = k.c(1.0f), half = k.c(0.5f);
  const ExprRef hx_signed = b.let("expm1.bits", bitcast(x, ScalarType::i32));
  // Integer comparisons run on i64 (the IR compares f32, f64 and i64).
  const ExprRef negative = b.let("expm1.neg", lt(cast(hx_signed, ScalarType::i64), k.i64(0)));  // the sign bit, -0 included
  const ExprRef hx = b.let("expm1.hx", cast(binary(Op::BitAnd, hx_signed, k.i(0x7fffffff)), ScalarType::i64));
  // Reduction for |x| > ln2/2: k = +-1 with ln 2 in two parts below 1.5 ln 2, else k = the
  // truncation of x/ln 2 +- 1/2 (a float product and sum, then C's conversion toward zero: floor
  // of the magnitude; the value is an integer below 2^8 in magnitude, so the cast is exact).
  const ExprRef near = binary(Op::And, lt(k.i64(0x3eb17218), hx), lt(hx, k.i64(0x3f851592)));
  const ExprRef v = b.let("expm1.v", add(mul(k.bits(0x3fb8aa3b), x), select(negative, neg(half), half)));
  const ExprRef trunc_v = select(negative, neg(unary(Op::Floor, neg(v))), unary(Op::Floor, v));
  const ExprRef kf_far = b.let("expm1.kf", trunc_v);
  const ExprRef kf_reduced = b.let("expm1.kr", select(near, select(negative, k.c(-1.0f), one), kf_far));
  const ExprRef reduced = b.let("expm1.reduced", lt(k.i64(0x3eb17218), hx));
  const ExprRef kf = b.let("expm1.kf0", select(reduced, kf_reduced, k.c(0.0f)));
  const ExprRef ki = b.let("expm1.k", cast(kf, ScalarType::i32));
  const ExprRef k64 = b.let("expm1.k64", cast(ki, ScalarType::i64));
  // hi = x - k ln2_hi (exact product), lo = k ln2_lo; for k = +-1 the same with k*ln2 = +-ln2.
  const ExprRef hi = b.let("expm1.hi", sub(x, mul(kf_reduced, k.bits(0x3f317180))));
  const ExprRef lo = b.let("expm1.lo", mul(kf_reduced, k.bits(0x3717f7d1)));
  const ExprRef xr_reduced = b.let("expm1.xr0", sub(hi, lo));
  const ExprRef r = b.let("expm1.r", select(reduced, xr_reduced, x));
  const ExprRef c = b.let("expm1.c", sub(sub(hi, xr_reduced), lo));
  // The primary range: r1 = 1 + hxs (Q1 + hxs (Q2 + ...)), hxs = r * r/2.
  const ExprRef hfx = b.let("expm1.hfx", mul(half, r));
  const ExprRef hxs = b.let("expm1.hxs", mul(r, hfx));
  ExprRef poly = k.bits(0xb457edbb);
  for (uint32_t q : {0x36867e54u, 0xb8a670cdu, 0x3ad00d01u, 0xbd088889u}) poly = add(k.bits(q), mul(hxs, poly));
  const ExprRef r1 = b.let("expm1.r1", add(one, mul(hxs, poly)));
  const ExprRef t = b.let("expm1.t", sub(k.c(3.0f), mul(r1, hfx)));
  const ExprRef e0 = b.let("expm1.e0", mul(hxs, div(sub(r1, t), sub(k.c(6.0f), mul(r, t)))));
  const ExprRef y_k0 = sub(r, sub(mul(r, e0), hxs));
  const ExprRef e = b.let("expm1.e", sub(sub(mul(r, sub(e0, c)), c), hxs));
  const ExprRef y_km1 = sub(mul(half, sub(r, e)), half);
  const ExprRef y_k1 = select(lt(r, k.c(-0.25f)), mul(k.c(-2.0f), sub(e, add(r, half))), add(one, mul(k.c(2.0f), sub(r, e))));
  // 2^k applied by adding k to the exponent field of y.
  const ExprRef exponent = b.let("expm1.kexp", binary(Op::Shl, ki, k.i(23)));
  const auto scaled = [&](ExprRef y) { return bitcast(add(bitcast(std::move(y), ScalarType::i32), exponent), ScalarType::f32); };
  const ExprRef y_wide = sub(scaled(sub(one, sub(e, r))), one);  // k <= -2 or k > 56
  const ExprRef two_to_minus_k = b.let("expm1.tk", bitcast(binary(Op::Shl, sub(k.i(0x7f), ki), k.i(23)), ScalarType::f32));
  const ExprRef y_small = scaled(sub(sub(one, two_to_minus_k), sub(e, r)));  // 2 <= k < 23: 1 - 2^-k is exact
  const ExprRef y_large = scaled(add(sub(r, add(e, two_to_minus_k)), one));  // 23 <= k <= 56
  ExprRef y = select(lt(k64, k.i64(23)), y_small, y_large);
  y = select(binary(Op::Or, binary(Op::Le, k64, k.i64(-2)), lt(k.i64(56), k64)), y_wide, y);
  y = select(eq(k64, k.i64(1)), y_k1, y);
  y = select(eq(k64, k.i64(-1)), y_km1, y);
  y = select(eq(k64, k.i64(0)), y_k0, y);
  // |x| < 2^-25: x itself; x <= -27 ln 2 (-inf included): -1; x >= 88.72284 (0x42b17218, +inf
  // included): +inf (fdlibm's overflow test; just below it the reduction's exponent add
  // overflows as in C); NaN: x + x.
  y = select(lt(hx, k.i64(0x33000000)), x, y);
  y = select(binary(Op::And, negative, binary(Op::Le, k.i64(0x4195b844), hx)), k.c(-1.0f), y);
  y = select(binary(Op::And, binary(Op::Le, k.i64(0), cast(hx_signed, ScalarType::i64)), binary(Op::Le, k.i64(0x42b17218), hx)), k.c(std::numeric_limits<float>::infinity()), y);
  return select(binary(Op::Ne, x, x), add(x, x), y);
}

ExprRef glibc_tanhf(Builder& b, ExprRef x) {
  const Consts k{x->type.lanes};
  x = bound(b, std::move(x), "tanh.x");
  const ExprRef one = k.c(1.0f), two = k.c(2.0f);
  const ExprRef jx = b.let("tanh.bits", bitcast(x, ScalarType::i32));
  const ExprRef ix32 = binary(Op::BitAnd, jx, k.i(0x7fffffff));
  const ExprRef ax = b.let("tanh.ax", bitcast(ix32, ScalarType::f32));
  const ExprRef ix = b.let("tanh.ix", cast(ix32, ScalarType::i64));  // compared as i64
  const ExprRef negative = b.let("tanh.neg", lt(cast(jx, ScalarType::i64), k.i64(0)));
  const ExprRef big = b.let("tanh.big", binary(Op::Le, k.i64(0x3f800000), ix));  // |x| >= 1
  const ExprRef t = b.let("tanh.t", glibc_expm1f(b, select(big, mul(two, ax), mul(k.c(-2.0f), ax))));
  ExprRef z = select(big, sub(one, div(two, add(t, two))), div(neg(t), add(t, two)));
  z = select(binary(Op::Le, k.i64(0x41b00000), ix), one, z);  // |x| >= 22: 1 - 1e-30 rounds to 1
  ExprRef y = select(negative, neg(z), z);
  y = select(lt(ix, k.i64(0x24000000)), mul(x, add(one, x)), y);  // |x| < 2^-55, +-0 included
  // +-inf: 1/x +- 1 = +-1; NaN: 1/x + 1 (or - 1 with the sign bit), a NaN.
  const ExprRef special = select(negative, sub(div(one, x), one), add(div(one, x), one));
  return select(binary(Op::Le, k.i64(0x7f800000), ix), special, y);
}

ExprRef exp2_f32(Builder& b, ExprRef x) {
  const Consts k{x->type.lanes};
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
    case MathImpl::Glibc: return glibc_expf(b, std::move(d));
    case MathImpl::GlibcDouble: return glibc_exp_double_f32(b, std::move(d));
    case MathImpl::TorchExpU20: return torch_exp_u20(b, std::move(d));
    case MathImpl::TorchFexpU20: return torch_fexp_u20(b, std::move(d));
    case MathImpl::Device: return call(MathFn::device_expf, std::move(d));
  }
  return nullptr;
}
ExprRef log_f32(Builder& b, MathImpl impl, ExprRef d) {
  switch (impl) {
    case MathImpl::SleefU10: return sleef_logf_u10(b, std::move(d));
    case MathImpl::Glibc: return glibc_logf(b, std::move(d));
    case MathImpl::Device: return call(MathFn::device_logf, std::move(d));
    case MathImpl::GlibcDouble:
    case MathImpl::TorchExpU20:
    case MathImpl::TorchFexpU20: break;  // exp-only implementations
  }
  throw Error("internal: an exp-only implementation (glibc double exp, exp_u20) has no log");
}

}  // namespace ordo::gen
