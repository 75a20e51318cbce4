// ordo_rt.cuh: the helpers every kernel rendered by backends/cuda includes. Each function is the
// exact lowering of one IR node (ir/ir.hpp); none decides numerics.
//
// The same text is compiled two ways: by NVRTC for the GPU, and by the host C++ compiler on
// top of templates/simt_emu.hpp (target cuda-emu), which defines the CUDA intrinsics used here
// with the same IEEE meaning. So this file uses only: __fadd_rn-style intrinsics (one rounding,
// never contracted), __float_as_int-style bit casts, __float2int_rn, __ll2float_rn-style
// conversions, floorf and floor (exact), plain integer and comparison operators, and three
// f32 <-> f16/bf16 conversion instructions (cvt_*: inline PTX on the GPU, written out by
// simt_emu.hpp on the host).
//
// Vectors: vec<T, N> is N lanes in a plain array. Every operation is lane by lane, written out
// as a pack expansion over the lane indices (not a loop), so the lanes of a register-resident
// vec become N scalar registers on the GPU. A loop per IR node, each fully unrolled by NVVM,
// cost NVRTC's optimizer about as much again as the rest of the kernel (layer_norm at N = 4096:
// 95 ms with loops, 55 ms without).
#pragma once

#if defined(__CUDACC__)
#define ORDO_FN __device__ __forceinline__
#define ORDO_VEC_FN ORDO_FN
#define ORDO_UNROLL _Pragma("unroll")
// An IR loop: its unrolling is the one the IR states, so the compiler adds none (and the PTX
// holds exactly one instruction per lane of each IR node).
#define ORDO_LOOP _Pragma("unroll 1")
#else  // the host, through simt_emu.hpp
#define ORDO_FN inline __attribute__((always_inline))
// The vector helpers the renderer calls stay calls on the host. Forced inline, the written-out
// lanes of every IR node land in the kernel's one function, and g++ -O1's inliner took 3x longer
// over the shipped kernels than with loops (bf16 layer_norm: 1.4 -> 11 s). As calls, each helper
// is compiled once per lane type and count, in about half the time the loops took.
#define ORDO_VEC_FN inline __attribute__((noinline))
#define ORDO_UNROLL
#define ORDO_LOOP
#endif

