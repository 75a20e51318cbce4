// NVRTC compile latency: request -> IR -> CUDA source -> cubin for sm_90, cold each time (a
// fresh NVRTC program; ordo's caches bypassed), median over repeated runs. The target is at
// most 150 ms for layer_norm. Prints one JSON line per kernel, with the medians of NVRTC's own
// phase times (front end, NVVM, ptxas), after two floors: an empty kernel (NVRTC's fixed cost)
// and an empty kernel that includes ordo_rt.cuh (what the helper header adds).
//   bench_nvrtc [--runs R] [--arch 90]
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.hpp"
#include "gen/gen.hpp"
#include "ir/error.hpp"

int main(int argc, char** argv) {
  int runs = 15, arch = 90;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--runs")) runs = std::max(1, std::atoi(argv[i + 1]));
    else if (!std::strcmp(argv[i], "--arch")) arch = std::atoi(argv[i + 1]);
  }
  using clock = std::chrono::steady_clock;
  struct Case {
    ordo::OpKind op;
    const char* order;
    ordo::ScalarType dtype;
  };
  const Case cases[] = {{ordo::OpKind::layer_norm, "fast", ordo::ScalarType::f32},
                        {ordo::OpKind::layer_norm, "torch-cuda", ordo::ScalarType::f32},
                        {ordo::OpKind::layer_norm, "torch-cuda", ordo::ScalarType::bf16},
                        {ordo::OpKind::softmax, "warp-butterfly", ordo::ScalarType::f32},
                        {ordo::OpKind::layer_norm, "torch1.13-cpu-avx2", ordo::ScalarType::f32},
                        {ordo::OpKind::layer_norm, "torch1.13-cpu-avx2", ordo::ScalarType::bf16},
                        {ordo::OpKind::softmax, "torch1.13-cpu-avx2", ordo::ScalarType::f32}};
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  try {
    ordo::cuda_backend::compile(ordo::cuda_backend::Source{"extern \"C\" __global__ void warm() {}", "warm"}, arch, true,
                                false);  // loads NVRTC's libraries once, outside the timing
    for (const char* include : {"", "#include \"ordo_rt.cuh\"\n"}) {
      const ordo::cuda_backend::Source s{std::string(include) + "extern \"C\" __global__ void empty() {}", "empty"};
      std::vector<double> nvrtc, frontend, nvvm, ptxas;
      for (int i = 0; i < runs; ++i) {
        const ordo::cuda_backend::Compiled out = ordo::cuda_backend::compile(s, arch, true, false, true);
        nvrtc.push_back(out.nvrtc_ms);
        frontend.push_back(out.frontend_ms);
        nvvm.push_back(out.nvvm_ms);
        ptxas.push_back(out.ptxas_ms);
      }
      fmt::print("{{\"floor\": \"{}\", \"arch\": \"sm_{}\", \"runs\": {}, \"nvrtc_median_ms\": {:.1f}, \"frontend_ms\": {}, "
                 "\"nvvm_ms\": {}, \"ptxas_ms\": {}}}\n",
                 *include ? "empty kernel including ordo_rt.cuh" : "empty kernel", arch, runs, median(nvrtc),
                 median(frontend), median(nvvm), median(ptxas));
    }
    for (const Case& c : cases) {
      ordo::Request r;
      r.op = c.op;
      r.cols = 4096;
      r.order = c.order;
      r.x_dtype = c.dtype;
      r.has_weight = r.has_bias = c.op == ordo::OpKind::layer_norm;
      r.target = ordo::Target::cuda;  // device-only orders (torch-cuda) resolve for cuda only
      std::vector<double> total, nvrtc, frontend, nvvm, ptxas;
      size_t cubin = 0;
      for (int i = 0; i < runs; ++i) {
        const auto t0 = clock::now();
        const ordo::ir::Kernel k = ordo::gen::build(r, ordo::gen::resolve(r));
        const ordo::cuda_backend::Compiled out =
            ordo::cuda_backend::compile(ordo::cuda_backend::render(k), arch, true, false, true);
        total.push_back(std::chrono::duration<double, std::milli>(clock::now() - t0).count());
        nvrtc.push_back(out.nvrtc_ms);
        frontend.push_back(out.frontend_ms);
        nvvm.push_back(out.nvvm_ms);
        ptxas.push_back(out.ptxas_ms);
        cubin = out.cubin.size();
      }
      std::sort(total.begin(), total.end());
      fmt::print("{{\"op\": \"{}\", \"order\": \"{}\", \"dtype\": \"{}\", \"cols\": 4096, \"arch\": \"sm_{}\", \"runs\": {}, "
                 "\"median_ms\": {:.1f}, \"min_ms\": {:.1f}, \"max_ms\": {:.1f}, \"nvrtc_median_ms\": {:.1f}, \"frontend_ms\": {}, "
                 "\"nvvm_ms\": {}, \"ptxas_ms\": {}, \"cubin_bytes\": {}, \"target_ms\": 150}}\n",
                 ordo::name(c.op), c.order, ordo::name(c.dtype), arch, runs, total[total.size() / 2], total.front(),
                 total.back(), median(nvrtc), median(frontend), median(nvvm), median(ptxas), cubin);
    }
  } catch (const ordo::Error& e) {
    fmt::print(stderr, "bench_nvrtc: {}\n", e.what());
    return 2;
  }
  return 0;
}
