// ordo's C++ API: request a kernel, run it, inspect how it was built.
//
//   ordo::Request r;  r.op = ordo::OpKind::layer_norm;  r.cols = 4096;  r.order = "torch1.13-cpu-avx2";
//   ordo::KernelHandle k = ordo::compile(r);          // cached: a repeated request is free
//   k->run({{x, rows*4096, f32}, {w, 4096, f32}, {b, 4096, f32}, {y, ...}, {mean, rows, f32}, {rstd, rows, f32}}, rows);
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ordo/request.hpp"

namespace ordo {

namespace cuda_backend {
struct Compiled;
}  // namespace cuda_backend
namespace detail {
// What a compiled kernel is made of inside ordo: its resolved Order, each stage's IR and the
// program its backend loaded (src/kernel_parts.hpp). Opaque here, so that this header and the IR
// do not depend on each other.
struct KernelParts;
}  // namespace detail

// The most elements (rows*N) one launch may cover: 2^59, so that every buffer's length in
// bytes (at most 8 per element), and the sum of a few of them, fit in int64_t. run() rejects a
// larger launch; below it, ArgSpec::elements and byte counts cannot overflow.
constexpr int64_t kMaxElements = int64_t(1) << 59;

// How an argument's length follows a launch of `rows` rows of an N-column op. The values are the
// C API's ORDO_EXTENT_*.
enum class ArgExtent : uint8_t {
  rows_by_cols,   // rows*N: a row each (x, y)
  cols,           // N: shared by every row (weight, bias)
  rows,           // one element per row (mean, rstd)
  rows_by_fixed,  // rows*K, K = ArgSpec::per_row (attention: q holds rows*S_q*D elements)
  fixed,          // K = ArgSpec::per_row, shared by every row (attention's mask without a batch dim)
  row_groups,     // ceil(rows/G)*K: K for each G = ArgSpec::group_rows consecutive rows (attention's
                  // mask with a batch dim and no head dim: a batch is H rows)
};
std::string_view name(ArgExtent e);  // "rows*N", "N", "rows", "rows*K", "K", "ceil(rows/G)*K"

// One argument of a kernel, in the order run() takes them.
struct ArgSpec {
  std::string name;
  ScalarType dtype;
  bool output;
  ArgExtent extent;
  int64_t per_row = 0;  // Extent::rows_by_fixed: elements per row (times the size below, if any)
  // Extent::rows_by_fixed, fixed, row_groups: -1, or the size argument (CompiledKernel::sizes) that
  // multiplies per_row: attention's k and v with S_k given at launch hold rows * D * S_k elements,
  // and a mask that spans the keys K * S_k.
  int per_row_size = -1;
  int64_t group_rows = 0;  // Extent::row_groups: G
  // Elements for a launch of `rows` rows with size arguments `sizes`; nullopt when that
  // overflows int64 or names a size not given.
  std::optional<int64_t> checked_elements(int64_t rows, int64_t cols, const std::vector<int64_t>& sizes = {}) const;
  // The same for sizes known to fit (buffers that exist).
  int64_t elements(int64_t rows, int64_t cols, const std::vector<int64_t>& sizes = {}) const {
    return checked_elements(rows, cols, sizes).value_or(INT64_MAX);
  }
};

struct BufferRef {
  void* data = nullptr;
  int64_t elements = 0;
  ScalarType dtype = ScalarType::f32;
};

class CompiledKernel;
namespace detail {
// compile() and compile_uncached() (src/runtime.cpp): one new kernel, sharing programs or not.
std::shared_ptr<const CompiledKernel> compile_new(const Request& r, bool share_programs);
}  // namespace detail

// A kernel ready to run: one or more stages (kernels over the same arguments, launched one after
// another: layer_norm_backward's dx over the rows, then its weight gradients over column blocks).
// ordo's own code reads the IR of each stage and the resolved Order through src/kernel_parts.hpp.
class CompiledKernel {
 public:
  CompiledKernel();  // empty; compile() fills it
  ~CompiledKernel();
  CompiledKernel(const CompiledKernel&) = delete;
  CompiledKernel& operator=(const CompiledKernel&) = delete;

  const Request& request() const { return request_; }
  size_t stage_count() const;
  const std::vector<ArgSpec>& args() const { return args_; }
  double compile_ms() const { return compile_ms_; }  // request to callable kernel, all phases
  // The backend's share, by phase: IR -> LLVM IR, LLVM optimization, machine code; summed over
  // the stages, which compile concurrently, so the sum may exceed compile_ms.
  double lower_ms() const { return lower_ms_; }
  double optimize_ms() const { return optimize_ms_; }
  double codegen_ms() const { return codegen_ms_; }
  int rows_in_flight() const;
  // The machine code came from the persistent disk cache (include/ordo/disk_cache.hpp); the
  // lower/optimize/codegen times are then 0.
  bool from_disk_cache() const { return from_disk_cache_; }
  // Targets cuda and cuda-emu: the CUDA C++ source (what NVRTC and the host compiler compile);
  // empty for the others.
  const std::string& cuda_source(size_t stage = 0) const;
  // Target cuda: NVRTC's output (PTX, cubin, ptxas's register and spill counts); null otherwise.
  const cuda_backend::Compiled* cuda_compiled(size_t stage = 0) const;

