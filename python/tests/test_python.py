#!/usr/bin/python3
"""The Python package: every op from numpy and from torch, results of the same kind and shape,
bit-identical to the CLI's kernels and (for exact orders) to torch itself; no copies of the
inputs; clear errors for bad arguments.

Run: PYTHONPATH=build/python /usr/bin/python3 python/tests/test_python.py
"""
import sys

import numpy as np
import torch

import ordo

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL", what)


def bits(a):
    if isinstance(a, torch.Tensor):
        a = a.view(torch.int16) if a.dtype == torch.bfloat16 else a
        a = a.numpy()
    return a.view(np.uint16 if a.dtype.itemsize == 2 else np.uint32)


def same_bits(a, b):
    fa = np.asarray(a.float() if isinstance(a, torch.Tensor) else a, dtype=np.float64)
    fb = np.asarray(b.float() if isinstance(b, torch.Tensor) else b, dtype=np.float64)
    return a.shape == b.shape and bool(np.all((bits(a) == bits(b)) | (np.isnan(fa) & np.isnan(fb))))


rng = np.random.default_rng(7)
x = rng.standard_normal((3, 5, 200)).astype(np.float32)  # rank 3: the op reduces the last dim
w = (1 + 0.1 * rng.standard_normal(200)).astype(np.float32)
b = (0.1 * rng.standard_normal(200)).astype(np.float32)
xt, wt, bt = torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b)
torch.set_num_threads(1)

# numpy in, numpy out; torch in, torch out; the same bits either way.
y, mean, rstd = ordo.layer_norm(x, w, b, eps=1e-5, order="torch1.13-cpu-avx2")
check(isinstance(y, np.ndarray) and y.shape == x.shape and mean.shape == (3, 5) and rstd.shape == (3, 5), "numpy shapes")
yt, mt, rt = ordo.layer_norm(xt, wt, bt, eps=1e-5, order="torch1.13-cpu-avx2")
check(isinstance(yt, torch.Tensor) and same_bits(yt, torch.from_numpy(y)), "torch and numpy results agree bit for bit")
# The exact order reproduces torch itself (its default capability here is avx2).
ref = torch.native_layer_norm(xt, [200], wt, bt, 1e-5)
check(same_bits(yt, ref[0]) and same_bits(mt, ref[1].reshape(3, 5)) and same_bits(rt, ref[2].reshape(3, 5)),
      "layer_norm torch1.13-cpu-avx2 equals torch.native_layer_norm")
check(same_bits(ordo.softmax(xt, order="torch1.13-cpu-avx2"), torch.softmax(xt, -1)), "softmax equals torch")
check(same_bits(ordo.log_softmax(xt, order="torch1.13-cpu-avx2"), torch.log_softmax(xt, -1)), "log_softmax equals torch")
xb = xt.to(torch.bfloat16)
check(same_bits(ordo.softmax(xb, order="torch1.13-cpu-avx2"), torch.softmax(xb, -1)), "bf16 softmax equals torch")
var, mean = ordo.var_mean(xt, order="torch1.13-cpu")
tv, tm = torch.var_mean(xt, -1, unbiased=False)
check(same_bits(var, tv) and same_bits(mean, tm), "var_mean equals torch.var_mean")
# sum and mean: a value per row, numpy in numpy out, torch in torch out, the same bits either way;
# mean is the order's sum divided by N, rounded once. (torch 2.15's own are reference_torch2_cpu's.)
s_np, m_np = ordo.sum(x, order="fast"), ordo.mean(x, order="fast")
check(isinstance(s_np, np.ndarray) and s_np.shape == (3, 5) and m_np.shape == (3, 5), "sum, mean: one value per row of a numpy x")
check(same_bits(ordo.sum(xt, order="fast"), torch.from_numpy(s_np)), "sum: torch and numpy x give the same bits")
check(same_bits(m_np, (s_np / np.float32(200)).astype(np.float32)), "mean is fast's sum / N rounded once")
# silu: fast takes Sleef's expf_u10 at every element; within a few ulp of float64's x/(1+exp(-x)).
y_silu = ordo.silu(x, order="fast")
ref_silu = x.astype(np.float64) / (1 + np.exp(-x.astype(np.float64)))
check(y_silu.shape == x.shape and np.abs(y_silu - ref_silu).max() <= 4 * np.spacing(np.abs(ref_silu).max().astype(np.float32)),
      "silu (fast) within 4 ulp of the largest output, against float64")