namespace ordo_rt {

typedef long long i64;
typedef unsigned long long u64;

// Storage types: a bit pattern, converted only by the explicit algorithms below.
struct bf16 {
  unsigned short bits;
};
struct f16 {
  unsigned short bits;
};

template <class T, int N>
struct vec {
  T v[N];
};

// ---- arithmetic: one IEEE operation, rounded to nearest even, never fused -------------------
ORDO_FN float add(float a, float b) { return __fadd_rn(a, b); }
ORDO_FN float sub(float a, float b) { return __fsub_rn(a, b); }
ORDO_FN float mul(float a, float b) { return __fmul_rn(a, b); }
ORDO_FN float div(float a, float b) { return __fdiv_rn(a, b); }
ORDO_FN float fma(float a, float b, float c) { return __fmaf_rn(a, b, c); }
ORDO_FN float sqrt(float a) { return __fsqrt_rn(a); }
ORDO_FN float neg(float a) { return -a; }
ORDO_FN float floor_(float a) { return floorf(a); }
ORDO_FN double add(double a, double b) { return __dadd_rn(a, b); }
ORDO_FN double sub(double a, double b) { return __dsub_rn(a, b); }
ORDO_FN double mul(double a, double b) { return __dmul_rn(a, b); }
ORDO_FN double div(double a, double b) { return __ddiv_rn(a, b); }
ORDO_FN double fma(double a, double b, double c) { return __fma_rn(a, b, c); }
ORDO_FN double sqrt(double a) { return __dsqrt_rn(a); }
ORDO_FN double neg(double a) { return -a; }
ORDO_FN double floor_(double a) { return ::floor(a); }

// i32 (math-library bit manipulation): two's complement, wrapping; computed unsigned because
// signed overflow is undefined in C++.
ORDO_FN int add(int a, int b) { return (int)((unsigned)a + (unsigned)b); }
ORDO_FN int sub(int a, int b) { return (int)((unsigned)a - (unsigned)b); }
ORDO_FN int mul(int a, int b) { return (int)((unsigned)a * (unsigned)b); }
ORDO_FN int shl(int a, int n) { return (int)((unsigned)a << n); }
ORDO_FN int shr(int a, int n) { return a >> n; }  // arithmetic (sign-filling) on every compiler ordo uses
ORDO_FN int bitand_(int a, int b) { return a & b; }

// i64 (indices, and the bits of doubles in glibc's expf): two's complement, wrapping, computed
// unsigned like i32; Div and Rem truncate (operands >= 0).
typedef unsigned long long u64;
ORDO_FN i64 add(i64 a, i64 b) { return (i64)((u64)a + (u64)b); }
ORDO_FN i64 sub(i64 a, i64 b) { return (i64)((u64)a - (u64)b); }
ORDO_FN i64 mul(i64 a, i64 b) { return (i64)((u64)a * (u64)b); }
ORDO_FN i64 shl(i64 a, i64 n) { return (i64)((u64)a << n); }
ORDO_FN i64 shr(i64 a, i64 n) { return a >> n; }  // arithmetic, as for int
ORDO_FN i64 bitand_(i64 a, i64 b) { return a & b; }
ORDO_FN i64 div(i64 a, i64 b) { return a / b; }
ORDO_FN i64 rem(i64 a, i64 b) { return a % b; }
ORDO_FN i64 minimum(i64 a, i64 b) { return a < b ? a : b; }
ORDO_FN i64 maximum(i64 a, i64 b) { return a > b ? a : b; }

// IEEE 754-2019 maximum/minimum: NaN if either operand is NaN (the interpreter returns a + b),
// and -0 < +0. Written out: fmaxf/fminf are maxNum/minNum (they drop NaN).
#define ORDO_MINMAX(T, SIGN)                                \
  ORDO_FN T maximum(T a, T b) {                             \
    if (!(a == a) || !(b == b)) return add(a, b);           \
    if (a == b) return SIGN(a) < 0 ? b : a;                 \
    return a > b ? a : b;                                   \
  }                                                         \
  ORDO_FN T minimum(T a, T b) {                             \
    if (!(a == a) || !(b == b)) return add(a, b);           \
    if (a == b) return SIGN(a) < 0 ? a : b;                 \
    return a < b ? a : b;                                   \
  }
ORDO_MINMAX(float, __float_as_int)
ORDO_MINMAX(double, __double_as_longlong)
#undef ORDO_MINMAX

// Comparisons: false with a NaN operand, except ne. Overloads, not templates, so that the
// lane-wise templates below are the only candidates for vectors.
#define ORDO_COMPARE(T)                                     \
  ORDO_FN bool lt(T a, T b) { return a < b; }               \
  ORDO_FN bool le(T a, T b) { return a <= b; }              \
  ORDO_FN bool eq(T a, T b) { return a == b; }              \
  ORDO_FN bool ne(T a, T b) { return a != b; }
ORDO_COMPARE(float) ORDO_COMPARE(double) ORDO_COMPARE(int) ORDO_COMPARE(i64)
#undef ORDO_COMPARE
ORDO_FN bool and_(bool a, bool b) { return a && b; }
ORDO_FN bool or_(bool a, bool b) { return a || b; }
template <class T> ORDO_FN T select(bool c, T a, T b) { return c ? a : b; }

// ---- bit casts (exact) ------------------------------------------------------------------------
ORDO_FN int bitcast_i32(float a) { return __float_as_int(a); }
ORDO_FN float bitcast_f32(int a) { return __int_as_float(a); }
ORDO_FN i64 bitcast_i64(double a) { return __double_as_longlong(a); }
ORDO_FN double bitcast_f64(i64 a) { return __longlong_as_double(a); }

// a * 2^n, the IR's ldexp, within its domain (a NaN, or |a| in [0.5, 2) with n in [-250, 254]):
// a * 2^(n>>1) is exact there (a normal result), so the second product is the one rounding.
ORDO_FN float ldexp_(float a, int n) {
  const int h = n >> 1;
  return mul(mul(a, __int_as_float((h + 127) << 23)), __int_as_float((n - h + 127) << 23));
}

// The IR's bf16_pair_dot (ir.hpp): avx512_bf16's vdpbf16ps on one lane, written out. Operands
// are a factor's high half (its bf16) or acc, a zero exponent field read as the zero of its sign;
// each step is one fma, flushed to the zero of its sign where the sum rounded to 24 bits with an
// unbounded exponent is below 2^-126, which the step scaled by 2^64 (exact there) decides where
// IEEE's rounding gives +-2^-126.
ORDO_FN float bf16_pair_operand(float v, bool factor) {
  int bits = __float_as_int(v);
  if (factor) bits &= int(0xffff0000u);
  if ((bits & 0x7f800000) == 0) bits &= int(0x80000000u);
  return __int_as_float(bits);
}
ORDO_FN float bf16_pair_step(float x, float y, float acc) {
  const float r = fma(x, y, acc);
  const float m = __int_as_float(__float_as_int(r) & 0x7fffffff);
  bool tiny = m < 0x1p-126f;
  if (m == 0x1p-126f) {
    const float scaled = fma(mul(x, 0x1p32f), mul(y, 0x1p32f), mul(acc, 0x1p64f));
    tiny = __int_as_float(__float_as_int(scaled) & 0x7fffffff) < 0x1p-62f;
  }
  return tiny ? __int_as_float(__float_as_int(r) & int(0x80000000u)) : r;
}
ORDO_FN float bf16_pair_dot(float acc, float x_odd, float y_odd, float x_even, float y_even) {
  const float s = bf16_pair_step(bf16_pair_operand(x_odd, true), bf16_pair_operand(y_odd, true), bf16_pair_operand(acc, false));
  return bf16_pair_step(bf16_pair_operand(x_even, true), bf16_pair_operand(y_even, true), s);
}

// ---- conversions (ir.hpp, Op::Cast) -------------------------------------------------------------
// f32 <-> f16/bf16 are PTX's conversion instructions, the ones cuda_fp16.h and cuda_bf16.h use for
// __float2half_rn, __half2float and (sm_80 on) __float2bfloat16_rn: round to nearest even, no
// flush of subnormals, and a NaN stays a NaN (the GPU's is canonical; ir.hpp leaves the payload
// open). simt_emu.hpp gives the host the same three functions, with ir/float_bits.hpp's
// algorithms. One instruction each, where the written-out algorithms were 4 (bf16) and about 15
// (f16) instructions in every rounding of every lane; NVRTC spent up to 2x longer on those kernels.
#if defined(__CUDACC__)
ORDO_FN unsigned short cvt_rn_bf16_f32(float f) {
  unsigned short r;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(f));
  return r;
}
ORDO_FN unsigned short cvt_rn_f16_f32(float f) {
  unsigned short r;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(f));
  return r;
}
ORDO_FN float cvt_f32_f16(unsigned short h) {
  float r;
  asm("cvt.f32.f16 %0, %1;" : "=f"(r) : "h"(h));
  return r;
}
#endif
ORDO_FN bf16 to_bf16(float f) {
  bf16 r;
  r.bits = cvt_rn_bf16_f32(f);
  return r;
}
ORDO_FN float to_f32(bf16 h) { return __int_as_float((int)((unsigned)h.bits << 16)); }  // exact
ORDO_FN f16 to_f16(float f) {
  f16 r;
  r.bits = cvt_rn_f16_f32(f);
  return r;
}
ORDO_FN float to_f32(f16 h) { return cvt_f32_f16(h.bits); }  // exact
// f32 -> bf16 -> f32, the pair of casts behind every rounding of a PyTorch bf16 kernel's
// intermediates. On the GPU one instruction: cvt.rn.bf16x2.f32 rounds its first operand into
// the upper half of the result (where a bf16's bits sit in an f32) and its second, +0, into the
// lower half (bits 0). The same rounding as cvt.rn.bf16.f32; the host composes the two casts.
#if defined(__CUDACC__)
ORDO_FN float round_bf16(float f) {
  unsigned r;
  asm("cvt.rn.bf16x2.f32 %0, %1, 0f00000000;" : "=r"(r) : "f"(f));
  return __int_as_float((int)r);
}
#else
ORDO_FN float round_bf16(float f) { return to_f32(to_bf16(f)); }
#endif
ORDO_FN float to_f32(double a) { return __double2float_rn(a); }
ORDO_FN float to_f32(i64 a) { return __ll2float_rn(a); }
ORDO_FN float to_f32(int a) { return __int2float_rn(a); }
ORDO_FN double to_f64(float a) { return (double)a; }  // exact
ORDO_FN double to_f64(bf16 a) { return (double)to_f32(a); }
ORDO_FN double to_f64(f16 a) { return (double)to_f32(a); }
ORDO_FN double to_f64(i64 a) { return __ll2double_rn(a); }
// f32 -> i32: nearest, ties to even; NaN and values outside the i32 range give INT32_MIN (the
// x86 cvtps2dq result). Every f32 of magnitude >= 2^23 is an integer, so "rounds into range"
// is "lies in [-2^31, 2^31)", and NaN fails both comparisons.
ORDO_FN int to_i32(float a) {
  return (a >= -2147483648.0f && a < 2147483648.0f) ? __float2int_rn(a) : (int)0x80000000u;
}
ORDO_FN i64 to_i64(int a) { return (i64)a; }  // sign extension: exact
ORDO_FN bf16 to_bf16(bf16 a) { return a; }
ORDO_FN f16 to_f16(f16 a) { return a; }

