// One adapter per target behind the backend seam (src/backend.hpp): the CPU (LLVM), cuda-emu,
// cuda (NVRTC and the driver) and the interpreter.
#include <fmt/format.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.hpp"
#include "backends/llvm/llvm_backend.hpp"
#include "ir/error.hpp"
#include "ir/interpret.hpp"
#include "src/backend.hpp"

namespace ordo::detail {
namespace {

// Below this many elements in the largest argument, a launch runs on the calling thread: handing
// blocks to the pool costs more than it saves.
constexpr int64_t kParallelWork = int64_t(1) << 15;

// The kernel without its description line (the op, shapes and order name that asked for it): two
// requests that generate the same program share its machine code, e.g. an alias and the order it
// resolves to, or threads=T where T does not change the order.
ir::Kernel without_description(const ir::Kernel& k) {
  ir::Kernel plain = k;
  plain.description.clear();
  return plain;
}

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

// The CUDA targets' view of a launch's buffers: bytes, and whether the kernel writes them.
std::vector<cuda_backend::BufferView> cuda_views(const StageLaunch& l, std::vector<std::string>* names) {
  std::vector<cuda_backend::BufferView> views;
  for (size_t i = 0; i < l.buffers.size(); ++i) {
    const bool workspace = i >= l.args.size();
    const BufferRef& b = l.buffers[i];
    views.push_back({b.data, b.elements * size_bytes(b.dtype), workspace || l.args[i].output});
    if (names) names->push_back(workspace ? l.workspaces[i - l.args.size()].name : l.args[i].name);
  }
  return views;
}

// ---- cpu: LLVM, ORC JIT ----------------------------------------------------------------------
class CpuProgram final : public StageProgram {
 public:
  CpuProgram(llvm_backend::Code code, int rows_in_flight) : code_(std::move(code)), rows_in_flight_(rows_in_flight) {}
  void launch(const StageLaunch& l) const override {
    const llvm_backend::EntryFn entry = code_->entry();
    const int64_t flags = l.stream_outputs ? llvm_backend::kStreamOutputs : 0;
    const int threads = l.work_elements < kParallelWork ? 1 : l.threads;
    parallel_for(l.instances, threads, [&](int64_t b, int64_t e) { entry(l.pointers.data(), l.extents.data(), b, e, flags); });
  }
  int rows_in_flight() const override { return rows_in_flight_; }

 private:
  llvm_backend::Code code_;  // owns the machine code; unloaded with the last program that holds it
  int rows_in_flight_;
};

class CpuBackend final : public Backend {
 public:
  std::string program_key(const ir::Kernel& k, const Request& r) const override {
    return fmt::format("{}\nrows in flight {}\n{}", llvm_backend::fingerprint(), r.rows_in_flight, ir::print(without_description(k)));
  }
  bool keeps_programs_on_disk() const override { return true; }
  StoredProgram compile(const ir::Kernel& k, const Request& r, PhaseTimes& times) const override {
    llvm_backend::Options options;
    options.rows_in_flight = r.rows_in_flight;
    llvm_backend::Object o = llvm_backend::compile_object(k, options);
    times.lower_ms += o.lower_ms;
    times.optimize_ms += o.optimize_ms;
    times.codegen_ms += o.codegen_ms;
    return StoredProgram{std::move(o.bytes), std::move(o.symbol), o.rows_in_flight, nullptr};
  }
  std::shared_ptr<const StageProgram> load(const ir::Kernel&, const Request&, const StoredProgram& p) const override {
    return std::make_shared<CpuProgram>(llvm_backend::load_object(p.object, p.symbol), p.rows_in_flight);
  }
};

// ---- cuda-emu: the CUDA C++ compiled by the host compiler over a SIMT emulation -------------
class EmuProgram final : public StageProgram {
 public:
  explicit EmuProgram(cuda_backend::EmuKernel kernel) : kernel_(std::move(kernel)) {}
  void launch(const StageLaunch& l) const override {
    // Blocks are independent, so any split over the pool gives the same bits. Vector accesses
    // need the alignment the GPU would.
    std::vector<std::string> names;
    const std::vector<cuda_backend::BufferView> views = cuda_views(l, &names);
    cuda_backend::check_alignment(kernel_.source(), names, views);
    const std::vector<long long> extents(l.extents.begin(), l.extents.end());
    const int64_t per_block = kernel_.source().instances_per_block;
    const int64_t blocks = (l.instances + per_block - 1) / per_block;
    const int threads = l.work_elements < kParallelWork ? 1 : l.threads;
    parallel_for(blocks, threads, [&](int64_t b, int64_t e) { kernel_.run_blocks(l.pointers.data(), extents.data(), l.instances, b, e); });
  }
  const std::string* cuda_source() const override { return &kernel_.source().text; }

