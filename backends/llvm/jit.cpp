// ORC LLJIT for the host CPU: one JIT per process, one module per kernel; kernels may compile
// on several threads at once.
#include <fmt/format.h>
#include <llvm/ExecutionEngine/Orc/CompileUtils.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/ExecutionEngine/Orc/ThreadSafeModule.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Transforms/InstCombine/InstCombine.h>
#include <llvm/Transforms/Scalar/EarlyCSE.h>
#include <llvm/Transforms/Scalar/LICM.h>
#include <llvm/Transforms/Scalar/SROA.h>
#include <llvm/Transforms/Scalar/SimplifyCFG.h>
#include <llvm/Transforms/Scalar/LoopPassManager.h>
#include <llvm/Support/CommandLine.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/TargetParser/Host.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <sstream>

#include "backend_id.hpp"  // generated: ORDO_LLVM_BACKEND_ID
#include "backends/llvm/llvm_backend.hpp"
#include "backends/llvm/lower.hpp"
#include "ir/error.hpp"

namespace ordo::llvm_backend {

namespace {

std::string take_error(llvm::Error e) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << e;
  return os.str();
}

// Host CPU, features detected; FP contraction strictly off (no fmuladd fusion anywhere).
llvm::orc::JITTargetMachineBuilder host_builder() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    // For investigating compile time and code quality only: LLVM's own options, e.g.
    // ORDO_LLVM_FLAGS="-time-passes". ordo's bit-exactness is tested, and promised, without them.
    if (const char* flags = std::getenv("ORDO_LLVM_FLAGS")) {
      static std::vector<std::string> words;
      std::istringstream in(flags);
      for (std::string w; in >> w;) words.push_back(w);
      std::vector<const char*> argv = {"ordo"};
      for (const std::string& w : words) argv.push_back(w.c_str());
      llvm::cl::ParseCommandLineOptions(static_cast<int>(argv.size()), argv.data(), "", &llvm::errs());
    }
  });
  auto jtmb = llvm::orc::JITTargetMachineBuilder::detectHost();
  if (!jtmb) throw Error("LLVM cannot describe the host CPU: " + take_error(jtmb.takeError()));
  jtmb->setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
  jtmb->getOptions().AllowFPOpFusion = llvm::FPOpFusion::Strict;
  // Position-independent code in the small code model: constants are read RIP-relative. A JIT's
  // default is the large model, which materializes every constant-pool address with a 64-bit
  // movabs (12 of the 46 instructions of torch2.15-cpu attention's exp loop); JITLink keeps an
  // object's sections in one allocation, within the model's +-2 GiB. Measured: torch2.15-cpu
  // attention f32, B*H = 8, S = 1024, D = 64, 1 thread, 21.7 -> 20.7 ms.
  jtmb->setCodeModel(llvm::CodeModel::Small);
  jtmb->setRelocationModel(llvm::Reloc::PIC_);
  return *jtmb;
}

// TargetMachines for the threads that compile at the same time. A TargetMachine is not safe to
// share between threads that optimize or generate code concurrently, and creating one takes
// milliseconds: each is used by one thread at a time and then returned for reuse.
class TargetMachinePool {
 public:
  explicit TargetMachinePool(llvm::orc::JITTargetMachineBuilder b) : builder_(std::move(b)) {}

  // Lent to one thread; returns to the pool when destroyed.
  class Lease {
   public:
    Lease(TargetMachinePool& pool, std::unique_ptr<llvm::TargetMachine> tm) : pool_(pool), tm_(std::move(tm)) {}
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() { pool_.give_back(std::move(tm_)); }
    llvm::TargetMachine& machine() const { return *tm_; }

   private:
    TargetMachinePool& pool_;
    std::unique_ptr<llvm::TargetMachine> tm_;
  };

