// backends/cuda: IR -> CUDA C++ -> NVRTC (PTX, cubin) -> the driver, loaded lazily; and the
// same CUDA C++ compiled by the host C++ compiler over templates/simt_emu.hpp (cuda-emu).
//
// Mapping: one CUDA thread per program instance. The grid is flat: thread
// blockIdx.x*blockDim.x + threadIdx.x runs instance `flat` (row-major over the IR's grid) when
// flat < the instance count. Control flow is uniform (the IR verifier), so every thread runs the
// whole body, but for per-instance loops and ifs (ir/ir.hpp), plain C++ control flow that each
// thread takes its own way (outside Team statements, so a block's threads agree). A team kernel (ir::Kernel::team > 1) instead runs instance blockIdx.x with a block
// of `team` threads: scratch buffers become __shared__ arrays, a Team statement is followed by
// __syncthreads() when it touches them, and IR shuffles are __shfl_down_sync/__shfl_xor_sync.
//
// Numerics: every IR node is one helper of templates/ordo_rt.cuh, written with the intrinsics
// that forbid contraction (__fadd_rn, __fmul_rn, ...), explicit __fmaf_rn only for IR fma, the
// bf16/f16 bit algorithms of ir/float_bits.hpp, and NVRTC runs with --fmad=false. Op::Call (the
// host C library's expf/logf) has no bit-exact device equivalent: kernels containing it are
// refused, never approximated.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ir/ir.hpp"

namespace ordo::cuda_backend {

// Thread-block size of every launch. Instances are independent, so it never changes results.
constexpr int kBlockSize = 128;

// The architectures ordo compiles for (sm_80, sm_86, sm_89, sm_90).
bool supported_arch(int arch);

struct Source {
  std::string text;   // the CUDA C++ translation unit; it includes "ordo_rt.cuh" only
  std::string entry;  // extern "C" __global__ function name
  // Alignment in bytes the kernel assumes for each buffer's base address (vector loads and
  // stores of 8 or 16 bytes); checked at launch.
  std::vector<int> buffer_align;
  int grid_rank = 1;
  int sizes = 0;  // size arguments (ir::Kernel::sizes), after the launch's rows
  bool uses_barriers = false;  // __syncthreads or warp shuffles: team kernels
  int block_threads = kBlockSize;      // threads per block
  int instances_per_block = kBlockSize;  // kBlockSize, or 1 for a team kernel
  // CUDA's own functions the kernel calls (ir::device_only): it runs on a GPU only.
  std::vector<std::string> device_calls;
  // Parameters, in order: one pointer per buffer, then the grid extents (long long each), the
  // launch's rows, its size arguments and the instance count (long long): their C spelling, for
  // manifests and the launch.
  std::vector<std::string> params;
  std::vector<std::string> param_types;  // the same parameters' types alone
};

// Every verified kernel renders; errors are internal (a lowering that does not exist).
Source render(const ir::Kernel& k);
// The kernel's calls of CUDA's own functions ("cuda.rsqrtf", ...): device-only (ir::MathFn).
std::vector<std::string> device_calls(const ir::Kernel& k);

// The embedded helper headers (templates/, and ir/float_bits.hpp, which simt_emu.hpp includes),
// by file name.
const std::string& ordo_rt_cuh();
const std::string& simt_emu_hpp();
const std::string& float_bits_hpp();

// ---- NVRTC ---------------------------------------------------------------------------------------
struct PtxasInfo {
  int registers = -1;
  int spill_stores = -1, spill_loads = -1;  // bytes
  int stack_frame = -1;                      // bytes
  std::string line;                          // "registers 40, stack 0 B, spill stores 0 B, spill loads 0 B"
};
struct Compiled {
  std::string ptx;
  std::string cubin;  // empty unless asked for
  std::string log;    // NVRTC's program log (ptxas -v lines when verbose)
  PtxasInfo ptxas;    // parsed from the log when verbose
  std::vector<std::string> options;
  double nvrtc_ms = 0;
  // NVRTC's own phase times (--time), when asked for: the C++ front end, NVVM (LLVM optimizer
  // and PTX generation) and ptxas ("PTX Translation"), whole milliseconds; -1 when not measured.
  double frontend_ms = -1, nvvm_ms = -1, ptxas_ms = -1;
};
bool nvrtc_available();  // built with the CUDA toolkit's NVRTC
std::string nvrtc_version();
// Compiles to PTX and, with `cubin`, to a cubin for sm_<arch>. `verbose` adds ptxas -v and
// parses its register/spill line; `phase_times` fills Compiled's phase times. Throws ordo::Error
// with NVRTC's log on failure.
Compiled compile(const Source& s, int arch, bool cubin, bool verbose, bool phase_times = false);
PtxasInfo parse_ptxas(const std::string& log, const std::string& entry);

// ---- launching (shared by cuda and cuda-emu) -------------------------------------------------------
struct BufferView {
  void* data = nullptr;
  int64_t bytes = 0;
  bool output = false;
};
// Throws ordo::Error naming the buffer whose address breaks the source's alignment assumption.
void check_alignment(const Source& s, const std::vector<std::string>& names, const std::vector<BufferView>& buffers);

// ---- the driver (libcuda.so.1, loaded at first use) ---------------------------------------------------
// A cubin ready to launch on the current device; the module is loaded at first launch.
class DeviceKernel {
 public:
  DeviceKernel(Source s, std::string cubin, int arch);
  ~DeviceKernel();
  // Copies the inputs to the device, launches ceil(instances / instances_per_block) blocks of
  // block_threads threads, copies the
  // outputs back. Throws ordo::Error naming what is missing when there is no usable driver.
  void launch(const std::vector<BufferView>& buffers, const std::vector<int64_t>& extents) const;
  const Source& source() const { return source_; }