check(same_bits(ordo.silu(xt, order="fast"), torch.from_numpy(y_silu)), "silu: torch and numpy x give the same bits")
# gelu_tanh: fast takes Sleef's tanhf_u10 at every element; within a few ulp of float64's formula.
y_gelu = ordo.gelu_tanh(x, order="fast")
x64 = x.astype(np.float64)
ref_gelu = 0.5 * x64 * (1 + np.tanh(np.sqrt(2 / np.pi) * (x64 + 0.044715 * x64 ** 3)))
check(y_gelu.shape == x.shape and np.abs(y_gelu - ref_gelu).max() <= 4 * np.spacing(np.abs(ref_gelu).max().astype(np.float32)),
      "gelu_tanh (fast) within 4 ulp of the largest output, against float64")
check(same_bits(ordo.gelu_tanh(xt, order="fast"), torch.from_numpy(y_gelu)), "gelu_tanh: torch and numpy x give the same bits")
dy_gelu = rng.standard_normal(x.shape).astype(np.float32)
t64 = np.tanh(np.sqrt(2 / np.pi) * (x64 + 0.044715 * x64 ** 3))
ref_dx_gelu = dy_gelu * (0.5 * (1 + t64) + 0.5 * x64 * (1 - t64 ** 2) * np.sqrt(2 / np.pi) * (1 + 3 * 0.044715 * x64 ** 2))
dx_gelu = ordo.gelu_tanh_backward(dy_gelu, x, order="fast")
check(dx_gelu.shape == x.shape and np.abs(dx_gelu - ref_dx_gelu).max() <= 8 * np.spacing(np.float32(np.abs(ref_dx_gelu).max())),
      "gelu_tanh_backward (fast) within 8 ulp of the largest gradient, against float64")
# gelu (the erf form): fast takes oneDNN's minimax erf, within 2^-20 of erf(x/sqrt 2) (measured
# at most 6.9e-7, tests/reference/numpy_bounds.py), then a rounded sum and product:
# |dy| <= (|x|/2)(2^-20 + u|1 + erf|) + 2u|y| per element.
import math  # noqa: E402
erf64 = np.vectorize(math.erf, otypes=[np.float64])(x64 / math.sqrt(2))
ref_erf_gelu = 0.5 * x64 * (1 + erf64)
bound = 0.5 * np.abs(x64) * (2.0 ** -20 + 2.0 ** -24 * np.abs(1 + erf64)) + 2 * 2.0 ** -24 * np.abs(ref_erf_gelu) + 2.0 ** -149
y_erf_gelu = ordo.gelu(x, order="fast")
check(y_erf_gelu.shape == x.shape and bool((np.abs(y_erf_gelu - ref_erf_gelu) <= bound).all()),
      "gelu (fast) within its stated bound of float64's (x/2)(1 + erf(x/sqrt 2)) at every element")
check(same_bits(ordo.gelu(xt, order="fast"), torch.from_numpy(y_erf_gelu)), "gelu: torch and numpy x give the same bits")
# gelu_backward: Abramowitz and Stegun's erf (within 1.5e-7, their stated bound) and oneDNN's exp;
# dx = dy (cdf + x pdf) within 8u |dy| (measured: 4.4u at most over N(0, 1), N(0, 16), N(0, 400)).
ref_dx_erf_gelu = dy_gelu * (0.5 * (1 + erf64) + x64 * np.exp(-0.5 * x64 ** 2) / math.sqrt(2 * math.pi))
dx_erf_gelu = ordo.gelu_backward(dy_gelu, x, order="fast")
check(dx_erf_gelu.shape == x.shape and bool((np.abs(dx_erf_gelu - ref_dx_erf_gelu) <= 8 * 2.0 ** -24 * np.abs(dy_gelu)).all()),
      "gelu_backward (fast) within 8u |dy| of float64's dy (cdf + x pdf) at every element")
dy_silu = rng.standard_normal(x.shape).astype(np.float32)
s64 = 1 / (1 + np.exp(-x.astype(np.float64)))
ref_dx = dy_silu * s64 * (1 + x * (1 - s64))
dx_silu = ordo.silu_backward(dy_silu, x, order="fast")
check(dx_silu.shape == x.shape and np.abs(dx_silu - ref_dx).max() <= 8 * np.spacing(np.float32(np.abs(ref_dx).max())),
      "silu_backward (fast) within 8 ulp of the largest gradient, against float64")
