#include "ir/interpret.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <climits>
#include <cmath>
#include <limits>
#include <cstring>

#include "ir/error.hpp"
#include "ir/float_bits.hpp"

namespace ordo::ir {
namespace {

constexpr int kMaxLanes = 32;

union Lane {
  double f64;
  float f32;
  int64_t i;  // i64, i32 (sign-extended) and bool
  uint16_t h; // f16 and bf16 bit patterns
};

struct Value {
  Type type;
  std::array<Lane, kMaxLanes> lane;  // lanes past type.lanes are unspecified and never read
};

// dst = src, copying only src's lanes: a whole Value is 264 bytes, and copying all of it on every
// read and write of a local was over half the interpreter's time (perf, mostly scalar kernels).
void copy_value(Value& dst, const Value& src) {
  dst.type = src.type;
  std::memcpy(dst.lane.data(), src.lane.data(), static_cast<size_t>(src.type.lanes) * sizeof(Lane));
}

// IEEE 754-2019 maximum/minimum: NaN-propagating, -0 < +0.
template <class T>
T ieee_max(T a, T b) {
  if (std::isnan(a) || std::isnan(b)) return a + b;
  if (a == b) return std::signbit(a) ? b : a;
  return a > b ? a : b;
}
template <class T>
T ieee_min(T a, T b) {
  if (std::isnan(a) || std::isnan(b)) return a + b;
  if (a == b) return std::signbit(a) ? a : b;
  return a < b ? a : b;
}

template <class T>
T arith(Op op, T a, T b) {
  switch (op) {
    case Op::Add: return a + b;
    case Op::Sub: return a - b;
    case Op::Mul: return a * b;
    case Op::Div: return a / b;
    case Op::Min: return ieee_min(a, b);
    case Op::Max: return ieee_max(a, b);
    default: return a;
  }
}

template <class T>
bool compare(Op op, T a, T b) {
  switch (op) {
    case Op::Lt: return a < b;
    case Op::Le: return a <= b;
    case Op::Eq: return a == b;
    case Op::Ne: return a != b;
    default: return false;
  }
}

// Op::Bf16PairDot on one lane (ir.hpp): vdpbf16ps's meaning.
float bf16_pair_dot(float acc, float x_odd, float y_odd, float x_even, float y_even) {
  // A factor's bf16 (its high half), or acc; then a zero exponent field read as the zero of its sign.
  auto operand = [](float v, bool factor) {
    uint32_t bits = f32_bits(v);
    if (factor) bits &= 0xffff0000u;
    if ((bits & 0x7f800000u) == 0) bits &= 0x80000000u;
    return f32_from_bits(bits);
  };
  // One fma, flushed where the sum rounded to 24 bits with an unbounded exponent is below 2^-126.
  // IEEE's rounding gives a magnitude below 2^-126 exactly then, except that it may give 2^-126
  // itself (its subnormal grid is coarser): there the same step scaled by 2^64 decides, exact
  // because such a sum has both factors below 2^25 and acc below 2^-100 in magnitude.
  auto step = [](float x, float y, float a) {
    const float r = std::fmaf(x, y, a);
    bool tiny = std::fabs(r) < 0x1p-126f;
    if (std::fabs(r) == 0x1p-126f) tiny = std::fabs(std::fmaf(x * 0x1p32f, y * 0x1p32f, a * 0x1p64f)) < 0x1p-62f;
    return tiny ? f32_from_bits(f32_bits(r) & 0x80000000u) : r;
  };
  const float s = step(operand(x_odd, true), operand(y_odd, true), operand(acc, false));
  return step(operand(x_even, true), operand(y_even, true), s);
}

double to_double(ScalarType t, Lane l) {
  switch (t) {
    case ScalarType::f64: return l.f64;
    case ScalarType::f32: return l.f32;
    case ScalarType::f16: return f16_bits_to_f32(l.h);
    case ScalarType::bf16: return bf16_bits_to_f32(l.h);
    default: return static_cast<double>(l.i);
  }
}

// Elements [at, at + n) lie inside [0, elements), tested without computing at + n, which could
// overflow.
bool in_bounds(int64_t at, int n, int64_t elements) { return at >= 0 && n <= elements && at <= elements - n; }
// The end of [at, at + n) for a message, also where at + n would overflow.
std::string end_text(int64_t at, int n) { return at <= INT64_MAX - n ? fmt::format("{}", at + n) : fmt::format("{}+{}", at, n); }

// Team memory's race check: per element, which thread last stored it and which threads read it,
// in which execution of a Team statement. Within one execution, an element one thread stores may
// be neither read nor stored by another, before or after (the interpreter runs the threads in
// order; a GPU runs them in any order). Reads by many threads are fine.
struct TeamAccess {
  static constexpr int several = -2;  // `reader` when more than one thread read the element
  int64_t write_phase = -1;
  int writer = -1;
  int64_t read_phase = -1;
  int reader = -1;
};

struct Machine {
  const Kernel& k;
  std::vector<BufferArg> buffers;  // the arguments, then each scratch buffer's storage
  std::vector<int64_t> pid;
  std::vector<int64_t> extents;
  int64_t launch_rows = 0;
  std::vector<Value> locals;
  std::vector<char> assigned;
  // Team kernels: per-thread locals live in thread_locals[thread * locals + id].
  std::vector<char> per_thread = per_thread_locals(k);
  std::vector<Value> thread_locals{};
  std::vector<char> thread_assigned{};
  int thread = -1;     // the running thread inside a Team statement, else -1
  int64_t phase = 0;   // executions of Team statements so far, for the race check
  std::vector<std::vector<TeamAccess>> team_access{};  // per buffer (scratch of team kernels only)
  // The values shuffles read: per shuffled local, every thread's value when the Team statement
  // began (and whether it was assigned).
  std::vector<int64_t> snapshot_local{};
  std::vector<std::vector<Value>> snapshot{};
  std::vector<std::vector<char>> snapshot_assigned{};
  std::vector<int64_t> launch_sizes{};  // Op::LaunchSize's values (Kernel::sizes)

