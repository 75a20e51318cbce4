// The ordo CLI's shared pieces: argument parsing, request fields, .npy inputs and outputs, and
// the command table. Each command lives in its own file (cmd_<name>.cpp) and is one row of
// kCommands (main.cpp); its help text sits next to it.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ir/error.hpp"
#include "ordo/npy.hpp"
#include "ordo/ordo.hpp"

namespace ordo::cli {

// One command: `ordo <name> ...`. `help` is what `ordo help <name>` and `ordo <name> --help`
// print: usage, every option, and an example for each.
struct Command {
  const char* name;
  const char* summary;  // one line, for `ordo --help`
  const char* help;
  int (*run)(int argc, char** argv);
  bool request_options;  // takes kRequestValues and kRequestFlags: its help ends with kRequestOptionsHelp
};
const std::vector<Command>& commands();

// The closest of `known` to `word` by edit distance, when it is close enough to be a likely typo.
std::optional<std::string> closest(const std::string& word, const std::vector<std::string>& known);

// Command-line options after the command (argv[1]): flags, key-value options, and positionals.
// An unknown option is an error naming the closest known one.
struct Args {
  std::vector<std::string> positional;
  std::multimap<std::string, std::string> values;
  std::vector<std::string> flags;

  static Args parse(int argc, char** argv, int first, const std::vector<std::string>& flag_names,
                    const std::vector<std::string>& value_names);
  bool flag(const std::string& k) const;
  std::optional<std::string> get(const std::string& k) const;
  std::vector<std::string> all(const std::string& k) const;
};

int64_t parse_int(const std::string& what, const std::string& s, int64_t lo, int64_t hi);
double parse_double(const std::string& what, const std::string& s);
ScalarType parse_dtype(const std::string& what, const std::string& s);
OpKind parse_op_arg(const Args& a);

// The options every command that builds a Request takes, and the Request they describe.
extern const std::vector<std::string> kRequestValues;
extern const std::vector<std::string> kRequestFlags;
extern const char* const kRequestOptionsHelp;
Request request_from(const Args& a, OpKind op);

std::vector<std::string> split(const std::string& s, char sep);
std::pair<std::string, std::string> name_file(const std::string& opt, const std::string& v);
// Reads the --in files named in `names`; every one must be given once.
std::map<std::string, NpyArray> read_inputs(const Args& a, OpKind op, const std::vector<std::string>& names);
// The commands that run a kernel on buffers they size themselves (bench, compare) take every
// length at compile time: `--sk launch` is refused there, naming the command.
void refuse_launch_sizes(const Request& r, const char* command);
// Checks --out names against the kernel's outputs.
std::map<std::string, std::string> output_files(const Args& a, const CompiledKernel& k);
// Runs `k` on `rows` rows (and the size arguments `sizes`, CompiledKernel::sizes) with the inputs
// named by its arguments and outputs shaped by out_shape, then writes the outputs named in
// out_files: only after everything has succeeded, all of them or none.
void run_and_write(const CompiledKernel& k, const std::map<std::string, NpyArray>& inputs,
                   const std::map<std::string, std::string>& out_files, int64_t rows, int threads,
                   const std::function<std::vector<int64_t>(const ArgSpec&)>& out_shape, const std::vector<int64_t>& sizes = {});
// The orders compare and demo run when --orders is not given: every order that has the op for x of
// dtype and runs on the CPU, each kernel once (no device-only orders, no aliases).
std::vector<std::string> default_orders(OpKind op, ScalarType dtype);
// Fails before any work when `path` cannot be created: its directory must exist.
void check_output_path(const std::string& option, const std::string& path);
// A progress callback that stays silent for the first second, then reports each step on
// stderr: one line rewritten in place on a terminal, one line per step otherwise.
std::function<void(size_t, size_t, const std::string&)> progress_line(std::string what);

double median(std::vector<double> v);
std::optional<std::string> env(const char* name);
void restore_env(const char* name, const std::optional<std::string>& v);
// A C identifier from an order name: "torch1.13-cpu-avx2" -> "torch1_13_cpu_avx2".
std::string c_identifier(const std::string& s);
std::string json_string(const std::string& s);
// Runs argv[0] with argv (no shell); returns its exit status, or -1 if it could not start.
int run_program(const std::vector<std::string>& args);
// Writes each (path, bytes) to a temporary beside it, then renames them all into place: every
// file appears, or (on any failure) none.
void write_files_atomic(const std::vector<std::pair<std::filesystem::path, std::string>>& files);

// The commands (cmd_<name>.cpp).
int cmd_run(int argc, char** argv);
int cmd_orders(int argc, char** argv);
int cmd_compare(int argc, char** argv);
int cmd_demo(int argc, char** argv);
int cmd_emit(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_build(int argc, char** argv);
int cmd_cache(int argc, char** argv);
extern const char* const kRunHelp;
extern const char* const kOrdersHelp;
extern const char* const kCompareHelp;
extern const char* const kDemoHelp;
extern const char* const kEmitHelp;
extern const char* const kBenchHelp;
extern const char* const kBuildHelp;
extern const char* const kCacheHelp;

}  // namespace ordo::cli
