// The ordo CLI's shared pieces (tools/cli.hpp).
#include "tools/cli.hpp"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backends/cuda/cuda_backend.hpp"
#include "gen/gen.hpp"

namespace ordo::cli {

std::optional<std::string> closest(const std::string& word, const std::vector<std::string>& known) {
  // Levenshtein distance; a suggestion must be within a third of the word's length (at least 2).
  auto distance = [](const std::string& a, const std::string& b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      size_t diagonal = row[0];
      row[0] = i;
      for (size_t j = 1; j <= b.size(); ++j) {
        const size_t up = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
        diagonal = up;
      }
    }
    return row[b.size()];
  };
  std::optional<std::string> best;
  size_t best_distance = std::max<size_t>(2, word.size() / 3) + 1;
  for (const std::string& k : known)
    if (size_t d = distance(word, k); d < best_distance) {
      best_distance = d;
      best = k;
    }
  return best;
}

Args Args::parse(int argc, char** argv, int first, const std::vector<std::string>& flag_names,
                 const std::vector<std::string>& value_names) {
  Args a;
  for (int i = first; i < argc; ++i) {
    std::string s = argv[i];
    if (s.rfind("--", 0) != 0) {
      a.positional.push_back(s);
      continue;
    }
    std::string key = s.substr(2), value;
    bool inline_value = false;
    if (size_t eq = key.find('='); eq != std::string::npos && key.rfind("in", 0) != 0 && key.rfind("out", 0) != 0) {
      value = key.substr(eq + 1);
      key = key.substr(0, eq);
      inline_value = true;
    }
    if (std::find(flag_names.begin(), flag_names.end(), key) != flag_names.end()) {
      if (inline_value) throw Error(fmt::format("--{} takes no value", key));
      a.flags.push_back(key);
    } else if (std::find(value_names.begin(), value_names.end(), key) != value_names.end()) {
      if (!inline_value) {
        if (i + 1 >= argc) throw Error(fmt::format("--{} needs a value", key));
        value = argv[++i];
      }
      a.values.emplace(key, value);
    } else {
      std::vector<std::string> known = flag_names;
      known.insert(known.end(), value_names.begin(), value_names.end());
      const std::optional<std::string> near = closest(key, known);
      throw Error(fmt::format("unknown option '{}' for '{}'{}; `ordo {} --help` lists its options", s, argv[1],
                              near ? fmt::format(" (did you mean '--{}'?)", *near) : "", argv[1]));
    }
  }
  return a;
}

bool Args::flag(const std::string& k) const { return std::find(flags.begin(), flags.end(), k) != flags.end(); }

std::optional<std::string> Args::get(const std::string& k) const {
  auto [lo, hi] = values.equal_range(k);
  if (lo == hi) return std::nullopt;
  if (std::next(lo) != hi) throw Error(fmt::format("--{} given more than once", k));
  return lo->second;
}

std::vector<std::string> Args::all(const std::string& k) const {
  std::vector<std::string> out;
  for (auto [lo, hi] = values.equal_range(k); lo != hi; ++lo) out.push_back(lo->second);
  return out;
}

int64_t parse_int(const std::string& what, const std::string& s, int64_t lo, int64_t hi) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) throw Error(fmt::format("{} '{}' is not an integer", what, s));
  if (v < lo || v > hi) throw Error(fmt::format("{} {} is outside [{}, {}]", what, v, lo, hi));
  return v;
}

double parse_double(const std::string& what, const std::string& s) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != s.size() || s.empty()) throw Error(fmt::format("{} '{}' is not a number", what, s));
  return v;
}

ordo::ScalarType parse_dtype(const std::string& what, const std::string& s) {
  auto t = ordo::parse_scalar_type(s);
  if (!t || *t == ordo::ScalarType::f64) throw Error(fmt::format("{} '{}' is not f32, bf16 or f16", what, s));
  return *t;
}

