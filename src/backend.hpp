// The backend seam: what the runtime asks of a target, and nothing else. One adapter per target
// (src/backends.cpp) turns a verified kernel into a loaded program and launches it; the runtime
// (src/runtime.cpp) owns the caches (in memory and on disk), the stages and the buffers, the same
// for every target. A new backend is one adapter and its line in backend_for(): no op, no order
// and no branch of the runtime changes.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ir/interpret.hpp"
#include "ir/ir.hpp"
#include "ordo/ordo.hpp"
#include "ordo/request.hpp"

namespace ordo::detail {

// Part of every program key: a new ordo may generate other code for the same IR.
constexpr const char* kOrdoVersion = "0.1.0";

// One launch of one stage, as the runtime prepared it.
struct StageLaunch {
  const ir::Kernel& kernel;
  // The op's arguments (`args`, in order) then its workspaces (`workspaces`): addresses, lengths
  // in elements and element types; `pointers` and `views` are the same, as the backends take them
  // (the interpreter checks every access against a view's length).
  const std::vector<BufferRef>& buffers;
  const std::vector<void*>& pointers;
  const std::vector<ir::BufferArg>& views;
  const std::vector<ArgSpec>& args;
  const std::vector<ir::Buffer>& workspaces;
  // ir::launch_extents: the grid's extents, the rows, the size arguments.
  const std::vector<int64_t>& extents;
  int64_t instances = 0;        // the grid's instances (the product of its extents)
  int64_t work_elements = 0;    // the largest argument's elements (attention: its multiply-adds / 8): below 2^15, one thread is faster
  int threads = 0;              // the caller's thread count (0: every core)
  bool stream_outputs = false;  // the CPU's non-temporal stores for large per-row outputs (never changes bits)
};

// A stage's program, loaded for its target: valid while the object lives.
class StageProgram {
 public:
  virtual ~StageProgram() = default;
  virtual void launch(const StageLaunch& launch) const = 0;
  // Instances the CPU backend runs in lock step (1 elsewhere).
  virtual int rows_in_flight() const { return 1; }
  // Targets cuda and cuda-emu: the CUDA C++ they compiled; target cuda: NVRTC's output.
  virtual const std::string* cuda_source() const { return nullptr; }
  virtual const cuda_backend::Compiled* cuda_compiled() const { return nullptr; }
};

// Where compile time went, by phase (CompiledKernel's lower_ms, optimize_ms, codegen_ms).
struct PhaseTimes {
  double lower_ms = 0, optimize_ms = 0, codegen_ms = 0;
};

// A compiled program that can be kept: in the disk cache, keyed by Backend::program_key.
struct StoredProgram {
  std::string object;  // machine code, or a shared object
  std::string symbol;  // its entry point
  int rows_in_flight = 1;
  // Target cuda: NVRTC's whole output (PTX, cubin, ptxas's counts), kept in memory only.
  std::shared_ptr<const cuda_backend::Compiled> nvrtc;
};

class Backend {
 public:
  virtual ~Backend() = default;
  // Everything the machine code depends on, as text: the backend's own fingerprint (compiler
  // version, target CPU, options the request picks) and the program (the stage's IR or source,
  // without the description that names the request, so that requests generating one program
  // share it). Empty: the backend keeps no program, in memory or on disk (the interpreter).
  virtual std::string program_key(const ir::Kernel& k, const Request& r) const = 0;
  // Whether compiled programs go to the disk cache (when it is on): the CPU's machine code, and
  // cuda-emu's shared objects; a cubin is not kept.
  virtual bool keeps_programs_on_disk() const = 0;
  // Compiles a stage to a program that can be stored, adding to `times`.
  virtual StoredProgram compile(const ir::Kernel& k, const Request& r, PhaseTimes& times) const = 0;
  // Loads a stored program (compiled here, or read from the disk cache): throws ordo::Error if it
  // cannot (the runtime then discards it and compiles again).
  virtual std::shared_ptr<const StageProgram> load(const ir::Kernel& k, const Request& r, const StoredProgram& p) const = 0;
};

// The adapter of a target.
const Backend& backend_for(Target t);

}  // namespace ordo::detail