  llvm::Expected<std::unique_ptr<Lease>> lend() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!idle_.empty()) {
        std::unique_ptr<llvm::TargetMachine> tm = std::move(idle_.back());
        idle_.pop_back();
        return std::make_unique<Lease>(*this, std::move(tm));
      }
    }
    auto created = builder_.createTargetMachine();
    if (!created) return created.takeError();
    return std::make_unique<Lease>(*this, std::move(*created));
  }

  const llvm::orc::JITTargetMachineBuilder& builder() const { return builder_; }

 private:
  void give_back(std::unique_ptr<llvm::TargetMachine> tm) {
    std::lock_guard<std::mutex> lock(mu_);
    idle_.push_back(std::move(tm));
  }
  llvm::orc::JITTargetMachineBuilder builder_;
  std::mutex mu_;
  std::vector<std::unique_ptr<llvm::TargetMachine>> idle_;
};

// LLJIT's default compiler shares one TargetMachine between threads that materialize at the
// same time (a race); its concurrent compiler builds a new TargetMachine per module. This one
// borrows from a pool.
class PooledCompiler : public llvm::orc::IRCompileLayer::IRCompiler {
 public:
  explicit PooledCompiler(TargetMachinePool& pool)
      : IRCompiler(llvm::orc::irManglingOptionsFromTargetOptions(pool.builder().getOptions())), pool_(pool) {}

  llvm::Expected<std::unique_ptr<llvm::MemoryBuffer>> operator()(llvm::Module& m) override {
    auto lease = pool_.lend();
    if (!lease) return lease.takeError();
    return llvm::orc::SimpleCompiler((*lease)->machine())(m);
  }

 private:
  TargetMachinePool& pool_;
};

struct Jit {
  std::unique_ptr<TargetMachinePool> machines;  // for optimization and code generation
  std::unique_ptr<llvm::orc::LLJIT> lljit;
  std::atomic<uint64_t> next_id{0};

  Jit() {
    llvm::orc::JITTargetMachineBuilder jtmb = host_builder();
    machines = std::make_unique<TargetMachinePool>(jtmb);
    TargetMachinePool* pool = machines.get();
    auto j = llvm::orc::LLJITBuilder()
                 .setJITTargetMachineBuilder(jtmb)
                 .setCompileFunctionCreator([pool](llvm::orc::JITTargetMachineBuilder)
                                                -> llvm::Expected<std::unique_ptr<llvm::orc::IRCompileLayer::IRCompiler>> {
                   return std::make_unique<PooledCompiler>(*pool);
                 })
                 .create();
    if (!j) throw Error("LLVM cannot create the JIT: " + take_error(j.takeError()));
    lljit = std::move(*j);
    auto gen = llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(lljit->getDataLayout().getGlobalPrefix());
    if (!gen) throw Error("LLVM cannot search the process for symbols: " + take_error(gen.takeError()));
    lljit->getMainJITDylib().addGenerator(std::move(*gen));
  }
};

std::shared_ptr<Jit> shared_jit() {
  static std::shared_ptr<Jit> j = std::make_shared<Jit>();
  return j;
}
Jit& jit() { return *shared_jit(); }

int choose_rows_in_flight(const ir::Kernel& k, const Options& opt) {
  // A team kernel runs its threads as loops over per-thread arrays: one instance at a time.
  if (k.team > 1) return 1;
  // Instances that may take different paths (per-instance loops and ifs) cannot share one.
  if (ir::has_per_instance_control(k)) return 1;
  if (opt.rows_in_flight > 0) return opt.rows_in_flight;
  // Kernels with scratch (attention) carry their own blocking; more instances would only
  // multiply the scratch and the register pressure.
  for (const ir::Buffer& b : k.buffers)
    if (!ir::is_argument(b)) return 1;
  int max_lanes = 1;
  for (const ir::Local& l : k.locals) max_lanes = std::max(max_lanes, l.type.lanes);
  // A scalar kernel is one long dependency chain per row: interleave rows to hide latency. A
  // lane-parallel kernel already has `lanes` independent chains per row; a second row in
  // flight gained 7-14% bandwidth on layer_norm 8192x4096 but doubled codegen time.
  return max_lanes == 1 ? 4 : 1;
}