  Value& slot(int64_t id) {
    const size_t i = static_cast<size_t>(id);
    return per_thread[i] ? thread_locals[static_cast<size_t>(thread) * k.locals.size() + i] : locals[i];
  }
  char& slot_assigned(int64_t id) {
    const size_t i = static_cast<size_t>(id);
    return per_thread[i] ? thread_assigned[static_cast<size_t>(thread) * k.locals.size() + i] : assigned[i];
  }
  // Team memory: element j of buffer b read (write = false) or stored by the running thread.
  void touch(int64_t b, int64_t j, bool write) {
    std::vector<TeamAccess>& all = team_access[static_cast<size_t>(b)];
    if (all.empty() || thread < 0) return;
    TeamAccess& e = all[static_cast<size_t>(j)];
    const std::string& name = k.buffers[static_cast<size_t>(b)].name;
    if (e.write_phase == phase && e.writer != thread)
      throw Error(fmt::format("interpreter: race on team memory {}[{}]: thread {} {} it in the team statement where thread {} stored it",
                              name, j, thread, write ? "stores" : "reads", e.writer));
    if (!write) {
      e.reader = e.read_phase == phase && e.reader != thread ? TeamAccess::several : thread;
      e.read_phase = phase;
      return;
    }
    if (e.read_phase == phase && e.reader != thread)
      throw Error(fmt::format("interpreter: race on team memory {}[{}]: thread {} stores it in the team statement where {} read it",
                              name, j, thread,
                              e.reader == TeamAccess::several ? std::string("other threads") : fmt::format("thread {}", e.reader)));
    e.write_phase = phase;
    e.writer = thread;
  }

