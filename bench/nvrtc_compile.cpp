// NVRTC compile latency: request -> IR -> CUDA source -> cubin for sm_90, cold each time (a
// fresh NVRTC program; ordo's caches bypassed), median over repeated runs. The target is at
// most 150 ms for layer_norm. Prints one JSON line per kernel, with the medians of NVRTC's own
// phase times (front end, NVVM, ptxas), after three floors: an empty kernel (NVRTC's fixed cost),
// an empty kernel that includes ordo_rt.cuh (what the helper header adds), and a kernel of one
// IEEE division (what ptxas adds for the division's slow path, which every layer_norm needs).
//
// The runs are interleaved: run i compiles the floors and then every kernel once, so a change
// in the machine's speed during the benchmark (this VM's compile times drift by up to 2x
// within an hour) reaches every kernel alike. "floor_ratio" is the median over runs of a kernel's
// time divided by the empty kernel's time in the same run: the number to compare across days.
//
// By default it compiles a fixed set of kernels (the GPU orders' layer_norm in every dtype, a
// CPU reference order mapped to the GPU, two softmax kernels). --every-layer-norm compiles
// instead every named order's layer_norm in every dtype the order takes, N = 4096, and the
// orders whose kernel depends on N at N = 4097 too (torch-cuda: PyTorch's two-kernel path).
//   bench_nvrtc [--runs R] [--arch 90] [--every-layer-norm]
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.hpp"
#include "gen/gen.hpp"
#include "ir/error.hpp"

