// The ordo IR: a small, closed set of nodes with exact floating-point meaning.
//
// A Kernel is a body executed once per program instance (a point of its grid; for the
// normalization ops an instance is one row). Inside an instance everything is explicit:
// loops, lanes, locals and every rounding. Reductions are not nodes of their own: gen/
// expands an Order (ir/order.hpp) into loops, and wraps the result in a Region that names
// the reduction and prints its Order, so the order is visible in the IR itself.
//
// Floating-point semantics, common to all nodes:
//  * Every arithmetic node computes the exact result of its operation and rounds it once to
//    its result type with round-to-nearest-even. Nothing is contracted or reassociated;
//    only Fma multiplies and adds with a single rounding. Bf16PairDot alone flushes
//    subnormals (its instruction's meaning, spelled out at the node).
//  * Arithmetic exists only in f32 and f64. f16 and bf16 are storage types: loaded, stored
//    and converted with Cast. Rounding an intermediate to bf16 is therefore a visible Cast pair.
//  * NaN results are NaN; which NaN payload propagates is not specified (IEEE 754 leaves it
//    open, and LLVM does not preserve it). Tests compare NaNs as one value and all other
//    values by bit pattern.
//  * Lanes are independent: a node on a vector applies its scalar meaning to each lane.
//
// Control flow (For bounds, If conditions) is uniform: it may depend only on constants and
// loop variables, never on program_id, loaded data or floating-point values. The verifier
// enforces this; backends rely on it to run several instances in lock step.
// Two exceptions, marked in the IR (Stmt::per_instance), let instances take different paths:
//  * a per-instance loop (printed `for.instance`) may have bounds that read program_id directly
//    (never data, nor a local computed from program_id), so that instances run it different
//    numbers of times: causal attention visits only the key blocks its query block can see;
//  * a per-instance if (printed `if.instance`) may have any scalar bool condition, data
//    included. gen/ uses it for a guarded fast path: the condition proves that a cheaper
//    sequence of nodes gives the bits of the general one, so both branches compute the same
//    results and the branch is a matter of speed only (exact-tiled's bf16 p @ v).
// Neither is ever inside a Team statement, so the threads of one instance (one CUDA block)
// always agree on them, and a kernel that has one runs its instances one at a time on the CPU
// (ir::has_per_instance_control), never in lock step.
//
// Teams (the CUDA-native orders). A kernel with Kernel::team = T > 1 runs each program instance
// with T threads. Its body is uniform code, executed alike by every thread, around Team
// statements; a Team statement runs its body once per thread, thread_id = 0 .. T-1, and the
// threads of one Team statement are independent: they communicate only through
//  * scratch buffers, which in a team kernel are shared by the instance's threads: a value
//    stored in one Team statement is read by other threads in a later one (consecutive Team
//    statements are separated by a barrier), and
//  * shuffles, which read another thread's value of a per-thread local as it was when the Team
//    statement began (a warp shuffle; the verifier keeps the local unassigned before the
//    shuffle in that statement, so "when it began" and "now" are the same on a GPU).
// Locals assigned inside Team statements are per-thread and keep their value from one Team
// statement to the next; locals assigned outside are uniform and read-only inside. Inside a Team
// body, loop bounds and If conditions may depend on thread_id (never on data or program_id).
// The interpreter runs the threads of a Team statement one after another in thread order.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ordo/scalar_type.hpp"

