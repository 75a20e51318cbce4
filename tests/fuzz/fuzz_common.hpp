// Shared by the fuzz targets: what must hold for a request that gen::resolve accepted, and how a
// broken promise is reported. A target returns normally for every input that is handled as
// documented (accepted, or rejected with ordo::Error); anything else aborts, which libFuzzer
// records as a crash together with the input.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gen/gen.hpp"
#include "ir/error.hpp"
#include "ir/interpret.hpp"
#include "ir/ir.hpp"
#include "ordo/request.hpp"

namespace ordo::fuzz {

[[noreturn]] inline void broken(const std::string& what) {
  fmt::print(stderr, "\nordo fuzz: broken promise: {}\n", what);
  std::abort();
}

// Kernels above this many columns are resolved but not built. Building is linear in N only for
// pairwise sums, whose leaf tables take O(N / block) memory (2^31 columns with block=8 is 2^28
// leaves, several GiB); that is a known cost of a valid request, not a fault, and it would
// drown the fuzzer in out-of-memory reports.
constexpr int64_t kMaxBuiltCols = int64_t(1) << 16;
// Kernels up to this many columns also run on the interpreter, over two rows.
constexpr int64_t kMaxInterpretedCols = 300;

// Row values that reach the special cases: zeros of both signs, NaN, infinities, subnormals,
// a large offset. Stored as `t` (f32, or 16-bit bit patterns).
inline std::vector<uint8_t> special_values(ScalarType t, int64_t n) {
  static const float pool[] = {0.0f, -0.0f, 1.0f, -2.5f, 1e4f, 1e4f + 1.0f, 3.0e38f, -3.0e38f, 1e-40f, 1e-20f,
                               __builtin_nanf(""), __builtin_inff(), -__builtin_inff(), 0.3f, 65504.0f, 7.0f};
  std::vector<uint8_t> out(static_cast<size_t>(n) * static_cast<size_t>(size_bytes(t)));
  for (int64_t i = 0; i < n; ++i) {
    const float v = pool[(i * 7 + i / 5) % 16];
    if (t == ScalarType::f32) {
      std::memcpy(out.data() + 4 * i, &v, 4);
    } else {
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      const uint16_t h = static_cast<uint16_t>(bits >> 16 ^ static_cast<uint32_t>(i));  // any 16-bit pattern will do
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  }
  return out;
}

// The promises for a request gen::resolve accepted: it builds, the kernel verifies, prints, and
// (small N) runs on the interpreter over correctly sized buffers without an error. Any
// ordo::Error here is a fault: resolve() is where a bad request must be rejected.
inline void check_resolved(const Request& r, const ir::Order& order) {
  if (r.cols > kMaxBuiltCols) return;
  std::vector<ir::Kernel> stages;
  try {
    stages = gen::build_stages(r, order);
  } catch (const std::exception& e) {
    broken(fmt::format("gen::build_stages threw for an accepted request {}: {}", r.key(), e.what()));
  }
  for (const ir::Kernel& k : stages) {
    if (std::string err = ir::verify(k); !err.empty()) broken(fmt::format("generated IR does not verify for {}: {}", r.key(), err));
    (void)ir::print(k);
  }
  if (r.cols > kMaxInterpretedCols) return;

  // Every stage (a backward op's weight gradients too) over the same buffers, as a launch runs them.
  constexpr int64_t rows = 2;
  std::vector<std::vector<uint8_t>> storage;
  std::vector<ir::BufferArg> args;
  std::vector<ScalarType> types;
  for (const ir::Buffer& b : stages[0].buffers) {
    if (!ir::is_argument(b)) continue;  // scratch (team memory, attention's blocks): the kernel's own
    const int64_t n = ir::launch_elements(b, rows, r.cols).value();
    storage.push_back(b.output ? std::vector<uint8_t>(static_cast<size_t>(n * size_bytes(b.elem)), 0) : special_values(b.elem, n));
    types.push_back(b.elem);
  }
  for (size_t i = 0; i < storage.size(); ++i)
    args.push_back(ir::BufferArg{storage[i].data(), static_cast<int64_t>(storage[i].size()) / size_bytes(types[i])});
  for (const ir::Kernel& k : stages) {
    // The grid: the rows (or blocks of them), then dims fixed at compile time (attention's query
    // blocks), or a column stage's fixed dims alone; then the launch's rows.
    try {
      ir::interpret(k, args, ir::launch_extents(k, rows));
    } catch (const std::exception& e) {
      broken(fmt::format("the interpreter rejected a generated kernel for {}: {}", r.key(), e.what()));
    }
  }
}

// resolve(), then the promises above. Returns whether the request was accepted.
inline bool check_request(const Request& r) {
  ir::Order order;
  try {
    order = gen::resolve(r);
  } catch (const Error&) {
    return false;  // rejected with a message: the documented outcome for a bad request
  }
  check_resolved(r, order);
  return true;
}

}  // namespace ordo::fuzz