s_seq = ordo.sum(x.astype(np.float64).astype(np.float32), order="two-pass-sequential")
check(np.abs(s_seq.astype(np.float64) - x.astype(np.float64).sum(-1)).max() < 1e-4, "two-pass-sequential sums within 1e-4 of float64")
yr, rr = ordo.rms_norm(xt, wt, eps=1e-5, order="torch-composite-cpu")
check(same_bits(yr, xt * torch.rsqrt(xt.pow(2).mean(-1, keepdim=True) + 1e-5) * wt), "rms_norm equals the torch composite")

# cross_entropy: int64 class indices from numpy or torch; the 1.13 order equals torch's
# F.cross_entropy; the backward (fast) is within a few ulp of float64's softmax minus the one-hot
# gradient; bad targets are refused by value.
logits = rng.standard_normal((37, 50)).astype(np.float32)
labels = rng.integers(0, 50, 37)
labels[::5] = -100
loss, logp, tw = ordo.cross_entropy(logits, labels, order="torch1.13-cpu-avx2")
check(isinstance(loss, np.ndarray) and loss.shape == () and logp.shape == logits.shape and tw.shape == () and float(tw) == 29,
      "cross_entropy: a scalar loss, logp like x and the 29 rows counted, from numpy")
lt = ordo.cross_entropy(torch.from_numpy(logits), torch.from_numpy(labels), order="torch1.13-cpu-avx2")[0]
check(same_bits(lt, torch.nn.functional.cross_entropy(torch.from_numpy(logits), torch.from_numpy(labels))) and
      same_bits(lt, torch.from_numpy(loss)), "cross_entropy torch1.13-cpu-avx2 equals torch's F.cross_entropy, numpy and torch alike")
none = ordo.cross_entropy(logits, labels, reduction="none", order="fast")[0]
check(none.shape == (37,) and np.all(none[::5] == 0), "reduction none: a loss per row, 0 where ignored")
_, logp_fast, tw_fast = ordo.cross_entropy(logits, labels, order="fast")
dx = ordo.cross_entropy_backward(np.array(1.0, dtype=np.float32), logp_fast, labels, tw_fast, order="fast")
l64 = logits.astype(np.float64)
ref_dx = np.exp(l64 - l64.max(1, keepdims=True))
ref_dx /= ref_dx.sum(1, keepdims=True)
ref_dx[labels == -100] = 0
ref_dx[np.flatnonzero(labels != -100), labels[labels != -100]] -= 1
ref_dx /= 29
check(dx.shape == logits.shape and np.abs(dx - ref_dx).max() <= 8 * np.spacing(np.float32(np.abs(ref_dx).max())),
      "cross_entropy_backward (fast) within 8 ulp of the largest gradient, against float64")
for bad_target, text in ((labels.astype(np.int32), "not int64"), (np.full(37, 50), "target 50 is out of bounds"),
                         (labels[:5], "needs (37,)")):
    try:
        ordo.cross_entropy(logits, bad_target, order="fast")
        check(False, f"cross_entropy refuses a bad target ({text})")
    except ValueError as e:
        check(text in str(e), f"cross_entropy refuses a bad target ({text}): {e}")
try:
    ordo.cross_entropy(logits, labels, reduction="avg", order="fast")
    check(False, "cross_entropy refuses reduction='avg'")
except ValueError as e:
    check("'avg'" in str(e), f"cross_entropy refuses reduction='avg': {e}")

# bf16 from numpy travels as uint16 bit patterns with dtype="bf16".
xb_np = xb.view(torch.int16).numpy().view(np.uint16)
sb = ordo.softmax(xb_np, order="torch1.13-cpu-avx2", dtype="bf16")
check(sb.dtype == np.uint16 and same_bits(torch.from_numpy(sb.view(np.int16)).view(torch.bfloat16), torch.softmax(xb, -1)),
      "bf16 via numpy uint16")

# No copy: the kernel reads the caller's memory. Changing x changes the result.
x2 = x.copy()
before = ordo.softmax(x2, order="fast")
x2[0, 0, 0] += 10
check(not np.array_equal(ordo.softmax(x2, order="fast")[0, 0], before[0, 0]), "inputs are read in place")

# softmax and log_softmax backward from dy and the forward's y: numpy in, numpy out; torch in,
# torch out; the same bits either way, and close to the float64 formulas.
sm, lsm = ordo.softmax(x, order="fast"), ordo.log_softmax(x, order="fast")
dy = rng.standard_normal(x.shape).astype(np.float32)
y64, ly64, dy64 = sm.astype(np.float64), lsm.astype(np.float64), dy.astype(np.float64)
want = {"softmax": (dy64 - (dy64 * y64).sum(-1, keepdims=True)) * y64,
        "log_softmax": dy64 - np.exp(ly64) * dy64.sum(-1, keepdims=True)}
