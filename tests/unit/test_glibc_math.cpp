// glibc's expf, logf, double exp, expm1f and tanhf written as IR (gen/blocks/math.cpp) against the
// installed libm, on every f32. The double exp is checked as PyTorch 2.x's CPU flash attention uses it: a float
// argument widened to double, the result rounded back to float.
//
// The orders that reproduce PyTorch's default CPU capability compute exp and log with these IR
// functions instead of calling libm, so that the interpreter, the CPU backend and CUDA compute
// them alike. That is only right if the IR is bit-identical to the libm eager code calls. This test
// checks it on all 2^32 inputs through the CPU backend, and on a sample through the interpreter
// (the specification) and cuda-emu. It fails, never skips, where the installed libm differs: a
// CPU without FMA, whose glibc picks its non-FMA variants, a glibc older than 2.28, or (tanhf) a
// glibc from 2.41 on, whose tanhf is CORE-MATH's.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "backends/cuda/cuda_backend.hpp"
#include "backends/llvm/llvm_backend.hpp"
#include "elementwise_kernel.hpp"
#include "gen/blocks/math.hpp"
#include "ir/interpret.hpp"
#include "ir/ir.hpp"

namespace ordo {
namespace {

using namespace ir;

constexpr int64_t kCols = 4096;

// y_exp = expf(x), y_log = logf(x), y_exp_double = float(exp(double(x))), y_expm1 = expm1f(x),
// y_tanh = tanhf(x) elementwise over rows of kCols, `lanes` at a time.
Kernel math_kernel(int lanes) {
  return test::elementwise_kernel(fmt::format("glibc_math_x{}", lanes), kCols, lanes,
                                  {{"y_exp", gen::glibc_expf},
                                   {"y_log", gen::glibc_logf},
                                   {"y_exp_double", gen::glibc_exp_double_f32},
                                   {"y_expm1", gen::glibc_expm1f},
                                   {"y_tanh", gen::glibc_tanhf}});
}

bool same(float a, float b) { return std::isnan(a) ? std::isnan(b) : std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b); }

float from_bits(uint32_t b) { return std::bit_cast<float>(b); }
float exp_double(float x) { return static_cast<float>(::exp(static_cast<double>(x))); }

struct Mismatch {
  uint64_t count = 0;
  uint32_t first_input = 0;
};

// Every f32 in rows of kCols (2^20 rows), split between the host's cores.
TEST_CASE("glibc expf, logf, double exp, expm1f and tanhf in IR equal the installed libm on every f32 input (cpu backend)") {
  const auto start = std::chrono::steady_clock::now();
  const llvm_backend::Compiled c = llvm_backend::compile(math_kernel(8));
  constexpr int64_t kRowsPerChunk = 4096;  // 2^24 inputs
  constexpr int64_t kChunks = (int64_t(1) << 32) / (kCols * kRowsPerChunk);
  std::atomic<int64_t> next{0};
  std::vector<Mismatch> exp_bad(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<Mismatch> log_bad(exp_bad.size()), exp_double_bad(exp_bad.size()), expm1_bad(exp_bad.size()), tanh_bad(exp_bad.size());
  std::vector<std::thread> workers;
  for (size_t w = 0; w < exp_bad.size(); ++w)
    workers.emplace_back([&, w] {
      const size_t n = static_cast<size_t>(kCols * kRowsPerChunk);
      std::vector<float> x(n), ye(n), yl(n), yd(n), ym(n), yt(n);
      for (int64_t chunk = next++; chunk < kChunks; chunk = next++) {
        const uint32_t base = static_cast<uint32_t>(chunk * kCols * kRowsPerChunk);
        for (size_t i = 0; i < n; ++i) x[i] = from_bits(base + static_cast<uint32_t>(i));
        void* buffers[] = {x.data(), ye.data(), yl.data(), yd.data(), ym.data(), yt.data()};
        const int64_t extents[] = {kRowsPerChunk};
        c.entry(buffers, extents, 0, kRowsPerChunk, 0);
        for (size_t i = 0; i < n; ++i) {
          if (!same(ye[i], ::expf(x[i])) && exp_bad[w].count++ == 0) exp_bad[w].first_input = base + static_cast<uint32_t>(i);
          if (!same(yl[i], ::logf(x[i])) && log_bad[w].count++ == 0) log_bad[w].first_input = base + static_cast<uint32_t>(i);
          if (!same(yd[i], exp_double(x[i])) && exp_double_bad[w].count++ == 0)
            exp_double_bad[w].first_input = base + static_cast<uint32_t>(i);
          if (!same(ym[i], ::expm1f(x[i])) && expm1_bad[w].count++ == 0) expm1_bad[w].first_input = base + static_cast<uint32_t>(i);
          if (!same(yt[i], ::tanhf(x[i])) && tanh_bad[w].count++ == 0) tanh_bad[w].first_input = base + static_cast<uint32_t>(i);
        }
      }
    });
  for (std::thread& t : workers) t.join();
  uint64_t exp_total = 0, log_total = 0, exp_double_total = 0, expm1_total = 0, tanh_total = 0;
  for (size_t w = 0; w < exp_bad.size(); ++w) {
    INFO(fmt::format("worker {}: first mismatching input 0x{:08x} (expf) / 0x{:08x} (logf) / 0x{:08x} (double exp) / 0x{:08x} (expm1f) / "
                     "0x{:08x} (tanhf)",
                     w, exp_bad[w].first_input, log_bad[w].first_input, exp_double_bad[w].first_input, expm1_bad[w].first_input,
                     tanh_bad[w].first_input));
    CHECK(exp_bad[w].count == 0);
    CHECK(log_bad[w].count == 0);
    CHECK(exp_double_bad[w].count == 0);
    CHECK(expm1_bad[w].count == 0);
    CHECK(tanh_bad[w].count == 0);
    exp_total += exp_bad[w].count;
    log_total += log_bad[w].count;
    exp_double_total += exp_double_bad[w].count;
    expm1_total += expm1_bad[w].count;
    tanh_total += tanh_bad[w].count;
  }
  MESSAGE(fmt::format("2^32 inputs: {} expf, {} logf, {} double exp, {} expm1f and {} tanhf results differ from libm's, {:.0f} s", exp_total,
                      log_total, exp_double_total, expm1_total, tanh_total,
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()));
}

// The interpreter (the specification) and cuda-emu, scalar and 8-lane, on 2^18 inputs spread over
// every exponent (a stride through the bit patterns) plus the special values. This ties the
// backends to the interpreter; it is too small to catch a misplaced fma (that moves only rare
// inputs), which the exhaustive test above does.
TEST_CASE("glibc expf, logf, expm1f and tanhf in IR: interpreter and cuda-emu agree with libm on a sample") {
  std::vector<float> x;
  for (uint32_t b : {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00000u, 0x00000001u, 0x007fffffu, 0x00800000u,
                     0x3f800000u, 0xbf800000u, 0x42b17217u, 0x42b17218u, 0xc2cff1b4u, 0xc2cff1b5u, 0xc2ce8ecfu, 0xc2ce8ed0u,
                     // expm1f's and tanhf's branch edges: |x| = 2^-25, ln2/2, 1.5 ln2, 27 ln2, 88.7217; 2^-55, 1, 22
                     0x33000000u, 0x3eb17218u, 0x3eb17219u, 0x3f851592u, 0x4195b844u, 0xc195b844u, 0x42b17180u, 0x42b17181u,
                     0x24000000u, 0x3f7fffffu, 0x41b00000u, 0xc1afffffu})
    x.push_back(from_bits(b));
  const uint32_t stride = 16411;  // odd: its multiples walk through every bit range
  while (x.size() < 64 * kCols) x.push_back(from_bits(static_cast<uint32_t>(x.size()) * stride + 12345u));
  const int64_t rows = static_cast<int64_t>(x.size()) / kCols;
  const size_t n = x.size();
  for (int lanes : {1, 8}) {
    const Kernel k = math_kernel(lanes);
    std::vector<float> ye(n), yl(n), yd(n), ym(n), yt(n), ee(n), el(n), ed(n), em(n), et(n);
    interpret(k,
              {{x.data(), int64_t(n)},
               {ye.data(), int64_t(n)},
               {yl.data(), int64_t(n)},
               {yd.data(), int64_t(n)},
               {ym.data(), int64_t(n)},
               {yt.data(), int64_t(n)}},
              {rows});
    const cuda_backend::Source src = cuda_backend::render(k);
    const cuda_backend::EmuKernel emu = cuda_backend::compile_emu(src);
    void* buffers[] = {x.data(), ee.data(), el.data(), ed.data(), em.data(), et.data()};
    const long long extents[] = {rows};
    const long long blocks = (rows + src.instances_per_block - 1) / src.instances_per_block;
    emu.run_blocks(buffers, extents, rows, 0, blocks);
    int exp_bad = 0, log_bad = 0, exp_double_bad = 0, expm1_bad = 0, tanh_bad = 0, emu_bad = 0;
    for (size_t i = 0; i < n; ++i) {
      exp_bad += !same(ye[i], ::expf(x[i]));
      log_bad += !same(yl[i], ::logf(x[i]));
      exp_double_bad += !same(yd[i], exp_double(x[i]));
      expm1_bad += !same(ym[i], ::expm1f(x[i]));
      tanh_bad += !same(yt[i], ::tanhf(x[i]));
      emu_bad += !same(ee[i], ye[i]) || !same(el[i], yl[i]) || !same(ed[i], yd[i]) || !same(em[i], ym[i]) || !same(et[i], yt[i]);
    }
    INFO(fmt::format("lanes {}", lanes));
    CHECK(exp_bad == 0);
    CHECK(log_bad == 0);
    CHECK(exp_double_bad == 0);
    CHECK(expm1_bad == 0);
    CHECK(tanh_bad == 0);
    CHECK(emu_bad == 0);
  }
}

}  // namespace
}  // namespace ordo
