// The verifier: every rule a backend relies on, checked once, with a message naming the node.
#include <fmt/format.h>

#include <climits>
#include <cmath>
#include <functional>

#include "ir/ir.hpp"

namespace ordo::ir {
namespace {

constexpr int kMaxLanes = 32;  // also the interpreter's fixed value width

struct Verifier {
  explicit Verifier(const Kernel& kernel) : k(kernel) {}
  const Kernel& k;
  std::vector<char> assigned;      // local has been assigned somewhere before this point
  std::vector<char> nonuniform;    // local may differ between program instances
  std::vector<char> loop_var;
  std::vector<char> per_thread;      // assigned inside Team statements (ir::per_thread_locals)
  std::vector<char> thread_varying;  // may differ between the threads of a team (not by data)
  bool in_team = false;              // checking a Team statement's body
  bool shuffle_allowed = false;      // checking an Assign at the top level of a Team body
  std::vector<char> assigned_in_team;  // assigned by earlier statements of the current Team body
  std::string error;

  std::string where(const Expr& e) {
    std::string text = print(e, k);
    if (text.size() > 160) text = text.substr(0, 157) + "...";
    return text;
  }
  bool fail(const Expr& e, std::string msg) {
    if (error.empty()) error = fmt::format("node `{}`: {}", where(e), msg);
    return false;
  }

  // Whether e is the same in every program instance. Also called (by mark_nonuniform) on
  // expressions not yet checked, so it must not trust them: a null operand or an unknown local
  // counts as non-uniform here, and expr() reports it when it reaches it.
  // With `allow_thread`, the same in every program instance but possibly different per thread of
  // a team (thread_id and locals computed from it): the rule inside Team bodies.
  bool uniform(const Expr& e, bool allow_thread = false) const {
    if (e.op == Op::ProgramId || e.op == Op::Load || e.op == Op::Gather || e.op == Op::ShuffleDown ||
        e.op == Op::ShuffleXor)
      return false;
    if (e.op == Op::ThreadId) return allow_thread;
    if (e.op == Op::Var && (e.index < 0 || e.index >= static_cast<int64_t>(nonuniform.size()) ||
                            nonuniform[static_cast<size_t>(e.index)] ||
                            (!allow_thread && thread_varying[static_cast<size_t>(e.index)])))
      return false;
    if (is_float(e.type.scalar)) return false;
    for (const ExprRef& a : e.args)
      if (!a || !uniform(*a, allow_thread)) return false;
    return true;
  }

  // A per-instance loop's bound (ir.hpp): uniform but for program_id read directly. A local
  // computed from program_id counts as varying, as it may also hold data.
  bool instance_bound(const Expr& e) const {
    if (e.op == Op::ProgramId) return true;
    if (e.args.empty() || e.op == Op::Load || e.op == Op::Gather || is_float(e.type.scalar)) return uniform(e);
    for (const ExprRef& a : e.args)
      if (!a || !instance_bound(*a)) return false;
    return true;
  }

  bool team_memory_ok(const Expr& load) const {
    return k.team <= 1 || in_team || is_argument(k.buffers[static_cast<size_t>(load.index)]);
  }

