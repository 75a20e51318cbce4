// Sleef's tanhf_u10 written as IR (gen/blocks/math.cpp, sleef_tanhf_u10) against the Sleef that
// PyTorch 2.15 runs: the AVX2 and AVX-512 builds exported by the wheel's libtorch_cpu.so
// (Sleef_tanhf8_u10avx2, Sleef_tanhf16_u10avx512f, what Vectorized<float>::tanh calls), on every
// f32 input through the CPU backend, and on a sample through the interpreter (the specification)
// and cuda-emu. The library is found through the torch 2.15 venv's Python, whose path CMake passes
// in ORDO_TORCH2_PYTHON (scripts/torch2-venv --python). The test fails, never skips, when that
// Python, the library or its Sleef functions are missing, or the CPU lacks AVX2; it checks the
// AVX-512 build only where the CPU has AVX-512F, and says so where it does not.
#include <dlfcn.h>
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <immintrin.h>

#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
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

// y = Sleef's tanhf_u10(x) over rows of kCols, `lanes` at a time.
Kernel tanh_kernel(int lanes) {
  return test::elementwise_kernel(fmt::format("sleef_tanh_x{}", lanes), kCols, lanes, {{"y", gen::sleef_tanhf_u10}});
}

// The wheel's libtorch_cpu.so, loaded once, or the reason it could not be.
struct TorchLibrary {
  void* handle = nullptr;
  std::string error;
};

const TorchLibrary& torch_library() {
  static const TorchLibrary lib = [] {
    TorchLibrary out;
    const char* python = std::getenv("ORDO_TORCH2_PYTHON");
    if (!python || !*python) {
      out.error = "ORDO_TORCH2_PYTHON is not set (CMake sets it to scripts/torch2-venv --python)";
      return out;
    }
    const std::string command = fmt::format(
        "'{}' -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), \"lib\", \"libtorch_cpu.so\"))' 2>/dev/null",
        python);
    FILE* pipe = popen(command.c_str(), "r");
    std::string path;
    if (pipe) {
      char line[4096];
      while (std::fgets(line, sizeof line, pipe)) path += line;
      pclose(pipe);
    }
    while (!path.empty() && (path.back() == '\n' || path.back() == '\r')) path.pop_back();
    if (path.empty()) {
      out.error = fmt::format("{} could not import torch (run scripts/setup.sh)", python);
      return out;
    }
    out.handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!out.handle) out.error = fmt::format("dlopen {}: {}", path, dlerror());
    return out;
  }();
  return lib;
}

void* sleef_function(const char* name) {
  const TorchLibrary& lib = torch_library();
  INFO(lib.error);
  REQUIRE(lib.handle != nullptr);
  void* f = dlsym(lib.handle, name);
  INFO(fmt::format("{} is not exported by the wheel's libtorch_cpu.so", name));
  REQUIRE(f != nullptr);
  return f;
}

using Tanh8 = __m256 (*)(__m256);
using Tanh16 = __m512 (*)(__m512);

__attribute__((target("avx2"))) void sleef_tanh8(Tanh8 f, const float* x, float* y, size_t n) {
  for (size_t i = 0; i < n; i += 8) _mm256_storeu_ps(y + i, f(_mm256_loadu_ps(x + i)));
}

__attribute__((target("avx512f"))) void sleef_tanh16(Tanh16 f, const float* x, float* y, size_t n) {
  for (size_t i = 0; i < n; i += 16) _mm512_storeu_ps(y + i, f(_mm512_loadu_ps(x + i)));
}

bool same(float a, float b) { return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b); }
float from_bits(uint32_t b) { return std::bit_cast<float>(b); }

