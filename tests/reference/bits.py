"""Bit-pattern helpers the reference tests share. bf16 arrays travel as uint16 bit patterns."""
import numpy as np


def to_bf16_bits(a):
    """float32 -> bfloat16 bit patterns, round to nearest even; NaN stays a quiet NaN."""
    f = np.asarray(a, dtype=np.float32)
    u = f.view(np.uint32).astype(np.uint64)
    bits = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(f), np.uint16(0x7FC0), bits).astype(np.uint16)


def as_float(a):
    a = a.reshape(-1) if a.ndim == 0 else a  # a scalar (a reduced loss): numpy views no 0-d array as another width
    return (a.astype(np.uint32) << 16).view(np.float32) if a.dtype == np.uint16 else a


def same_bits(a, b):
    """Bit-identical, with every NaN equal to every NaN (NaN payloads are unspecified).
    Returns (ok, message naming the first difference)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False, f"shape/dtype {a.shape}/{a.dtype} vs {b.shape}/{b.dtype}"
    a, b = (a.reshape(-1), b.reshape(-1)) if a.ndim == 0 else (a, b)
    ua, ub = (a, b) if a.dtype == np.uint16 else (a.view(np.uint32), b.view(np.uint32))
    fa, fb = as_float(a), as_float(b)
    bad = (ua != ub) & ~(np.isnan(fa) & np.isnan(fb))
    if bad.any():
        i = np.flatnonzero(bad.ravel())[0]
        return False, f"{int(bad.sum())} of {a.size} differ; first at {i}: ordo {fa.ravel()[i]!r} reference {fb.ravel()[i]!r}"
    return True, ""


def cpu_flags():
    """The CPU's feature flags as /proc/cpuinfo lists them (an empty set where it cannot be read)."""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_has_avx512():
    """PyTorch's avx512 kernels need AVX-512F (and BW/VL/DQ); without them
    ATEN_CPU_CAPABILITY=avx512 silently runs the avx2 build, so nothing can be verified."""
    return all(f in cpu_flags() for f in ("avx512f", "avx512bw", "avx512vl", "avx512dq"))


def capabilities(report, avx512_order="torch1.13-cpu-avx512"):
    """The ATEN_CPU_CAPABILITY values this machine can verify; says so, naming the order left
    unverified, when avx512 is not one."""
    caps = ["default", "avx2"]
    if cpu_has_avx512():
        caps.append("avx512")
    else:
        report(f"NOT VERIFIED: {avx512_order} (this CPU has no AVX-512; torch would run its avx2 kernels)")
    return caps