  bool expr(const Expr& e) {
    if (static_cast<int>(e.args.size()) != arity(e.op)) return fail(e, "wrong number of operands");
    for (const ExprRef& a : e.args) {
      if (!a) return fail(e, "null operand");
      if (!expr(*a)) return false;
    }
    const Type t = e.type;
    if (t.lanes < 1 || t.lanes > kMaxLanes) return fail(e, fmt::format("lanes {} outside [1, {}]", t.lanes, kMaxLanes));
    auto same = [&](size_t i, size_t j) { return e.args[i]->type == e.args[j]->type; };
    auto arg_t = [&](size_t i) { return e.args[i]->type; };
    const bool arith = is_arith_float(t.scalar);
    switch (e.op) {
      case Op::Const:
        if (t.scalar == ScalarType::f32 && static_cast<double>(static_cast<float>(e.imm_f)) != e.imm_f &&
            !std::isnan(e.imm_f))
          return fail(e, "f32 constant is not exactly representable");
        if (t.scalar == ScalarType::f16 || t.scalar == ScalarType::bf16)
          return fail(e, "constants of storage types are not allowed; cast an f32 constant");
        if (t.scalar == ScalarType::i32 && (e.imm_i < INT32_MIN || e.imm_i > INT32_MAX))
          return fail(e, fmt::format("i32 constant {} is out of range", e.imm_i));
        return true;
      case Op::Var:
        if (e.index < 0 || e.index >= static_cast<int64_t>(k.locals.size())) return fail(e, "unknown local");
        if (!assigned[static_cast<size_t>(e.index)]) return fail(e, "local read before it is assigned");
        if (k.locals[static_cast<size_t>(e.index)].type != t) return fail(e, "type differs from the local's");
        if (per_thread[static_cast<size_t>(e.index)] && !in_team) return fail(e, "per-thread local read outside a team statement");
        return true;
      case Op::ThreadId:
        if (!in_team) return fail(e, "thread_id outside a team statement");
        if (t != Type{ScalarType::i64, 1}) return fail(e, "thread_id is a scalar i64");
        return true;
      case Op::ShuffleDown:
      case Op::ShuffleXor: {
        if (e.index < 0 || e.index >= static_cast<int64_t>(k.locals.size())) return fail(e, "unknown local");
        const size_t l = static_cast<size_t>(e.index);
        if (!in_team || !shuffle_allowed)
          return fail(e, "a shuffle must be in an assignment at the top level of a team statement (every thread of the warp runs it)");
        if (k.team % 32 != 0) return fail(e, fmt::format("shuffles need a team of whole warps (a multiple of 32), not {}", k.team));
        if (e.imm_i < 1 || e.imm_i > 31) return fail(e, fmt::format("shuffle offset {} outside [1, 31]", e.imm_i));
        if (!per_thread[l]) return fail(e, "shuffles read per-thread locals");
        if (!assigned[l]) return fail(e, "local read before it is assigned");
        if (k.locals[l].type != t || t.lanes != 1 || t.scalar == ScalarType::boolean) return fail(e, "shuffles move a scalar number of the local's type");
        if (assigned_in_team[l]) return fail(e, "the local is assigned earlier in this team statement; a shuffle reads its value from the statement's start");
        return true;
      }
      case Op::ProgramId:
      case Op::GridExtent:
        if (e.index < 0 || e.index >= k.grid_rank) return fail(e, fmt::format("grid has rank {}", k.grid_rank));
        if (t != Type{ScalarType::i64, 1}) return fail(e, fmt::format("{} is a scalar i64", spelling(e.op)));
        return true;
      case Op::LaunchRows:
        if (t != Type{ScalarType::i64, 1}) return fail(e, "launch_rows is a scalar i64");
        return true;
      case Op::LaunchSize:
        if (e.index < 0 || e.index >= static_cast<int64_t>(k.sizes.size()))
          return fail(e, fmt::format("the kernel has {} size arguments", k.sizes.size()));
        if (t != Type{ScalarType::i64, 1}) return fail(e, "launch_size is a scalar i64");
        return true;
      case Op::Load:
        if (e.index < 0 || e.index >= static_cast<int64_t>(k.buffers.size())) return fail(e, "unknown buffer");
        if (k.buffers[static_cast<size_t>(e.index)].elem != t.scalar) return fail(e, "type differs from the buffer's");
        if (arg_t(0) != Type{ScalarType::i64, 1}) return fail(e, "index must be a scalar i64");
        if (!team_memory_ok(e)) return fail(e, "a team kernel reads its scratch (team memory) only inside team statements");
        return true;
      case Op::Gather: {
        if (e.index < 0 || e.index >= static_cast<int64_t>(k.buffers.size())) return fail(e, "unknown buffer");
        if (k.buffers[static_cast<size_t>(e.index)].elem != t.scalar) return fail(e, "type differs from the buffer's");
        if (arg_t(0) != Type{ScalarType::i64, t.lanes}) return fail(e, "gather indices must be i64 with the result's lanes");
        if (!team_memory_ok(e)) return fail(e, "a team kernel reads its scratch (team memory) only inside team statements");
        return true;
      }
      case Op::Iota:
        if (t.scalar != ScalarType::i64) return fail(e, "iota is i64");
        return true;
      case Op::Add: case Op::Sub: case Op::Mul: case Op::Div:
        if (!same(0, 1) || arg_t(0) != t) return fail(e, fmt::format("operand types {} and {} differ", to_string(arg_t(0)), to_string(arg_t(1))));
        if (t.scalar == ScalarType::i32 && e.op != Op::Div) return true;
        if (t.scalar == ScalarType::i64 && e.op != Op::Div) return true;  // lane-wise two's complement
        if (!arith && !(t == Type{ScalarType::i64, 1})) return fail(e, fmt::format("arithmetic in {} (compute in f32 or f64; cast storage types)", to_string(t)));
        return true;
      case Op::Shl: case Op::Shr: case Op::BitAnd: {
        if (!same(0, 1) || arg_t(0) != t || (t.scalar != ScalarType::i32 && t.scalar != ScalarType::i64))
          return fail(e, fmt::format("{} takes i32 or i64 operands of one type", spelling(e.op)));
        if (e.op != Op::BitAnd) {
          const Expr* c = e.args[1].get();
          if (c->op == Op::Broadcast) c = c->args[0].get();  // a vector shift takes a splatted count
          const Expr& count = *c;
          const int64_t bits = t.scalar == ScalarType::i32 ? 32 : 64;
          if (count.op != Op::Const || count.imm_i < 0 || count.imm_i >= bits)
            return fail(e, fmt::format("shift count must be a constant in [0, {}]", bits - 1));
        }
        return true;
      }
      case Op::Bitcast: {
        const ScalarType from = arg_t(0).scalar, to = t.scalar;
        const bool ok = (from == ScalarType::f32 && to == ScalarType::i32) || (from == ScalarType::i32 && to == ScalarType::f32) ||
                        (from == ScalarType::f64 && to == ScalarType::i64) || (from == ScalarType::i64 && to == ScalarType::f64);
        if (!ok || arg_t(0).lanes != t.lanes)
          return fail(e, fmt::format("bitcast {} -> {} is not allowed (f32 <-> i32 and f64 <-> i64 only)", name(from), name(to)));
        return true;
      }
      case Op::Call:
        if (e.index < 0 || e.index > static_cast<int64_t>(kLastMathFn)) return fail(e, "unknown library function");
        if (arg_t(0) != t || t.scalar != ScalarType::f32) return fail(e, "library functions take and return f32");
        return true;
      case Op::Rem:
        if (!same(0, 1) || t != Type{ScalarType::i64, 1}) return fail(e, "rem takes scalar i64 operands");
        return true;
      case Op::Fma:
        if (!same(0, 1) || !same(0, 2) || arg_t(0) != t) return fail(e, "fma operand types differ");
        if (!arith) return fail(e, fmt::format("fma in {}", to_string(t)));
        return true;
      case Op::Bf16PairDot:
        if (t.scalar != ScalarType::f32) return fail(e, fmt::format("bf16_pair_dot in {}", to_string(t)));
        for (size_t i = 0; i < 5; ++i)
          if (arg_t(i) != t) return fail(e, "bf16_pair_dot takes five f32 operands of one lane count");
        return true;
      case Op::Ldexp:
        if (arg_t(0) != t || t.scalar != ScalarType::f32 || arg_t(1) != Type{ScalarType::i32, t.lanes})
          return fail(e, "ldexp takes f32 and i32 operands of one lane count");
        return true;
      case Op::Sqrt: case Op::Neg: case Op::Floor:
        if (arg_t(0) != t || !arith) return fail(e, fmt::format("{} needs f32 or f64", spelling(e.op)));
        return true;
      case Op::Min: case Op::Max:
        if (!same(0, 1) || arg_t(0) != t) return fail(e, "operand types differ");
        if (!arith && t.scalar != ScalarType::i64) return fail(e, "min/max need f32, f64 or i64");
        return true;
      case Op::Lt: case Op::Le: case Op::Eq: case Op::Ne:
        if (!same(0, 1)) return fail(e, "compared types differ");
        if (!is_arith_float(arg_t(0).scalar) && arg_t(0).scalar != ScalarType::i64) return fail(e, "compare needs f32, f64 or i64");
        if (t != Type{ScalarType::boolean, arg_t(0).lanes}) return fail(e, "compare result must be bool lanes");
        return true;
      case Op::And: case Op::Or:
        if (!same(0, 1) || arg_t(0) != t || t.scalar != ScalarType::boolean) return fail(e, fmt::format("{} takes bool operands", spelling(e.op)));
        return true;
      case Op::Select:
        if (arg_t(0) != Type{ScalarType::boolean, t.lanes}) return fail(e, "select condition must be bool with the value's lanes");
        if (!same(1, 2) || arg_t(1) != t) return fail(e, "select arms differ in type");
        return true;
      case Op::Cast: {
        ScalarType from = arg_t(0).scalar, to = t.scalar;
        bool ok = (from == ScalarType::f32 && (to == ScalarType::f64 || to == ScalarType::f16 || to == ScalarType::bf16)) ||
                  (from == ScalarType::f64 && to == ScalarType::f32) ||
                  ((from == ScalarType::f16 || from == ScalarType::bf16) && is_arith_float(to)) ||
                  (from == ScalarType::i64 && is_arith_float(to)) ||
                  (from == ScalarType::i32 && (to == ScalarType::f32 || to == ScalarType::i64)) ||
                  (from == ScalarType::f32 && to == ScalarType::i32);
        if (!ok) return fail(e, fmt::format("cast {} -> {} is not allowed", name(from), name(to)));
        if (arg_t(0).lanes != t.lanes) return fail(e, "cast changes lanes");
        return true;
      }
      case Op::Broadcast:
        if (arg_t(0).lanes != 1 || arg_t(0).scalar != t.scalar) return fail(e, "broadcast takes a scalar of the same type");
        return true;
      case Op::Extract:
        if (e.index < 0 || e.index >= arg_t(0).lanes || t != Type{arg_t(0).scalar, 1}) return fail(e, "lane out of range");
        return true;
      case Op::Table:
        if (e.index < 0 || e.index >= static_cast<int64_t>(k.tables.size())) return fail(e, "unknown table");
        if (arg_t(0).scalar != ScalarType::i64 || t != Type{ScalarType::i64, arg_t(0).lanes})
          return fail(e, "table indices and values are i64 of one lane count");
        return true;
    }
    return fail(e, "unknown op");
  }