namespace ordo::ir {

struct Type {
  ScalarType scalar = ScalarType::f32;
  int lanes = 1;
  friend bool operator==(const Type&, const Type&) = default;
};
std::string to_string(Type t);

// X(name, arity, spelling). The one list of expression nodes; printer and verifier use it.
#define ORDO_EXPR_OPS(X)                                                                      \
  /* Literal of the node's type (value in Expr::imm_f or imm_i), broadcast to its lanes. */   \
  X(Const, 0, "const")                                                                       \
  /* Read local Expr::index. The verifier requires an assignment earlier in program text. */ \
  X(Var, 0, "var")                                                                           \
  /* This instance's coordinate along grid dimension Expr::index (i64, non-uniform). */       \
  X(ProgramId, 0, "program_id")                                                              \
  /* The launch's extent of grid dimension Expr::index (i64; the same for every instance). */ \
  X(GridExtent, 0, "grid_extent")                                                            \
  /* The launch's row count (i64, uniform): grid_extent(0) in a kernel whose grid is over rows; \
     a column stage (Kernel::grid_over_rows false) reads it to loop over the rows. */          \
  X(LaunchRows, 0, "launch_rows")                                                            \
  /* The launch's size argument Expr::index (i64, uniform): a length the kernel serves every \
     value of, given at each launch (Kernel::sizes names them: attention's "S_k"). */         \
  X(LaunchSize, 0, "launch_size")                                                            \
  /* Team kernels, inside a Team statement: this thread's index in [0, Kernel::team) (i64). */ \
  X(ThreadId, 0, "thread_id")                                                                \
  /* Team kernels, a top-level statement of a Team body: per-thread local Expr::index (a      \
     scalar) of thread s as it was when the Team statement began, s = thread_id + imm_i       \
     (ShuffleDown) or thread_id ^ imm_i (ShuffleXor), imm_i in [1, 31]. A source outside the   \
     reading thread's warp of 32 threads reads the thread's own value (CUDA's shfl rule). */   \
  X(ShuffleDown, 0, "shuffle_down")                                                          \
  X(ShuffleXor, 0, "shuffle_xor")                                                            \
  /* Elements [i, i+lanes) of buffer Expr::index; i is args[0] (i64), in elements. */         \
  X(Load, 1, "load")                                                                         \
  /* Lane l is element args[0][l] of buffer Expr::index; args[0] is an i64 vector whose       \
     lanes are the result's (a gather: attention reads query rows into lanes with it). */     \
  X(Gather, 1, "gather")                                                                     \
  /* The i64 vector 0, 1, ..., lanes-1: which lane is which, for lane-dependent indices. */   \
  X(Iota, 0, "iota")                                                                         \
  /* f32/f64: IEEE with RNE. i64: two's complement, wrapping, lane-wise on vectors (Add, Sub, \
     Mul, Min, Max); Div/Rem are scalar and truncate, defined for a dividend >= 0 and a       \
     divisor > 0 only (the interpreter reports any other as an error).                        \
     i32 (Add, Sub, Mul only): two's complement, wrapping. */                                \
  X(Add, 2, "add")                                                                           \
  X(Sub, 2, "sub")                                                                           \
  X(Mul, 2, "mul")                                                                           \
  X(Div, 2, "div")                                                                           \
  X(Rem, 2, "rem") /* i64 only */                                                            \
  /* a*b+c with one rounding. Appears only where an Order asked for it. */                    \
  X(Fma, 3, "fma")                                                                           \
  /* avx512_bf16's vdpbf16ps on each lane: f32 args (acc, x_odd, y_odd, x_even, y_even).      \
     Each factor is the bf16 of its high 16 bits (the low 16 are ignored, so a bf16 value     \
     held in f32 is itself). Every operand, acc included, whose exponent field is zero (a     \
     subnormal or a zero) is read as the zero of its sign; then                               \
       s = ftz(fma(x_odd, y_odd, acc)), result = ftz(fma(x_even, y_even, s)),                 \
     each fma rounded once (RNE), and ftz(r) the zero of r's sign where r rounded to 24 bits  \
     with an unbounded exponent is below 2^-126 in magnitude (x86's tininess after rounding:  \
     -2^-126 + 2^-190 stays -2^-126; -2^-126 + 3*2^-152, which IEEE rounds to -2^-126,       \
     becomes -0). MXCSR plays no part.                                                        \
     The bf16 products are exact in f32, so each fma's one rounding is the sum's. Measured    \
     against the instruction on 32 million lanes (tests/unit/test_bf16_pair_dot.cpp). */       \
  X(Bf16PairDot, 5, "bf16_pair_dot")                                                         \
  /* f32 args[0] times 2^(i32 args[1]), lane-wise, rounded once: defined when args[0] is NaN    \
     (NaN), or in +-[0.5, 2) with args[1] in [-250, 254]. Elsewhere the value is unspecified    \
     (the interpreter gives NaN), so a kernel must not let such a lane reach a result: Sleef's   \
     exp discards them by its range selects. The domain is what makes every backend's form      \
     exact: one vscalefps on AVX-512, x * 2^(n>>1) * 2^(n-(n>>1)) elsewhere (the first product  \
     is exact there), CUDA's ldexpf. */                                                         \
  X(Ldexp, 2, "ldexp")                                                                       \
  /* Correctly rounded square root. */                                                       \
  X(Sqrt, 1, "sqrt")                                                                         \
  /* The largest integer not above the operand; exact (+-0, +-inf and NaN are themselves, a   \
     negative fraction gives -1 or below, -0.5 gives -1). One vrndscaleps, CUDA's floorf. */   \
  X(Floor, 1, "floor")                                                                       \
  /* Sign flip; exact. */                                                                    \
  X(Neg, 1, "neg")                                                                           \
  /* IEEE 754-2019 minimum/maximum: NaN if either operand is NaN; -0 < +0. */                 \
  X(Min, 2, "min")                                                                           \
  X(Max, 2, "max")                                                                           \
  /* Comparisons give bool lanes; any comparison with NaN is false except Ne. */              \
  X(Lt, 2, "lt")                                                                             \
  X(Le, 2, "le")                                                                             \
  X(Eq, 2, "eq")                                                                             \
  X(Ne, 2, "ne")                                                                             \
  X(And, 2, "and") /* bool only */                                                           \
  X(Or, 2, "or")   /* bool only */                                                           \
  /* i32 and i64 bit operations, lane-wise. Shift counts are constants in [0, bits - 1];       \
     Shr is arithmetic (sign-filling). */                                                     \
  X(Shl, 2, "shl")                                                                           \
  X(Shr, 2, "shr")                                                                           \
  X(BitAnd, 2, "bitand")                                                                     \
  /* The bits of args[0] reinterpreted: f32 <-> i32, f64 <-> i64. Exact. */                 \
  X(Bitcast, 1, "bitcast")                                                                   \
  /* A CUDA device function, Expr::index a MathFn, of f32 args[0] (see MathFn: device-only). \
     Library functions with a known algorithm (Sleef's, glibc's expf and logf) are not calls:  \
     gen/blocks/math.cpp writes them out in these nodes. */                                          \
  X(Call, 1, "call")                                                                         \
  X(Select, 3, "select") /* args[0] ? args[1] : args[2], lane by lane */                       \
  /* Conversion to the node's scalar type with RNE. Allowed: f32<->f64, f32->f16/bf16,      \
     f16/bf16->f32/f64 (exact), i64->f32/f64 (RNE), i32->f32 (RNE), i32->i64 (exact),      \
     and f32->i32: rounded                                                                  \
     to the nearest integer, ties to even; NaN and values outside the i32 range give        \
     INT32_MIN (the x86 cvtps2dq result, which Sleef's algorithms rely on). */               \
  X(Cast, 1, "cast")                                                                         \
  /* Scalar args[0] repeated into the node's lanes. */                                       \
  X(Broadcast, 1, "broadcast")                                                               \
  /* Lane Expr::index of vector args[0], as a scalar. */                                     \
  X(Extract, 1, "extract")                                                                   \
  /* Lane l is element args[0][l] of the kernel's constant i64 table Expr::index (args[0] is  \
     i64 with the result's lanes; an index outside the table is an error). Uniform when its   \
     index is: gen/ uses tables to drive loops whose shape is irregular but fixed (a tree),   \
     and as the constant tables of glibc's expf and logf (indexed by data bits). */           \
  X(Table, 1, "table")

// The functions Op::Call may name: CUDA's own (rsqrtf is rsqrt.approx.f32; expf and logf are
// CUDA's libdevice versions). They have no definition off the GPU, so only target cuda lowers
// them, and the interpreter, cpu and cuda-emu refuse kernels that call them ("device-only").
// glibc's expf/logf, which eager CPU code calls, are not here: their algorithms are IR
// (gen/blocks/math.hpp), so every backend computes them, the GPU included.
enum class MathFn : uint8_t { device_rsqrtf, device_expf, device_logf };
constexpr MathFn kLastMathFn = MathFn::device_logf;
std::string_view name(MathFn f);

enum class Op : uint8_t {
#define ORDO_X(name, arity, spelling) name,
  ORDO_EXPR_OPS(ORDO_X)
#undef ORDO_X
};
int arity(Op op);
std::string_view spelling(Op op);

struct Expr;
using ExprRef = std::shared_ptr<const Expr>;

struct Expr {
  Op op;
  Type type;
  std::vector<ExprRef> args;
  int64_t index = 0;  // Var: local id; Load: buffer id; ProgramId: dimension; Extract: lane; Call: MathFn
  double imm_f = 0;   // Const of a float type
  int64_t imm_i = 0;  // Const of i64 or bool
};

enum class StmtKind : uint8_t {
  Assign,  // locals[target] = value
  Store,   // buffer[target][index .. index+lanes) = value. With an i64 vector index of the
           // value's lanes it is a scatter: lane l goes to buffer[index[l]], lanes in order
           // 0, 1, ... (so of two lanes with one index the higher lane's value stays).
  For,     // for (locals[target] = begin; < end; += step) body. step is a positive constant. The
           // variable takes begin + j*step, j = 0, 1, ..., while that value, computed exactly, is
           // below end: it never wraps around INT64_MAX. After a loop that ran no trip it is
           // unassigned.
  If,      // if (cond) body else else_body
  Region,  // body, labelled: the expansion of one reduction and the Order that produced it
  Team,    // body once per thread of the instance's team (team kernels; see the top of this file)
};

struct Stmt {
  explicit Stmt(StmtKind k) : kind(k) {}
  StmtKind kind;
  int target = -1;  // Assign/For: local id. Store: buffer id.
  ExprRef value;    // Assign/Store: the value. If: the condition.
  ExprRef index;    // Store: element index.
  ExprRef begin, end;
  int64_t step = 1;
  bool per_instance = false;  // For: bounds may read program_id; If: the condition may read data (the top of this file)
  std::vector<Stmt> body, else_body;
  std::string label;  // Region: "moments", "sum(x)", ...
  std::string note;   // Region: the Order, printed
};

// How a buffer's length relates to a launch over `rows` instances of an N-column op.
enum class Extent : uint8_t {
  rows_by_cols,  // rows*N: one row per instance (x, y)
  cols,          // N: shared by every instance (weight, bias)
  rows,          // one element per instance (mean, rstd, var)
  rows_by_fixed, // rows*K with K = Buffer::per_row fixed at compile time (attention: q is rows*Sq*D)
  fixed,         // K = Buffer::per_row elements shared by every instance, whatever the row count
                 // (attention's mask without a batch dim)
  row_groups,    // ceil(rows / G)*K: K = Buffer::per_row elements for each group of G =
                 // Buffer::block_rows consecutive rows, shared by the group (attention's mask with
                 // a batch dim but no head dim: a group is a batch's H rows)
  scratch,       // K = Buffer::per_row elements of working memory private to each program
                 // instance (shared by its threads in a team kernel: CUDA shared memory), not
                 // an argument of the kernel. Its contents are unspecified when the instance
                 // starts: gen/ writes an element before reading it.
  row_blocks,    // ceil(rows / Buffer::block_rows) * K elements, K = Buffer::per_row: working
                 // memory of one launch, K elements per block of block_rows rows, that the stages
                 // of an op share (a backward's per-block partial weight gradients, written by the
                 // rows' stage and summed by the column stage). An argument of every stage, after
                 // the op's own; whoever launches allocates it (ordo's runtime does, so it is not
                 // among CompiledKernel::args). Unspecified when the launch starts: the first stage
                 // writes an element before any stage reads it.
};
std::string_view name(Extent e);

struct Buffer {
  std::string name;
  ScalarType elem;  // any type but bool (the verifier's rule: a bool has no layout in memory)
  bool output = false;  // written by the kernel (scratch buffers count as outputs)
  Extent extent = Extent::rows_by_cols;
  int64_t per_row = 0;  // rows_by_fixed, fixed, row_groups, scratch and row_blocks: the K above
  int64_t block_rows = 0;  // row_blocks and row_groups: rows per block or group
  // rows_by_fixed, fixed, row_groups: -1, or a size argument (Kernel::sizes) that multiplies
  // per_row: K = per_row * size, given at launch (attention's k and v with S_k at launch: per_row D
  // times S_k; a mask that spans the keys).
  int per_row_size = -1;
};
// The kernel's arguments are its non-scratch buffers, which come first (the verifier checks).
inline bool is_argument(const Buffer& b) { return b.extent != Extent::scratch; }
// A launch's working memory (Extent::row_blocks): an argument the launcher allocates.
inline bool is_workspace(const Buffer& b) { return b.extent == Extent::row_blocks; }
// Elements of a buffer of that extent in a launch of `rows` rows of N = cols columns (scratch:
// per instance); nullopt when that overflows int64.
std::optional<int64_t> launch_elements(Extent e, int64_t per_row, int64_t block_rows, int64_t rows, int64_t cols);
inline std::optional<int64_t> launch_elements(const Buffer& b, int64_t rows, int64_t cols) {
  return launch_elements(b.extent, b.per_row, b.block_rows, rows, cols);
}
// The same with the launch's size arguments (Kernel::sizes), which a buffer's per_row_size
// reads; nullopt on overflow, or when the size it names is missing or negative.
std::optional<int64_t> launch_elements(Extent e, int64_t per_row, int per_row_size, int64_t block_rows, int64_t rows, int64_t cols,
                                       const std::vector<int64_t>& sizes);
inline std::optional<int64_t> launch_elements(const Buffer& b, int64_t rows, int64_t cols, const std::vector<int64_t>& sizes) {
  return launch_elements(b.extent, b.per_row, b.per_row_size, b.block_rows, rows, cols, sizes);
}

struct Local {
  std::string name;
  Type type;
};

struct Kernel {
  std::string name;
  std::vector<Buffer> buffers;
  std::vector<Local> locals;
  std::vector<std::vector<int64_t>> tables;  // constant i64 arrays, read by Op::Table
  int grid_rank = 1;  // program_id(d) for d < grid_rank
  // Extents of grid dims 1 .. grid_rank-1 when they are fixed at compile time (attention's query
  // blocks); dim 0 is the launch's row count. Empty: every extent is given at launch.
  std::vector<int64_t> grid_fixed;
  // Whether grid dim 0 is the launch's row count (an instance per row, or per (batch, head)).
  // false: a column stage. Every grid extent is fixed (grid_fixed lists all grid_rank of them)
  // and the kernel reads the row count with launch_rows, looping over the rows itself: the
  // weight gradients of a backward op, a sum over every row, in an order that does not depend on
  // how the launch is split.
  bool grid_over_rows = true;
  // A column stage whose outputs are defined for a launch of no rows (its loop over the rows runs
  // zero times): it runs then, where every other stage is skipped (a loss of an empty batch).
  bool runs_without_rows = false;
  // A kernel over rows whose instance is a block of this many consecutive rows: grid dim 0's
  // extent is ceil(rows / rows_per_instance), and the last block may be shorter (a per-instance
  // loop walks min(rows_per_instance, rows - first row) of them). 1: an instance per row.
  int64_t rows_per_instance = 1;
  // Threads per program instance. 1: the body is one thread's program. > 1: a team kernel (see
  // the top of this file); CUDA runs an instance as one block of `team` threads.
  int team = 1;
  std::vector<Stmt> body;
  std::string description;  // one line: op, shapes, dtypes, order name
  // Launches the kernel refuses. Such a launch would take a path whose order is not known: the
  // order reproduces a library, and that library's kernel for this launch was never measured
  // (PyTorch calls MKL on all its threads for one (batch, head), say), or the launch contradicts
  // the layout the kernel was generated for (rows that are not whole groups of heads). The kernel
  // still holds that path, since the same code serves every other row count; every backend, the
  // interpreter included, rejects such a launch with `why` before running anything.
  struct RefusedLaunch {
    enum class When : uint8_t {
      rows_equal,         // launch rows == rows
      rows_at_least,      // launch rows >= rows
      rows_not_multiple,  // launch rows % rows != 0
    };
    When when = When::rows_equal;
    int64_t rows = 0;
    std::string why;
    bool refuses(int64_t launch_rows) const;
    std::string condition() const;  // "rows == 1", "rows >= 2", "rows % 3 != 0"
  };
  std::vector<RefusedLaunch> refused_launches;
  // The size arguments every launch gives, by name (Op::LaunchSize i reads the i-th): lengths the
  // kernel serves every value of, where an order's arithmetic does not change with them.
  std::vector<std::string> sizes;
};

// The refusal for a launch of `rows` rows, if the kernel refuses it (the first that applies).
const Kernel::RefusedLaunch* refusal(const Kernel& k, int64_t rows);

// What every backend's entry takes for a launch of `rows` rows: the grid's extents (the row dim
// ceil(rows / rows_per_instance) for a kernel over rows, then the fixed dims), then the rows, then
// the size arguments (Kernel::sizes), one per name.
std::vector<int64_t> launch_extents(const Kernel& k, int64_t rows, const std::vector<int64_t>& sizes = {});

// Expression constructors. They infer the result type from the operands; the verifier checks
// that the operands agree.
ExprRef constant(Type t, double value);
ExprRef index_const(int64_t value);
ExprRef var(const Kernel& k, int local);
ExprRef program_id(int dim);
ExprRef grid_extent(int dim);
ExprRef launch_rows();
ExprRef launch_size(int index);
ExprRef load(const Kernel& k, int buffer, ExprRef index, int lanes = 1);
ExprRef gather(const Kernel& k, int buffer, ExprRef indices);
ExprRef iota(int lanes);
ExprRef binary(Op op, ExprRef a, ExprRef b);
ExprRef fma(ExprRef a, ExprRef b, ExprRef c);
// Op::Bf16PairDot: acc + x_odd*y_odd, then + x_even*y_even, as vdpbf16ps (see the node).
ExprRef bf16_pair_dot(ExprRef acc, ExprRef x_odd, ExprRef y_odd, ExprRef x_even, ExprRef y_even);
ExprRef unary(Op op, ExprRef a);
ExprRef select(ExprRef cond, ExprRef a, ExprRef b);
ExprRef cast(ExprRef a, ScalarType to);
ExprRef broadcast(ExprRef a, int lanes);
ExprRef extract(ExprRef a, int lane);
ExprRef table(int id, ExprRef index);
ExprRef bitcast(ExprRef a, ScalarType to);
ExprRef call(MathFn f, ExprRef a);
ExprRef thread_id();
ExprRef shuffle_down(const Kernel& k, int local, int delta);
ExprRef shuffle_xor(const Kernel& k, int local, int mask);

inline ExprRef add(ExprRef a, ExprRef b) { return binary(Op::Add, std::move(a), std::move(b)); }
inline ExprRef sub(ExprRef a, ExprRef b) { return binary(Op::Sub, std::move(a), std::move(b)); }
inline ExprRef mul(ExprRef a, ExprRef b) { return binary(Op::Mul, std::move(a), std::move(b)); }
inline ExprRef div(ExprRef a, ExprRef b) { return binary(Op::Div, std::move(a), std::move(b)); }

// Appends statements to a kernel, with structured nesting.
class Builder {
 public:
  explicit Builder(Kernel& k) : k_(k) { stack_.push_back(&k.body); }
  Kernel& kernel() { return k_; }

