// Pin the order, or choose a faster one on purpose and see what it costs.
//
// Variants, all layer_norm over rows of N = 4096 float32 values (the same input for each):
//   torch1.13-cpu-avx2   reproduces PyTorch 1.13's CPU kernel (avx2 build) bit for bit
//   fast                 ordo's fastest order: two-pass, 4x8-lane fma sums, fused affine
//   two-pass-pairwise    numpy's pairwise sum inside a two-pass variance
//   one-pass             E[x^2] - E[x]^2: unstable when the mean is large against the spread
//
// The program validates first: each compiled kernel must match the interpreter, the IR's
// executable specification, bit for bit. Then it measures each variant against float64 on
// two inputs, one centred and one with a large offset, and times it.
//
//   build/bin/example_pin_the_order
#include <fmt/format.h>

#include <chrono>
#include <cmath>

#include "ordo/compare.hpp"
#include "ordo/ordo.hpp"

int main() {
  const std::vector<std::string> orders = {"torch1.13-cpu-avx2", "fast", "two-pass-pairwise", "one-pass"};
  const int64_t rows = 64, cols = 4096;

  for (const std::string& name : orders) {
    ordo::Request r;
    r.op = ordo::OpKind::layer_norm;
    r.cols = cols;
    r.order = name;
    ordo::KernelHandle jit = ordo::compile(r);
    r.target = ordo::Target::interpreter;
    ordo::KernelHandle spec = ordo::compile(r);
    ordo::HostBuffers a = ordo::make_buffers(*jit, 8, 7, 100.0, 1.0), b = a;
    jit->run(a.refs(8, cols), 8);
    spec->run(b.refs(8, cols), 8);
    if (ordo::count_identical(ordo::ScalarType::f32, a.get("y"), b.get("y")) != 8 * cols) {
      fmt::print(stderr, "{}: the JIT kernel differs from the interpreter\n", name);
      return 1;
    }
  }
  fmt::print("validated: every variant's JIT kernel equals the interpreter bit for bit\n\n");

  fmt::print("{:<20} | {:>22} | {:>22} | {:>8}\n", "order", "max|err| y, N(0,1)", "max|err| y, N(100,1)", "ms");
  for (const std::string& name : orders) {
    ordo::CompareOptions centred, offset;
    centred.base.op = offset.base.op = ordo::OpKind::layer_norm;
    centred.base.cols = offset.base.cols = cols;
    centred.rows = offset.rows = rows;
    centred.orders = offset.orders = {name};
    offset.offset = 100.0;
    ordo::OrderResult c = ordo::compare_orders(centred).results[0], o = ordo::compare_orders(offset).results[0];
    if (!c.error.empty() || !o.error.empty()) {
      fmt::print(stderr, "{}: {}{}\n", name, c.error, o.error);
      return 1;
    }
    fmt::print("{:<20} | {:>22.3e} | {:>22.3e} | {:>8.3f}\n", name, c.max_abs_err.at("y"), o.max_abs_err.at("y"),
               c.seconds * 1e3);
  }
  return 0;
}