// gen/ already emits what matters for speed (explicit vectors, unrolled chunks, rows in lock
// step), so the pipeline only cleans up: promote locals to registers, fold, CSE, hoist
// loop-invariant broadcasts and weight loads. The O2 module pipeline cost 3-7x more
// optimization time for no measured speed on these kernels (bench/layer_norm_speed.py).
// None of these passes changes floating-point results: there are no fast-math flags.
void optimize(llvm::Module& m, llvm::TargetMachine& tm) {
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PassBuilder pb(&tm);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  llvm::FunctionPassManager fpm;
  fpm.addPass(llvm::SROAPass(llvm::SROAOptions::ModifyCFG));
  fpm.addPass(llvm::EarlyCSEPass(true));
  fpm.addPass(llvm::InstCombinePass());
  fpm.addPass(llvm::SimplifyCFGPass());
  fpm.addPass(llvm::createFunctionToLoopPassAdaptor(llvm::LICMPass(llvm::LICMOptions()), true));
  fpm.addPass(llvm::InstCombinePass());
  llvm::ModulePassManager mpm;
  mpm.addPass(llvm::createModuleToFunctionPassAdaptor(std::move(fpm)));
  mpm.run(m, mam);
}

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

std::unique_ptr<llvm::Module> build_module(llvm::LLVMContext& ctx, const ir::Kernel& k, const std::string& symbol,
                                           int rows, Jit& j, llvm::TargetMachine& tm, Compiled* timing = nullptr) {
  auto t0 = std::chrono::steady_clock::now();
  auto m = std::make_unique<llvm::Module>(k.name, ctx);
  m->setDataLayout(j.lljit->getDataLayout());
  m->setTargetTriple(j.lljit->getTargetTriple().str());
  lower(*m, k, symbol, rows);
  auto t1 = std::chrono::steady_clock::now();
  optimize(*m, tm);
  if (timing) {
    timing->lower_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
    timing->optimize_ms = ms_since(t1);
  }
  return m;
}

}  // namespace

Object compile_object(const ir::Kernel& k, const Options& opt) {
  Jit& j = jit();
  Object out;
  out.rows_in_flight = choose_rows_in_flight(k, opt);
  out.symbol = opt.symbol.empty() ? "ordo_" + k.name : opt.symbol;
  auto lease = j.machines->lend();
  if (!lease) throw Error("LLVM cannot create a target machine: " + take_error(lease.takeError()));
  Compiled timing;
  llvm::LLVMContext ctx;
  auto m = build_module(ctx, k, out.symbol, out.rows_in_flight, j, (*lease)->machine(), &timing);
  out.lower_ms = timing.lower_ms;
  out.optimize_ms = timing.optimize_ms;
  auto t = std::chrono::steady_clock::now();
  llvm::Expected<std::unique_ptr<llvm::MemoryBuffer>> object = nullptr;
  if (opt.position_independent) {
    llvm::orc::JITTargetMachineBuilder b = host_builder();
    b.setRelocationModel(llvm::Reloc::PIC_);
    auto tm = b.createTargetMachine();
    if (!tm) throw Error("LLVM cannot create a target machine: " + take_error(tm.takeError()));
    m->setPICLevel(llvm::PICLevel::BigPIC);
    object = llvm::orc::SimpleCompiler(**tm)(*m);
  } else {
    object = llvm::orc::SimpleCompiler((*lease)->machine())(*m);
  }
  if (!object) throw Error("LLVM could not compile " + k.name + ": " + take_error(object.takeError()));
  out.bytes.assign((*object)->getBufferStart(), (*object)->getBufferSize());
  out.codegen_ms = ms_since(t);
  return out;
}

