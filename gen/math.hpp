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
// two-step ldexp. Inputs below -104 give +0, above 100 give +inf.
ir::ExprRef sleef_expf_u10(ir::Builder& b, ir::ExprRef d);
// Sleef 3.5 logf_u10 (FMA build, xlogf_u1): exponent split, (m-1)/(m+1) in double-float
// arithmetic, a degree-2 polynomial, and a double-float sum with e*ln 2.
ir::ExprRef sleef_logf_u10(ir::Builder& b, ir::ExprRef d);

// ordo's own 2^x: round-to-integer split, a degree-7 polynomial, exponent bits (gen/math.cpp).
ir::ExprRef exp2_f32(ir::Builder& b, ir::ExprRef x);

ir::ExprRef exp_f32(ir::Builder& b, ir::MathImpl impl, ir::ExprRef d);
ir::ExprRef log_f32(ir::Builder& b, ir::MathImpl impl, ir::ExprRef d);

}  // namespace ordo::gen