for op, fwd in (("softmax", sm), ("log_softmax", lsm)):
    backward = getattr(ordo, op + "_backward")
    dx = backward(dy, fwd, order="fast")
    dxt = backward(torch.from_numpy(dy), torch.from_numpy(fwd), order="torch2.15-cpu-avx2(threads=2)")
    check(isinstance(dx, np.ndarray) and dx.shape == x.shape and np.abs(dx - want[op]).max() < 1e-4 * np.abs(want[op]).max(),
          f"{op}_backward: numpy out, close to float64")
    check(isinstance(dxt, torch.Tensor) and same_bits(dxt, torch.from_numpy(backward(dy, fwd, order="torch2.15-cpu-avx2(threads=2)"))),
          f"{op}_backward: torch and numpy results agree bit for bit")

# Errors are ValueError/TypeError naming the problem; nothing crashes.
for what, call, expect in [
    ("non-contiguous", lambda: ordo.softmax(xt.transpose(0, 2)), "contiguous"),
    ("unknown order", lambda: ordo.softmax(xt, order="nope"), "nope"),
    ("int input", lambda: ordo.softmax(np.ones((2, 3), np.int32)), "int32"),
    ("uint16 without dtype", lambda: ordo.softmax(np.ones((2, 3), np.uint16)), "dtype='bf16'"),
    ("weight length", lambda: ordo.layer_norm(x, w[:10], b), "weight"),
    ("not an array", lambda: ordo.softmax([1.0, 2.0]), "dimension"),
    ("softmax_backward shapes", lambda: ordo.softmax_backward(x[..., :10], x), "dy has shape (3, 5, 10) but y has (3, 5, 200)"),
    ("softmax_backward dtypes", lambda: ordo.softmax_backward(x.astype(np.float16), x), "dy is f16 but y is f32"),
]:
    try:
        call()
        check(False, f"{what}: no error")
    except (ValueError, TypeError) as e:
        check(expect in str(e), f"{what}: message {str(e)!r} lacks {expect!r}")

# attention: torch in, torch out, bit-identical to eager with the pinned orders (the installed
# torch runs its avx2 kernels by default here); numpy in, numpy out; lse on request.
import math
import torch
g = torch.Generator().manual_seed(3)
q, k, v = (torch.randn(2, 3, 19, 64, generator=g) for _ in range(3))
eager = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(64), -1) @ v
for order in ("torch1.13-cpu-math", "exact-tiled"):
    got = ordo.attention(q, k, v, order=order)
    check(isinstance(got, torch.Tensor) and same_bits(got.numpy(), eager.numpy()), f"attention {order} matches eager bit for bit")
# Strided views with a contiguous last dim (a [B, S, H, D] projection viewed as [B, H, S, D]):
# packed for the kernel, their row stride in the request. An order that reproduces no library
# gives the packed tensors' bits; PyTorch's composite, which copies strided operands first, is
# refused with them; a strided last dim is an error.
qs, ks, vs = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v))
check(same_bits(ordo.attention(qs, ks, vs, order="fast").numpy(), ordo.attention(q, k, v, order="fast").numpy()),
      "attention on strided views: the packed tensors' bits")
for what, call, expect in [
    ("strided q, k, v for the composite", lambda: ordo.attention(qs, ks, vs, order="torch2.15-cpu-math(mkl=intel)"), "row strides (192, 192, 192)"),
    ("a strided last dim", lambda: ordo.attention(q.transpose(-1, -2).contiguous().transpose(-1, -2), k, v), "last dim has stride"),
]:
    try:
        call()
        check(False, f"{what}: accepted")
    except (ValueError, RuntimeError) as e:
        check(expect in str(e), f"{what}: {e}")
got, lse = ordo.attention(q.numpy(), k.numpy(), v.numpy(), order="flash(16)", return_lse=True)
ref_lse = torch.logsumexp(q.double() @ k.double().transpose(-2, -1) / 8, -1).numpy()
check(isinstance(got, np.ndarray) and got.shape == (2, 3, 19, 64) and np.abs(got - eager.numpy()).max() < 1e-5
      and lse.shape == (2, 3, 19) and np.abs(lse - ref_lse).max() < 1e-5, "attention flash: numpy out, close, lse")