// ---- vectors, lane by lane ------------------------------------------------------------------------
// lanes<0, 1, ..., N-1>, built by halves (log2(N) levels of instantiation, not N).
template <int... I> struct lanes {};
template <class A, class B> struct join_lanes;
template <int... I, int... J> struct join_lanes<lanes<I...>, lanes<J...> > {
  typedef lanes<I..., ((int)sizeof...(I) + J)...> type;
};
template <int N> struct make_lanes {
  typedef typename join_lanes<typename make_lanes<N / 2>::type, typename make_lanes<N - N / 2>::type>::type type;
};
template <> struct make_lanes<1> { typedef lanes<0> type; };
template <> struct make_lanes<0> { typedef lanes<> type; };

// Each vector operation is two overloads: the one the renderer calls, which passes the lane
// indices on, and the one that expands over them.
#define ORDO_LANES1(fn)                                                                              \
  template <class A, int N, int... I>                                                                \
  ORDO_FN auto fn(const vec<A, N>& a, lanes<I...>)->vec<decltype(fn(a.v[0])), N> {                   \
    return {{fn(a.v[I])...}};                                                                        \
  }                                                                                                  \
  template <class A, int N>                                                                          \
  ORDO_VEC_FN auto fn(const vec<A, N>& a)->vec<decltype(fn(a.v[0])), N> {                            \
    return fn(a, typename make_lanes<N>::type());                                                    \
  }