  int buffer(std::string name, ScalarType elem, bool output, Extent extent, int64_t per_row = 0);
  // An Extent::row_blocks buffer: per_block elements for each block of block_rows rows.
  int workspace(std::string name, ScalarType elem, int64_t block_rows, int64_t per_block);
  int local(std::string name, Type t);
  // A fresh local assigned `value` now; returns a read of it.
  ExprRef let(std::string name, ExprRef value);
  ExprRef get(int local) const { return var(k_, local); }

  int table(std::vector<int64_t> values);
  // Refuse launches of exactly `rows` rows (Kernel::refused_launches), or those `when` names;
  // the first reason given for a condition is kept.
  void refuse_launch(int64_t rows, std::string why);
  void refuse_launches(Kernel::RefusedLaunch::When when, int64_t rows, std::string why);
  void assign(int local, ExprRef value);
  void store(int buffer, ExprRef index, ExprRef value);

  // for (v = begin; v < end; v += step) body(read of v)
  template <class F>
  void for_range(std::string name, ExprRef begin, ExprRef end, int64_t step, F&& body) {
    loop(std::move(name), std::move(begin), std::move(end), step, false, std::forward<F>(body));
  }
  // The same with bounds that may read program_id: a per-instance loop (the top of this file).
  template <class F>
  void for_per_instance(std::string name, ExprRef begin, ExprRef end, int64_t step, F&& body) {
    loop(std::move(name), std::move(begin), std::move(end), step, true, std::forward<F>(body));
  }
  template <class F>
  void loop(std::string name, ExprRef begin, ExprRef end, int64_t step, bool per_instance, F&& body) {
    int v = local(std::move(name), Type{ScalarType::i64, 1});
    Stmt s{StmtKind::For};
    s.target = v;
    s.begin = std::move(begin);
    s.end = std::move(end);
    s.step = step;
    s.per_instance = per_instance;
    stack_.back()->push_back(std::move(s));
    stack_.push_back(&stack_.back()->back().body);
    body(get(v));
    stack_.pop_back();
  }
  template <class F>
  void if_(ExprRef cond, F&& then) {
    Stmt s{StmtKind::If};
    s.value = std::move(cond);
    stack_.back()->push_back(std::move(s));
    stack_.push_back(&stack_.back()->back().body);
    then();
    stack_.pop_back();
  }
  template <class F, class G>
  void if_else(ExprRef cond, F&& then, G&& otherwise) {
    branch(std::move(cond), false, std::forward<F>(then), std::forward<G>(otherwise));
  }
  // The same with a condition that may read data: a per-instance if (the top of this file).
  template <class F, class G>
  void if_else_per_instance(ExprRef cond, F&& then, G&& otherwise) {
    branch(std::move(cond), true, std::forward<F>(then), std::forward<G>(otherwise));
  }
  template <class F, class G>
  void branch(ExprRef cond, bool per_instance, F&& then, G&& otherwise) {
    Stmt s{StmtKind::If};
    s.value = std::move(cond);
    s.per_instance = per_instance;
    stack_.back()->push_back(std::move(s));
    Stmt& placed = stack_.back()->back();
    stack_.push_back(&placed.body);
    then();
    stack_.pop_back();
    stack_.push_back(&placed.else_body);
    otherwise();
    stack_.pop_back();
  }
  // A Team statement: body(read of thread_id) once per thread.
  template <class F>
  void team(F&& body) {
    stack_.back()->push_back(Stmt{StmtKind::Team});
    stack_.push_back(&stack_.back()->back().body);
    body(thread_id());
    stack_.pop_back();
  }
  template <class F>
  void region(std::string label, std::string note, F&& body) {
    Stmt s{StmtKind::Region};
    s.label = std::move(label);
    s.note = std::move(note);
    stack_.back()->push_back(std::move(s));
    stack_.push_back(&stack_.back()->back().body);
    body();
    stack_.pop_back();
  }

