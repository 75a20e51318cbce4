// backends/llvm: IR -> LLVM IR (IRBuilder) -> ORC LLJIT for the host CPU.
//
// The lowering never decides numerics: every IR node becomes the LLVM instruction with the
// same IEEE meaning, with no fast-math flags and FP contraction off. What it does choose:
//  * vector IR types become LLVM vectors, so an order's lanes are SIMD lanes;
//  * `rows_in_flight` program instances run in lock step (their control flow is uniform by
//    the verifier's rule), so a serial chain in one row overlaps with other rows' chains.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "ir/ir.hpp"

namespace ordo::llvm_backend {

// Runs program instances [begin, end) of a kernel. buffers[i] is the i-th Kernel::buffers
// entry; extents[d] the grid extent of dimension d (instances are numbered row-major),
// extents[grid_rank] the launch's rows (launch_rows), and extents[grid_rank + 1 + i] its size
// argument i (launch_size, Kernel::sizes); flags are launch choices that never change results.
using EntryFn = void (*)(void* const* buffers, const int64_t* extents, int64_t begin, int64_t end, int64_t flags);

// Vector stores of per-row outputs bypass the cache (non-temporal): faster when the output
// is far larger than the cache and not read again soon.
constexpr int64_t kStreamOutputs = 1;

struct Options {
  int rows_in_flight = 0;  // 0: choose (4 when the kernel is scalar, else 2)
  // compile_object only. The entry symbol (default "ordo_<kernel name>"), and position-
  // independent code for linking into a shared library (`ordo build`).
  std::string symbol;
  bool position_independent = false;
};

// Machine code loaded into the JIT: its entry point, valid while this object lives. The last
// reference's release unloads it (removes its symbol namespace and returns its code and data
// memory), so a process that compiles kernels without end keeps only the ones it holds.
class LoadedCode {
 public:
  LoadedCode(EntryFn entry, void* dylib, std::shared_ptr<void> jit) : entry_(entry), dylib_(dylib), jit_(std::move(jit)) {}
  LoadedCode(const LoadedCode&) = delete;
  LoadedCode& operator=(const LoadedCode&) = delete;
  ~LoadedCode();
  EntryFn entry() const { return entry_; }

 private:
  EntryFn entry_;
  void* dylib_;  // the llvm::orc::JITDylib holding only this object
  // The JIT, kept alive until its last code is unloaded: kernels held by static objects (the
  // kernel cache) are destroyed at exit, in no fixed order relative to the JIT.
  std::shared_ptr<void> jit_;
};
using Code = std::shared_ptr<const LoadedCode>;

struct Compiled {
  Code code;               // owns the machine code
  EntryFn entry = nullptr;  // code->entry(): valid while `code` (or a copy of it) lives
  int rows_in_flight = 1;
  double lower_ms = 0, optimize_ms = 0, codegen_ms = 0;  // where compile time went
};
// Thread-safe.
Compiled compile(const ir::Kernel& k, const Options& opt = {});
// The two halves of compile(), for callers that keep machine code (the disk cache):
// an object file for the host whose entry point is `symbol`, and loading one into the JIT.
struct Object {
  std::string bytes;   // a relocatable ELF object
  std::string symbol;  // its entry point, an EntryFn
  int rows_in_flight = 1;
  double lower_ms = 0, optimize_ms = 0, codegen_ms = 0;
};
Object compile_object(const ir::Kernel& k, const Options& opt = {});
// Loads an object produced by compile_object (in this process or, from the disk cache, in an
// earlier one with the same fingerprint()). Each load gets its own symbol namespace, so one
// object may be loaded more than once. Throws ordo::Error if LLVM rejects it.
Code load_object(const std::string& bytes, const std::string& symbol);

// What machine code depends on besides the IR: LLVM's version, the target triple, CPU and
// its features, and the code generation options. Part of every disk-cache key.
std::string fingerprint();

// The optimized LLVM IR text of a kernel, as compile() would run it.
std::string emit_llvm_ir(const ir::Kernel& k, const Options& opt = {});

// "x86_64 znver3 +avx2,+fma,..." : what the JIT targets.
std::string host_description();

}  // namespace ordo::llvm_backend
