// Node constructors, the Builder, and the printer.
#include "ir/ir.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "ir/error.hpp"

namespace ordo::ir {

std::string to_string(Type t) {
  if (t.lanes == 1) return std::string(name(t.scalar));
  return fmt::format("{}x{}", name(t.scalar), t.lanes);
}

int arity(Op op) {
  switch (op) {
#define ORDO_X(n, a, s) case Op::n: return a;
    ORDO_EXPR_OPS(ORDO_X)
#undef ORDO_X
  }
  return 0;
}

std::string_view spelling(Op op) {
  switch (op) {
#define ORDO_X(n, a, s) case Op::n: return s;
    ORDO_EXPR_OPS(ORDO_X)
#undef ORDO_X
  }
  return "?";
}

namespace {
ExprRef make(Op op, Type t, std::vector<ExprRef> args, int64_t index = 0) {
  auto e = std::make_shared<Expr>();
  e->op = op;
  e->type = t;
  e->args = std::move(args);
  e->index = index;
  return e;
}
bool is_comparison(Op op) { return op == Op::Lt || op == Op::Le || op == Op::Eq || op == Op::Ne; }
}  // namespace

ExprRef constant(Type t, double value) {
  auto e = std::make_shared<Expr>();
  e->op = Op::Const;
  e->type = t;
  if (is_float(t.scalar)) e->imm_f = value;
  else e->imm_i = static_cast<int64_t>(value);
  return e;
}

ExprRef index_const(int64_t value) {
  auto e = std::make_shared<Expr>();
  e->op = Op::Const;
  e->type = Type{ScalarType::i64, 1};
  e->imm_i = value;
  return e;
}

ExprRef var(const Kernel& k, int local) {
  return make(Op::Var, k.locals.at(static_cast<size_t>(local)).type, {}, local);
}
ExprRef program_id(int dim) { return make(Op::ProgramId, Type{ScalarType::i64, 1}, {}, dim); }
ExprRef grid_extent(int dim) { return make(Op::GridExtent, Type{ScalarType::i64, 1}, {}, dim); }
ExprRef launch_rows() { return make(Op::LaunchRows, Type{ScalarType::i64, 1}, {}, 0); }
ExprRef launch_size(int index) { return make(Op::LaunchSize, Type{ScalarType::i64, 1}, {}, index); }
ExprRef load(const Kernel& k, int buffer, ExprRef index, int lanes) {
  return make(Op::Load, Type{k.buffers.at(static_cast<size_t>(buffer)).elem, lanes}, {std::move(index)}, buffer);
}
ExprRef gather(const Kernel& k, int buffer, ExprRef indices) {
  const int lanes = indices->type.lanes;
  return make(Op::Gather, Type{k.buffers.at(static_cast<size_t>(buffer)).elem, lanes}, {std::move(indices)}, buffer);
}
ExprRef iota(int lanes) { return make(Op::Iota, Type{ScalarType::i64, lanes}, {}); }
ExprRef binary(Op op, ExprRef a, ExprRef b) {
  Type t = a->type;
  if (is_comparison(op)) t.scalar = ScalarType::boolean;
  return make(op, t, {std::move(a), std::move(b)});
}
ExprRef fma(ExprRef a, ExprRef b, ExprRef c) {
  Type t = a->type;
  return make(Op::Fma, t, {std::move(a), std::move(b), std::move(c)});
}
ExprRef bf16_pair_dot(ExprRef acc, ExprRef x_odd, ExprRef y_odd, ExprRef x_even, ExprRef y_even) {
  Type t = acc->type;
  return make(Op::Bf16PairDot, t, {std::move(acc), std::move(x_odd), std::move(y_odd), std::move(x_even), std::move(y_even)});
}
ExprRef unary(Op op, ExprRef a) {
  Type t = a->type;
  return make(op, t, {std::move(a)});
}
ExprRef select(ExprRef cond, ExprRef a, ExprRef b) {
  Type t = a->type;
  return make(Op::Select, t, {std::move(cond), std::move(a), std::move(b)});
}
ExprRef cast(ExprRef a, ScalarType to) {
  Type t{to, a->type.lanes};
  return make(Op::Cast, t, {std::move(a)});
}
ExprRef broadcast(ExprRef a, int lanes) {
  Type t{a->type.scalar, lanes};
  return make(Op::Broadcast, t, {std::move(a)});
}
ExprRef extract(ExprRef a, int lane) {
  Type t{a->type.scalar, 1};
  return make(Op::Extract, t, {std::move(a)}, lane);
}

ExprRef bitcast(ExprRef a, ScalarType to) {
  Type t{to, a->type.lanes};
  return make(Op::Bitcast, t, {std::move(a)});
}
ExprRef call(MathFn f, ExprRef a) {
  Type t = a->type;
  return make(Op::Call, t, {std::move(a)}, static_cast<int64_t>(f));
}

ExprRef thread_id() { return make(Op::ThreadId, Type{ScalarType::i64, 1}, {}); }
namespace {
ExprRef shuffle(Op op, const Kernel& k, int local, int offset) {
  ExprRef e = make(op, k.locals.at(static_cast<size_t>(local)).type, {}, local);
  const_cast<Expr&>(*e).imm_i = offset;
  return e;
}
}  // namespace
ExprRef shuffle_down(const Kernel& k, int local, int delta) { return shuffle(Op::ShuffleDown, k, local, delta); }
ExprRef shuffle_xor(const Kernel& k, int local, int mask) { return shuffle(Op::ShuffleXor, k, local, mask); }

std::string_view name(MathFn f) {
  switch (f) {
    case MathFn::device_rsqrtf: return "cuda.rsqrtf";
    case MathFn::device_expf: return "cuda.expf";
    case MathFn::device_logf: return "cuda.logf";
  }
  return "?";
}

std::string_view name(Extent e) {
  switch (e) {
    case Extent::rows_by_cols: return "rows*N";
    case Extent::cols: return "N";
    case Extent::rows: return "rows";
    case Extent::rows_by_fixed: return "rows*K";
    case Extent::fixed: return "K";
    case Extent::row_groups: return "ceil(rows/G)*K";
    case Extent::scratch: return "scratch";
    case Extent::row_blocks: return "ceil(rows/B)*K";
  }
  return "?";
}

std::optional<int64_t> launch_elements(Extent e, int64_t per_row, int64_t block_rows, int64_t rows, int64_t cols) {
  int64_t per = 1, count = rows;
  switch (e) {
    case Extent::cols: return cols;
    case Extent::scratch:
    case Extent::fixed: return per_row;
    case Extent::rows: break;
    case Extent::rows_by_cols: per = cols; break;
    case Extent::rows_by_fixed: per = per_row; break;
    case Extent::row_blocks:
    case Extent::row_groups:
      if (block_rows < 1) return std::nullopt;
      count = rows / block_rows + (rows % block_rows != 0);
      per = per_row;
      break;
  }
  int64_t n = 0;
  if (__builtin_mul_overflow(count, per, &n)) return std::nullopt;
  return n;
}

std::optional<int64_t> launch_elements(Extent e, int64_t per_row, int per_row_size, int64_t block_rows, int64_t rows, int64_t cols,
                                       const std::vector<int64_t>& sizes) {
  if (per_row_size < 0) return launch_elements(e, per_row, block_rows, rows, cols);
  if (static_cast<size_t>(per_row_size) >= sizes.size() || sizes[static_cast<size_t>(per_row_size)] < 0) return std::nullopt;
  int64_t scaled = 0;
  if (__builtin_mul_overflow(per_row, sizes[static_cast<size_t>(per_row_size)], &scaled)) return std::nullopt;
  return launch_elements(e, scaled, block_rows, rows, cols);
}

int Builder::buffer(std::string name, ScalarType elem, bool output, Extent extent, int64_t per_row) {
  k_.buffers.push_back(Buffer{std::move(name), elem, output, extent, per_row});
  return static_cast<int>(k_.buffers.size()) - 1;
}
int Builder::workspace(std::string name, ScalarType elem, int64_t block_rows, int64_t per_block) {
  k_.buffers.push_back(Buffer{std::move(name), elem, true, Extent::row_blocks, per_block, block_rows});
  return static_cast<int>(k_.buffers.size()) - 1;
}
ExprRef table(int id, ExprRef index) {
  Type t{ScalarType::i64, index->type.lanes};
  return make(Op::Table, t, {std::move(index)}, id);
}

// An identical table is shared: a kernel that computes exp in several places holds its table once.
int Builder::table(std::vector<int64_t> values) {
  for (size_t i = 0; i < k_.tables.size(); ++i)
    if (k_.tables[i] == values) return static_cast<int>(i);
  k_.tables.push_back(std::move(values));
  return static_cast<int>(k_.tables.size()) - 1;
}

void Builder::refuse_launch(int64_t rows, std::string why) { refuse_launches(Kernel::RefusedLaunch::When::rows_equal, rows, std::move(why)); }

void Builder::refuse_launches(Kernel::RefusedLaunch::When when, int64_t rows, std::string why) {
  if (rows < 1) throw Error(fmt::format("internal: a launch refusal names rows {}", rows));
  for (const Kernel::RefusedLaunch& r : k_.refused_launches)
    if (r.when == when && r.rows == rows) return;
  k_.refused_launches.push_back({when, rows, std::move(why)});
}

bool Kernel::RefusedLaunch::refuses(int64_t launch_rows) const {
  switch (when) {
    case When::rows_equal: return launch_rows == rows;
    case When::rows_at_least: return launch_rows >= rows;
    case When::rows_not_multiple: return launch_rows % rows != 0;
  }
  return false;
}

std::string Kernel::RefusedLaunch::condition() const {
  switch (when) {
    case When::rows_equal: return fmt::format("rows == {}", rows);
    case When::rows_at_least: return fmt::format("rows >= {}", rows);
    case When::rows_not_multiple: return fmt::format("rows % {} != 0", rows);
  }
  return "?";
}

const Kernel::RefusedLaunch* refusal(const Kernel& k, int64_t rows) {
  for (const Kernel::RefusedLaunch& r : k.refused_launches)
    if (r.refuses(rows)) return &r;
  return nullptr;
}

std::vector<int64_t> launch_extents(const Kernel& k, int64_t rows, const std::vector<int64_t>& sizes) {
  std::vector<int64_t> extents;
  if (k.grid_over_rows) {
    const int64_t per = std::max<int64_t>(1, k.rows_per_instance);
    extents.push_back(rows / per + (rows % per != 0));
  }
  extents.insert(extents.end(), k.grid_fixed.begin(), k.grid_fixed.end());
  extents.push_back(rows);
  extents.insert(extents.end(), sizes.begin(), sizes.end());
  return extents;
}

int Builder::local(std::string name, Type t) {
  // Names are for reading the IR; the id is the identity. Suffix repeats so the text is unambiguous.
  int uses = 0;
  for (const Local& l : k_.locals)
    if (l.name == name || l.name.rfind(name + ".", 0) == 0) ++uses;
  if (uses) name += fmt::format(".{}", uses);
  k_.locals.push_back(Local{std::move(name), t});
  return static_cast<int>(k_.locals.size()) - 1;
}
ExprRef Builder::let(std::string name, ExprRef value) {
  int l = local(std::move(name), value->type);
  assign(l, std::move(value));
  return get(l);
}
void Builder::assign(int local, ExprRef value) {
  Stmt s{StmtKind::Assign};
  s.target = local;
  s.value = std::move(value);
  stack_.back()->push_back(std::move(s));
}
void Builder::store(int buffer, ExprRef index, ExprRef value) {
  Stmt s{StmtKind::Store};
  s.target = buffer;
  s.index = std::move(index);
  s.value = std::move(value);
  stack_.back()->push_back(std::move(s));
}

// ---------------------------------------------------------------------------------------------
// Printer

// The printer is total: the verifier prints the nodes it rejects, so a malformed kernel (null
// operands, unknown locals, buffers or tables, operand counts that differ from the op's arity)
// must print too, with "?" in the place of what is missing, and never throw.
namespace {
void mark_per_thread(const std::vector<Stmt>& body, bool in_team, std::vector<char>& out) {
  for (const Stmt& s : body) {
    if (in_team && (s.kind == StmtKind::Assign || s.kind == StmtKind::For) && s.target >= 0 &&
        s.target < static_cast<int>(out.size()))
      out[static_cast<size_t>(s.target)] = 1;
    if (!has_bodies(s)) continue;
    const bool inner = in_team || s.kind == StmtKind::Team;
    mark_per_thread(s.body, inner, out);
    mark_per_thread(s.else_body, inner, out);
  }
}
}  // namespace

std::vector<const Expr*> operands(const Stmt& s) {
  std::vector<const Expr*> out;
  auto add_if = [&](const ExprRef& e) {
    if (e) out.push_back(e.get());
  };
  switch (s.kind) {
    case StmtKind::Assign: case StmtKind::If: add_if(s.value); break;
    case StmtKind::Store: add_if(s.index); add_if(s.value); break;
    case StmtKind::For: add_if(s.begin); add_if(s.end); break;
    case StmtKind::Region: case StmtKind::Team: break;
  }
  return out;
}

namespace {
void add_shuffled(const Expr& e, std::vector<int64_t>& out) {
  if ((e.op == Op::ShuffleDown || e.op == Op::ShuffleXor) && std::find(out.begin(), out.end(), e.index) == out.end())
    out.push_back(e.index);
  for (const ExprRef& a : e.args) add_shuffled(*a, out);
}
}  // namespace

std::vector<int64_t> shuffled_locals(const Stmt& team) {
  std::vector<int64_t> out;
  for (const Stmt& s : team.body)  // the verifier allows shuffles in top-level assignments only
    if (s.kind == StmtKind::Assign && s.value) add_shuffled(*s.value, out);
  return out;
}

std::vector<char> per_thread_locals(const Kernel& k) {
  std::vector<char> out(k.locals.size(), 0);
  mark_per_thread(k.body, false, out);
  return out;
}

namespace {
bool any_per_instance_control(const std::vector<Stmt>& body) {
  for (const Stmt& s : body)
    if (((s.kind == StmtKind::For || s.kind == StmtKind::If) && s.per_instance) ||
        (has_bodies(s) && (any_per_instance_control(s.body) || any_per_instance_control(s.else_body))))
      return true;
  return false;
}
}  // namespace

bool has_per_instance_control(const Kernel& k) { return any_per_instance_control(k.body); }

namespace {
std::string local_name(const Kernel& k, int64_t id) {
  if (id < 0 || id >= static_cast<int64_t>(k.locals.size())) return fmt::format("?local{}", id);
  return k.locals[static_cast<size_t>(id)].name;
}
std::string buffer_name(const Kernel& k, int64_t id) {
  if (id < 0 || id >= static_cast<int64_t>(k.buffers.size())) return fmt::format("?buffer{}", id);
  return k.buffers[static_cast<size_t>(id)].name;
}
std::string print_ref(const ExprRef& e, const Kernel& k) { return e ? print(*e, k) : std::string("?null"); }
}  // namespace

std::string print(const Expr& e, const Kernel& k) {
  auto arg = [&](size_t i) { return i < e.args.size() ? print_ref(e.args[i], k) : std::string("?missing"); };
  switch (e.op) {
    case Op::Const:
      if (is_float(e.type.scalar)) {
        // Shortest text that reads back to the same value of the constant's type.
        std::string v = e.type.scalar == ScalarType::f32 ? fmt::format("{}", static_cast<float>(e.imm_f))
                                                          : fmt::format("{}", e.imm_f);
        return fmt::format("{}:{}", v, to_string(e.type));
      }
      if (e.type.scalar == ScalarType::boolean) return e.imm_i ? "true" : "false";
      return fmt::format("{}", e.imm_i);
    case Op::Var:
      return fmt::format("%{}", local_name(k, e.index));
    case Op::ProgramId:
      return fmt::format("program_id({})", e.index);
    case Op::GridExtent:
      return fmt::format("grid_extent({})", e.index);
    case Op::LaunchRows:
      return "launch_rows";
    case Op::LaunchSize:
      return e.index >= 0 && static_cast<size_t>(e.index) < k.sizes.size() ? fmt::format("launch_size({})", k.sizes[static_cast<size_t>(e.index)])
                                                                            : fmt::format("launch_size(#{})", e.index);
    case Op::ThreadId:
      return "thread_id";
    case Op::ShuffleDown:
    case Op::ShuffleXor:
      return fmt::format("{}(%{}, {})", spelling(e.op), local_name(k, e.index), e.imm_i);
    case Op::Load:
      return fmt::format("load.{}({}[{}])", to_string(e.type), buffer_name(k, e.index), arg(0));
    case Op::Gather:
      return fmt::format("gather.{}({}[{}])", to_string(e.type), buffer_name(k, e.index), arg(0));
    case Op::Iota:
      return fmt::format("iota.{}", to_string(e.type));
    case Op::Extract:
      return fmt::format("extract({}, {})", arg(0), e.index);
    case Op::Table:
      return fmt::format("table{}[{}]", e.index, arg(0));
    case Op::Call:
      return fmt::format("call {}({})", name(static_cast<MathFn>(e.index)), arg(0));
    case Op::Cast:
    case Op::Bitcast:
    case Op::Broadcast:
      return fmt::format("{}.{}({})", spelling(e.op), to_string(e.type), arg(0));
    default: {
      std::string s = std::string(spelling(e.op)) + "(";
      for (size_t i = 0; i < e.args.size(); ++i) s += (i ? ", " : "") + arg(i);
      return s + ")";
    }
  }
}

namespace {
void print_stmts(const std::vector<Stmt>& body, const Kernel& k, int depth, std::string& out) {
  std::string pad(static_cast<size_t>(2 * depth), ' ');
  for (const Stmt& s : body) {
    switch (s.kind) {
      case StmtKind::Assign: {
        const bool known = s.target >= 0 && s.target < static_cast<int>(k.locals.size());
        out += fmt::format("{}%{}: {} = {}\n", pad, local_name(k, s.target),
                           known ? to_string(k.locals[static_cast<size_t>(s.target)].type) : "?", print_ref(s.value, k));
        break;
      }
      case StmtKind::Store:
        out += fmt::format("{}store {}[{}] = {}\n", pad, buffer_name(k, s.target), print_ref(s.index, k), print_ref(s.value, k));
        break;
      case StmtKind::For:
        out += fmt::format("{}{} %{} in [{}, {}) step {} {{\n", pad, s.per_instance ? "for.instance" : "for", local_name(k, s.target),
                           print_ref(s.begin, k), print_ref(s.end, k), s.step);
        print_stmts(s.body, k, depth + 1, out);
        out += pad + "}\n";
        break;
      case StmtKind::If:
        out += fmt::format("{}{} {} {{\n", pad, s.per_instance ? "if.instance" : "if", print_ref(s.value, k));
        print_stmts(s.body, k, depth + 1, out);
        if (!s.else_body.empty()) {
          out += pad + "} else {\n";
          print_stmts(s.else_body, k, depth + 1, out);
        }
        out += pad + "}\n";
        break;
      case StmtKind::Region:
        out += fmt::format("{}region {} [{}] {{\n", pad, s.label, s.note);
        print_stmts(s.body, k, depth + 1, out);
        out += pad + "}\n";
        break;
      case StmtKind::Team:
        out += fmt::format("{}team x{} {{\n", pad, k.team);
        print_stmts(s.body, k, depth + 1, out);
        out += pad + "}\n";
        break;
    }
  }
}
}  // namespace

std::string print(const Kernel& k) {
  std::string out = fmt::format("kernel {}  // {}\n", k.name, k.description);
  for (size_t i = 0; i < k.sizes.size(); ++i) out += fmt::format("  size {}: i64, given at launch\n", k.sizes[i]);
  for (const Buffer& b : k.buffers) {
    std::string extent(name(b.extent));
    if (b.extent == Extent::rows_by_fixed) extent = fmt::format("rows*{}", b.per_row);
    if (b.extent == Extent::rows_by_fixed && b.per_row_size >= 0 && static_cast<size_t>(b.per_row_size) < k.sizes.size())
      extent = fmt::format("rows*{}*{}", b.per_row, k.sizes[static_cast<size_t>(b.per_row_size)]);
    if (b.extent == Extent::scratch) extent = fmt::format("scratch {}", b.per_row);
    if (b.extent == Extent::row_blocks || b.extent == Extent::row_groups) extent = fmt::format("ceil(rows/{})*{}", b.block_rows, b.per_row);
    if (b.extent == Extent::fixed) extent = fmt::format("{}", b.per_row);
    out += fmt::format("  {} {}: {}[{}]\n", b.output ? "out" : "in ", b.name, name(b.elem), extent);
  }
  for (size_t t = 0; t < k.tables.size(); ++t) {
    const std::vector<int64_t>& v = k.tables[t];
    std::string items;
    for (size_t i = 0; i < v.size() && i < 24; ++i) items += fmt::format("{}{}", i ? ", " : "", v[i]);
    out += fmt::format("  table{}: i64[{}] = [{}{}]\n", t, v.size(), items, v.size() > 24 ? ", ..." : "");
  }
  std::string fixed;
  for (int64_t e : k.grid_fixed) fixed += fmt::format(" x {}", e);
  // The grid's dims: the rows (or blocks of them) for a kernel over rows, then the fixed ones.
  std::string dims;
  if (!k.grid_over_rows) dims = " (column stage:" + fixed.substr(2) + (k.runs_without_rows ? "; runs on a launch of no rows" : "") + ")";
  else if (k.rows_per_instance > 1) dims = fmt::format(" (blocks of {} rows{})", k.rows_per_instance, fixed);
  else if (!fixed.empty()) dims = " (rows" + fixed + ")";
  out += fmt::format("  grid rank {}{}{}\n", k.grid_rank, dims,
                     k.team > 1 ? fmt::format(", team of {} threads", k.team) : "");
  for (const Kernel::RefusedLaunch& r : k.refused_launches) out += fmt::format("  refuses {}: {}\n", r.condition(), r.why);
  out += "{\n";
  print_stmts(k.body, k, 1, out);
  out += "}\n";
  return out;
}

}  // namespace ordo::ir
