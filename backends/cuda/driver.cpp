// The CUDA driver, loaded with dlopen("libcuda.so.1") at the first launch, never linked: ordo
// generates and compiles CUDA kernels on machines without a driver, and only launching needs
// one. Entry points are resolved by the versioned names cuda.h maps them to (cuMemAlloc ->
// cuMemAlloc_v2, ...); the few types used are declared here, so cuda.h is not needed either.
#include <dlfcn.h>
#include <fmt/format.h>

#include <mutex>

#include "backends/cuda/cuda_backend.hpp"
#include "ir/error.hpp"

namespace ordo::cuda_backend {

namespace {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = struct CUctx_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUstream = struct CUstream_st*;
constexpr int kAttrComputeCapabilityMajor = 75, kAttrComputeCapabilityMinor = 76;

struct Api {
  CUresult (*cuInit)(unsigned) = nullptr;
  CUresult (*cuDeviceGetCount)(int*) = nullptr;
  CUresult (*cuDeviceGet)(CUdevice*, int) = nullptr;
  CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice) = nullptr;
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*cuCtxSetCurrent)(CUcontext) = nullptr;
  CUresult (*cuCtxSynchronize)() = nullptr;
  CUresult (*cuModuleLoadData)(CUmodule*, const void*) = nullptr;
  CUresult (*cuModuleUnload)(CUmodule) = nullptr;
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*) = nullptr;
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t) = nullptr;
  CUresult (*cuMemFree)(CUdeviceptr) = nullptr;
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void*, size_t) = nullptr;
  CUresult (*cuMemcpyDtoH)(void*, CUdeviceptr, size_t) = nullptr;
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                             void**, void**) = nullptr;
  CUresult (*cuGetErrorName)(CUresult, const char**) = nullptr;
  CUresult (*cuGetErrorString)(CUresult, const char**) = nullptr;
};

struct Driver {
  Api api;
  std::string error;  // empty: usable
  CUdevice device = 0;
  CUcontext context = nullptr;
  int cc_major = 0, cc_minor = 0;

  std::string describe(CUresult r) const {
    const char *n = nullptr, *s = nullptr;
    if (api.cuGetErrorName) api.cuGetErrorName(r, &n);
    if (api.cuGetErrorString) api.cuGetErrorString(r, &s);
    return fmt::format("{} ({}): {}", n ? n : "CUDA error", r, s ? s : "no description");
  }
  void check(CUresult r, const char* what) const {
    if (r != 0) throw Error(fmt::format("CUDA driver: {} failed: {}", what, describe(r)));
  }
};

template <class F>
bool resolve(void* lib, F& fn, const char* symbol, std::string& error) {
  fn = reinterpret_cast<F>(dlsym(lib, symbol));
  if (!fn && error.empty())
    error = fmt::format("libcuda.so.1 has no symbol {}: the installed NVIDIA driver is too old for ordo", symbol);
  return fn != nullptr;
}

Driver load() {
  Driver d;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* why = dlerror();
    d.error = fmt::format(
        "the CUDA driver is not available: dlopen(\"libcuda.so.1\") failed ({}). Launching a kernel of target cuda needs an "
        "NVIDIA GPU and its driver; generating and compiling (ordo emit --cuda/--ptx, ordo build --target cuda) work without "
        "one, and target cuda-emu runs the same CUDA source on the CPU",
        why ? why : "no reason given");
    return d;
  }
  Api& a = d.api;
  std::string& e = d.error;
  resolve(lib, a.cuGetErrorName, "cuGetErrorName", e);
  resolve(lib, a.cuGetErrorString, "cuGetErrorString", e);
  resolve(lib, a.cuInit, "cuInit", e);
  resolve(lib, a.cuDeviceGetCount, "cuDeviceGetCount", e);
  resolve(lib, a.cuDeviceGet, "cuDeviceGet", e);
  resolve(lib, a.cuDeviceGetAttribute, "cuDeviceGetAttribute", e);
  resolve(lib, a.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", e);
  resolve(lib, a.cuCtxSetCurrent, "cuCtxSetCurrent", e);
  resolve(lib, a.cuCtxSynchronize, "cuCtxSynchronize", e);
  resolve(lib, a.cuModuleLoadData, "cuModuleLoadData", e);
  resolve(lib, a.cuModuleUnload, "cuModuleUnload", e);
  resolve(lib, a.cuModuleGetFunction, "cuModuleGetFunction", e);
  resolve(lib, a.cuMemAlloc, "cuMemAlloc_v2", e);
  resolve(lib, a.cuMemFree, "cuMemFree_v2", e);
  resolve(lib, a.cuMemcpyHtoD, "cuMemcpyHtoD_v2", e);
  resolve(lib, a.cuMemcpyDtoH, "cuMemcpyDtoH_v2", e);
  resolve(lib, a.cuLaunchKernel, "cuLaunchKernel", e);
  if (!e.empty()) return d;
  CUresult r = a.cuInit(0);
  if (r != 0) {
    e = fmt::format("the CUDA driver loaded but cuInit failed: {}", d.describe(r));
    return d;
  }
  int count = 0;
  r = a.cuDeviceGetCount(&count);
  if (r != 0 || count == 0) {
    e = r != 0 ? fmt::format("cuDeviceGetCount failed: {}", d.describe(r)) : "the CUDA driver reports no device";
    return d;
  }
  try {
    d.check(a.cuDeviceGet(&d.device, 0), "cuDeviceGet(0)");
    d.check(a.cuDeviceGetAttribute(&d.cc_major, kAttrComputeCapabilityMajor, d.device), "cuDeviceGetAttribute");
    d.check(a.cuDeviceGetAttribute(&d.cc_minor, kAttrComputeCapabilityMinor, d.device), "cuDeviceGetAttribute");
    d.check(a.cuDevicePrimaryCtxRetain(&d.context, d.device), "cuDevicePrimaryCtxRetain");
  } catch (const Error& x) {
    e = x.what();
  }
  return d;
}

