// IR -> CUDA C++. Every expression node becomes one `const` temporary computed by one helper of
// templates/ordo_rt.cuh, in the order the IR states; locals become C++ locals; loops and ifs stay
// loops and ifs. Within a statement a node shared by several operands is computed once (as the
// LLVM lowering does); nothing is reused across statements, since locals may change between them.
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <unordered_map>

#include "backends/cuda/cuda_backend.hpp"
#include "ir/error.hpp"

namespace ordo::cuda_backend {

using namespace ordo::ir;

bool supported_arch(int arch) { return arch == 80 || arch == 86 || arch == 89 || arch == 90; }

namespace {

// Alignment analysis: for each i64 expression, the exponent of the largest power of two known
// to divide it (capped: 16-byte accesses of 1-byte elements need at most 2^4), from constants,
// sums, products, tables and the assignments of locals (loop variables: begin and step).
constexpr int kMaxPow2 = 6;

int ctz_capped(int64_t v) { return v == 0 ? kMaxPow2 : std::min(kMaxPow2, std::countr_zero(static_cast<uint64_t>(v))); }

struct Alignment {
  const Kernel& k;
  std::vector<int> local;  // per local: kMaxPow2 until an assignment says less

  explicit Alignment(const Kernel& kernel) : k(kernel), local(kernel.locals.size(), kMaxPow2) {
    // Locals only lose factors as assignments are seen; iterate to the fixed point.
    for (bool changed = true; changed;) {
      changed = false;
      visit(k.body, changed);
    }
  }
  int of(const Expr& e) const {
    if (e.type != Type{ScalarType::i64, 1}) return 0;
    switch (e.op) {
      case Op::Const: return ctz_capped(e.imm_i);
      case Op::Var: return local[static_cast<size_t>(e.index)];
      case Op::Add: case Op::Sub: case Op::Min: case Op::Max: return std::min(of(*e.args[0]), of(*e.args[1]));
      case Op::Mul: return std::min(kMaxPow2, of(*e.args[0]) + of(*e.args[1]));
      case Op::Select: return std::min(of(*e.args[1]), of(*e.args[2]));
      case Op::Table: {
        int m = kMaxPow2;
        for (int64_t v : k.tables[static_cast<size_t>(e.index)]) m = std::min(m, ctz_capped(v));
        return m;
      }
      default: return 0;  // program_id, grid_extent, div, rem: nothing known
    }
  }
  void lower(int target, int value, bool& changed) {
    int& l = local[static_cast<size_t>(target)];
    if (value < l) {
      l = value;
      changed = true;
    }
  }
  void visit(const std::vector<Stmt>& body, bool& changed) {
    for (const Stmt& s : body) {
      if (s.kind == StmtKind::Assign && k.locals[static_cast<size_t>(s.target)].type == Type{ScalarType::i64, 1})
        lower(s.target, of(*s.value), changed);
      if (s.kind == StmtKind::For) lower(s.target, std::min(of(*s.begin), ctz_capped(s.step)), changed);
      visit(s.body, changed);
      visit(s.else_body, changed);
    }
  }
};

// Mirrors chunk_bytes() of ordo_rt.cuh: the chunk a vector access of `bytes` moves.
int chunk_bytes(int align, int bytes, int elem) {
  if (align % 16 == 0 && bytes % 16 == 0) return 16;
  if (align % 8 == 0 && bytes % 8 == 0) return 8;
  if (align % 4 == 0 && bytes % 4 == 0 && elem <= 4) return 4;
  return 0;
}

std::string scalar_type(ScalarType t) {
  switch (t) {
    case ScalarType::f64: return "double";
    case ScalarType::f32: return "float";
    case ScalarType::f16: return "ordo_rt::f16";
    case ScalarType::bf16: return "ordo_rt::bf16";
    case ScalarType::i64: return "long long";
    case ScalarType::boolean: return "bool";
    case ScalarType::i32: return "int";
  }
  return "?";
}
std::string c_type(Type t) {
  return t.lanes == 1 ? scalar_type(t.scalar) : fmt::format("ordo_rt::vec<{}, {}>", scalar_type(t.scalar), t.lanes);
}

std::string identifier(const std::string& s) {
  std::string out;
  for (char c : s) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return out;
}

// A literal with exactly the constant's bits: hexadecimal floating point for finite values.
std::string literal(const Expr& e) {
  switch (e.type.scalar) {
    case ScalarType::f32: {
      const float v = static_cast<float>(e.imm_f);
      if (!std::isfinite(v)) return fmt::format("__int_as_float((int)0x{:08x}u)", std::bit_cast<uint32_t>(v));
      return v < 0 || std::signbit(v) ? fmt::format("(-{:a}f)", -v) : fmt::format("{:a}f", v);
    }
    case ScalarType::f64: {
      const double v = e.imm_f;
      if (!std::isfinite(v)) return fmt::format("__longlong_as_double((long long)0x{:016x}ull)", std::bit_cast<uint64_t>(v));
      return v < 0 || std::signbit(v) ? fmt::format("(-{:a})", -v) : fmt::format("{:a}", v);
    }
    case ScalarType::i32: {
      const int32_t v = static_cast<int32_t>(e.imm_i);
      return v == INT32_MIN ? "(-2147483647 - 1)" : fmt::format("{}", v);
    }
    case ScalarType::i64:
      return e.imm_i == INT64_MIN ? "(-9223372036854775807LL - 1)" : fmt::format("{}LL", e.imm_i);
    case ScalarType::boolean: return e.imm_i ? "true" : "false";
    default: throw Error(fmt::format("internal: cuda: constant of storage type {}", name(e.type.scalar)));
  }
}

// The names of the kernel's Op::Call functions (all device-only), each once.
void collect_calls(const Expr& e, std::vector<std::string>& out) {
  if (e.op == Op::Call) {
    std::string n(name(static_cast<MathFn>(e.index)));
    if (std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
  }
  for (const ExprRef& a : e.args) collect_calls(*a, out);
}
void collect_calls(const std::vector<Stmt>& body, std::vector<std::string>& out) {
  for (const Stmt& s : body) {
    for (const Expr* e : operands(s)) collect_calls(*e, out);
    if (!has_bodies(s)) continue;
    collect_calls(s.body, out);
    collect_calls(s.else_body, out);
  }
}
// Whether statements read or write a scratch buffer (team memory in a team kernel).
bool touches_scratch(const Kernel& k, const Expr& e) {
  if ((e.op == Op::Load || e.op == Op::Gather) && !is_argument(k.buffers[static_cast<size_t>(e.index)])) return true;
  for (const ExprRef& a : e.args)
    if (touches_scratch(k, *a)) return true;
  return false;
}
bool touches_scratch(const Kernel& k, const std::vector<Stmt>& body) {
  for (const Stmt& s : body) {
    if (s.kind == StmtKind::Store && !is_argument(k.buffers[static_cast<size_t>(s.target)])) return true;
    for (const Expr* e : operands(s))
      if (touches_scratch(k, *e)) return true;
    if (has_bodies(s) && (touches_scratch(k, s.body) || touches_scratch(k, s.else_body))) return true;
  }
  return false;
}

struct Renderer {
  const Kernel& k;
  Alignment align;
  std::string out;
  int depth = 1;
  int next_temp = 0;
  std::unordered_map<const Expr*, std::string> memo;  // within one statement
  std::vector<std::string> locals, buffers;
  std::vector<int> buffer_align;

  explicit Renderer(const Kernel& kernel) : k(kernel), align(kernel), buffer_align(kernel.buffers.size(), 1) {
    for (size_t i = 0; i < k.locals.size(); ++i) locals.push_back(fmt::format("l{}_{}", i, identifier(k.locals[i].name)));
    for (size_t i = 0; i < k.buffers.size(); ++i) buffers.push_back(fmt::format("b{}_{}", i, identifier(k.buffers[i].name)));
  }

  void line(const std::string& s) {
    out.append(static_cast<size_t>(2 * depth), ' ');
    out += s;
    out += '\n';
  }

  // The proven alignment of element `index` of buffer `b` (bytes, at most 16) and the chunk a
  // vector access of `lanes` elements will use; the buffer's base must then be aligned to it.
  int access_align(int b, const Expr& index, int lanes) {
    const int elem = size_bytes(k.buffers[static_cast<size_t>(b)].elem);
    const int a = std::min(16, elem << align.of(index));
    const int chunk = chunk_bytes(a, lanes * elem, elem);
    buffer_align[static_cast<size_t>(b)] = std::max(buffer_align[static_cast<size_t>(b)], std::max(chunk, elem));
    return a;
  }

  std::string temp(const Expr& e, const std::string& value) {
    std::string t = fmt::format("t{}", next_temp++);
    line(fmt::format("const {} {} = {};", c_type(e.type), t, value));
    memo.emplace(&e, t);
    return t;
  }

  std::string expr(const Expr& e) {
    if (auto it = memo.find(&e); it != memo.end()) return it->second;
    const int n = e.type.lanes;
    switch (e.op) {
      case Op::Const: return n == 1 ? literal(e) : fmt::format("ordo_rt::broadcast<{}>({})", n, literal(e));
      case Op::Var: return locals[static_cast<size_t>(e.index)];
      case Op::ProgramId: return fmt::format("pid{}", e.index);
      case Op::GridExtent: return fmt::format("ext{}", e.index);
      case Op::LaunchRows: return "launch_rows";
      case Op::LaunchSize: return fmt::format("size{}", e.index);
      case Op::Iota: return n == 1 ? std::string("0LL") : temp(e, fmt::format("ordo_rt::iota<{}>()", n));
      case Op::ThreadId: return "(long long)threadIdx.x";
      // Every thread of the warp runs the statement (the verifier keeps shuffles out of
      // thread-dependent control flow), as the full mask promises.
      case Op::ShuffleDown:
        return temp(e, fmt::format("__shfl_down_sync(0xffffffffu, {}, {})", locals[static_cast<size_t>(e.index)], e.imm_i));
      case Op::ShuffleXor:
        return temp(e, fmt::format("__shfl_xor_sync(0xffffffffu, {}, {})", locals[static_cast<size_t>(e.index)], e.imm_i));
      default: break;
    }
    // Cast(Cast(f32 x, bf16), f32): one rounding of x to bf16, kept in an f32 (round_bf16).
    if (e.op == Op::Cast && e.type.scalar == ScalarType::f32 && e.args[0]->op == Op::Cast &&
        e.args[0]->type.scalar == ScalarType::bf16 && e.args[0]->args[0]->type.scalar == ScalarType::f32 &&
        !memo.count(e.args[0].get()))
      return temp(e, fmt::format("ordo_rt::round_bf16({})", expr(*e.args[0]->args[0])));
    std::vector<std::string> a;
    for (const ExprRef& arg : e.args) a.push_back(expr(*arg));
    auto call = [&](const char* fn) {
      std::string s = fmt::format("ordo_rt::{}(", fn);
      for (size_t i = 0; i < a.size(); ++i) s += (i ? ", " : "") + a[i];
      return s + ")";
    };
    switch (e.op) {
      case Op::Load: {
        const std::string& b = buffers[static_cast<size_t>(e.index)];
        if (n == 1) {
          access_align(static_cast<int>(e.index), *e.args[0], 1);
          return temp(e, fmt::format("{}[{}]", b, a[0]));
        }
        const int al = access_align(static_cast<int>(e.index), *e.args[0], n);
        return temp(e, fmt::format("ordo_rt::load<{}, {}>({}, {})", n, al, b, a[0]));
      }
      case Op::Gather:  // one lane: a scalar index and a plain load
        if (n == 1) return temp(e, fmt::format("{}[{}]", buffers[static_cast<size_t>(e.index)], a[0]));
        return temp(e, fmt::format("ordo_rt::gather({}, {})", buffers[static_cast<size_t>(e.index)], a[0]));
      case Op::Add: return temp(e, call("add"));
      case Op::Sub: return temp(e, call("sub"));
      case Op::Mul: return temp(e, call("mul"));
      case Op::Div: return temp(e, call("div"));
      case Op::Rem: return temp(e, call("rem"));
      case Op::Fma: return temp(e, call("fma"));
      case Op::Ldexp: return temp(e, call("ldexp_"));
      case Op::Bf16PairDot: return temp(e, call("bf16_pair_dot"));
      case Op::Sqrt: return temp(e, call("sqrt"));
      case Op::Floor: return temp(e, call("floor_"));
      case Op::Neg: return temp(e, call("neg"));
      case Op::Min: return temp(e, call("minimum"));
      case Op::Max: return temp(e, call("maximum"));
      case Op::Lt: return temp(e, call("lt"));
      case Op::Le: return temp(e, call("le"));
      case Op::Eq: return temp(e, call("eq"));
      case Op::Ne: return temp(e, call("ne"));
      case Op::And: return temp(e, call("and_"));
      case Op::Or: return temp(e, call("or_"));
      case Op::Shl: return temp(e, call("shl"));
      case Op::Shr: return temp(e, call("shr"));
      case Op::BitAnd: return temp(e, call("bitand_"));
      case Op::Bitcast: {
        switch (e.type.scalar) {
          case ScalarType::i32: return temp(e, call("bitcast_i32"));
          case ScalarType::f32: return temp(e, call("bitcast_f32"));
          case ScalarType::i64: return temp(e, call("bitcast_i64"));
          case ScalarType::f64: return temp(e, call("bitcast_f64"));
          default: throw Error(fmt::format("internal: cuda: bitcast to {}", name(e.type.scalar)));
        }
      }
      case Op::Select: return temp(e, call("select"));
      case Op::Cast: {
        switch (e.type.scalar) {
          case ScalarType::f32: return temp(e, call("to_f32"));
          case ScalarType::f64: return temp(e, call("to_f64"));
          case ScalarType::bf16: return temp(e, call("to_bf16"));
          case ScalarType::f16: return temp(e, call("to_f16"));
          case ScalarType::i32: return temp(e, call("to_i32"));
          case ScalarType::i64: return temp(e, call("to_i64"));
          default: throw Error(fmt::format("internal: cuda: cast to {}", name(e.type.scalar)));
        }
      }
      // A one-lane value is a C++ scalar: broadcasting to one lane, or extracting from a
      // one-lane value, is the value itself.
      case Op::Broadcast: return n == 1 ? a[0] : temp(e, fmt::format("ordo_rt::broadcast<{}>({})", n, a[0]));
      case Op::Extract: return e.args[0]->type.lanes == 1 ? a[0] : temp(e, fmt::format("{}.v[{}]", a[0], e.index));
      case Op::Table:
        if (n == 1) return temp(e, fmt::format("ordo_table{}[{}]", e.index, a[0]));
        return temp(e, fmt::format("ordo_rt::table_lookup(ordo_table{}, {})", e.index, a[0]));
      case Op::Call: {
        const MathFn f = static_cast<MathFn>(e.index);
        if (n != 1) throw Error(fmt::format("internal: cuda: a {}-lane call of {}", n, name(f)));
        // CUDA's own functions: rsqrtf is rsqrt.approx.f32; expf and logf are libdevice's.
        const char* fn = f == MathFn::device_rsqrtf ? "rsqrtf" : f == MathFn::device_expf ? "expf" : "logf";
        return temp(e, fmt::format("{}({})", fn, a[0]));
      }
      default: break;
    }
    throw Error(fmt::format("internal: cuda: no lowering for {}", spelling(e.op)));
  }

  void stmts(const std::vector<Stmt>& body) {
    for (const Stmt& s : body) stmt(s);
  }

  void stmt(const Stmt& s) {
    memo.clear();
    switch (s.kind) {
      case StmtKind::Assign:
        line(fmt::format("{} = {};", locals[static_cast<size_t>(s.target)], expr(*s.value)));
        break;
      case StmtKind::Store: {
        const std::string idx = expr(*s.index), v = expr(*s.value);
        const std::string& b = buffers[static_cast<size_t>(s.target)];
        const int n = s.value->type.lanes;
        if (s.index->type.lanes > 1) {  // scatter
          line(fmt::format("ordo_rt::scatter({}, {}, {});", b, idx, v));
          break;
        }
        const int al = access_align(s.target, *s.index, n);
        if (n == 1) line(fmt::format("{}[{}] = {};", b, idx, v));
        else line(fmt::format("ordo_rt::store<{}>({}, {}, {});", al, b, idx, v));
        break;
      }
      case StmtKind::For: {
        // Bounds are evaluated once, before the loop (as the interpreter does). The IR's own
        // unrolling is the one it states: the loop is not unrolled further, so the PTX holds
        // exactly one instruction per lane of every IR node.
        const std::string lo = expr(*s.begin), hi = expr(*s.end);
        const std::string iv = fmt::format("i{}", next_temp++);
        line(fmt::format("ORDO_LOOP for (long long {} = {}; {} < {}; {} += {}LL) {{", iv, lo, iv, hi, iv, s.step));
        ++depth;
        line(fmt::format("{} = {};", locals[static_cast<size_t>(s.target)], iv));
        stmts(s.body);
        --depth;
        line("}");
        break;
      }
      case StmtKind::If: {
        line(fmt::format("if ({}) {{", expr(*s.value)));
        ++depth;
        stmts(s.body);
        --depth;
        if (!s.else_body.empty()) {
          line("} else {");
          ++depth;
          stmts(s.else_body);
          --depth;
        }
        line("}");
        break;
      }
      case StmtKind::Team: {
        // Every thread runs the body; the barrier after it separates this statement's team
        // memory accesses from the next one's. A statement that only shuffles needs none.
        line("{  // team statement: every thread of the block");
        ++depth;
        stmts(s.body);
        --depth;
        line("}");
        if (touches_scratch(k, s.body)) line("__syncthreads();");
        break;
      }
      case StmtKind::Region: {
        std::string note = s.note;
        std::replace(note.begin(), note.end(), '\n', ' ');
        line(fmt::format("{{  // {} [{}]", s.label, note));
        ++depth;
        stmts(s.body);
        --depth;
        line("}");
        break;
      }
    }
  }
};

}  // namespace

std::vector<std::string> device_calls(const Kernel& k) {
  std::vector<std::string> out;
  collect_calls(k.body, out);
  return out;
}

Source render(const Kernel& k) {
  if (k.grid_rank < 1 || k.grid_rank > 3) throw Error(fmt::format("internal: cuda: grid rank {} (1 to 3 supported)", k.grid_rank));
  Renderer R(k);
  Source s;
  s.entry = "ordo_" + identifier(k.name);
  s.grid_rank = k.grid_rank;
  s.sizes = static_cast<int>(k.sizes.size());
  const bool team = k.team > 1;
  s.block_threads = team ? k.team : kBlockSize;
  s.instances_per_block = team ? 1 : kBlockSize;
  s.uses_barriers = team;
  s.device_calls = device_calls(k);

  // The body first: it determines the buffers' alignment, which the signature documents.
  if (team) {
    R.line("const long long flat = (long long)blockIdx.x;  // one block per instance");
  } else {
    R.line("const long long flat = (long long)blockIdx.x * (long long)blockDim.x + (long long)threadIdx.x;");
  }
  R.line("if (flat >= instances) return;");
  // Instances are numbered row-major over the grid, as the interpreter runs them.
  if (k.grid_rank == 1) {
    R.line("const long long pid0 = flat;");
  } else {
    R.line("long long rest = flat;");
    for (int d = k.grid_rank - 1; d >= 1; --d) {
      R.line(fmt::format("const long long pid{} = rest % ext{};", d, d));
      R.line(fmt::format("rest /= ext{};", d));
    }
    R.line("const long long pid0 = rest;");
  }
  for (size_t i = 0; i < k.locals.size(); ++i) R.line(fmt::format("{} {};", c_type(k.locals[i].type), R.locals[i]));
  // Scratch buffers: per-thread arrays (CUDA local memory), or in a team kernel the block's
  // shared memory; 16-byte aligned like a global buffer.
  for (size_t i = 0; i < k.buffers.size(); ++i)
    if (!is_argument(k.buffers[i]))
      R.line(fmt::format("alignas(16) {}{} {}[{}];", team ? "__shared__ " : "", scalar_type(k.buffers[i].elem), R.buffers[i],
                         k.buffers[i].per_row));
  R.stmts(k.body);
  const std::string body = std::move(R.out);

  std::string& t = s.text;
  t += fmt::format("// Generated by ordo (backends/cuda) from IR kernel {}: {}\n", k.name, k.description);
  t += team ? fmt::format("// One block of {} threads per program instance (an IR team). Compile with --fmad=false; every fused multiply-add below is an IR fma.\n", k.team)
              : "// One thread per program instance. Compile with --fmad=false; every fused multiply-add below is an IR fma.\n";
  t += "#include \"ordo_rt.cuh\"\n\n";
  // Constant memory serves a warp one address at a time, so tables read at a thread-varying index
  // go to global memory (in constant memory ptxas also spilled around such reads, in
  // torch1.13-cpu-default's f32 softmax at N = 17). It holds 64 KiB; past 48 KiB of uniformly read
  // tables, those go to global memory too.
  const std::vector<char> varying = tables_read_at_varying_index(k);
  size_t constant_bytes = 0;
  for (size_t i = 0; i < k.tables.size(); ++i)
    if (!varying[i]) constant_bytes += k.tables[i].size() * 8;
  const bool constant_fits = constant_bytes <= 48 * 1024;
  for (size_t i = 0; i < k.tables.size(); ++i) {
    const char* space = constant_fits && !varying[i] ? "__constant__" : "__device__";
    t += fmt::format("{} const long long ordo_table{}[{}] = {{", space, i, std::max<size_t>(1, k.tables[i].size()));
    for (size_t j = 0; j < k.tables[i].size(); ++j) t += fmt::format("{}{}LL", j ? ", " : "", k.tables[i][j]);
    t += "};\n";
  }
  if (!k.tables.empty()) t += "\n";
  // One thread per instance holds the order's whole per-row state. With only a block size given,
  // ptxas aims at full occupancy and spilled a few bytes in kernels of 40 to 48 registers
  // (torch1.13-cpu-default's softmax and log_softmax); "one block per multiprocessor suffices"
  // lets it keep the state in registers. Team kernels keep the plain bound.
  const std::string bounds = team ? fmt::format("{}", s.block_threads) : fmt::format("{}, 1", s.block_threads);
  t += fmt::format("extern \"C\" __global__ void __launch_bounds__({}) {}(\n", bounds, s.entry);
  size_t arguments = 0;
  for (size_t i = 0; i < k.buffers.size(); ++i) {
    const Buffer& b = k.buffers[i];
    if (!is_argument(b)) continue;  // scratch: declared in the body
    ++arguments;
    s.param_types.push_back(fmt::format("{}{}*", b.output ? "" : "const ", scalar_type(b.elem)));
    s.params.push_back(s.param_types.back() + " " + R.buffers[i]);
    s.buffer_align.push_back(R.buffer_align[i]);
  }
  for (int d = 0; d < k.grid_rank; ++d) {
    s.params.push_back(fmt::format("long long ext{}", d));
    s.param_types.push_back("long long");
  }
  s.params.push_back("long long launch_rows");
  s.param_types.push_back("long long");
  for (size_t i = 0; i < k.sizes.size(); ++i) {  // Kernel::sizes: size{i} is launch_size(i)
    s.params.push_back(fmt::format("long long size{}", i));
    s.param_types.push_back("long long");
  }
  s.params.push_back("long long instances");
  s.param_types.push_back("long long");
  for (size_t i = 0; i < s.params.size(); ++i) {
    std::string note;
    if (i < arguments)
      note = fmt::format("  // {} {}, {}-byte aligned", k.buffers[i].output ? "out" : "in", name(k.buffers[i].extent),
                         s.buffer_align[i]);
    t += fmt::format("    {}{}{}\n", s.params[i], i + 1 < s.params.size() ? "," : ") {", note);
  }
  t += body;
  t += "}\n";
  return s;
}

}  // namespace ordo::cuda_backend
