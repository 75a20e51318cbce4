// Sizes past 32-bit indexing (issue 7, "Limits"): a launch of more than 2^31 elements either
// runs, with 64-bit offsets in the generated code, or is rejected with a message before any
// allocation. Nothing here allocates such a launch's memory:
//  * requests with N up to 2^31 compile, and their optimized LLVM IR indexes memory only with
//    i64 offsets;
//  * a row that starts more than 2^32 elements into its buffers runs: the buffers handed to the
//    kernel are placed so that only that row lies in real memory, and its results must equal the
//    interpreter's for the same row. 32-bit offsets would land far outside it;
//  * run() computes every buffer length of a launch with rows*N > 2^31 exactly, and rejects a
//    launch whose rows*N would overflow, naming both numbers; so does make_buffers, which also
//    refuses buffers larger than this machine's memory before allocating them.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cstdint>
#include <regex>
#include <sstream>

#include "backends/llvm/llvm_backend.hpp"
#include "gen/gen.hpp"
#include "ir/error.hpp"
#include "ir/interpret.hpp"
#include "ordo/compare.hpp"
#include "ordo/ordo.hpp"
#include "src/kernel_parts.hpp"

using namespace ordo;

namespace {

constexpr int64_t kTwo31 = int64_t(1) << 31;

Request request(OpKind op, const char* order, int64_t cols) {
  Request r;
  r.op = op;
  r.order = order;
  r.cols = cols;
  r.has_weight = op == OpKind::layer_norm || op == OpKind::rms_norm;
  r.has_bias = op == OpKind::layer_norm;
  return r;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(accepted)";
}

// One request of each kind of reduction the table has (lane Welford cascade, sequential Welford,
// lane-tree and level-cascade sums, softmax lane trees, online softmax). Pairwise orders are left
// out: their leaf tables grow as N / block, a known cost of a valid request.
const std::vector<Request>& wide_requests() {
  static const std::vector<Request> rs = {
      request(OpKind::layer_norm, "fast", kTwo31),
      request(OpKind::layer_norm, "torch1.13-cpu-avx2", kTwo31),
      request(OpKind::var_mean, "sequential-welford", kTwo31),
      request(OpKind::rms_norm, "torch-composite-cpu", kTwo31),
      request(OpKind::softmax, "torch1.13-cpu-default", kTwo31),
      request(OpKind::log_softmax, "online", kTwo31),
  };
  return rs;
}

}  // namespace

TEST_CASE("N above 2^31 is rejected when the request is resolved, before anything is built") {
  CHECK(error_of([] { compile(request(OpKind::layer_norm, "fast", kTwo31 + 1)); }) ==
        "N = 2147483649 exceeds the supported 2^31 columns");
}

TEST_CASE("N = 2^31 compiles, and the optimized LLVM IR addresses memory with 64-bit offsets only") {
  for (const Request& r : wide_requests()) {
    INFO(r.key());
    KernelHandle k;
    REQUIRE_NOTHROW(k = compile(r));
    const std::string llvm_ir = llvm_backend::emit_llvm_ir(ordo::kernel_ir(*k));
    std::istringstream lines(llvm_ir);
    int geps = 0;
    for (std::string line; std::getline(lines, line);) {
      if (line.find("getelementptr") == std::string::npos) continue;
      ++geps;
      // Every index operand of every address computation is an i64 ("i32 " would be one of 32 bits).
      INFO(line);
      CHECK(line.find(" i32 ") == std::string::npos);
      CHECK(line.find(" i16 ") == std::string::npos);
    }
    CHECK(geps > 0);
    // The row stride, N = 2^31 elements (2^32 or 2^33 bytes once LLVM folds in the element
    // size), multiplies the row number in i64: some i64 multiply by at least 2^31, or shift by
    // at least 31, must be there. It does not fit in 32 bits.
    bool wide_stride = false;
    const std::regex scale("(mul|shl) (nuw |nsw )*i64 %[^,]+, ([0-9]+)");
    for (auto m = std::sregex_iterator(llvm_ir.begin(), llvm_ir.end(), scale); m != std::sregex_iterator(); ++m) {
      const uint64_t c = std::stoull((*m)[3].str());
      wide_stride |= (*m)[1] == "shl" ? c >= 31 : c >= (uint64_t(1) << 31);
    }
    CHECK(wide_stride);
  }
}

