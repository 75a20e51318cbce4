// Elementary functions as IR. An exact order must reproduce a library's exp and log to the
// bit, so each implementation here is that library's algorithm written out node by node:
// every rounding, every fma and every bit manipulation is visible in the IR and identical
// on every backend. Arguments and results are f32 scalars or vectors; intermediates that are
// read more than once become locals of the kernel being built.
#pragma once

#include "ir/ir.hpp"
#include "ir/order.hpp"

namespace ordo::gen {

// Sleef 3.5 expf_u10 (FMA build; the function PyTorch's avx2/avx512 Vectorized<float>::exp
// calls): Cody-Waite reduction by ln 2 in two parts, a degree-5 Horner polynomial, and a
// two-step ldexp, whose one rounding is the IR's ldexp. Inputs below -104 give +0, above 100
// give +inf.
ir::ExprRef sleef_expf_u10(ir::Builder& b, ir::ExprRef d);
// Sleef 3.5 logf_u10 (FMA build, xlogf_u1): exponent split, (m-1)/(m+1) in double-float
// arithmetic, a degree-2 polynomial, and a double-float sum with e*ln 2.
ir::ExprRef sleef_logf_u10(ir::Builder& b, ir::ExprRef d);

// Sleef's tanhf_u10 (xtanhf, FMA build; the same in Sleef 3.5.1 through 3.9, and what PyTorch's
// avx2/avx512 Vectorized<float>::tanh calls): e^|x| in double-float arithmetic (Sleef's expk2f:
// reduction by ln 2 in two parts, a degree-3 polynomial carried into double-float Horner steps,
// the two parts scaled by 2^q with two-step ldexps), then (e - 1/e)/(e + 1/e) as a double-float
// quotient, rounded once; 1 above |x| = 8.664339742, the sign of x put back, NaN (all bits set)
// for a NaN x.
ir::ExprRef sleef_tanhf_u10(ir::Builder& b, ir::ExprRef x);

// glibc 2.28+ expf and logf as x86-64 runs them on a CPU with FMA (the __expf_fma/__logf_fma
// variants its ifunc picks; which operations are fused was read from the installed libm's
// machine code, docs/research/glibc-expf-logf.md). Both compute in double. expf: x * 32/ln 2 split
// into k + r by a shift constant, 2^(k/32) from a 32-entry table and the exponent field, a cubic in
// r. logf: x = 2^e z, z/c - 1 against a 16-entry table of c, a quartic for log1p. Tested against
// the installed libm on every f32 input (tests/unit/test_glibc_math.cpp).
ir::ExprRef glibc_expf(ir::Builder& b, ir::ExprRef x);
ir::ExprRef glibc_logf(ir::Builder& b, ir::ExprRef x);

// glibc's expm1f and tanhf up to 2.40 (fdlibm's float code: sysdeps/ieee754/flt-32/s_expm1f.c
// and s_tanhf.c, compiled for x86-64 with no fma; glibc 2.41 replaced tanhf by CORE-MATH's
// correctly rounded one). expm1f: reduction x = k ln 2 + r in two parts (k by truncation), a
// degree-5 rational correction in r*r/2, and k put back in the exponent field by an integer add,
// with fdlibm's branch for each k. tanhf: expm1f of 2|x| (|x| >= 1: 1 - 2/(t+2)) or of -2|x|
// (-t/(t+2)), x(1+x) below 2^-55, +-1 from |x| = 22 up. Every branch is computed and one selected
// per lane. Tested against the installed libm on every f32 input (tests/unit/test_glibc_math.cpp).
ir::ExprRef glibc_expm1f(ir::Builder& b, ir::ExprRef x);
ir::ExprRef glibc_tanhf(ir::Builder& b, ir::ExprRef x);

// glibc 2.28+'s double exp as x86-64 runs it with FMA (__exp_fma; fmas read from the installed
// libm's machine code): x * 128/ln 2 split into i + r by a shift constant, 2^(i/128) from a
// 128-entry table of (2^(k/128) rounded, its relative tail) and the exponent field, a quartic in r.
// Arguments and result are f64.
ir::ExprRef glibc_exp_f64(ir::Builder& b, ir::ExprRef x);
// float(exp(double(x))): what C++ code computes when a float reaches the double exp (PyTorch 2.x's
// CPU flash attention, for the scores past its last full vector).
ir::ExprRef glibc_exp_double_f32(ir::Builder& b, ir::ExprRef x);
// PyTorch 2.x's Vectorized<float>::exp_u20 for AVX2 and AVX-512 (ATen/cpu/vec): the argument
// clamped to [ln FLT_MIN, ln FLT_MAX] by min/max instructions (NaN becomes ln FLT_MAX),
// n = floor(x log2 e + 1/2), r = x - n ln 2 (fmas), a degree-5 Horner polynomial with fmas, and
// (p * 2^(n-1)) * 2 with 2^(n-1) built in the exponent field, +0 below ln FLT_MIN.
ir::ExprRef torch_exp_u20(ir::Builder& b, ir::ExprRef x);
// oneDNN's exp injector (jit_uni_eltwise_injector's exp_compute_vector_fwd, the exp inside its
// gelu_erf): exp_u20's algorithm with fx = src log2(e) + 1/2 as a product and a sum, each rounded.
ir::ExprRef onednn_exp(ir::Builder& b, ir::ExprRef x);
// PyTorch 2.x's Vectorized<float>::fexp_u20 (AVX2/AVX-512): 2^(x log2 e) with a cubic
// correction of the fraction, the result's bits formed by a truncating conversion.
ir::ExprRef torch_fexp_u20(ir::Builder& b, ir::ExprRef x);

// ordo's own 2^x: round-to-integer split, a degree-7 polynomial, exponent bits (gen/blocks/math.cpp).
ir::ExprRef exp2_f32(ir::Builder& b, ir::ExprRef x);

ir::ExprRef exp_f32(ir::Builder& b, ir::MathImpl impl, ir::ExprRef d);
ir::ExprRef log_f32(ir::Builder& b, ir::MathImpl impl, ir::ExprRef d);

}  // namespace ordo::gen