 private:
  Kernel& k_;
  std::vector<std::vector<Stmt>*> stack_;
};

// The printer: one node per line, nested by indentation. Stable: tests compare it.
std::string print(const Kernel& k);
std::string print(const Expr& e, const Kernel& k);

// The expressions a statement of its kind uses, in evaluation order: Assign and If their value,
// Store its index and value, For its bounds. Other fields are ignored (the verifier checks only
// these), so passes over a kernel's expressions walk these and nothing else.
std::vector<const Expr*> operands(const Stmt& s);
// Whether a statement of its kind runs statements of its own: For, If (body and else_body),
// Region and Team. The bodies of other kinds are ignored like their unused fields.
inline bool has_bodies(const Stmt& s) {
  return s.kind == StmtKind::For || s.kind == StmtKind::If || s.kind == StmtKind::Region || s.kind == StmtKind::Team;
}

// The locals a Team statement's shuffles read (each once, in order of appearance): the values
// every backend must keep as they were when the statement began.
std::vector<int64_t> shuffled_locals(const Stmt& team);

// Per local: 1 if it is assigned (or is a loop variable) inside a Team statement, which makes
// it per-thread in a team kernel.
std::vector<char> per_thread_locals(const Kernel& k);

// Whether the kernel has a per-instance loop or if (Stmt::per_instance): its instances may then
// take different paths, and no backend runs them in lock step.
bool has_per_instance_control(const Kernel& k);

// The verifier: returns an empty string, or a message naming the first malformed node.
std::string verify(const Kernel& k);

// Per table: 1 if some Op::Table reads it at an index that may differ between program
// instances or between the threads of a team (data, program_id or thread_id), by the verifier's
// uniformity analysis. glibc's expf and logf index their tables by data bits. For a verified kernel.
std::vector<char> tables_read_at_varying_index(const Kernel& k);

}  // namespace ordo::ir