TEST_CASE("a row that starts past 2^32 elements runs with 64-bit offsets and matches the interpreter") {
  // Row `last` of a launch of `rows` rows starts at element last*N = 16384 * 262147, past 2^32.
  // The buffers passed to the kernel begin `last` rows before real memory that holds one row, so
  // the kernel touches real memory only if its offsets are exact.
  constexpr int64_t cols = (int64_t(1) << 18) + 3, last = int64_t(1) << 14, rows = last + 1;
  static_assert(last * cols > (int64_t(1) << 32));
  for (const Request& base : {request(OpKind::layer_norm, "fast", cols), request(OpKind::softmax, "torch1.13-cpu-avx2", cols),
                              request(OpKind::var_mean, "sequential-welford", cols)}) {
    INFO(base.key());
    Request r = base;
    r.target = Target::interpreter;
    KernelHandle k = compile(r);
    HostBuffers want = make_buffers(*k, 1, 3, 100.0, 2.0);  // one row, offset 100: the statistics matter
    HostBuffers got = want;
    k->run(want.refs(1, cols), 1);

    const llvm_backend::Compiled c = llvm_backend::compile(ordo::kernel_ir(*k));
    std::vector<void*> ptrs;
    for (size_t i = 0; i < got.args.size(); ++i) {
      const ArgSpec& a = got.args[i];
      const int64_t per_row = a.extent == ArgExtent::rows_by_cols ? cols : a.extent == ArgExtent::rows ? 1 : 0;
      const uint64_t shift = static_cast<uint64_t>(last * per_row * size_bytes(a.dtype));
      const uintptr_t real = reinterpret_cast<uintptr_t>(got.bytes[i].data());
      REQUIRE(real > shift);  // the shifted address stays a plain address (heap addresses are far above 2^36)
      ptrs.push_back(reinterpret_cast<void*>(real - shift));
    }
    const int64_t extents[1] = {rows};
    c.entry(ptrs.data(), extents, last, rows, 0);
    for (size_t i = 0; i < got.args.size(); ++i) {
      const ArgSpec& a = got.args[i];
      if (!a.output) continue;
      INFO(a.name);
      CHECK(count_identical(a.dtype, got.bytes[i], want.bytes[i]) == static_cast<int64_t>(want.bytes[i].size()) / size_bytes(a.dtype));
    }
  }
}

TEST_CASE("run() computes lengths past 2^31 exactly, and rejects rows*N that would overflow") {
  KernelHandle k = compile(request(OpKind::layer_norm, "fast", kTwo31));
  // Three rows of 2^31: 6442450944 elements, computed without overflow; nothing is touched, as
  // the lengths are checked first.
  std::vector<BufferRef> none(6, BufferRef{nullptr, 0, ScalarType::f32});
  CHECK(error_of([&] { k->run(none, 3); }) == "x: 0 elements given, expected 6442450944 (rows*N with rows=3, N=2147483648)");
  // The largest launch allowed: rows*N = kMaxElements exactly.
  CHECK(error_of([&] { k->run(none, kMaxElements / kTwo31); }) ==
        "x: 0 elements given, expected 576460752303423488 (rows*N with rows=268435456, N=2147483648)");
  // One more row, and rows*N is past the limit; with rows = 2^40 it would overflow int64_t.
  CHECK(error_of([&] { k->run(none, kMaxElements / kTwo31 + 1); }) ==
        "rows=268435457 with N=2147483648: rows*N exceeds the 576460752303423488 elements a launch may have");
  CHECK(error_of([&] { k->run(none, int64_t(1) << 40); }) ==
        "rows=1099511627776 with N=2147483648: rows*N exceeds the 576460752303423488 elements a launch may have");
  CHECK(error_of([&] { k->run(none, INT64_MAX); }) ==
        "rows=9223372036854775807 with N=2147483648: rows*N exceeds the 576460752303423488 elements a launch may have");
}

TEST_CASE("make_buffers refuses, before allocating, buffers that overflow or exceed the machine's memory") {
  KernelHandle k = compile(request(OpKind::layer_norm, "fast", kTwo31));
  CHECK(error_of([&] { make_buffers(*k, int64_t(1) << 40, 1, 0, 1); }) ==
        "rows=1099511627776 with N=2147483648: rows*N exceeds the 576460752303423488 elements a launch may have");
  // 2^24 rows of 2^31 f32: x and y are 2^57 bytes each, far more than any machine has.
  const std::string big = error_of([&] { make_buffers(*k, int64_t(1) << 24, 1, 0, 1); });
  INFO(big);
  CHECK(big.rfind("rows=16777216 with N=2147483648 needs 268435472.1 GiB of buffers; this machine has ", 0) == 0);
}