Code load_object(const std::string& bytes, const std::string& symbol) {
  Jit& j = jit();
  // A JITDylib per kernel: the same symbol may then be defined by many loaded objects, and
  // removing it unloads exactly this object.
  auto jd = j.lljit->createJITDylib(fmt::format("kernel{}", j.next_id++));
  if (!jd) throw Error("LLVM JIT cannot create a symbol namespace: " + take_error(jd.takeError()));
  // Until the object is linked, an error removes the JITDylib again.
  auto unload = [](llvm::orc::JITDylib* d) { llvm::consumeError(jit().lljit->getExecutionSession().removeJITDylib(*d)); };
  std::unique_ptr<llvm::orc::JITDylib, decltype(unload)> pending(&*jd, unload);
  auto gen = llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(j.lljit->getDataLayout().getGlobalPrefix());
  if (!gen) throw Error("LLVM cannot search the process for symbols: " + take_error(gen.takeError()));
  jd->addGenerator(std::move(*gen));  // C library routines LLVM's code generator may call (memset, ...)
  auto buffer = llvm::MemoryBuffer::getMemBufferCopy(bytes, symbol);
  if (auto e = j.lljit->addObjectFile(*jd, std::move(buffer))) throw Error("LLVM JIT rejected the object: " + take_error(std::move(e)));
  auto sym = j.lljit->lookup(*jd, symbol);
  if (!sym) throw Error("LLVM JIT could not link " + symbol + ": " + take_error(sym.takeError()));
  return std::make_shared<LoadedCode>(sym->toPtr<EntryFn>(), pending.release(), shared_jit());
}

LoadedCode::~LoadedCode() {
  if (!dylib_) return;
  // Removing the JITDylib frees its object's code and data segments and its symbol table. A
  // destructor cannot throw: a failure here only leaves that memory held, so it is reported.
  if (auto e = static_cast<Jit*>(jit_.get())->lljit->getExecutionSession().removeJITDylib(*static_cast<llvm::orc::JITDylib*>(dylib_)))
    fmt::print(stderr, "ordo: unloading a kernel's machine code failed: {}\n", take_error(std::move(e)));
}

Compiled compile(const ir::Kernel& k, const Options& opt) {
  Object o = compile_object(k, opt);
  Compiled out;
  out.rows_in_flight = o.rows_in_flight;
  out.lower_ms = o.lower_ms;
  out.optimize_ms = o.optimize_ms;
  auto t = std::chrono::steady_clock::now();
  out.code = load_object(o.bytes, o.symbol);
  out.entry = out.code->entry();
  out.codegen_ms = o.codegen_ms + ms_since(t);
  return out;
}

std::string fingerprint() {
  // Detecting the host costs cpuid instructions (a trap to the hypervisor in a VM) on every
  // compile's cache key; the host does not change while the process runs.
  static const std::string once = [] {
    llvm::orc::JITTargetMachineBuilder b = host_builder();
    return fmt::format("llvm {}; {}; cpu {}; features {}; backend sources {}", LLVM_VERSION_STRING, b.getTargetTriple().str(),
                       b.getCPU(), b.getFeatures().getString(), ORDO_LLVM_BACKEND_ID);
  }();
  return once;
}

std::string emit_llvm_ir(const ir::Kernel& k, const Options& opt) {
  Jit& j = jit();
  llvm::LLVMContext ctx;
  auto lease = j.machines->lend();
  if (!lease) throw Error("LLVM cannot create a target machine: " + take_error(lease.takeError()));
  auto m = build_module(ctx, k, "ordo_" + k.name, choose_rows_in_flight(k, opt), j, (*lease)->machine());
  std::string s;
  llvm::raw_string_ostream os(s);
  m->print(os, nullptr);
  return os.str();
}

std::string host_description() {
  llvm::orc::JITTargetMachineBuilder b = host_builder();
  std::string features;
  for (const std::string& f : b.getFeatures().getFeatures())
    if (f == "+avx2" || f == "+fma" || f == "+f16c" || f == "+avx512f" || f == "+avx") features += (features.empty() ? "" : ",") + f;
  return fmt::format("{} {} {}", b.getTargetTriple().str(), b.getCPU(), features);
}

}  // namespace ordo::llvm_backend