#define ORDO_LANES2(fn)                                                                              \
  template <class A, class B, int N, int... I>                                                       \
  ORDO_FN auto fn(const vec<A, N>& a, const vec<B, N>& b, lanes<I...>)                               \
      ->vec<decltype(fn(a.v[0], b.v[0])), N> {                                                       \
    return {{fn(a.v[I], b.v[I])...}};                                                                \
  }                                                                                                  \
  template <class A, class B, int N>                                                                 \
  ORDO_VEC_FN auto fn(const vec<A, N>& a, const vec<B, N>& b)->vec<decltype(fn(a.v[0], b.v[0])), N> { \
    return fn(a, b, typename make_lanes<N>::type());                                                 \
  }
ORDO_LANES2(add) ORDO_LANES2(sub) ORDO_LANES2(mul) ORDO_LANES2(div) ORDO_LANES2(rem)
ORDO_LANES2(minimum) ORDO_LANES2(maximum)
ORDO_LANES2(lt) ORDO_LANES2(le) ORDO_LANES2(eq) ORDO_LANES2(ne) ORDO_LANES2(and_) ORDO_LANES2(or_)
ORDO_LANES2(shl) ORDO_LANES2(shr) ORDO_LANES2(bitand_) ORDO_LANES2(ldexp_)
ORDO_LANES1(sqrt) ORDO_LANES1(floor_) ORDO_LANES1(neg) ORDO_LANES1(bitcast_i32) ORDO_LANES1(bitcast_f32)
ORDO_LANES1(bitcast_i64) ORDO_LANES1(bitcast_f64)
ORDO_LANES1(round_bf16) ORDO_LANES1(to_bf16) ORDO_LANES1(to_f16) ORDO_LANES1(to_f32) ORDO_LANES1(to_f64) ORDO_LANES1(to_i32)
ORDO_LANES1(to_i64)
#undef ORDO_LANES1
#undef ORDO_LANES2