ordo::OpKind parse_op_arg(const Args& a) {
  if (a.positional.empty()) throw Error("missing the op: layer_norm, rms_norm, var_mean, sum, mean, silu, gelu_tanh, gelu, softmax, log_softmax or attention");
  if (a.positional.size() > 1) throw Error(fmt::format("unexpected argument '{}'", a.positional[1]));
  auto op = ordo::parse_op(a.positional[0]);
  if (!op) throw Error(fmt::format("unknown op '{}'; ops: layer_norm, rms_norm, var_mean, sum, mean, silu, gelu_tanh, gelu, softmax, log_softmax, attention", a.positional[0]));
  return *op;
}

const std::vector<std::string> kRequestValues = {"order", "eps", "acc", "target", "weight-dtype", "cols", "dtype", "rows-in-flight",
                                                 "arch", "sq", "sk", "heads", "kv-group", "row-strides", "mask", "ignore-index",
                                                 "reduction"};
const std::vector<std::string> kRequestFlags = {"allow-mixed-dtypes", "no-weight", "no-bias", "causal", "lse"};

const char* const kRequestOptionsHelp = R"(
request options (every command that builds a kernel):
  --order NAME          the order (`ordo orders` lists them)      --order torch2.15-cpu
  --eps E               layer_norm/rms_norm epsilon (1e-5)        --eps 1e-6
  --acc f32|f64         accumulation type, where the order is open --acc f64
  --dtype T             x's storage: f32, bf16, f16 (f32)          --dtype bf16
  --weight-dtype T      weight and bias storage (x's)              --weight-dtype f32
  --allow-mixed-dtypes  let weight and x differ                    --dtype bf16 --weight-dtype f32 --allow-mixed-dtypes
  --no-weight, --no-bias  layer_norm/rms_norm without them         --no-bias
  --target T            cpu, interpreter, cuda, cuda-emu (cpu)     --target cuda-emu
  --arch sm_XX          target cuda: sm_80, sm_86, sm_89, sm_90    --arch sm_80
  --rows-in-flight R    CPU rows run in lock step (0: backend's choice; never changes bits)  --rows-in-flight 4
  --cols N              the reduced dim N (attention: D); --cols launch: one kernel for every N, given at each launch  --cols 4096
  --sq N, --sk N        attention's query and key lengths; --sk launch: one kernel for every S_k, given at each launch  --sq 1 --sk launch
  --heads H             attention: H of PyTorch's (B, H, S, D); launches are B*H rows (1)  --heads 8
  --kv-group G          attention_backward: G query heads per K/V head (grouped-query); launches are B*H/G rows (1)  --heads 8 --kv-group 4
  --row-strides Q,K,V   attention: the row strides of the q, k, v tensors PyTorch was given (D: contiguous)  --row-strides 512,512,512
  --causal              attention: key j hidden from query i > j   --causal
  --mask T:DIMS         attention: an additive mask input (PyTorch's attn_mask; the torch2.15-cpu orders), T f32 or the
                        inputs' dtype, DIMS of B, H, Q, K each its letter where spanned or 1 where broadcast  --mask bf16:B1QK
  --lse                 attention: also the log-sum-exp of each query row  --lse
  --ignore-index I      cross_entropy: the target that marks a row as not counted (-100)  --ignore-index 0
  --reduction R         cross_entropy: mean, sum or none (mean)    --reduction sum
)";

// Fields every subcommand shares.
ordo::Request request_from(const Args& a, ordo::OpKind op) {
  ordo::Request r;
  r.op = op;
  if (auto v = a.get("order")) r.order = *v;
  if (auto v = a.get("eps")) r.eps = parse_double("--eps", *v);
  if (auto v = a.get("acc")) {
    auto t = ordo::parse_scalar_type(*v);
    if (!t || (*t != ordo::ScalarType::f32 && *t != ordo::ScalarType::f64)) throw Error(fmt::format("--acc '{}' is not f32 or f64", *v));
    r.acc_dtype = *t;
  }
  if (auto v = a.get("target")) {
    auto t = ordo::parse_target(*v);
    if (!t) throw Error(fmt::format("--target '{}' is not cpu, interpreter, cuda or cuda-emu", *v));
    r.target = *t;
  }
  if (auto v = a.get("arch")) {
    if (v->rfind("sm_", 0) != 0) throw Error(fmt::format("--arch '{}' is not sm_80, sm_86, sm_89 or sm_90", *v));
    r.cuda_arch = static_cast<int>(parse_int("--arch", v->substr(3), 0, 1000));
    if (!ordo::cuda_backend::supported_arch(r.cuda_arch)) throw Error(fmt::format("--arch '{}' is not sm_80, sm_86, sm_89 or sm_90", *v));
  }
  if (auto v = a.get("dtype")) r.x_dtype = parse_dtype("--dtype", *v);
  if (auto v = a.get("weight-dtype")) r.weight_dtype = parse_dtype("--weight-dtype", *v);
  if (auto v = a.get("cols")) {
    // `--cols launch`: one kernel for every N, given at each launch (Request::cols_at_launch).
    if (*v == "launch") r.cols_at_launch = true;
    else r.cols = parse_int("--cols", *v, 0, int64_t(1) << 40);
  }
  if (auto v = a.get("rows-in-flight")) r.rows_in_flight = static_cast<int>(parse_int("--rows-in-flight", *v, 0, 16));
  r.allow_mixed_dtypes = a.flag("allow-mixed-dtypes");
  // attention's shape (rows are batch*heads); other ops reject these in resolve().
  if (auto v = a.get("sq")) r.seq_q = parse_int("--sq", *v, 1, int64_t(1) << 24);
  if (auto v = a.get("sk")) {
    // `--sk launch`: one kernel for every S_k, given at each launch (Request::seq_k_at_launch).
    if (*v == "launch") r.seq_k_at_launch = true;
    else r.seq_k = parse_int("--sk", *v, 1, int64_t(1) << 24);
  }
  if (auto v = a.get("heads")) r.heads = parse_int("--heads", *v, 1, int64_t(1) << 24);
  if (auto v = a.get("kv-group")) r.kv_group = parse_int("--kv-group", *v, 1, int64_t(1) << 24);
  if (auto v = a.get("row-strides")) {
    const std::vector<std::string> parts = split(*v, ',');
    if (parts.size() != 3) throw Error(fmt::format("--row-strides '{}' is not Q,K,V (three integers)", *v));
    r.q_row_stride = parse_int("--row-strides", parts[0], 1, int64_t(1) << 40);
    r.k_row_stride = parse_int("--row-strides", parts[1], 1, int64_t(1) << 40);
    r.v_row_stride = parse_int("--row-strides", parts[2], 1, int64_t(1) << 40);
  }
  r.causal = a.flag("causal");
  if (auto v = a.get("mask")) {
    r.mask = ordo::AttentionMask::parse(*v);
    if (!r.mask) throw Error(fmt::format("--mask '{}' is not T:DIMS (T f32, bf16 or f16; DIMS of B or 1, H or 1, Q or 1, K or 1: f32:B1QK)", *v));
  }
  r.lse_output = a.flag("lse");
  if (auto v = a.get("ignore-index")) r.ignore_index = parse_int("--ignore-index", *v, INT64_MIN, INT64_MAX);
  if (auto v = a.get("reduction")) {
    auto red = ordo::parse_loss_reduction(*v);
    if (!red) throw Error(fmt::format("--reduction '{}' is not mean, sum or none", *v));
    r.reduction = *red;
  }
  // A backward op takes its forward's shape options (weight and bias: their gradients).
  const ordo::OpKind forward = ordo::forward_of(op);
  if (forward == ordo::OpKind::attention) {
    if (!r.seq_q) r.seq_q = r.seq_k ? r.seq_k : 1024;
    if (!r.seq_k && !r.seq_k_at_launch) r.seq_k = r.seq_q;
  }
  r.has_weight = (forward == ordo::OpKind::layer_norm || forward == ordo::OpKind::rms_norm) && !a.flag("no-weight");
  r.has_bias = forward == ordo::OpKind::layer_norm && !a.flag("no-bias");
  return r;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0, depth = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i < s.size() && s[i] == '(') ++depth;
    if (i < s.size() && s[i] == ')' && depth) --depth;
    if (i == s.size() || (s[i] == sep && depth == 0)) {
      out.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  return out;
}

std::pair<std::string, std::string> name_file(const std::string& opt, const std::string& v) {
  size_t eq = v.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == v.size())
    throw Error(fmt::format("--{} '{}' must be NAME=FILE.npy", opt, v));
  return {v.substr(0, eq), v.substr(eq + 1)};
}

// Reads the --in files named in `names`; every one must be given once.
std::map<std::string, ordo::NpyArray> read_inputs(const Args& a, ordo::OpKind op, const std::vector<std::string>& names) {
  std::map<std::string, ordo::NpyArray> inputs;
  for (const std::string& v : a.all("in")) {
    auto [n, file] = name_file("in", v);
    if (std::find(names.begin(), names.end(), n) == names.end())
      throw Error(fmt::format("{} has no input '{}'; inputs: {}", ordo::name(op), n, fmt::join(names, ", ")));
    if (inputs.count(n)) throw Error(fmt::format("input '{}' given twice", n));
    inputs.emplace(n, ordo::read_npy(file));
  }
  return inputs;
}

// Checks --out names against the kernel's outputs.
std::map<std::string, std::string> output_files(const Args& a, const ordo::CompiledKernel& k) {
  std::map<std::string, std::string> out_files;
  for (const std::string& v : a.all("out")) {
    auto [n, file] = name_file("out", v);
    bool known = false;
    std::string outs;
    for (const ordo::ArgSpec& s : k.args())
      if (s.output) {
        known |= s.name == n;
        outs += (outs.empty() ? "" : ", ") + s.name;
      }
    if (!known) throw Error(fmt::format("{} has no output '{}'; outputs: {}", ordo::name(k.request().op), n, outs));
    if (out_files.count(n)) throw Error(fmt::format("output '{}' given twice", n));
    out_files[n] = file;
  }
  if (out_files.empty()) throw Error("no --out NAME=FILE.npy given");
  return out_files;
}

void refuse_launch_sizes(const ordo::Request& r, const char* command) {
  if (r.cols_at_launch)
    throw Error(fmt::format("{} runs kernels built for one N; --cols launch is for emit, build and run: give --cols N", command));
  if (r.seq_k_at_launch)
    throw Error(fmt::format("{} runs kernels built for one S_k; --sk launch is for emit, build and run: give --sk N", command));
}

// Runs `k` on `rows` rows with the inputs named by its arguments and outputs shaped by
// out_shape, then writes the outputs named in out_files: only after everything has succeeded,
// all of them or none.
void run_and_write(const ordo::CompiledKernel& k, const std::map<std::string, ordo::NpyArray>& inputs,
                   const std::map<std::string, std::string>& out_files, int64_t rows, int threads,
                   const std::function<std::vector<int64_t>(const ordo::ArgSpec&)>& out_shape, const std::vector<int64_t>& sizes) {
  std::vector<ordo::NpyArray> buffers;
  for (const ordo::ArgSpec& s : k.args()) {
    ordo::NpyArray b;
    if (!s.output) b = inputs.at(s.name);
    else {
      b.dtype = s.dtype;
      b.shape = out_shape(s);
      b.data.assign(static_cast<size_t>(s.elements(rows, k.launch_cols(sizes), sizes) * ordo::size_bytes(s.dtype)), 0);
    }
    buffers.push_back(std::move(b));
  }
  std::vector<ordo::BufferRef> refs;
  for (ordo::NpyArray& b : buffers) refs.push_back(ordo::BufferRef{b.data.data(), b.elements(), b.dtype});
  k.run_with_sizes(refs, rows, sizes, threads);
  std::vector<std::pair<std::string, const ordo::NpyArray*>> files;
  for (size_t i = 0; i < buffers.size(); ++i)
    if (auto it = out_files.find(k.args()[i].name); it != out_files.end()) files.emplace_back(it->second, &buffers[i]);
  ordo::write_npy_files_atomic(files);
}


// Fails before any work when `path` cannot be created: its directory must exist.
void check_output_path(const std::string& option, const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path parent = fs::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty() && !fs::is_directory(parent, ec))
    throw Error(fmt::format("{} {}: directory '{}' does not exist", option, path, parent.string()));
  if (fs::is_directory(path, ec)) throw Error(fmt::format("{} {}: is a directory", option, path));
}