TEST_CASE("Sleef tanhf_u10 in IR equals the wheel's AVX2 and AVX-512 Sleef on every f32 input, NaN bits included (cpu backend)") {
  REQUIRE(__builtin_cpu_supports("avx2"));
  const bool avx512 = __builtin_cpu_supports("avx512f");
  const Tanh8 tanh8 = reinterpret_cast<Tanh8>(sleef_function("Sleef_tanhf8_u10avx2"));
  const Tanh16 tanh16 = avx512 ? reinterpret_cast<Tanh16>(sleef_function("Sleef_tanhf16_u10avx512f")) : nullptr;
  if (!avx512) MESSAGE("this CPU has no AVX-512F: only the AVX2 build is compared");
  const llvm_backend::Compiled c = llvm_backend::compile(tanh_kernel(8));
  constexpr int64_t kRowsPerChunk = 4096;  // 2^24 inputs
  constexpr int64_t kChunks = (int64_t(1) << 32) / (kCols * kRowsPerChunk);
  std::atomic<int64_t> next{0};
  const size_t workers_n = std::max(1u, std::thread::hardware_concurrency());
  std::vector<uint64_t> bad8(workers_n), bad16(workers_n);
  std::vector<uint32_t> first8(workers_n), first16(workers_n);
  std::vector<std::thread> workers;
  for (size_t w = 0; w < workers_n; ++w)
    workers.emplace_back([&, w] {
      const size_t n = static_cast<size_t>(kCols * kRowsPerChunk);
      std::vector<float> x(n), y(n), ref(n);
      for (int64_t chunk = next++; chunk < kChunks; chunk = next++) {
        const uint32_t base = static_cast<uint32_t>(chunk * kCols * kRowsPerChunk);
        for (size_t i = 0; i < n; ++i) x[i] = from_bits(base + static_cast<uint32_t>(i));
        void* buffers[] = {x.data(), y.data()};
        const int64_t extents[] = {kRowsPerChunk};
        c.entry(buffers, extents, 0, kRowsPerChunk, 0);
        sleef_tanh8(tanh8, x.data(), ref.data(), n);
        for (size_t i = 0; i < n; ++i)
          if (!same(y[i], ref[i]) && bad8[w]++ == 0) first8[w] = base + static_cast<uint32_t>(i);
        if (tanh16) {
          sleef_tanh16(tanh16, x.data(), ref.data(), n);
          for (size_t i = 0; i < n; ++i)
            if (!same(y[i], ref[i]) && bad16[w]++ == 0) first16[w] = base + static_cast<uint32_t>(i);
        }
      }
    });
  for (std::thread& t : workers) t.join();
  uint64_t total8 = 0, total16 = 0;
  for (size_t w = 0; w < workers_n; ++w) {
    INFO(fmt::format("worker {}: first mismatching input 0x{:08x} (avx2) / 0x{:08x} (avx512)", w, first8[w], first16[w]));
    CHECK(bad8[w] == 0);
    CHECK(bad16[w] == 0);
    total8 += bad8[w];
    total16 += bad16[w];
  }
  MESSAGE(fmt::format("2^32 inputs: {} differ from Sleef's AVX2 build, {} from its AVX-512 build{}", total8, total16,
                      avx512 ? "" : " (not compared)"));
}

// The interpreter (the specification) and cuda-emu, scalar and 8-lane, against the CPU backend on
// 2^18 inputs spread over every exponent plus the special values and the cut at 8.664339742.
TEST_CASE("Sleef tanhf_u10 in IR: interpreter and cuda-emu agree with the cpu backend on a sample") {
  std::vector<float> x;
  for (uint32_t b : {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00000u, 0x00000001u, 0x007fffffu,
                     0x00800000u, 0x3f800000u, 0xbf800000u, 0x410aa123u, 0x410aa124u, 0xc10aa123u, 0xc10aa124u, 0x3f317218u})
    x.push_back(from_bits(b));
  const uint32_t stride = 16411;
  while (x.size() < 64 * kCols) x.push_back(from_bits(static_cast<uint32_t>(x.size()) * stride + 12345u));
  const int64_t rows = static_cast<int64_t>(x.size()) / kCols;
  const size_t n = x.size();
  const llvm_backend::Compiled c = llvm_backend::compile(tanh_kernel(8));
  std::vector<float> want(n);
  {
    void* buffers[] = {x.data(), want.data()};
    const int64_t extents[] = {rows};
    c.entry(buffers, extents, 0, rows, 0);
  }
  for (int lanes : {1, 8}) {
    const Kernel k = tanh_kernel(lanes);
    std::vector<float> yi(n), ye(n);
    interpret(k, {{x.data(), int64_t(n)}, {yi.data(), int64_t(n)}}, {rows});
    const cuda_backend::Source src = cuda_backend::render(k);
    const cuda_backend::EmuKernel emu = cuda_backend::compile_emu(src);
    void* buffers[] = {x.data(), ye.data()};
    const long long extents[] = {rows};
    emu.run_blocks(buffers, extents, rows, 0, (rows + src.instances_per_block - 1) / src.instances_per_block);
    int interp_bad = 0, emu_bad = 0;
    for (size_t i = 0; i < n; ++i) {
      interp_bad += !same(yi[i], want[i]);
      emu_bad += !same(ye[i], want[i]);
    }
    INFO(fmt::format("lanes {}", lanes));
    CHECK(interp_bad == 0);
    CHECK(emu_bad == 0);
  }
}

}  // namespace
}  // namespace ordo