  static void mark_assigned(const Stmt& s, std::vector<char>& out) {
    if ((s.kind == StmtKind::Assign || s.kind == StmtKind::For) && s.target >= 0 && s.target < static_cast<int>(out.size()))
      out[static_cast<size_t>(s.target)] = 1;
    if (!has_bodies(s)) return;
    for (const Stmt& inner : s.body) mark_assigned(inner, out);
    for (const Stmt& inner : s.else_body) mark_assigned(inner, out);
  }

  bool stmts(const std::vector<Stmt>& body) {
    for (const Stmt& s : body)
      if (!stmt(s)) return false;
    return true;
  }

  bool stmt_fail(const Stmt& s, std::string msg) {
    if (error.empty()) {
      Kernel one = k;
      one.body.clear();
      one.body.push_back(s);
      std::string text = print(one);
      auto first = text.find("{\n");
      text = first == std::string::npos ? text : text.substr(first + 2);
      auto nl = text.find('\n');
      text = text.substr(0, nl);
      while (!text.empty() && text.front() == ' ') text.erase(text.begin());
      if (text.size() > 160) text = text.substr(0, 157) + "...";
      error = fmt::format("statement `{}`: {}", text, msg);
    }
    return false;
  }

  bool stmt(const Stmt& s) {
    switch (s.kind) {
      case StmtKind::Assign: {
        if (s.target < 0 || s.target >= static_cast<int>(k.locals.size())) return stmt_fail(s, "unknown local");
        if (!s.value) return stmt_fail(s, "assignment has no value");
        if (!expr(*s.value)) return false;
        if (loop_var[static_cast<size_t>(s.target)]) return stmt_fail(s, "assigns a loop variable");
        if (k.team > 1 && !in_team && per_thread[static_cast<size_t>(s.target)])
          return stmt_fail(s, "a per-thread local (assigned in a team statement) is assigned outside one");
        const Type lt = k.locals[static_cast<size_t>(s.target)].type;
        if (s.value->type != lt) return stmt_fail(s, fmt::format("value is {}, local is {}", to_string(s.value->type), to_string(lt)));
        assigned[static_cast<size_t>(s.target)] = 1;
        return true;
      }
      case StmtKind::Store: {
        if (s.target < 0 || s.target >= static_cast<int>(k.buffers.size())) return stmt_fail(s, "unknown buffer");
        if (!s.index || !s.value) return stmt_fail(s, "store needs an index and a value");
        if (!expr(*s.index) || !expr(*s.value)) return false;
        const Buffer& b = k.buffers[static_cast<size_t>(s.target)];
        if (!b.output) return stmt_fail(s, fmt::format("buffer {} is an input", b.name));
        if (k.team > 1 && !in_team) return stmt_fail(s, "a team kernel stores only inside team statements");
        if (s.value->type.scalar != b.elem) return stmt_fail(s, fmt::format("stores {} into {}[]", to_string(s.value->type), name(b.elem)));
        if (s.index->type != Type{ScalarType::i64, 1} && s.index->type != Type{ScalarType::i64, s.value->type.lanes})
          return stmt_fail(s, "index must be a scalar i64, or an i64 vector of the value's lanes (a scatter)");
        return true;
      }
      case StmtKind::For: {
        if (s.target < 0 || s.target >= static_cast<int>(k.locals.size())) return stmt_fail(s, "unknown loop variable");
        if (!s.begin || !s.end) return stmt_fail(s, "loop needs a begin and an end");
        if (!expr(*s.begin) || !expr(*s.end)) return false;
        if (k.locals[static_cast<size_t>(s.target)].type != Type{ScalarType::i64, 1}) return stmt_fail(s, "loop variable must be i64");
        if (s.begin->type != Type{ScalarType::i64, 1} || s.end->type != Type{ScalarType::i64, 1}) return stmt_fail(s, "loop bounds must be i64");
        if (s.per_instance) {
          // The threads of an instance must agree on it: a team kernel's barriers sit in such loops.
          if (in_team) return stmt_fail(s, "a per-instance loop inside a team statement");
          if (!instance_bound(*s.begin) || !instance_bound(*s.end))
            return stmt_fail(s, "per-instance loop bounds read data or a varying local (only program_id itself may vary)");
        } else if (!uniform(*s.begin, in_team) || !uniform(*s.end, in_team)) {
          return stmt_fail(s, "loop bounds depend on program_id or data");
        }
        if (k.team > 1 && !in_team && per_thread[static_cast<size_t>(s.target)])
          return stmt_fail(s, "a per-thread local (assigned in a team statement) is a loop variable outside one");
        if (s.step <= 0) return stmt_fail(s, fmt::format("step {} is not positive", s.step));
        if (assigned[static_cast<size_t>(s.target)]) return stmt_fail(s, "loop variable is reused");
        assigned[static_cast<size_t>(s.target)] = 1;
        loop_var[static_cast<size_t>(s.target)] = 1;
        return stmts(s.body);
      }
      case StmtKind::If:
        if (!s.value) return stmt_fail(s, "if has no condition");
        if (!expr(*s.value)) return false;
        if (s.value->type != Type{ScalarType::boolean, 1}) return stmt_fail(s, "condition must be a scalar bool");
        if (s.per_instance) {
          // The threads of an instance must agree on it, as on a per-instance loop.
          if (in_team) return stmt_fail(s, "a per-instance if inside a team statement");
        } else if (!uniform(*s.value, in_team)) {
          return stmt_fail(s, "condition depends on program_id or data");
        }
        return stmts(s.body) && stmts(s.else_body);
      case StmtKind::Region:
        return stmts(s.body);
      case StmtKind::Team: {
        if (k.team <= 1) return stmt_fail(s, "team statement in a kernel with a team of 1 thread");
        if (in_team) return stmt_fail(s, "team statements do not nest");
        in_team = true;
        assigned_in_team.assign(k.locals.size(), 0);
        for (const Stmt& inner : s.body) {
          shuffle_allowed = inner.kind == StmtKind::Assign;
          const bool ok = stmt(inner);
          shuffle_allowed = false;
          if (!ok) return false;
          mark_assigned(inner, assigned_in_team);
        }
        in_team = false;
        return true;
      }
    }
    return stmt_fail(s, "unknown statement");
  }
};

// Flags every local that statements inside s (at any depth) assign or loop over.
void mark_assigned_within(const Stmt& s, std::vector<char>& flag, bool& changed) {
  for (const std::vector<Stmt>* body : {&s.body, &s.else_body})
    for (const Stmt& inner : *body) {
      const bool assigns = inner.kind == StmtKind::Assign || inner.kind == StmtKind::For;
      if (assigns && inner.target >= 0 && inner.target < static_cast<int>(flag.size()) && !flag[static_cast<size_t>(inner.target)]) {
        flag[static_cast<size_t>(inner.target)] = 1;
        changed = true;
      }
      mark_assigned_within(inner, flag, changed);
    }
}

// A local is non-uniform when any assignment to it is. Iterate to a fixed point: first the
// locals that depend on data or program_id, then those that depend on thread_id only (loop
// variables of loops with thread-dependent bounds included).
void mark_nonuniform(Verifier& v, bool thread) {
  std::vector<char>& flag = thread ? v.thread_varying : v.nonuniform;
  bool changed = true;
  auto valid = [&](int target) { return target >= 0 && target < static_cast<int>(v.k.locals.size()); };
  std::function<void(const std::vector<Stmt>&)> walk = [&](const std::vector<Stmt>& body) {
    for (const Stmt& s : body) {
      bool varies = false;
      if (s.kind == StmtKind::Assign && s.value && valid(s.target)) varies = !v.uniform(*s.value, !thread);
      if (thread && s.kind == StmtKind::For && s.begin && s.end && valid(s.target))
        varies = !v.uniform(*s.begin) || !v.uniform(*s.end);
      // A per-instance loop's variable ends at a value that differs between instances.
      if (!thread && s.kind == StmtKind::For && s.per_instance && valid(s.target)) varies = true;
      // Whether a per-instance if's branches run differs between instances, so whatever they assign does.
      if (!thread && s.kind == StmtKind::If && s.per_instance) mark_assigned_within(s, flag, changed);
      if (varies && !flag[static_cast<size_t>(s.target)]) {
        flag[static_cast<size_t>(s.target)] = 1;
        changed = true;
      }
      walk(s.body);
      walk(s.else_body);
    }
  };
  while (changed) {
    changed = false;
    walk(v.k.body);
  }
}

// Which locals vary between program instances, and which between the threads of a team. Float
// and bool locals always count as varying (they hold data).
void mark_varying_locals(Verifier& v) {
  const Kernel& k = v.k;
  v.nonuniform.assign(k.locals.size(), 0);
  v.thread_varying.assign(k.locals.size(), 0);
  for (size_t i = 0; i < k.locals.size(); ++i)
    if (is_float(k.locals[i].type.scalar) || k.locals[i].type.scalar == ScalarType::boolean) v.nonuniform[i] = 1;
  mark_nonuniform(v, false);
  mark_nonuniform(v, true);
}

void mark_varying_tables(const Verifier& v, const Expr& e, std::vector<char>& out) {
  if (e.op == Op::Table && !v.uniform(*e.args[0])) out[static_cast<size_t>(e.index)] = 1;
  for (const ExprRef& a : e.args) mark_varying_tables(v, *a, out);
}
void mark_varying_tables(const Verifier& v, const std::vector<Stmt>& body, std::vector<char>& out) {
  for (const Stmt& s : body) {
    for (const Expr* e : operands(s)) mark_varying_tables(v, *e, out);
    if (!has_bodies(s)) continue;
    mark_varying_tables(v, s.body, out);
    mark_varying_tables(v, s.else_body, out);
  }
}

}  // namespace

std::vector<char> tables_read_at_varying_index(const Kernel& k) {
  Verifier v(k);
  mark_varying_locals(v);
  std::vector<char> out(k.tables.size(), 0);
  mark_varying_tables(v, k.body, out);
  return out;
}

std::string verify(const Kernel& k) {
  Verifier v(k);
  v.assigned.assign(k.locals.size(), 0);
  v.loop_var.assign(k.locals.size(), 0);
  v.per_thread = per_thread_locals(k);
  if (k.team < 1 || k.team > 1024) return fmt::format("kernel {}: team of {} threads outside [1, 1024]", k.name, k.team);
  if (k.grid_rank < 1 || k.grid_rank > 3) return fmt::format("kernel {}: grid rank {} outside [1, 3]", k.name, k.grid_rank);
  if (k.runs_without_rows && k.grid_over_rows)
    return fmt::format("kernel {}: runs on a launch of no rows, but its grid is over the rows (only a column stage can)", k.name);
  const size_t fixed_dims = static_cast<size_t>(k.grid_over_rows ? k.grid_rank - 1 : k.grid_rank);
  if ((!k.grid_fixed.empty() || !k.grid_over_rows) && k.grid_fixed.size() != fixed_dims)
    return fmt::format("kernel {}: {} fixed grid extents for grid rank {}{}", k.name, k.grid_fixed.size(), k.grid_rank,
                       k.grid_over_rows ? "" : " (a column stage fixes every dimension)");
  for (int64_t e : k.grid_fixed)
    if (e < 1) return fmt::format("kernel {}: fixed grid extent {} is not positive", k.name, e);
  if (k.rows_per_instance < 1 || (k.rows_per_instance > 1 && !k.grid_over_rows))
    return fmt::format("kernel {}: {} rows per instance{}", k.name, k.rows_per_instance,
                       k.grid_over_rows ? " is not positive" : " in a column stage, whose grid is fixed");
  bool seen_scratch = false, seen_workspace = false;
  for (const Buffer& b : k.buffers) {
    const bool sized = b.extent == Extent::rows_by_fixed || b.extent == Extent::fixed || b.extent == Extent::row_groups ||
                       b.extent == Extent::scratch || is_workspace(b);
    if (sized && b.per_row < 1) return fmt::format("kernel {}: buffer {} needs a positive size per row, got {}", k.name, b.name, b.per_row);
    const bool scales = b.extent == Extent::rows_by_fixed || b.extent == Extent::fixed || b.extent == Extent::row_groups;
    if (b.per_row_size >= 0 && (!scales || static_cast<size_t>(b.per_row_size) >= k.sizes.size()))
      return fmt::format("kernel {}: buffer {}'s size per row reads size argument {}, but it is {} and the kernel has {} size arguments",
                         k.name, b.name, b.per_row_size, name(b.extent), k.sizes.size());
    if (b.extent == Extent::scratch && !b.output) return fmt::format("kernel {}: scratch buffer {} must be writable", k.name, b.name);
    if (is_workspace(b) && (!b.output || b.block_rows < 1))
      return fmt::format("kernel {}: workspace {} must be writable, with a positive block of rows (got {})", k.name, b.name, b.block_rows);
    if (b.extent == Extent::row_groups && b.block_rows < 1)
      return fmt::format("kernel {}: buffer {} needs a positive group of rows, got {}", k.name, b.name, b.block_rows);
    if (seen_scratch && is_argument(b)) return fmt::format("kernel {}: argument {} follows a scratch buffer", k.name, b.name);
    // The op's own arguments are a prefix: the runtime appends the workspaces it allocates.
    if (seen_workspace && !is_workspace(b) && is_argument(b))
      return fmt::format("kernel {}: argument {} follows a workspace", k.name, b.name);
    seen_scratch |= !is_argument(b);
    seen_workspace |= is_workspace(b);
  }
  // Memory holds numbers only. A bool has no agreed layout in memory: the interpreter keeps one
  // byte per lane, while LLVM packs a vector of i1 into bits.
  for (const Buffer& b : k.buffers)
    if (b.elem == ScalarType::boolean) return fmt::format("kernel {}: buffer {} has element type bool; buffers hold numbers", k.name, b.name);
  mark_varying_locals(v);
  v.stmts(k.body);
  if (!v.error.empty()) return fmt::format("kernel {}: {}", k.name, v.error);
  return {};
}

}  // namespace ordo::ir
