"""Bit-pattern comparison of torch tensors, for the worker processes of the torch 2.15 reference
tests (they put this directory on PYTHONPATH). bits.py is the numpy counterpart."""
import numpy as np
import torch


def bits(t):
    t = t.contiguous()
    return t.view(torch.int16).numpy() if t.element_size() == 2 else t.view(torch.int32).numpy()


def same(a, b):
    """(ok, why) for torch's `a` and ordo's `b`: same dtype, shape and bit patterns; every NaN
    equals every NaN."""
    if a.dtype != b.dtype or tuple(a.shape) != tuple(b.shape):
        return False, f"dtype/shape {b.dtype}{tuple(b.shape)} vs torch {a.dtype}{tuple(a.shape)}"
    differ = (bits(a) != bits(b)) & ~(torch.isnan(a.float()) & torch.isnan(b.float())).numpy()
    if differ.any():
        i = int(np.flatnonzero(differ.ravel())[0])
        return False, f"{int(differ.sum())} of {a.numel()} differ; first at {i}: ordo {b.reshape(-1)[i].item()!r} torch {a.reshape(-1)[i].item()!r}"
    return True, ""


# The attention tests run torch on 1, 2 and (a third of the cases) 3 threads.
THREAD_COUNTS = (1, 2, 3)


def runs_on(threads, case_index):
    return threads < 3 or case_index % 3 == 0


def _intel_host():
    try:
        return "GenuineIntel" in open("/proc/cpuinfo").read()
    except OSError:
        return False


INTEL_HOST = _intel_host()


def _physical_cores():
    """Distinct (package, core) pairs in sysfs, as ordo counts MKL's default thread count."""
    cores, cpu = set(), 0
    while True:
        base = f"/sys/devices/system/cpu/cpu{cpu}/topology/"
        try:
            cores.add((open(base + "physical_package_id").read().strip(), open(base + "core_id").read().strip()))
        except OSError:
            break
        cpu += 1
    return len(cores) or 1


# MKL's own thread count, which PyTorch's parallel loop's other threads run it with (the orders'
# mkl_threads): measured on 2 cores only, so elsewhere ordo refuses the loop's launches it touches.
PHYSICAL_CORES = _physical_cores()


def splits_on_three_threads(products):
    """Whether MKL's sgemm on 3 threads runs one of `products`, each (nt, n rows of C, m columns,
    K terms; nt: q @ k^T's form), otherwise than on one thread. Measured on an Intel AVX-512 host with
    direct calls (docs/research/torch2.15-attention.md): a product that is not a gemv is threaded
    past n*m*K = 144000; a gemv 'N' (one row of p @ v) cuts K in three from K = 384 unless m is in
    41..69; a gemv 'T' (one query or one key) cuts its other side's rows in three when
    (rows // 3) * K >= 4096 and rows * (K + 288) > 41680."""
    for nt, n, m, k in products:
        if k == 1:
            continue
        if nt and (n == 1 or m == 1):
            rows = m if n == 1 else n
            if rows > 1 and rows // 3 * k >= 4096 and rows * (k + 288) > 41680:
                return True
        elif not nt and n == 1:
            if k >= 384 and not 41 <= m <= 69:
                return True
        elif n * m * k > 144000:
            return True
    return False


def refusal_why(error, case, threads, products):
    """"" when ordo's error is the refusal it owes this launch, else why the case fails. With torch on
    3 threads PyTorch runs MKL on 3 threads for a launch of one (batch, head) (and for an Intel host's
    f32 products inside its parallel loop, on its first thread), whose splits are not modelled: on an
    Intel host in f32 ordo reproduces the calls 3 threads leave whole (splits_on_three_threads over
    the launch's `products`) and refuses the others; elsewhere it refuses every launch of one (batch,
    head) and runs the others (MKL gives one thread's bits inside the loop there). On an Intel host
    with other than 2 cores the loop's other threads run MKL on all of them (mkl_threads), which is
    not measured: ordo refuses those f32 launches too. Any other error, or that refusal of any other
    launch, fails."""
    loop = "PyTorch's parallel loop then runs MKL" in str(error)
    if INTEL_HOST and case["dtype"] == "f32" and loop and PHYSICAL_CORES != 2 and (threads == 2 or PHYSICAL_CORES > 3):
        return ""  # a host with more cores than the 2 measured: the loop's other threads run MKL on all of them
    if threads > 2 and "MKL's splits of a call are measured on 2 threads only" in str(error):
        if INTEL_HOST and case["dtype"] == "f32":
            owed = splits_on_three_threads(products)
        else:
            owed = case["batch"] * case.get("kv_heads", case["heads"]) == 1  # instances: (batch, K/V head)s
        if owed:
            return ""
    return f"ordo: {error}"


def flash_blocks(c):
    """PyTorch's CPU flash query and key blocks for case c: (query rows per block, key rows per block)
    of every block shape."""
    qs = min(256 if c["sq"] >= 768 else 64 if c["sq"] >= 192 else 32, c["sq"])
    ks = min(512, c["sk"])
    return [(qb, kb) for qb in {qs, c["sq"] % qs} - {0} for kb in {ks, c["sk"] % ks} - {0}]


# The layouts the attention tests hand PyTorch q, k and v in, for cases of several heads: its own
# (B, H, S, D) contiguous, a [B, S, H, D] projection viewed as (B, H, S, D) (rows H*D apart, as
# most models call SDPA), and one slice of a fused [B, S, 3, H, D] qkv projection (rows 3*H*D
# apart). PyTorch's flash kernels hand MKL those row strides, and its kernel choice reads them.
LAYOUTS = ("bhsd", "bshd", "fused")


def layout_of(case):
    """Each layout on a share of the cases of several heads, spread over shapes and dtypes."""
    if case.get("layout"):
        return case["layout"]
    return LAYOUTS[(case["seed"] + case["sq"]) % 3] if case["heads"] > 1 else "bhsd"


def relayout(t, layout):
    """t (B, H, S, D), contiguous, as the same values in `layout`."""
    if layout == "bhsd":
        return t
    if layout == "bshd":
        return t.transpose(1, 2).contiguous().transpose(1, 2)
    b, h, s, d = t.shape
    fused = torch.zeros(b, s, 3, h, d, dtype=t.dtype)
    fused[:, :, 1] = t.transpose(1, 2)
    return fused[:, :, 1].transpose(1, 2)