template <class T, int N, int... I>
ORDO_FN vec<T, N> fma(const vec<T, N>& a, const vec<T, N>& b, const vec<T, N>& c, lanes<I...>) {
  return {{fma(a.v[I], b.v[I], c.v[I])...}};
}
template <class T, int N>
ORDO_VEC_FN vec<T, N> fma(const vec<T, N>& a, const vec<T, N>& b, const vec<T, N>& c) {
  return fma(a, b, c, typename make_lanes<N>::type());
}
template <int N, int... I>
ORDO_FN vec<float, N> bf16_pair_dot(const vec<float, N>& acc, const vec<float, N>& xo, const vec<float, N>& yo, const vec<float, N>& xe,
                                    const vec<float, N>& ye, lanes<I...>) {
  return {{bf16_pair_dot(acc.v[I], xo.v[I], yo.v[I], xe.v[I], ye.v[I])...}};
}
template <int N>
ORDO_VEC_FN vec<float, N> bf16_pair_dot(const vec<float, N>& acc, const vec<float, N>& xo, const vec<float, N>& yo, const vec<float, N>& xe,
                                        const vec<float, N>& ye) {
  return bf16_pair_dot(acc, xo, yo, xe, ye, typename make_lanes<N>::type());
}
template <class T, int N, int... I>
ORDO_FN vec<T, N> select(const vec<bool, N>& c, const vec<T, N>& a, const vec<T, N>& b, lanes<I...>) {
  return {{(c.v[I] ? a.v[I] : b.v[I])...}};
}
template <class T, int N>
ORDO_VEC_FN vec<T, N> select(const vec<bool, N>& c, const vec<T, N>& a, const vec<T, N>& b) {
  return select(c, a, b, typename make_lanes<N>::type());
}
// Op::Table with one index per lane.
template <int N, int... I>
ORDO_FN vec<i64, N> table_lookup(const i64* table, const vec<i64, N>& at, lanes<I...>) {
  return {{table[at.v[I]]...}};
}
template <int N>
ORDO_VEC_FN vec<i64, N> table_lookup(const i64* table, const vec<i64, N>& at) {
  return table_lookup(table, at, typename make_lanes<N>::type());
}
template <class T, int... I>
ORDO_FN vec<T, sizeof...(I)> broadcast(T a, lanes<I...>) {
  return {{((void)I, a)...}};
}
template <int N, class T>
ORDO_VEC_FN vec<T, N> broadcast(T a) {
  return broadcast(a, typename make_lanes<N>::type());
}

// ---- memory ------------------------------------------------------------------------------------
// A vector access of N elements at p + i, where the renderer proved (p + i) is aligned to A
// bytes given that the buffer's base is (checked at launch). It moves the largest chunks both
// the alignment and the size allow: 16 bytes (one 128-bit ld/st.global.v4), 8 or 4; else one
// element at a time. Chunks are copied bit for bit through a union, which the host compiler
// and NVRTC both define.
template <int Bytes> struct chunk;
template <> struct chunk<16> { typedef uint4 type; };
template <> struct chunk<8> { typedef uint2 type; };
template <> struct chunk<4> { typedef unsigned type; };