 private:
  cuda_backend::EmuKernel kernel_;
};

class EmuBackend final : public Backend {
 public:
  // The host compiler takes about a second per kernel: its shared objects are kept on disk, keyed
  // by the source of the program alone (the source names the request in its first comment).
  std::string program_key(const ir::Kernel& k, const Request&) const override {
    return fmt::format("{}\n{}", cuda_backend::emu_fingerprint(), cuda_backend::render(without_description(k)).text);
  }
  bool keeps_programs_on_disk() const override { return true; }
  StoredProgram compile(const ir::Kernel& k, const Request&, PhaseTimes& times) const override {
    const cuda_backend::Source src = cuda_backend::render(k);  // refuses Op::Call with a clear error
    const auto t = std::chrono::steady_clock::now();
    std::string object = cuda_backend::compile_emu_object(src);
    times.codegen_ms += ms_since(t);
    return StoredProgram{std::move(object), "ordo_emu_run", 1, nullptr};
  }
  std::shared_ptr<const StageProgram> load(const ir::Kernel& k, const Request&, const StoredProgram& p) const override {
    return std::make_shared<EmuProgram>(cuda_backend::load_emu(cuda_backend::render(k), p.object));
  }
};

// ---- cuda: NVRTC's cubin, launched through the driver ------------------------------------------
class DeviceProgram final : public StageProgram {
 public:
  DeviceProgram(std::string source, std::shared_ptr<const cuda_backend::Compiled> compiled, std::shared_ptr<const cuda_backend::DeviceKernel> device)
      : source_(std::move(source)), compiled_(std::move(compiled)), device_(std::move(device)) {}
  void launch(const StageLaunch& l) const override { device_->launch(cuda_views(l, nullptr), l.extents); }
  const std::string* cuda_source() const override { return &source_; }
  const cuda_backend::Compiled* cuda_compiled() const override { return compiled_.get(); }

 private:
  std::string source_;
  std::shared_ptr<const cuda_backend::Compiled> compiled_;
  std::shared_ptr<const cuda_backend::DeviceKernel> device_;
};

class DeviceBackend final : public Backend {
 public:
  // A cubin is compiled for each request and not kept (NVRTC takes a fraction of a second).
  std::string program_key(const ir::Kernel&, const Request&) const override { return {}; }
  bool keeps_programs_on_disk() const override { return false; }
  StoredProgram compile(const ir::Kernel& k, const Request& r, PhaseTimes& times) const override {
    auto c = std::make_shared<cuda_backend::Compiled>(cuda_backend::compile(cuda_backend::render(k), r.cuda_arch, true, false));
    times.codegen_ms += c->nvrtc_ms;
    return StoredProgram{c->cubin, {}, 1, std::move(c)};
  }
  std::shared_ptr<const StageProgram> load(const ir::Kernel& k, const Request& r, const StoredProgram& p) const override {
    cuda_backend::Source src = cuda_backend::render(k);
    std::string text = src.text;
    auto device = std::make_shared<cuda_backend::DeviceKernel>(std::move(src), p.object, r.cuda_arch);
    return std::make_shared<DeviceProgram>(std::move(text), p.nvrtc, std::move(device));
  }
};

// ---- interpreter: the specification; nothing to compile ----------------------------------------
class InterpreterProgram final : public StageProgram {
 public:
  void launch(const StageLaunch& l) const override { ir::interpret(l.kernel, l.views, l.extents); }
};

class InterpreterBackend final : public Backend {
 public:
  std::string program_key(const ir::Kernel&, const Request&) const override { return {}; }
  bool keeps_programs_on_disk() const override { return false; }
  StoredProgram compile(const ir::Kernel&, const Request&, PhaseTimes&) const override { return {}; }
  std::shared_ptr<const StageProgram> load(const ir::Kernel&, const Request&, const StoredProgram&) const override {
    return std::make_shared<InterpreterProgram>();
  }
};

}  // namespace

const Backend& backend_for(Target t) {
  static const CpuBackend cpu;
  static const EmuBackend emu;
  static const DeviceBackend device;
  static const InterpreterBackend interpreter;
  switch (t) {
    case Target::cpu: return cpu;
    case Target::cuda_emu: return emu;
    case Target::cuda: return device;
    case Target::interpreter: return interpreter;
  }
  throw Error(fmt::format("internal: no backend for target {}", static_cast<int>(t)));
}

}  // namespace ordo::detail
