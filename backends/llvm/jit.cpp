// ORC LLJIT for the host CPU: one JIT per process, one module per kernel.
#include <fmt/format.h>
#include <llvm/ExecutionEngine/Orc/CompileUtils.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/ExecutionEngine/Orc/ThreadSafeModule.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/TargetParser/Host.h>

#include <atomic>
#include <mutex>

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
  });
  auto jtmb = llvm::orc::JITTargetMachineBuilder::detectHost();
  if (!jtmb) throw Error("LLVM cannot describe the host CPU: " + take_error(jtmb.takeError()));
  jtmb->setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
  jtmb->getOptions().AllowFPOpFusion = llvm::FPOpFusion::Strict;
  return *jtmb;
}

struct Jit {
  std::unique_ptr<llvm::orc::LLJIT> lljit;
  std::unique_ptr<llvm::TargetMachine> tm;  // for optimization; guarded by mu
  std::mutex mu;
  std::atomic<uint64_t> next_id{0};

  Jit() {
    llvm::orc::JITTargetMachineBuilder jtmb = host_builder();
    auto tmx = jtmb.createTargetMachine();
    if (!tmx) throw Error("LLVM cannot create a target machine: " + take_error(tmx.takeError()));
    tm = std::move(*tmx);
    // LLJIT's default compiler shares one TargetMachine between threads that materialize at
    // the same time; the concurrent compiler makes one per compile.
    auto j = llvm::orc::LLJITBuilder()
                 .setJITTargetMachineBuilder(jtmb)
                 .setCompileFunctionCreator([](llvm::orc::JITTargetMachineBuilder b)
                                                -> llvm::Expected<std::unique_ptr<llvm::orc::IRCompileLayer::IRCompiler>> {
                   return std::make_unique<llvm::orc::ConcurrentIRCompiler>(std::move(b));
                 })
                 .create();
    if (!j) throw Error("LLVM cannot create the JIT: " + take_error(j.takeError()));
    lljit = std::move(*j);
    auto gen = llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(lljit->getDataLayout().getGlobalPrefix());
    if (!gen) throw Error("LLVM cannot search the process for symbols: " + take_error(gen.takeError()));
    lljit->getMainJITDylib().addGenerator(std::move(*gen));
  }
};

Jit& jit() {
  static Jit j;
  return j;
}

int choose_rows_in_flight(const ir::Kernel& k, const Options& opt) {
  if (opt.rows_in_flight > 0) return opt.rows_in_flight;
  int max_lanes = 1;
  for (const ir::Local& l : k.locals) max_lanes = std::max(max_lanes, l.type.lanes);
  // A scalar kernel is one long dependency chain per row: interleave more rows.
  return max_lanes == 1 ? 4 : 2;
}

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
  pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O2).run(m, mam);
}

std::unique_ptr<llvm::Module> build_module(llvm::LLVMContext& ctx, const ir::Kernel& k, const std::string& symbol,
                                           int rows, Jit& j) {
  auto m = std::make_unique<llvm::Module>(k.name, ctx);
  m->setDataLayout(j.lljit->getDataLayout());
  m->setTargetTriple(j.lljit->getTargetTriple().str());
  lower(*m, k, symbol, rows);
  std::lock_guard<std::mutex> lock(j.mu);
  optimize(*m, *j.tm);
  return m;
}

}  // namespace

Compiled compile(const ir::Kernel& k, const Options& opt) {
  Jit& j = jit();
  const int rows = choose_rows_in_flight(k, opt);
  const std::string symbol = fmt::format("ordo_{}_{}", k.name, j.next_id++);
  auto ctx = std::make_unique<llvm::LLVMContext>();
  auto m = build_module(*ctx, k, symbol, rows, j);
  if (auto e = j.lljit->addIRModule(llvm::orc::ThreadSafeModule(std::move(m), std::move(ctx))))
    throw Error("LLVM JIT rejected the module: " + take_error(std::move(e)));
  auto sym = j.lljit->lookup(symbol);
  if (!sym) throw Error("LLVM JIT could not compile " + symbol + ": " + take_error(sym.takeError()));
  return Compiled{sym->toPtr<EntryFn>(), rows};
}

std::string emit_llvm_ir(const ir::Kernel& k, const Options& opt) {
  Jit& j = jit();
  llvm::LLVMContext ctx;
  auto m = build_module(ctx, k, "ordo_" + k.name, choose_rows_in_flight(k, opt), j);
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