__host__ __device__ constexpr int chunk_bytes(int align, int bytes, int elem) {
  return (align % 16 == 0 && bytes % 16 == 0) ? 16
         : (align % 8 == 0 && bytes % 8 == 0) ? 8
         : (align % 4 == 0 && bytes % 4 == 0 && elem <= 4) ? 4
                                                             : 0;
}

template <class T, int N, int... I>
ORDO_FN vec<T, N> load_lanes(const T* p, i64 i, lanes<I...>) {
  return {{p[i + I]...}};
}
template <class C, class T, int N, int... J>
ORDO_FN vec<T, N> load_chunks(const C* src, lanes<J...>) {
  union {
    C c[sizeof...(J)];
    vec<T, N> v;
  } u = {{src[J]...}};
  return u.v;
}
template <int N, int A, class T>
ORDO_VEC_FN vec<T, N> load(const T* p, i64 i) {
  constexpr int bytes = N * (int)sizeof(T);
  constexpr int cb = chunk_bytes(A, bytes, (int)sizeof(T));
  if constexpr (cb == 0) {
    return load_lanes<T, N>(p, i, typename make_lanes<N>::type());
  } else {
    typedef typename chunk<cb>::type C;
    return load_chunks<C, T, N>(reinterpret_cast<const C*>(p + i), typename make_lanes<bytes / cb>::type());
  }
}
template <class T, int N, int... I>
ORDO_FN void store_lanes(T* p, i64 i, const vec<T, N>& v, lanes<I...>) {
  ((p[i + I] = v.v[I]), ...);
}
template <class C, class T, int N, int... J>
ORDO_FN void store_chunks(C* dst, const vec<T, N>& v, lanes<J...>) {
  union {
    vec<T, N> v;
    C c[sizeof...(J)];
  } u = {v};
  ((dst[J] = u.c[J]), ...);
}
template <int A, class T, int N>
ORDO_VEC_FN void store(T* p, i64 i, const vec<T, N>& v) {
  constexpr int bytes = N * (int)sizeof(T);
  constexpr int cb = chunk_bytes(A, bytes, (int)sizeof(T));
  if constexpr (cb == 0) {
    store_lanes(p, i, v, typename make_lanes<N>::type());
  } else {
    typedef typename chunk<cb>::type C;
    store_chunks(reinterpret_cast<C*>(p + i), v, typename make_lanes<bytes / cb>::type());
  }
}

// Gather and scatter (attention keeps one query per lane): lane l reads or writes element i.v[l].
// A scatter writes its lanes in order (a comma fold is sequenced left to right), so of two lanes
// with one index the higher lane's value stays.
template <class T, int N, int... I>
ORDO_FN vec<T, N> gather(const T* p, const vec<i64, N>& i, lanes<I...>) {
  return {{p[i.v[I]]...}};
}
template <class T, int N>
ORDO_VEC_FN vec<T, N> gather(const T* p, const vec<i64, N>& i) {
  return gather(p, i, typename make_lanes<N>::type());
}
template <class T, int N, int... I>
ORDO_FN void scatter(T* p, const vec<i64, N>& i, const vec<T, N>& v, lanes<I...>) {
  ((p[i.v[I]] = v.v[I]), ...);
}
template <class T, int N>
ORDO_VEC_FN void scatter(T* p, const vec<i64, N>& i, const vec<T, N>& v) {
  scatter(p, i, v, typename make_lanes<N>::type());
}
template <int... I>
ORDO_FN vec<i64, sizeof...(I)> iota(lanes<I...>) {
  return {{(i64)I...}};
}
template <int N>
ORDO_VEC_FN vec<i64, N> iota() {
  return iota(typename make_lanes<N>::type());
}

}  // namespace ordo_rt