  // Every path returns `v`, so that it is built in the caller's Value (NRVO) instead of being
  // copied there whole.
  Value eval(const Expr& e) {
    Value v;
    v.type = e.type;
    const int n = e.type.lanes;
    const ScalarType t = e.type.scalar;
    switch (e.op) {
      case Op::Const:
        for (int i = 0; i < n; ++i) {
          if (t == ScalarType::f64) v.lane[i].f64 = e.imm_f;
          else if (t == ScalarType::f32) v.lane[i].f32 = static_cast<float>(e.imm_f);
          else v.lane[i].i = e.imm_i;
        }
        return v;
      case Op::Var:
        if (!slot_assigned(e.index))
          throw Error(fmt::format("interpreter: local %{} read before assignment", k.locals[static_cast<size_t>(e.index)].name));
        copy_value(v, slot(e.index));
        return v;
      case Op::ThreadId:
        v.lane[0].i = thread;
        return v;
      case Op::ShuffleDown:
      case Op::ShuffleXor: {
        const int64_t from = e.op == Op::ShuffleDown ? thread + e.imm_i : thread ^ e.imm_i;
        // CUDA's rule: a source outside the reading thread's warp reads the thread's own value.
        const int source = from / 32 == thread / 32 && from < k.team ? static_cast<int>(from) : thread;
        for (size_t i = 0; i < snapshot.size(); ++i)
          if (snapshot_local[i] == e.index) {
            if (!snapshot_assigned[i][static_cast<size_t>(source)])
              throw Error(fmt::format("interpreter: thread {} shuffles %{} of thread {}, which has not assigned it", thread,
                                      k.locals[static_cast<size_t>(e.index)].name, source));
            copy_value(v, snapshot[i][static_cast<size_t>(source)]);
            return v;
          }
        throw Error("internal: interpreter: shuffle of a local without a snapshot");
      }
      case Op::ProgramId:
        v.lane[0].i = pid[static_cast<size_t>(e.index)];
        return v;
      case Op::GridExtent:
        v.lane[0].i = extents[static_cast<size_t>(e.index)];
        return v;
      case Op::LaunchRows:
        v.lane[0].i = launch_rows;
        return v;
      case Op::LaunchSize:
        v.lane[0].i = launch_sizes[static_cast<size_t>(e.index)];
        return v;
      case Op::Load: {
        const BufferArg& b = buffers[static_cast<size_t>(e.index)];
        int64_t at = eval(*e.args[0]).lane[0].i;
        if (!in_bounds(at, n, b.elements))
          throw Error(fmt::format("interpreter: load {}[{}..{}) outside [0, {})", k.buffers[static_cast<size_t>(e.index)].name, at, end_text(at, n), b.elements));
        const int sz = size_bytes(t);
        for (int i = 0; i < n; ++i) touch(e.index, at + i, false);
        for (int i = 0; i < n; ++i) {
          const char* p = static_cast<const char*>(b.data) + (at + i) * sz;
          v.lane[i].i = 0;
          std::memcpy(&v.lane[i], p, static_cast<size_t>(sz));
        }
        return v;
      }
      case Op::Gather: {
        const BufferArg& b = buffers[static_cast<size_t>(e.index)];
        Value at = eval(*e.args[0]);
        const int sz = size_bytes(t);
        for (int i = 0; i < n; ++i) {
          const int64_t j = at.lane[i].i;
          if (j < 0 || j >= b.elements)
            throw Error(fmt::format("interpreter: gather {}[{}] outside [0, {})", k.buffers[static_cast<size_t>(e.index)].name, j, b.elements));
          touch(e.index, j, false);
          v.lane[i].i = 0;
          std::memcpy(&v.lane[i], static_cast<const char*>(b.data) + j * sz, static_cast<size_t>(sz));
        }
        return v;
      }
      case Op::Iota:
        for (int i = 0; i < n; ++i) v.lane[i].i = i;
        return v;
      case Op::Ldexp: {
        Value a = eval(*e.args[0]), b = eval(*e.args[1]);
        for (int i = 0; i < n; ++i) {
          const float x = a.lane[i].f32, m = std::fabs(x);
          const int32_t k = static_cast<int32_t>(b.lane[i].i);  // an i32 lane keeps its low 32 bits
          const bool in_range = m >= 0.5f && m < 2.0f && k >= -250 && k <= 254;
          // In the domain x * 2^k is exact in double; the conversion to f32 is the one rounding
          // (to nearest, ties to even, into the subnormals too). Outside it: NaN (unspecified).
          v.lane[i].f32 = std::isnan(x) ? x
                          : in_range    ? static_cast<float>(std::ldexp(static_cast<double>(x), static_cast<int>(k)))
                                        : std::numeric_limits<float>::quiet_NaN();
        }
        return v;
      }
      case Op::Add: case Op::Sub: case Op::Mul: case Op::Div: case Op::Min: case Op::Max: case Op::Rem: {
        Value a = eval(*e.args[0]), b = eval(*e.args[1]);
        for (int i = 0; i < n; ++i) {
          if (t == ScalarType::f64) v.lane[i].f64 = arith(e.op, a.lane[i].f64, b.lane[i].f64);
          else if (t == ScalarType::f32) v.lane[i].f32 = arith(e.op, a.lane[i].f32, b.lane[i].f32);
          else if (t == ScalarType::i32) {
            // Two's complement wrap-around: compute in unsigned 32-bit.
            const uint32_t x = static_cast<uint32_t>(a.lane[i].i), y = static_cast<uint32_t>(b.lane[i].i);
            const uint32_t r = e.op == Op::Add ? x + y : e.op == Op::Sub ? x - y : x * y;
            v.lane[i].i = static_cast<int32_t>(r);
          } else {
            int64_t x = a.lane[i].i, y = b.lane[i].i;
            // Div and Rem are defined for x >= 0 and y > 0 only (ir.hpp): the backends emit a
            // signed division, which traps or is undefined outside that range.
            if ((e.op == Op::Div || e.op == Op::Rem) && (x < 0 || y <= 0))
              throw Error(fmt::format("interpreter: i64 {}({}, {}) needs a dividend >= 0 and a divisor > 0", spelling(e.op), x, y));
            // Add, Sub and Mul wrap around (two's complement), computed in unsigned arithmetic,
            // where wrapping is defined in C++, as it is for LLVM's add/sub/mul without nsw.
            const uint64_t ux = static_cast<uint64_t>(x), uy = static_cast<uint64_t>(y);
            switch (e.op) {
              case Op::Add: v.lane[i].i = static_cast<int64_t>(ux + uy); break;
              case Op::Sub: v.lane[i].i = static_cast<int64_t>(ux - uy); break;
              case Op::Mul: v.lane[i].i = static_cast<int64_t>(ux * uy); break;
              case Op::Div: v.lane[i].i = x / y; break;
              case Op::Rem: v.lane[i].i = x % y; break;
              case Op::Min: v.lane[i].i = std::min(x, y); break;
              default: v.lane[i].i = std::max(x, y); break;
            }
          }
        }
        return v;
      }
      case Op::Fma: {
        Value a = eval(*e.args[0]), b = eval(*e.args[1]), c = eval(*e.args[2]);
        for (int i = 0; i < n; ++i) {
          if (t == ScalarType::f64) v.lane[i].f64 = std::fma(a.lane[i].f64, b.lane[i].f64, c.lane[i].f64);
          else v.lane[i].f32 = std::fmaf(a.lane[i].f32, b.lane[i].f32, c.lane[i].f32);
        }
        return v;
      }
      case Op::Bf16PairDot: {
        Value acc = eval(*e.args[0]), xo = eval(*e.args[1]), yo = eval(*e.args[2]), xe = eval(*e.args[3]), ye = eval(*e.args[4]);
        for (int i = 0; i < n; ++i)
          v.lane[i].f32 = bf16_pair_dot(acc.lane[i].f32, xo.lane[i].f32, yo.lane[i].f32, xe.lane[i].f32, ye.lane[i].f32);
        return v;
      }
      case Op::Sqrt: case Op::Neg: {
        Value a = eval(*e.args[0]);
        for (int i = 0; i < n; ++i) {
          if (t == ScalarType::f64) v.lane[i].f64 = e.op == Op::Sqrt ? std::sqrt(a.lane[i].f64) : -a.lane[i].f64;
          else v.lane[i].f32 = e.op == Op::Sqrt ? std::sqrt(a.lane[i].f32) : -a.lane[i].f32;
        }
        return v;
      }
      case Op::Floor: {
        Value a = eval(*e.args[0]);
        for (int i = 0; i < n; ++i) {
          if (t == ScalarType::f64) v.lane[i].f64 = std::floor(a.lane[i].f64);
          else v.lane[i].f32 = std::floor(a.lane[i].f32);
        }
        return v;
      }
      case Op::Lt: case Op::Le: case Op::Eq: case Op::Ne: {
        Value a = eval(*e.args[0]), b = eval(*e.args[1]);
        const ScalarType at = a.type.scalar;
        for (int i = 0; i < n; ++i) {
          if (at == ScalarType::f64) v.lane[i].i = compare(e.op, a.lane[i].f64, b.lane[i].f64);
          else if (at == ScalarType::f32) v.lane[i].i = compare(e.op, a.lane[i].f32, b.lane[i].f32);
          else v.lane[i].i = compare(e.op, a.lane[i].i, b.lane[i].i);
        }
        return v;
      }
      case Op::And: case Op::Or: {
        Value a = eval(*e.args[0]), b = eval(*e.args[1]);
        for (int i = 0; i < n; ++i) v.lane[i].i = e.op == Op::And ? (a.lane[i].i && b.lane[i].i) : (a.lane[i].i || b.lane[i].i);
        return v;
      }
      case Op::Shl: case Op::Shr: case Op::BitAnd: {
        Value a = eval(*e.args[0]), b = eval(*e.args[1]);
        for (int i = 0; i < n; ++i) {
          const int count = static_cast<int>(b.lane[i].i);
          if (t == ScalarType::i32) {
            const int32_t x = static_cast<int32_t>(a.lane[i].i);
            if (e.op == Op::Shl) v.lane[i].i = static_cast<int32_t>(static_cast<uint32_t>(x) << count);
            else if (e.op == Op::Shr) v.lane[i].i = x >> count;  // arithmetic in C++20
            else v.lane[i].i = x & static_cast<int32_t>(b.lane[i].i);
          } else {
            const int64_t x = a.lane[i].i;
            if (e.op == Op::Shl) v.lane[i].i = static_cast<int64_t>(static_cast<uint64_t>(x) << count);
            else if (e.op == Op::Shr) v.lane[i].i = x >> count;
            else v.lane[i].i = x & b.lane[i].i;
          }
        }
        return v;
      }
      case Op::Bitcast: {
        Value a = eval(*e.args[0]);
        for (int i = 0; i < n; ++i) {
          switch (t) {
            case ScalarType::i32: v.lane[i].i = static_cast<int32_t>(std::bit_cast<uint32_t>(a.lane[i].f32)); break;
            case ScalarType::f32: v.lane[i].f32 = std::bit_cast<float>(static_cast<uint32_t>(a.lane[i].i)); break;
            case ScalarType::i64: v.lane[i].i = std::bit_cast<int64_t>(a.lane[i].f64); break;
            default: v.lane[i].f64 = std::bit_cast<double>(a.lane[i].i); break;
          }
        }
        return v;
      }
      case Op::Call:
        throw Error(fmt::format("interpreter: {} is device-only (CUDA's own approximation, with no definition off the GPU); "
                                "this order runs on target cuda only",
                                name(static_cast<MathFn>(e.index))));
      case Op::Select: {
        Value c = eval(*e.args[0]), a = eval(*e.args[1]), b = eval(*e.args[2]);
        for (int i = 0; i < n; ++i) v.lane[i] = c.lane[i].i ? a.lane[i] : b.lane[i];
        return v;
      }
      case Op::Cast: {
        Value a = eval(*e.args[0]);
        const ScalarType from = a.type.scalar;
        for (int i = 0; i < n; ++i) {
          Lane l = a.lane[i];
          switch (t) {
            case ScalarType::f64: v.lane[i].f64 = to_double(from, l); break;  // exact from every allowed source but i64
            case ScalarType::f32:
              if (from == ScalarType::f64) v.lane[i].f32 = static_cast<float>(l.f64);
              else if (from == ScalarType::i64 || from == ScalarType::i32) v.lane[i].f32 = static_cast<float>(l.i);
              else v.lane[i].f32 = static_cast<float>(to_double(from, l));
              break;
            case ScalarType::f16: v.lane[i].h = f32_to_f16_bits(l.f32); break;
            case ScalarType::bf16: v.lane[i].h = f32_to_bf16_bits(l.f32); break;
            case ScalarType::i32: {
              const float r = std::nearbyint(l.f32);  // the default rounding mode: ties to even
              const bool fits = r >= -2147483648.0f && r < 2147483648.0f;  // false for NaN
              v.lane[i].i = fits ? static_cast<int32_t>(r) : INT32_MIN;
              break;
            }
            case ScalarType::i64: v.lane[i].i = l.i; break;  // from i32, held sign-extended: exact
            default: break;
          }
        }
        return v;
      }
      case Op::Broadcast: {
        Value a = eval(*e.args[0]);
        for (int i = 0; i < n; ++i) v.lane[i] = a.lane[0];
        return v;
      }
      case Op::Extract: {
        Value a = eval(*e.args[0]);
        v.lane[0] = a.lane[static_cast<size_t>(e.index)];
        return v;
      }
      case Op::Table: {
        const std::vector<int64_t>& t = k.tables[static_cast<size_t>(e.index)];
        Value at = eval(*e.args[0]);
        for (int i = 0; i < n; ++i) {
          if (at.lane[i].i < 0 || at.lane[i].i >= static_cast<int64_t>(t.size()))
            throw Error(fmt::format("interpreter: table{}[{}] outside [0, {})", e.index, at.lane[i].i, t.size()));
          v.lane[i].i = t[static_cast<size_t>(at.lane[i].i)];
        }
        return v;
      }
    }
    throw Error("interpreter: unknown op");
  }

