// cuda-emu: the CUDA source NVRTC compiles, compiled instead by the host C++ compiler on top of
// templates/simt_emu.hpp, into a shared object loaded with dlopen. A generated launcher runs a
// range of blocks; the runtime spreads blocks over its thread pool (blocks are independent).
#include <dlfcn.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "backends/cuda/cuda_backend.hpp"
#include "ir/error.hpp"

extern char** environ;

namespace ordo::cuda_backend {

namespace {

void write_file(const std::filesystem::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary);
  f << text;
  if (!f) throw Error(fmt::format("cuda-emu: cannot write {}", p.string()));
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Runs argv without a shell, stdout and stderr to `log`; returns the exit status (-1: not run).
int run(const std::vector<std::string>& args, const std::filesystem::path& log) {
  std::vector<char*> argv;
  for (const std::string& s : args) argv.push_back(const_cast<char*>(s.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = 0;
  const int started = posix_spawnp(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (started != 0) return -1;
  int status = 0;
  // A signal to this process (a profiler's or libFuzzer's timer) interrupts waitpid: wait again.
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// The launcher: blocks [begin, end) of Source::block_threads threads, each thread the kernel itself.
std::string launcher(const Source& s) {
  std::string args;
  const size_t buffers = s.param_types.size() - static_cast<size_t>(s.grid_rank + s.sizes) - 2;
  for (size_t i = 0; i < buffers; ++i) args += fmt::format("{}static_cast<{}>(buffers[{}])", i ? ", " : "", s.param_types[i], i);
  // extents: the grid's, then the launch's rows, then its size arguments.
  for (int d = 0; d <= s.grid_rank + s.sizes; ++d) args += fmt::format(", extents[{}]", d);
  args += ", instances";
  return fmt::format(
      "// cuda-emu launcher (generated): the kernel below is the exact source NVRTC compiles.\n"
      "#include \"simt_emu.hpp\"\n"
      "#include \"kernel.cu\"\n\n"
      "extern \"C\" __attribute__((visibility(\"default\"))) unsigned long long ordo_emu_block_memory_bytes() {{\n"
      "  return {1} ? ordo_emu::block_memory_bytes({0}) : 0;\n"
      "}}\n\n"
      "extern \"C\" __attribute__((visibility(\"default\"))) void ordo_emu_run(void* const* buffers, const long long* extents,\n"
      "    long long instances, long long block_begin, long long block_end, void* block_memory) {{\n"
      "  blockDim.x = {0};\n"
      "  gridDim.x = static_cast<unsigned>((instances + {4} - 1) / {4});\n"
      "  for (long long b = block_begin; b < block_end; ++b) {{\n"
      "    blockIdx.x = static_cast<unsigned>(b);\n"
      "    ordo_emu::run_block({0}, {1}, block_memory, [&] {{ {2}({3}); }});\n"
      "  }}\n"
      "}}\n",
      s.block_threads, s.uses_barriers ? "true" : "false", s.entry, args, s.instances_per_block);
}

// Whether `program` is an executable file in a directory of PATH.
bool on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');)
    if (!dir.empty() && access((std::filesystem::path(dir) / program).c_str(), X_OK) == 0) return true;
  return false;
}

}  // namespace

std::vector<std::string> emu_compiler_command() {
  const char* cxx = std::getenv("ORDO_EMU_CXX");
  // -ffp-contract=off: a*b+c stays two roundings (fma only where the source says __fmaf_rn).
  // -fno-fast-math keeps IEEE semantics; -fno-math-errno only lets sqrt inline (same result).
  // -fno-strict-aliasing: ordo_rt.cuh moves vector chunks through pointer casts, as CUDA code does.
  // -O0: the cuda-emu sweeps compile hundreds of kernels, and the host compile, not the emulated
  // run, is their time. g++ -O0 took 0.47 s where -O1 took 0.72 (an attention kernel) and 0.18
  // against 0.27 (layer_norm), while the layer_norm and softmax_backward sweeps' runs, warm,
  // took 10.5 s against 9.1. No level changes IEEE results (no contraction, SSE arithmetic,
  // fmaf and sqrtf correctly rounded either way).
  std::vector<std::string> cmd = {cxx && *cxx ? cxx : "c++", "-std=c++17", "-O0", "-ffp-contract=off", "-fno-fast-math",
                                  "-fno-math-errno", "-fno-strict-aliasing", "-fPIC", "-shared", "-w"};
  // gold (binutils) links the kernel's shared object in 0.05 s where the default ld.bfd took
  // 0.18 s, which was about 40% of a small kernel's whole host compile. The link changes no code.
  static const bool gold = on_path("ld.gold");
  if (gold) cmd.push_back("-fuse-ld=gold");
  return cmd;
}

namespace {
struct TempDir {
  std::filesystem::path dir;
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "ordo-emu-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw Error(fmt::format("cuda-emu: cannot create a directory like {}", tmpl));
    dir = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};
}  // namespace

std::string compile_emu_object(const Source& s) {
  if (!s.device_calls.empty()) {
    std::string list;
    for (const std::string& c : s.device_calls) list += (list.empty() ? "" : ", ") + c;
    throw Error(fmt::format("cuda-emu: {} calls {}, CUDA's own approximation{} with no definition off the GPU; this order is "
                            "device-only and runs on target cuda",
                            s.entry, list, s.device_calls.size() > 1 ? "s" : ""));
  }
  TempDir t;
  const std::filesystem::path& dir = t.dir;
  write_file(dir / "ordo_rt.cuh", ordo_rt_cuh());
  write_file(dir / "simt_emu.hpp", simt_emu_hpp());
  std::filesystem::create_directory(dir / "ir");
  write_file(dir / "ir" / "float_bits.hpp", float_bits_hpp());
  write_file(dir / "kernel.cu", s.text);
  write_file(dir / "launch.cpp", launcher(s));
  std::vector<std::string> cmd = emu_compiler_command();
  cmd.insert(cmd.end(), {"-I" + dir.string(), "-o", (dir / "kernel.so").string(), (dir / "launch.cpp").string(), "-lm"});
  const int status = run(cmd, dir / "log.txt");
  if (status != 0) {
    std::string line;
    for (const std::string& c : cmd) line += (line.empty() ? "" : " ") + c;
    throw Error(fmt::format("cuda-emu: the host compiler failed on {} (exit {}{}): {}\n{}", s.entry, status,
                            status == -1 ? ", could not run it; set ORDO_EMU_CXX" : "", line, read_file(dir / "log.txt")));
  }
  return read_file(dir / "kernel.so");
}

EmuKernel load_emu(const Source& s, const std::string& object, double compile_ms) {
  // dlopen needs a file; the mapping outlives it. The library is closed with the last copy of
  // the EmuKernel; it holds no memory of its own (the runtime lends each launch its block memory).
  TempDir t;
  const std::filesystem::path so = t.dir / "kernel.so";
  write_file(so, object);
  void* h = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) throw Error(fmt::format("cuda-emu: dlopen of the compiled kernel failed: {}", dlerror()));
  std::shared_ptr<void> library(h, [](void* handle) { dlclose(handle); });
  auto run = reinterpret_cast<EmuKernel::RunFn>(dlsym(h, "ordo_emu_run"));
  auto memory_bytes = reinterpret_cast<unsigned long long (*)()>(dlsym(h, "ordo_emu_block_memory_bytes"));
  if (!run || !memory_bytes) throw Error("cuda-emu: the compiled kernel lacks ordo_emu_run or ordo_emu_block_memory_bytes");
  return EmuKernel(s, std::move(library), run, static_cast<size_t>(memory_bytes()), compile_ms);
}

void EmuKernel::run_blocks(void* const* buffers, const long long* extents, long long instances, long long block_begin,
                           long long block_end) const {
  // The calling thread's block memory, kept for its later launches of any kernel: a block of
  // 1024 fibers needs 256 MiB of stack address space, of which a launch touches a few pages per
  // fiber. malloc'ed, never cleared, so untouched stack is never paged in.
  struct Held {
    void* memory = nullptr;
    size_t bytes = 0;
    ~Held() { std::free(memory); }
  };
  thread_local Held held;
  if (held.bytes < block_memory_bytes_) {
    std::free(held.memory);
    held.bytes = 0;
    held.memory = std::aligned_alloc(64, (block_memory_bytes_ + 63) / 64 * 64);
    if (!held.memory) throw Error(fmt::format("cuda-emu: cannot allocate {} bytes of fiber memory for {}", block_memory_bytes_, source_.entry));
    held.bytes = block_memory_bytes_;
  }
  run_(buffers, extents, instances, block_begin, block_end, held.memory);
}

EmuKernel compile_emu(const Source& s) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string object = compile_emu_object(s);
  return load_emu(s, object, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
}

std::string emu_fingerprint() {
  static const std::string version = [] {
    TempDir t;
    std::vector<std::string> cmd = {emu_compiler_command()[0], "--version"};
    const int status = run(cmd, t.dir / "version.txt");
    std::string v = read_file(t.dir / "version.txt");
    return status == 0 ? v.substr(0, v.find('\n')) : std::string("unknown compiler");
  }();
  std::string cmd;
  for (const std::string& c : emu_compiler_command()) cmd += c + " ";
  return fmt::format("cuda-emu; {}; {}\n{}\n{}\n{}", version, cmd, ordo_rt_cuh(), simt_emu_hpp(), float_bits_hpp());
}

}  // namespace ordo::cuda_backend