# attention_backward: close to autograd of the float64 composite; torch tensors in and out; lse
# given or recomputed by the order's forward.
qd, kd, vd = (t.double().requires_grad_() for t in (q, k, v))
od = torch.softmax(qd @ kd.transpose(-2, -1) / 8, -1) @ vd
dout = torch.randn(2, 3, 19, 64, generator=g)
od.backward(dout.double())
lse32 = torch.from_numpy(ref_lse.astype(np.float32))
for given in (True, False):
    grads = ordo.attention_backward(q, k, v, od.detach().float(), dout, lse=lse32 if given else None, order="flash")
    check(all(isinstance(t, torch.Tensor) for t in grads)
          and all(np.abs(t.numpy() - r.grad.numpy()).max() < 1e-4 for t, r in zip(grads, (qd, kd, vd))),
          f"attention_backward flash (lse {'given' if given else 'recomputed'}): dq, dk, dv close to float64 autograd")
for what, call, expect in [
    ("attention_backward dout shape", lambda: ordo.attention_backward(q, k, v, q, dout[..., :5, :]), "dout has shape"),
    ("attention_backward lse shape", lambda: ordo.attention_backward(q, k, v, q, dout, lse=lse32[..., :3]), "lse has shape"),
    ("attention shapes", lambda: ordo.attention(q, k[..., :32], v[..., :32]), "differ"),
    ("attention D", lambda: ordo.attention(q[..., :12], k[..., :12], v[..., :12]), "head dim"),
]:
    try:
        call()
        check(False, f"{what}: no error")
    except ValueError as e:
        check(expect in str(e), f"{what}: message {str(e)!r} lacks {expect!r}")

names = {o["name"]: o for o in ordo.orders()}
check(names["torch1.13-cpu-avx2"]["exact"] and not names["fast"]["exact"] and not names["torch1.13-cpu-avx2"]["unverified"],
      "orders() marks exact/unverified")
table = ordo.compare("softmax", cols=300, rows=8, orders=["fast", "online", "torch1.13-cpu-avx2"])
check([r["order"] for r in table] == ["fast", "online", "torch1.13-cpu-avx2"] and table[0]["identical"]["fast"] == 1.0
      and table[1]["max_ulp"]["y"] >= 0 and "agreement" in str(table), "compare() returns the table")
# Every order that has the op for the dtype, and only those: the torch2.15 rows sum f32 rows only.
table = ordo.compare("sum", cols=40, rows=4, dtype="bf16")
check(table and all(not r["error"] for r in table) and "fast" in [r["order"] for r in table]
      and not any(r["order"].startswith("torch2.15") for r in table), "compare() of a bf16 sum runs the orders that have it")

# The in-memory kernel cache: bounded, least recently requested dropped first.
capacity = ordo.cache_stats()["capacity"]
ordo.set_kernel_cache_capacity(2)
before = ordo.cache_stats()
for n in (301, 302, 303):  # a kernel built for each N (ordo.softmax would take the one for every N)
    ordo._ordo.compile("softmax", n, "f32", "", "fast")
after = ordo.cache_stats()
check(after["entries"] == 2 and after["capacity"] == 2 and after["evictions"] - before["evictions"] >= 1,
      f"the kernel cache keeps 2 kernels when told to: {after}")
try:
    ordo.set_kernel_cache_capacity(0)
    check(False, "a kernel cache capacity of 0 is refused")
except ValueError as e:
    check("at least 1" in str(e), f"a kernel cache capacity of 0 is refused: {e}")
ordo.set_kernel_cache_capacity(capacity)

# Executors: ordo's pool by default here (ordo.torch picks OpenMP); torch's libgomp is loaded, so
# OpenMP is there to pick; the bits are the same on either.
check(ordo.executor() == "pool", f"the default executor is ordo's pool, got {ordo.executor()}")
big = np.random.default_rng(3).standard_normal((512, 1000)).astype(np.float32)
on_pool = [ordo.softmax(big, order="fast"), ordo.layer_norm(big, order="torch1.13-cpu-avx2")[0]]
ordo.set_executor("openmp")
check(ordo.executor() == "openmp", "set_executor('openmp') takes effect")
on_omp = [ordo.softmax(big, order="fast"), ordo.layer_norm(big, order="torch1.13-cpu-avx2")[0]]
check(all(np.array_equal(bits(a), bits(b)) for a, b in zip(on_pool, on_omp)), "OpenMP's threads give the pool's bits")
ordo.set_executor("pool")
try:
    ordo.set_executor("tbb")
    check(False, "an unknown executor is refused")
except ValueError as e:
    check("expected pool or openmp" in str(e), f"an unknown executor is refused: {e}")

print(f"python package: {'ok' if not failures else f'{len(failures)} failed'}")
sys.exit(1 if failures else 0)
