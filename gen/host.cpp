#include "gen/host.hpp"

#include <cpuid.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <set>
#include <thread>
#include <utility>

namespace ordo::gen {
namespace {

// Distinct (package, core) pairs in sysfs, else the logical CPUs: how MKL counts cores for its
// default thread count.
int probe_physical_cores() {
  std::set<std::pair<std::string, std::string>> cores;
  for (unsigned cpu = 0;; ++cpu) {
    const std::string dir = fmt::format("/sys/devices/system/cpu/cpu{}/topology/", cpu);
    std::ifstream package(dir + "physical_package_id"), core(dir + "core_id");
    std::string p, c;
    if (!(package >> p) || !(core >> c)) break;
    cores.insert({p, c});
  }
  if (!cores.empty()) return static_cast<int>(cores.size());
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

HostModel probe() {
  HostModel h;
  __builtin_cpu_init();
  h.vendor = __builtin_cpu_is("intel") ? HostModel::Vendor::intel
             : __builtin_cpu_is("amd") ? HostModel::Vendor::amd
                                       : HostModel::Vendor::other;
  h.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  h.avx512f = __builtin_cpu_supports("avx512f");
  h.avx512 = h.avx512f && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512dq");
  h.avx512_bf16 = __builtin_cpu_supports("avx512bf16");
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  // AVX512-FP16 (leaf 7, EDX bit 23), which GCC's __builtin_cpu_supports does not name.
  h.avx512_fp16 = __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) && (edx >> 23 & 1);
  h.avx_ne_convert = __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) && (edx >> 5 & 1);
  h.physical_cores = probe_physical_cores();
  if (const char* env = std::getenv("ATEN_CPU_CAPABILITY")) h.aten_cpu_capability = env;
  return h;
}

}  // namespace

const HostModel& HostModel::running() {
  static const HostModel host = probe();
  return host;
}

std::vector<std::string_view> HostModel::names() {
  return {"intel-avx2", "intel-avx512", "intel-avx512bf16", "intel-avx512fp16", "amd-avx2", "amd-avx512"};
}

std::optional<HostModel> HostModel::named(std::string_view name) {
  HostModel h;
  h.physical_cores = 2;
  h.avx2_fma = true;
  if (name == "intel-avx2" || name == "amd-avx2") {
    h.vendor = name == "amd-avx2" ? Vendor::amd : Vendor::intel;
    return h;
  }
  h.avx512 = h.avx512f = true;
  if (name == "intel-avx512") {
    h.vendor = Vendor::intel;
  } else if (name == "intel-avx512bf16") {
    h.vendor = Vendor::intel;
    h.avx512_bf16 = true;
  } else if (name == "intel-avx512fp16") {
    h.vendor = Vendor::intel;
    h.avx512_bf16 = h.avx512_fp16 = true;
  } else if (name == "amd-avx512") {
    h.vendor = Vendor::amd;
    h.avx512_bf16 = true;
  } else {
    return std::nullopt;
  }
  return h;
}

std::string HostModel::describe() const {
  std::string s = vendor == Vendor::intel ? "intel" : vendor == Vendor::amd ? "amd" : "another vendor";
  for (auto [has, feature] : {std::pair{avx512, "avx512"}, {!avx512 && avx2_fma, "avx2"}, {!avx512 && avx512f, "avx512f"},
                              {avx512_bf16, "avx512_bf16"}, {avx512_fp16, "avx512_fp16"}, {avx_ne_convert, "avx_ne_convert"}})
    if (has) s += fmt::format(", {}", feature);
  s += fmt::format(", {} cores", physical_cores);
  if (!aten_cpu_capability.empty()) s += fmt::format(", ATEN_CPU_CAPABILITY={}", aten_cpu_capability);
  return s;
}

}  // namespace ordo::gen