int main(int argc, char** argv) {
  int runs = 15, arch = 90;
  bool every_layer_norm = false;
  const char* usage = "usage: bench_nvrtc [--runs R] [--arch 90] [--every-layer-norm]";
  // A positive integer, or an error naming the flag and the value.
  auto positive = [&](const char* flag, const char* text, int& out) {
    char* end = nullptr;
    const long v = std::strtol(text, &end, 10);
    if (end == text || *end || v < 1 || v > 1000000) {
      fmt::print(stderr, "bench_nvrtc: {} takes a positive integer, not '{}' ({})\n", flag, text, usage);
      return false;
    }
    out = static_cast<int>(v);
    return true;
  };
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--every-layer-norm")) {
      every_layer_norm = true;
    } else if (i + 1 < argc && !std::strcmp(argv[i], "--runs")) {
      if (!positive("--runs", argv[++i], runs)) return 2;
    } else if (i + 1 < argc && !std::strcmp(argv[i], "--arch")) {
      if (!positive("--arch", argv[++i], arch)) return 2;
    } else {
      fmt::print(stderr, "bench_nvrtc: unknown argument '{}' ({})\n", argv[i], usage);
      return 2;
    }
  }
  using clock = std::chrono::steady_clock;
  struct Case {
    ordo::OpKind op;
    std::string order;
    ordo::ScalarType dtype;
    int64_t cols = 4096;
  };
  std::vector<Case> cases = {{ordo::OpKind::layer_norm, "fast", ordo::ScalarType::f32},
                             {ordo::OpKind::layer_norm, "fast", ordo::ScalarType::bf16},
                             {ordo::OpKind::layer_norm, "fast", ordo::ScalarType::f16},
                             {ordo::OpKind::layer_norm, "torch-cuda", ordo::ScalarType::f32},
                             {ordo::OpKind::layer_norm, "torch-cuda", ordo::ScalarType::bf16},
                             {ordo::OpKind::layer_norm, "torch-cuda", ordo::ScalarType::f16},
                             {ordo::OpKind::softmax, "warp-butterfly", ordo::ScalarType::f32},
                             {ordo::OpKind::layer_norm, "torch1.13-cpu-avx2", ordo::ScalarType::f32},
                             {ordo::OpKind::layer_norm, "torch1.13-cpu-avx2", ordo::ScalarType::bf16},
                             {ordo::OpKind::softmax, "torch1.13-cpu-avx2", ordo::ScalarType::f32}};
  if (every_layer_norm) {
    cases.clear();
    for (const ordo::gen::NamedOrder& o : ordo::gen::named_orders()) {
      if (std::find(o.ops.begin(), o.ops.end(), ordo::OpKind::layer_norm) == o.ops.end()) continue;
      for (ordo::ScalarType t : o.dtypes) cases.push_back({ordo::OpKind::layer_norm, std::string(o.name), t});
    }
    for (ordo::ScalarType t : {ordo::ScalarType::f32, ordo::ScalarType::bf16, ordo::ScalarType::f16})
      cases.push_back({ordo::OpKind::layer_norm, "torch-cuda", t, 4097});
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  // One compile's times, collected per floor or kernel over the runs.
  struct Times {
    std::vector<double> total, nvrtc, frontend, nvvm, ptxas, ratio;
    size_t cubin = 0;
    void add(double total_ms, const ordo::cuda_backend::Compiled& c) {
      total.push_back(total_ms);
      nvrtc.push_back(c.nvrtc_ms);
      frontend.push_back(c.frontend_ms);
      nvvm.push_back(c.nvvm_ms);
      ptxas.push_back(c.ptxas_ms);
      cubin = c.cubin.size();
    }
  };
  try {
    auto source = [](std::string text, std::string entry) {
      ordo::cuda_backend::Source s;
      s.text = std::move(text);
      s.entry = std::move(entry);
      return s;
    };
    // Loads NVRTC's libraries once, outside the timing.
    ordo::cuda_backend::compile(source("extern \"C\" __global__ void warm() {}", "warm"), arch, true, false);
    const ordo::cuda_backend::Source floors[] = {
        source("extern \"C\" __global__ void empty() {}", "empty"),
        source("#include \"ordo_rt.cuh\"\nextern \"C\" __global__ void empty() {}", "empty"),
        source("#include \"ordo_rt.cuh\"\n"
               "extern \"C\" __global__ void one_division(const float* x, float* y) { y[0] = ordo_rt::div(x[0], x[1]); }",
               "one_division")};
    const char* floor_names[] = {"empty kernel", "empty kernel including ordo_rt.cuh", "one division, including ordo_rt.cuh"};
    constexpr size_t kFloors = sizeof(floors) / sizeof(floors[0]);
    std::vector<ordo::Request> requests;
    for (const Case& c : cases) {
      ordo::Request r;
      r.op = c.op;
      r.cols = c.cols;
      r.order = c.order;
      r.x_dtype = c.dtype;
      r.has_weight = r.has_bias = c.op == ordo::OpKind::layer_norm;
      r.target = ordo::Target::cuda;  // device-only orders (torch-cuda) resolve for cuda only
      requests.push_back(r);
    }
    std::vector<Times> floor_times(kFloors), kernel_times(requests.size());
    for (int i = 0; i < runs; ++i) {
      for (size_t f = 0; f < kFloors; ++f) {
        const ordo::cuda_backend::Compiled out = ordo::cuda_backend::compile(floors[f], arch, true, false, true);
        floor_times[f].add(out.nvrtc_ms, out);
      }
      for (size_t j = 0; j < requests.size(); ++j) {
        const auto t0 = clock::now();
        const ordo::ir::Kernel k = ordo::gen::build(requests[j], ordo::gen::resolve(requests[j]));
        const ordo::cuda_backend::Compiled out = ordo::cuda_backend::compile(ordo::cuda_backend::render(k), arch, true, false, true);
        const double ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
        kernel_times[j].add(ms, out);
        kernel_times[j].ratio.push_back(ms / floor_times[0].nvrtc.back());
      }
    }
    for (size_t f = 0; f < kFloors; ++f) {
      const Times& t = floor_times[f];
      fmt::print("{{\"floor\": \"{}\", \"arch\": \"sm_{}\", \"runs\": {}, \"nvrtc_median_ms\": {:.1f}, \"frontend_ms\": {}, "
                 "\"nvvm_ms\": {}, \"ptxas_ms\": {}}}\n",
                 floor_names[f], arch, runs, median(t.nvrtc), median(t.frontend), median(t.nvvm), median(t.ptxas));
    }
    for (size_t j = 0; j < requests.size(); ++j) {
      const Times& t = kernel_times[j];
      const auto [lo, hi] = std::minmax_element(t.total.begin(), t.total.end());
      fmt::print("{{\"op\": \"{}\", \"order\": \"{}\", \"dtype\": \"{}\", \"cols\": {}, \"arch\": \"sm_{}\", \"runs\": {}, "
                 "\"median_ms\": {:.1f}, \"min_ms\": {:.1f}, \"max_ms\": {:.1f}, \"floor_ratio\": {:.2f}, \"nvrtc_median_ms\": {:.1f}, "
                 "\"frontend_ms\": {}, \"nvvm_ms\": {}, \"ptxas_ms\": {}, \"cubin_bytes\": {}, \"target_ms\": 150}}\n",
                 ordo::name(cases[j].op), cases[j].order, ordo::name(cases[j].dtype), cases[j].cols, arch, runs, median(t.total), *lo, *hi,
                 median(t.ratio), median(t.nvrtc), median(t.frontend), median(t.nvvm), median(t.ptxas), t.cubin);
    }
  } catch (const ordo::Error& e) {
    fmt::print(stderr, "bench_nvrtc: {}\n", e.what());
    return 2;
  }
  return 0;
}
