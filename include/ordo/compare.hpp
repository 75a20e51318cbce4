// Running several orders of one op on one input and measuring how far apart they land:
// the engine behind `ordo compare` and the demo.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "ordo/ordo.hpp"

namespace ordo {

// Host arrays for every argument of a kernel, in ArgSpec order.
struct HostBuffers {
  std::vector<ArgSpec> args;
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<BufferRef> refs(int64_t rows, int64_t cols);
  const std::vector<uint8_t>& get(const std::string& name) const;
  std::vector<uint8_t>& get(const std::string& name);
};

// Deterministic input: offset + scale * N(0, 1), rounded to `t` (splitmix64 + Box-Muller).
std::vector<uint8_t> random_values(ScalarType t, int64_t n, uint64_t seed, double offset, double scale);
// Buffers for a kernel: inputs filled (x from the options, weight ~ 1 + 0.1 N, bias ~ 0.1 N), outputs zeroed.
HostBuffers make_buffers(const CompiledKernel& k, int64_t rows, uint64_t seed, double offset, double scale);

double value_at(ScalarType t, const uint8_t* data, int64_t i);
// Distance in units in the last place of `t` between two values of type `t`, given as bits;
// NaN vs NaN is 0, NaN vs a number is -1 (reported as "nan").
int64_t ulp_distance(ScalarType t, const uint8_t* a, const uint8_t* b, int64_t i);
// Bit-identical, with every NaN equal to every NaN (see ir/ir.hpp on NaN payloads).
bool same_bits(ScalarType t, const uint8_t* a, const uint8_t* b, int64_t i);
int64_t count_identical(ScalarType t, const std::vector<uint8_t>& a, const std::vector<uint8_t>& b);

// Every output of the op computed in float64 from the same inputs (two-pass statistics).
std::map<std::string, std::vector<double>> reference_f64(const Request& r, const HostBuffers& in, int64_t rows);

struct CompareOptions {
  Request base;  // op, cols, dtypes, flags, eps, target; `order` is ignored
  int64_t rows = 64;
  uint64_t seed = 1;
  double offset = 0, scale = 1;
  std::vector<std::string> orders;
  int repeats = 5;
  // Called before each order runs (done = orders finished so far) and once at the end
  // (done == total, order empty). The CLI draws its progress line from it.
  std::function<void(size_t done, size_t total, const std::string& order)> progress;
};

struct OrderResult {
  std::string order;
  std::string error;                         // set when the order could not run
  std::map<std::string, std::vector<uint8_t>> outputs;
  std::map<std::string, double> max_abs_err;  // per output, against float64
  std::map<std::string, int64_t> max_ulp;     // per output, against float64 rounded to the output type
  std::vector<double> identical;              // fraction of the primary output bit-identical to each order
  std::vector<int64_t> primary_ulps;          // per element of the primary output: ULPs from float64 (-1: NaN mismatch)
  double seconds = 0;                         // fastest of `repeats` runs
  double gbps = 0;
};

struct CompareReport {
  CompareOptions options;
  std::string primary;  // the output the agreement matrix is about: y, or var for var_mean
  std::vector<OrderResult> results;
};

CompareReport compare_orders(const CompareOptions& opt);
std::string format_report(const CompareReport& rep);

}  // namespace ordo