  // The threads one after another, thread order. Shuffles read the snapshot taken here.
  void run_team(const Stmt& team) {
    ++phase;
    snapshot_local = shuffled_locals(team);
    snapshot.assign(snapshot_local.size(), std::vector<Value>(static_cast<size_t>(k.team)));
    snapshot_assigned.assign(snapshot_local.size(), std::vector<char>(static_cast<size_t>(k.team)));
    for (size_t i = 0; i < snapshot_local.size(); ++i)
      for (thread = 0; thread < k.team; ++thread) {
        snapshot[i][static_cast<size_t>(thread)] = slot(snapshot_local[i]);
        snapshot_assigned[i][static_cast<size_t>(thread)] = slot_assigned(snapshot_local[i]);
      }
    for (thread = 0; thread < k.team; ++thread) run(team.body);
    thread = -1;
  }

  void run(const std::vector<Stmt>& body) {
    for (const Stmt& s : body) {
      switch (s.kind) {
        case StmtKind::Assign: {
          copy_value(slot(s.target), eval(*s.value));
          slot_assigned(s.target) = 1;
          break;
        }
        case StmtKind::Store: {
          const BufferArg& b = buffers[static_cast<size_t>(s.target)];
          Value index = eval(*s.index);
          Value v = eval(*s.value);
          const int n = v.type.lanes;
          const int sz = size_bytes(v.type.scalar);
          if (index.type.lanes > 1) {  // scatter, lane by lane in lane order
            for (int i = 0; i < n; ++i) {
              const int64_t j = index.lane[i].i;
              if (j < 0 || j >= b.elements)
                throw Error(fmt::format("interpreter: scatter {}[{}] outside [0, {})", k.buffers[static_cast<size_t>(s.target)].name, j, b.elements));
              touch(s.target, j, true);
              std::memcpy(static_cast<char*>(b.data) + j * sz, &v.lane[i], static_cast<size_t>(sz));
            }
            break;
          }
          const int64_t at = index.lane[0].i;
          if (!in_bounds(at, n, b.elements))
            throw Error(fmt::format("interpreter: store {}[{}..{}) outside [0, {})", k.buffers[static_cast<size_t>(s.target)].name, at, end_text(at, n), b.elements));
          for (int i = 0; i < n; ++i) touch(s.target, at + i, true);
          for (int i = 0; i < n; ++i)
            std::memcpy(static_cast<char*>(b.data) + (at + i) * sz, &v.lane[i], static_cast<size_t>(sz));
          break;
        }
        case StmtKind::For: {
          // The variable takes begin, begin + step, ... while that value, computed exactly, is
          // below end. It never wraps around: the loop ends where the next value would pass
          // INT64_MAX. After the loop it holds its last value; after a loop that ran no
          // iteration it is unassigned, as a local assigned only inside the body would be.
          const int64_t begin = eval(*s.begin).lane[0].i, end = eval(*s.end).lane[0].i;
          Value& iv = slot(s.target);
          iv.type = Type{ScalarType::i64, 1};
          const uint64_t step = static_cast<uint64_t>(s.step);
          for (int64_t i = begin; i < end;) {
            iv.lane[0].i = i;
            slot_assigned(s.target) = 1;
            run(s.body);
            // end - i is positive here, and exact as an unsigned number.
            if (static_cast<uint64_t>(end) - static_cast<uint64_t>(i) <= step) break;
            i = static_cast<int64_t>(static_cast<uint64_t>(i) + step);
          }
          break;
        }
        case StmtKind::If:
          if (eval(*s.value).lane[0].i) run(s.body);
          else run(s.else_body);
          break;
        case StmtKind::Region:
          run(s.body);
          break;
        case StmtKind::Team:
          run_team(s);
          break;
      }
    }
  }
};

}  // namespace

void interpret(const Kernel& k, const std::vector<BufferArg>& buffers, const std::vector<int64_t>& extents) {
  size_t arguments = 0;
  for (const Buffer& b : k.buffers) arguments += is_argument(b);
  if (buffers.size() != arguments)
    throw Error(fmt::format("interpreter: kernel {} takes {} buffers, got {}", k.name, arguments, buffers.size()));
  std::vector<BufferArg> all = buffers;
  std::vector<std::vector<char>> scratch;
  scratch.reserve(k.buffers.size());  // `all` keeps pointers into these
  for (const Buffer& b : k.buffers)
    if (!is_argument(b)) {
      scratch.emplace_back(static_cast<size_t>(b.per_row * size_bytes(b.elem)));
      all.push_back(BufferArg{scratch.back().data(), b.per_row});
    }
  const size_t rank = static_cast<size_t>(k.grid_rank);
  if (!k.sizes.empty() && extents.size() != rank + 1 + k.sizes.size())
    throw Error(fmt::format("interpreter: kernel {} has grid rank {} and {} size arguments, so it takes {} extents (the grid's, the rows, "
                            "the sizes), got {}",
                            k.name, k.grid_rank, k.sizes.size(), rank + 1 + k.sizes.size(), extents.size()));
  for (size_t i = 0; i < k.sizes.size(); ++i)
    if (extents[rank + 1 + i] < 0) throw Error(fmt::format("interpreter: size {} = {} is negative", k.sizes[i], extents[rank + 1 + i]));
  if (k.sizes.empty() && extents.size() != rank + 1 && (extents.size() != rank || !k.grid_over_rows || k.rows_per_instance > 1))
    throw Error(fmt::format("interpreter: kernel {} has grid rank {}, got {} extents{}", k.name, k.grid_rank, extents.size(),
                            k.grid_over_rows && k.rows_per_instance == 1 ? "" : " (this kernel also takes the launch's rows)"));
  if (k.rows_per_instance > 1 && extents[0] != launch_extents(k, extents[rank])[0])
    throw Error(fmt::format("interpreter: kernel {} takes blocks of {} rows: {} rows make {} instances, got {}", k.name, k.rows_per_instance,
                            extents[rank], launch_extents(k, extents[rank])[0], extents[0]));
  const std::vector<int64_t> grid(extents.begin(), extents.begin() + static_cast<std::ptrdiff_t>(rank));
  Machine m{k, all, std::vector<int64_t>(rank, 0), grid, extents.size() > rank ? extents[rank] : extents[0],
            std::vector<Value>(k.locals.size()), {}};
  m.launch_sizes.assign(extents.begin() + static_cast<std::ptrdiff_t>(std::min(extents.size(), rank + 1)), extents.end());
  // Instances are independent; run them in row-major grid order.
  if (k.team > 1) {
    m.thread_locals.resize(k.locals.size() * static_cast<size_t>(k.team));
    m.team_access.resize(k.buffers.size());
    for (size_t b = 0; b < k.buffers.size(); ++b)
      if (!is_argument(k.buffers[b])) m.team_access[b].resize(static_cast<size_t>(k.buffers[b].per_row));
  } else {
    m.team_access.resize(k.buffers.size());  // all empty: no race check without a team
  }
  std::vector<int64_t>& p = m.pid;
  int64_t total = 1;
  if (m.launch_rows < 0) throw Error(fmt::format("interpreter: launch rows {} is negative", m.launch_rows));
  if (const Kernel::RefusedLaunch* r = refusal(k, m.launch_rows)) throw Error(fmt::format("rows={}: {}", m.launch_rows, r->why));
  for (int64_t e : grid) {
    if (e < 0) throw Error(fmt::format("interpreter: grid extent {} is negative", e));
    if (e != 0 && total > INT64_MAX / e) throw Error("interpreter: the grid has more than INT64_MAX instances");
    total *= e;
  }
  for (int64_t flat = 0; flat < total; ++flat) {
    int64_t rest = flat;
    for (int d = k.grid_rank - 1; d >= 0; --d) {
      p[static_cast<size_t>(d)] = rest % grid[static_cast<size_t>(d)];
      rest /= grid[static_cast<size_t>(d)];
    }
    m.assigned.assign(k.locals.size(), 0);
    m.thread_assigned.assign(k.team > 1 ? k.locals.size() * static_cast<size_t>(k.team) : 0, 0);
    for (std::vector<TeamAccess>& a : m.team_access) std::fill(a.begin(), a.end(), TeamAccess{});
    // Scratch starts unspecified; all-ones bytes (NaN, -1) make a read before a write visible.
    for (std::vector<char>& s : scratch) std::fill(s.begin(), s.end(), char(-1));
    m.run(k.body);
  }
}

}  // namespace ordo::ir
