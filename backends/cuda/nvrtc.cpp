// NVRTC: CUDA C++ -> PTX and cubin, in process. Found by CMake in the CUDA toolkit; without it
// (ORDO_HAVE_NVRTC undefined) rendering and cuda-emu still work and compile() says what is missing.
#include <fmt/format.h>

#include <chrono>
#include <regex>

#include "backends/cuda/cuda_backend.hpp"
#include "ir/error.hpp"
#include "ordo_templates.hpp"  // generated: the templates/ files as string literals

#ifdef ORDO_HAVE_NVRTC
#include <nvrtc.h>
#endif

namespace ordo::cuda_backend {

const std::string& ordo_rt_cuh() {
  static const std::string s = ordo_templates::kOrdoRtCuh;
  return s;
}
const std::string& simt_emu_hpp() {
  static const std::string s = ordo_templates::kSimtEmuHpp;
  return s;
}
const std::string& float_bits_hpp() {
  static const std::string s = ordo_templates::kFloatBitsHpp;
  return s;
}

PtxasInfo parse_ptxas(const std::string& log, const std::string& entry) {
  // ptxas -v prints, per function:
  //   ptxas info    : Function properties for NAME
  //       S bytes stack frame, T bytes spill stores, U bytes spill loads
  //   ptxas info    : Used R registers, ...
  PtxasInfo p;
  const size_t at = log.find("Function properties for " + entry);
  if (at == std::string::npos) return p;
  std::smatch m;
  const std::string rest = log.substr(at);
  if (std::regex_search(rest, m, std::regex(R"((\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)"))) {
    p.stack_frame = std::stoi(m[1]);
    p.spill_stores = std::stoi(m[2]);
    p.spill_loads = std::stoi(m[3]);
  }
  if (std::regex_search(rest, m, std::regex(R"(Used (\d+) registers)"))) p.registers = std::stoi(m[1]);
  p.line = fmt::format("ptxas: {} registers, stack frame {} B, spill stores {} B, spill loads {} B", p.registers,
                       p.stack_frame, p.spill_stores, p.spill_loads);
  return p;
}

#ifdef ORDO_HAVE_NVRTC

bool nvrtc_available() { return true; }

std::string nvrtc_version() {
  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  return fmt::format("{}.{}", major, minor);
}

namespace {
void check(nvrtcResult r, const char* what) {
  if (r != NVRTC_SUCCESS) throw Error(fmt::format("NVRTC {} failed: {}", what, nvrtcGetErrorString(r)));
}
}  // namespace

Compiled compile(const Source& s, int arch, bool cubin, bool verbose, bool phase_times) {
  if (!supported_arch(arch)) throw Error(fmt::format("CUDA arch sm_{} is not supported (sm_80, sm_86, sm_89, sm_90)", arch));
  const auto t0 = std::chrono::steady_clock::now();
  Compiled c;
  // Exact IEEE arithmetic: no contraction into fma (every fma is explicit), no flush to zero,
  // IEEE division and square root (the intrinsics state it too; the flags keep any other code
  // honest).
  // --minimal: NVRTC's built-in header leaves out textures and surfaces, the device runtime
  // (cudaMalloc, launches from device code) and the runtime API's types, none of which a rendered
  // kernel uses; parsing them was about a third of the front end's time (8 of 25 ms for
  // layer_norm). The PTX is the same.
  c.options = {fmt::format("--gpu-architecture=sm_{}", arch), "--fmad=false", "--ftz=false", "--prec-div=true",
               "--prec-sqrt=true", "--std=c++17", "--minimal"};
  if (verbose) c.options.insert(c.options.end(), {"--ptxas-options=-v", "--no-cache"});
  if (phase_times) c.options.push_back("--time=-");  // a table in the log: "file, phase, 17, ms"
  nvrtcProgram prog = nullptr;
  const char* header_text[] = {ordo_rt_cuh().c_str()};
  const char* header_name[] = {"ordo_rt.cuh"};
  check(nvrtcCreateProgram(&prog, s.text.c_str(), (s.entry + ".cu").c_str(), 1, header_text, header_name), "create program");
  std::vector<const char*> opts;
  for (const std::string& o : c.options) opts.push_back(o.c_str());
  const nvrtcResult r = nvrtcCompileProgram(prog, static_cast<int>(opts.size()), opts.data());
  size_t n = 0;
  nvrtcGetProgramLogSize(prog, &n);
  c.log.assign(n, '\0');
  if (n) nvrtcGetProgramLog(prog, c.log.data());
  while (!c.log.empty() && c.log.back() == '\0') c.log.pop_back();
  if (r != NVRTC_SUCCESS) {
    nvrtcDestroyProgram(&prog);
    throw Error(fmt::format("internal: NVRTC rejected the CUDA source of {} ({}):\n{}", s.entry, nvrtcGetErrorString(r), c.log));
  }
  check(nvrtcGetPTXSize(prog, &n), "PTX size");
  c.ptx.assign(n, '\0');
  check(nvrtcGetPTX(prog, c.ptx.data()), "PTX");
  while (!c.ptx.empty() && c.ptx.back() == '\0') c.ptx.pop_back();
  if (cubin) {
    check(nvrtcGetCUBINSize(prog, &n), "cubin size");
    c.cubin.assign(n, '\0');
    check(nvrtcGetCUBIN(prog, c.cubin.data()), "cubin");
  }
  nvrtcDestroyProgram(&prog);
  if (verbose) c.ptxas = parse_ptxas(c.log, s.entry);
  if (phase_times) {
    const std::regex row(R"(, (CUDA C\+\+ Frontend|NVVM Optimizer|PTX Translation), ([0-9.]+), ms)");
    for (auto it = std::sregex_iterator(c.log.begin(), c.log.end(), row); it != std::sregex_iterator(); ++it) {
      const std::string phase = (*it)[1];
      double& ms = phase == "CUDA C++ Frontend" ? c.frontend_ms : phase == "NVVM Optimizer" ? c.nvvm_ms : c.ptxas_ms;
      ms = std::stod((*it)[2]);
    }
  }
  c.nvrtc_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return c;
}

#else

bool nvrtc_available() { return false; }
std::string nvrtc_version() { return "none"; }
Compiled compile(const Source&, int, bool, bool, bool) {
  throw Error("this ordo was built without NVRTC (CMake did not find the CUDA toolkit); target cuda-emu runs the same source on the CPU");
}

#endif

}  // namespace ordo::cuda_backend