  // How outputs are stored. Never changes results. automatic streams (non-temporal stores)
  // when the per-row outputs of the launch exceed 32 MiB, far more than stays in cache.
  enum class Stores { automatic, cached, streaming };

  // Runs `rows` rows. buffers follow args(); each is checked for dtype and length first.
  // threads = 0 uses every core. Rows are independent, so results do not depend on it.
  void run(const std::vector<BufferRef>& buffers, int64_t rows, int threads = 0, Stores stores = Stores::automatic) const {
    run_with_sizes(buffers, rows, {}, threads, stores);
  }
  // The same for a kernel that takes size arguments (sizes(): attention's S_k, or a row op's N,
  // when the request asked for it at launch), one value each, in [1, 2^24], in the order sizes()
  // names them. A row op's buffers are then sized by that N.
  void run_with_sizes(const std::vector<BufferRef>& buffers, int64_t rows, const std::vector<int64_t>& sizes, int threads = 0,
                      Stores stores = Stores::automatic) const;
  // The names of the lengths each launch gives ("N", "S_k"): empty when the request fixed them all.
  const std::vector<std::string>& sizes() const;
  // N of a launch with these size arguments: the request's, or the launch's (Request::cols_at_launch).
  int64_t launch_cols(const std::vector<int64_t>& sizes) const { return request_.cols_at_launch ? sizes.at(0) : request_.cols; }

  // The parts inside, for ordo's own code (src/kernel_parts.hpp).
  const detail::KernelParts& parts() const { return *parts_; }

 private:
  friend std::shared_ptr<const CompiledKernel> detail::compile_new(const Request&, bool share_programs);
  Request request_;
  std::unique_ptr<detail::KernelParts> parts_;
  std::vector<ArgSpec> args_;
  double compile_ms_ = 0, lower_ms_ = 0, optimize_ms_ = 0, codegen_ms_ = 0;
  bool from_disk_cache_ = false;
};

using KernelHandle = std::shared_ptr<const CompiledKernel>;

// Resolves, generates, verifies and compiles. Throws ordo::Error with a message naming the
// bad field. compile() keeps kernels in a thread-safe in-memory cache keyed by the whole
// request; concurrent callers of one new request wait for a single compile (if it fails, each
// waiter throws an ordo::Error of its own with the same message, and nothing is cached).
// The cache holds at most ORDO_KERNEL_CACHE_ENTRIES kernels (default 512; set_kernel_cache_capacity
// changes it) and drops the least recently requested past that. A dropped kernel's machine code
// is unloaded once no handle to it is left, so a process that requests kernels without end stays
// bounded; requesting a dropped kernel again compiles it again (or loads it from the disk cache).
// Below it, requests that generate the same program (an alias and the order it names, or a
// parameter the order ignores) share one loaded program while any kernel uses it.
// compile_uncached bypasses both in-memory caches (not the disk cache, which ORDO_CACHE=0 turns
// off): a fresh compile, e.g. to time one.
KernelHandle compile(const Request& r);
KernelHandle compile_uncached(const Request& r);
// At least 1; lowering it drops the least recently requested kernels at once.
void set_kernel_cache_capacity(size_t entries);

struct CacheStats {
  uint64_t hits = 0, misses = 0, entries = 0;  // the request cache
  uint64_t shared_programs = 0;  // stages of missed requests served by a program already compiled
  uint64_t evictions = 0;        // kernels dropped from the request cache past its capacity
  uint64_t capacity = 0;         // the request cache's capacity, in kernels
};
CacheStats cache_stats();

// Runs fn(begin, end) over contiguous blocks of [0, n) on the executor's threads (threads = 0:
// every core, or OpenMP's default count). Kernel launches use it; so do baselines that must be
// measured the same way.
void parallel_for(int64_t n, int threads, const std::function<void(int64_t, int64_t)>& fn);

// Where a launch split over threads runs. `pool`: ordo's own threads (the default). `openmp`: the
// OpenMP runtime (libgomp) the process has already loaded, as PyTorch's CPU ops run on it; ordo's
// kernels then run on torch's own threads, one after another with its ops, instead of a second
// set of threads competing with them for the cores (torch's threads spin after each of its
// parallel regions). Bits never depend on it. set_executor(openmp) throws Error when no libgomp
// is loaded. ORDO_EXECUTOR=pool|openmp sets the first choice.
enum class Executor { pool, openmp };
void set_executor(Executor e);
Executor executor();

}  // namespace ordo
