// The kernel the math tests run their IR functions in: input x and one output per function,
// each y_i = f_i(x) elementwise over rows of `cols`, `lanes` elements at a time.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "ir/ir.hpp"

namespace ordo::test {

using ElementwiseFn = std::function<ir::ExprRef(ir::Builder&, ir::ExprRef)>;

inline ir::Kernel elementwise_kernel(const std::string& name, int64_t cols, int lanes,
                                     const std::vector<std::pair<std::string, ElementwiseFn>>& outputs) {
  using namespace ir;
  Kernel k;
  k.name = name;
  Builder b(k);
  const int x = b.buffer("x", ScalarType::f32, false, Extent::rows_by_cols);
  std::vector<int> ys;
  for (const auto& [out, fn] : outputs) ys.push_back(b.buffer(out, ScalarType::f32, true, Extent::rows_by_cols));
  const ExprRef row = b.let("row", mul(program_id(0), index_const(cols)));
  b.for_range("c", index_const(0), index_const(cols), lanes, [&](ExprRef c) {
    const ExprRef at = b.let("at", add(row, c));
    const ExprRef v = b.let("v", load(k, x, at, lanes));
    for (size_t i = 0; i < outputs.size(); ++i) b.store(ys[i], at, outputs[i].second(b, v));
  });
  const std::string problems = verify(k);
  INFO(problems);
  REQUIRE(problems.empty());
  return k;
}

}  // namespace ordo::test
