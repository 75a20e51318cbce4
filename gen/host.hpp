// The machine a reference library ran on, as far as its choice of kernel reads it. PyTorch picks
// its CPU capability from ATEN_CPU_CAPABILITY or the CPU's ISA; MKL runs other kernels on Intel
// and AMD CPUs and with avx512_bf16; oneDNN takes PyTorch's 16-bit products only with the right
// AVX-512 extensions; MKL's default thread count is the physical cores. The orders that reproduce
// those libraries resolve against a HostModel, so resolution is a pure function of (Request,
// HostModel): HostModel::running() probes this machine once, and a test can resolve against any
// other host's model (HostModel::named) on whatever machine it runs on.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ordo::gen {

struct HostModel {
  enum class Vendor : uint8_t { intel, amd, other };
  Vendor vendor = Vendor::other;
  bool avx2_fma = false;        // AVX2 and FMA: PyTorch's avx2 capability
  bool avx512 = false;          // AVX-512 F, BW, VL and DQ: PyTorch's avx512 capability
  bool avx512f = false;         // AVX-512 F alone: what MKL's and oneDNN's choices test
  bool avx512_bf16 = false;
  bool avx512_fp16 = false;
  bool avx_ne_convert = false;  // CPUID leaf 7 subleaf 1, EDX bit 5
  int physical_cores = 1;       // MKL's default thread count: distinct (package, core) pairs
  std::string aten_cpu_capability;  // ATEN_CPU_CAPABILITY as set in the environment ("" unset)

  // This machine, probed on first use (cpuid, /sys, the environment).
  static const HostModel& running();
  // A model of a host type, for tests: intel-avx2, intel-avx512, intel-avx512bf16 (Cooper Lake),
  // intel-avx512fp16 (Sapphire Rapids: avx512_bf16 and avx512_fp16), amd-avx2 (Zen 2/3),
  // amd-avx512 (Zen 4/5, with avx512_bf16). Two physical cores, ATEN_CPU_CAPABILITY unset.
  static std::optional<HostModel> named(std::string_view name);
  static std::vector<std::string_view> names();
  std::string describe() const;  // "intel, avx512, avx512_bf16, 2 cores"
};

}  // namespace ordo::gen