 private:
  struct State;
  Source source_;
  std::string cubin_;
  int arch_;
  std::unique_ptr<State> state_;
};
// The result of trying to load libcuda and initialize it: empty if usable, else why not.
std::string driver_status();

// ---- cuda-emu: the same source, compiled by the host C++ compiler ------------------------------------
class EmuKernel {
 public:
  // The generated launcher: blocks [block_begin, block_end) of a launch with
  // Source::block_threads threads per block, in `block_memory` (templates/simt_emu.hpp).
  using RunFn = void (*)(void* const* buffers, const long long* extents, long long instances, long long block_begin,
                         long long block_end, void* block_memory);
  EmuKernel(Source s, std::shared_ptr<void> library, RunFn run, size_t block_memory_bytes, double compile_ms)
      : source_(std::move(s)), library_(std::move(library)), run_(run), block_memory_bytes_(block_memory_bytes),
        compile_ms_(compile_ms) {}
  const Source& source() const { return source_; }
  // Runs blocks [block_begin, block_end) on the calling thread. Thread-safe.
  void run_blocks(void* const* buffers, const long long* extents, long long instances, long long block_begin,
                  long long block_end) const;
  double compile_ms() const { return compile_ms_; }

 private:
  Source source_;
  std::shared_ptr<void> library_;  // the dlopen handle; closed with the last copy
  RunFn run_;
  size_t block_memory_bytes_;  // 0 when the kernel runs its threads as a plain loop
  double compile_ms_;
};
// Compiles with $ORDO_EMU_CXX (default c++) -std=c++17 -O0 -ffp-contract=off (linked by gold when
// installed) into a shared object and loads it (it stays loaded while the EmuKernel, or a copy,
// lives). Thread-safe.
EmuKernel compile_emu(const Source& s);
// The two halves, for the disk cache: the shared object's bytes, and loading them.
std::string compile_emu_object(const Source& s);
EmuKernel load_emu(const Source& s, const std::string& object, double compile_ms = 0);
// The host compiler command line used for cuda-emu.
std::vector<std::string> emu_compiler_command();
// What an emulation object depends on besides the source: the compiler's command line and
// version, and the embedded headers. Part of the disk-cache key.
std::string emu_fingerprint();

}  // namespace ordo::cuda_backend