// A progress callback that stays silent for the first second, then reports each step on
// stderr: one line rewritten in place on a terminal, one line per step otherwise.
std::function<void(size_t, size_t, const std::string&)> progress_line(std::string what) {
  const auto start = std::chrono::steady_clock::now();
  const bool tty = isatty(fileno(stderr));
  return [=](size_t done, size_t total, const std::string& item) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (s < 1.0) return;
    const std::string line = item.empty() ? fmt::format("{}: {}/{} done in {:.1f} s", what, done, total, s)
                                          : fmt::format("{}: {}/{} {:.1f} s, running {}", what, done, total, s, item);
    if (tty) fmt::print(stderr, "\r\033[K{}{}", line, item.empty() ? "\n" : "");
    else fmt::print(stderr, "{}\n", line);
  };
}


double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::optional<std::string>(v) : std::nullopt;
}
void restore_env(const char* name, const std::optional<std::string>& v) {
  if (v) ::setenv(name, v->c_str(), 1);
  else ::unsetenv(name);
}


// A C identifier from an order name: "torch1.13-cpu-avx2" -> "torch1_13_cpu_avx2".
std::string c_identifier(const std::string& s) {
  std::string out;
  for (char c : s) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  while (!out.empty() && out.back() == '_') out.pop_back();
  return out;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// Runs argv[0] with argv (no shell); returns its exit status, or -1 if it could not start.
int run_program(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const std::string& s : args) argv.push_back(const_cast<char*>(s.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawnp(&pid, argv[0], nullptr, nullptr, argv.data(), environ) != 0) return -1;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)  // interrupted by a signal: wait again
    if (errno != EINTR) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Writes each (path, bytes) to a temporary beside it, then renames them all into place: every
// file appears, or (on any failure) none.
void write_files_atomic(const std::vector<std::pair<std::filesystem::path, std::string>>& files) {
  namespace fs = std::filesystem;
  const std::string tag = fmt::format(".tmp.{}", ::getpid());
  std::vector<fs::path> temps;
  try {
    for (const auto& [path, bytes] : files) {
      temps.push_back(path.string() + tag);
      std::ofstream out(temps.back(), std::ios::binary);
      out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
      if (!out) throw Error(fmt::format("cannot write {}", path.string()));
    }
    for (size_t i = 0; i < files.size(); ++i) fs::rename(temps[i], files[i].first);
  } catch (...) {
    std::error_code ec;
    for (const fs::path& t : temps) fs::remove(t, ec);
    throw;
  }
}


std::vector<std::string> default_orders(ordo::OpKind op, ordo::ScalarType dtype) {
  std::vector<std::string> out;
  for (const ordo::gen::NamedOrder& n : ordo::gen::named_orders()) {
    const std::vector<ordo::ScalarType>& dtypes = ordo::gen::dtypes_for(n, op);
    const bool has = std::find(n.ops.begin(), n.ops.end(), op) != n.ops.end() &&
                     std::find(dtypes.begin(), dtypes.end(), dtype) != dtypes.end();
    // device-only orders run on a GPU alone; an alias is another row's kernel
    if (has && !n.device_only && !n.alias) out.emplace_back(n.name);
  }
  return out;
}

}  // namespace ordo::cli