// Loaded at the first use, once per process.
const Driver& driver() {
  static const Driver d = load();
  return d;
}

}  // namespace

std::string driver_status() { return driver().error; }

struct DeviceKernel::State {
  std::mutex mu;
  CUmodule module = nullptr;
  CUfunction function = nullptr;
};

DeviceKernel::DeviceKernel(Source s, std::string cubin, int arch)
    : source_(std::move(s)), cubin_(std::move(cubin)), arch_(arch), state_(std::make_unique<State>()) {}

DeviceKernel::~DeviceKernel() {
  if (state_ && state_->module) driver().api.cuModuleUnload(state_->module);
}

void DeviceKernel::launch(const std::vector<BufferView>& buffers, const std::vector<int64_t>& extents) const {
  const Driver& d = driver();
  if (!d.error.empty()) throw Error(d.error);
  const Api& a = d.api;
  // A cubin runs on devices of its major version with an equal or higher minor version.
  if (d.cc_major != arch_ / 10 || d.cc_minor < arch_ % 10)
    throw Error(fmt::format("the kernel was compiled for sm_{}, device 0 has compute capability {}.{}: request arch sm_{}{}",
                            arch_, d.cc_major, d.cc_minor, d.cc_major, d.cc_minor));
  d.check(a.cuCtxSetCurrent(d.context), "cuCtxSetCurrent");
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (!state_->module) {
      d.check(a.cuModuleLoadData(&state_->module, cubin_.data()), "cuModuleLoadData");
      d.check(a.cuModuleGetFunction(&state_->function, state_->module, source_.entry.c_str()), "cuModuleGetFunction");
    }
  }
  // Device copies of every buffer (cuMemAlloc aligns to 256 bytes, more than any vector access
  // needs), freed on every path out.
  struct Allocations {
    const Api& a;
    std::vector<CUdeviceptr> p;
    ~Allocations() {
      for (CUdeviceptr x : p)
        if (x) a.cuMemFree(x);
    }
  } mem{a, {}};
  for (const BufferView& b : buffers) {
    CUdeviceptr p = 0;
    if (b.bytes > 0) d.check(a.cuMemAlloc(&p, static_cast<size_t>(b.bytes)), "cuMemAlloc");
    mem.p.push_back(p);
    // Outputs too: bytes a kernel does not write keep the caller's values, as on the CPU.
    if (b.bytes > 0) d.check(a.cuMemcpyHtoD(p, b.data, static_cast<size_t>(b.bytes)), "cuMemcpyHtoD");
  }
  // extents: the grid's, then the launch's rows (launch_rows).
  long long instances = 1;
  std::vector<long long> ext(extents.begin(), extents.end());
  for (int d = 0; d < source_.grid_rank; ++d) instances *= ext.at(static_cast<size_t>(d));
  std::vector<void*> params;
  for (CUdeviceptr& p : mem.p) params.push_back(&p);
  for (long long& e : ext) params.push_back(&e);
  params.push_back(&instances);
  const long long per_block = source_.instances_per_block;
  const long long blocks = (instances + per_block - 1) / per_block;
  if (blocks > 0x7fffffffLL) throw Error(fmt::format("{} instances need {} blocks, more than one launch holds", instances, blocks));
  d.check(a.cuLaunchKernel(state_->function, static_cast<unsigned>(blocks), 1, 1, static_cast<unsigned>(source_.block_threads), 1, 1, 0, nullptr, params.data(), nullptr),
          "cuLaunchKernel");
  d.check(a.cuCtxSynchronize(), "the kernel (cuCtxSynchronize)");
  for (size_t i = 0; i < buffers.size(); ++i)
    if (buffers[i].output && buffers[i].bytes > 0)
      d.check(a.cuMemcpyDtoH(buffers[i].data, mem.p[i], static_cast<size_t>(buffers[i].bytes)), "cuMemcpyDtoH");
}

void check_alignment(const Source& s, const std::vector<std::string>& names, const std::vector<BufferView>& buffers) {
  for (size_t i = 0; i < buffers.size() && i < s.buffer_align.size(); ++i) {
    const auto addr = reinterpret_cast<uintptr_t>(buffers[i].data);
    if (buffers[i].bytes > 0 && addr % static_cast<uintptr_t>(s.buffer_align[i]) != 0)
      throw Error(fmt::format("{}: address {:#x} is not {}-byte aligned; the CUDA kernel {} reads it with {}-byte vector "
                              "accesses (pass an aligned buffer)",
                              i < names.size() ? names[i] : fmt::format("buffer {}", i), addr, s.buffer_align[i], s.entry,
                              s.buffer_align[i]));
  }
}

}  // namespace ordo::cuda_backend
