// Same statistics, different rounding: where PyTorch's bf16 layer_norm rounds, and what moving
// those rounding points changes.
//
// PyTorch 1.13's CPU layer_norm on bf16 input keeps its statistics in bf16. Every intermediate
// is rounded to bf16: each Welford merge, mean and rstd, and the scale/shift pair. The
// arithmetic itself is float32. ordo writes each of those roundings as an explicit
// cast.bf16 / cast.f32 pair in the IR. So the rounding points are part of the order, and they
// can be moved without touching the algorithm:
//
//   torch1.13-cpu-default                     the reference: bit-exact with eager PyTorch (tested in
//                                             tests/reference/torch_layer_norm.py)
//   lane-welford(...,round=each)              the same algorithm, spelled as a parameterized order;
//                                             must be bit-identical to the reference
//   lane-welford(...,round=final)             the same algorithm with every statistic kept in f32;
//                                             bf16 rounding happens once, at the outputs
//
// The program checks that the first two are identical, shows where the rounding points sit
// in the IR, and then measures on a row with a large mean (10 + N(0, 1)), where rounding the
// mean to bf16 costs the most:
//   - how many y elements change when the rounding points move;
//   - the distance of each variant from float64.
//
//   build/bin/example_rounding_points
#include <fmt/format.h>

#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <sstream>

#include "ordo/compare.hpp"
#include "ordo/ordo.hpp"
#include "src/kernel_parts.hpp"

namespace {

constexpr int64_t kCols = 4096, kRows = 512;
const std::string kReference = "torch1.13-cpu-default";
const std::string kEach = "lane-welford(lanes=16,chunk=16,affine=scale-bias,round=each)";
const std::string kFinal = "lane-welford(lanes=16,chunk=16,affine=scale-bias,round=final)";

ordo::Request bf16_layer_norm(const std::string& order) {
  ordo::Request r;
  r.op = ordo::OpKind::layer_norm;
  r.cols = kCols;
  r.x_dtype = ordo::ScalarType::bf16;
  r.order = order;
  return r;
}

// The IR lines that round a value to bf16 before the output pass, i.e. the statistics'
// rounding points.
std::vector<std::string> rounding_points(const ordo::ir::Kernel& k) {
  std::vector<std::string> out;
  std::istringstream text(ordo::ir::print(k));
  for (std::string line; std::getline(text, line);) {
    if (line.find("store y[") != std::string::npos) break;  // the elementwise output pass
    if (line.find("cast.bf16") != std::string::npos && line.find("store") == std::string::npos) out.push_back(line);
  }
  return out;
}

}  // namespace

int main() {
  // 1. The parameterized spelling with round=each is the reference order: same kernel bits.
  ordo::CompareOptions same;
  same.base = bf16_layer_norm(kReference);
  same.rows = 64;
  same.offset = 10;
  same.orders = {kReference, kEach};
  ordo::CompareReport check = ordo::compare_orders(same);
  for (const ordo::OrderResult& r : check.results)
    if (!r.error.empty()) {
      fmt::print(stderr, "{}: {}\n", r.order, r.error);
      return 1;
    }
  for (const char* out : {"y", "mean", "rstd"}) {
    const auto& a = check.results[0].outputs.at(out);
    const auto& b = check.results[1].outputs.at(out);
    if (ordo::count_identical(ordo::ScalarType::bf16, a, b) != static_cast<int64_t>(a.size() / 2)) {
      fmt::print(stderr, "{} and {} differ in {}: the parameterized order is not the reference\n", kReference, kEach, out);
      return 1;
    }
  }
  fmt::print("{} == {} bit for bit (y, mean, rstd)\n\n", kEach, kReference);

  // 2. Where the rounding points sit.
  for (const std::string& order : {kEach, kFinal}) {
    ordo::KernelHandle k = ordo::compile(bf16_layer_norm(order));
    std::vector<std::string> points = rounding_points(ordo::kernel_ir(*k));
    fmt::print("{}:\n  {} IR assignments round to bf16 before the output pass", order, points.size());
    // Which values: the locals they assign, without the numeric suffixes of unrolled copies.
    std::vector<std::string> names;
    for (const std::string& line : points) {
      size_t at = line.find('%'), colon = line.find(':');
      if (at == std::string::npos || colon == std::string::npos || colon < at) continue;
      std::string n = line.substr(at + 1, colon - at - 1);
      while (!n.empty() && (std::isdigit(static_cast<unsigned char>(n.back())) || n.back() == '.')) n.pop_back();
      if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
    }
    fmt::print("{}{}\n", names.empty() ? "" : ": ", fmt::join(names, ", "));
    if (!points.empty()) fmt::print("  e.g. {}\n", points.back().substr(points.back().find_first_not_of(' ')));
  }

  // 3. What moving them changes, on rows with a large mean.
  ordo::CompareOptions o;
  o.base = bf16_layer_norm(kReference);
  o.rows = kRows;
  o.offset = 10;
  o.scale = 1;
  o.orders = {kReference, kFinal};
  ordo::CompareReport rep = ordo::compare_orders(o);
  for (const ordo::OrderResult& r : rep.results)
    if (!r.error.empty()) {
      fmt::print(stderr, "{}: {}\n", r.order, r.error);
      return 1;
    }
  const ordo::OrderResult& each = rep.results[0];
  const ordo::OrderResult& final = rep.results[1];
  const double changed = 1.0 - each.identical[1];
  fmt::print("\ninput: {} rows of N = {} bf16 values, 10 + N(0, 1)\n", kRows, kCols);
  fmt::print("moving the rounding points changes {:.2f}% of y elements\n\n", 100 * changed);
  fmt::print("{:<62} {:>10} {:>9} {:>9} {:>9}\n", "order", "max|err| y", "ulp y", "ulp mean", "ulp rstd");
  for (const ordo::OrderResult* r : {&each, &final})
    fmt::print("{:<62} {:>10.3e} {:>9} {:>9} {:>9}\n", r->order, r->max_abs_err.at("y"), r->max_ulp.at("y"),
               r->max_ulp.at("mean"), r->max_ulp.at("rstd"));
  fmt::print("\n(ULPs of bf16 against float64 statistics computed from the same bf16 inputs)\n");
  if (changed <= 0) {
    fmt::print(stderr, "expected the rounding points to matter on this input\n");
    return 1;
  }
  return 0;
}
