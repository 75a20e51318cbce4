// The constants every generator writes, spelled once.
#pragma once

#include <cstdint>

#include "ir/ir.hpp"

namespace ordo::gen {

// An i64 constant: an element index, a count or a loop bound.
inline ir::ExprRef idx(int64_t v) { return ir::index_const(v); }

// The f32 constant nearest v (v rounded to f32, ties to even), broadcast to `lanes` lanes.
inline ir::ExprRef f32c(double v, int lanes = 1) {
  ir::ExprRef c = ir::constant(ir::Type{ScalarType::f32, 1}, static_cast<double>(static_cast<float>(v)));
  return lanes > 1 ? ir::broadcast(c, lanes) : c;
}

}  // namespace ordo::gen
