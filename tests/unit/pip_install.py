"""`pip install .` at the repo root builds and installs the ordo package into the active
environment, and `import ordo` works from any directory.

Two fresh venvs (Debian's python3, as the torch 2.15 venv uses):
  1. `pip install .`: numpy comes along as the one dependency; ordo runs on numpy arrays.
  2. `pip install --no-deps .` into a venv that sees the torch 2.15 venv's packages (a .pth
     file): ordo runs on torch tensors and gives torch's bits with order torch2.15-cpu, and
     ordo.torch (installed with it) routes F.layer_norm to ordo inside pinned.
Both import ordo from a temporary directory, never from the source tree. The build directory
(build/pip, pyproject.toml) is kept, so the second install and later runs rebuild nothing; on a
fresh clone ccache serves the first one's compiles from the main build's (CMakeLists.txt).
"""
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

CHECK_NUMPY = r'''
import numpy as np, ordo, sys
assert not ordo.__file__.startswith(sys.argv[1]), ordo.__file__  # the installed package, not the tree
x = np.random.default_rng(0).standard_normal((4, 100)).astype(np.float32)
y, mean, rstd = ordo.layer_norm(x, order="two-pass-pairwise")
assert y.shape == x.shape and mean.shape == (4,), (y.shape, mean.shape)
print("numpy:", ordo.__file__)
'''

CHECK_TORCH = r'''
import numpy as np, ordo, sys, torch
assert not ordo.__file__.startswith(sys.argv[1]), ordo.__file__
x = torch.randn(5, 1000, dtype=torch.bfloat16)
w = torch.randn(1000)
want = torch.nn.functional.layer_norm(x, [1000], w.bfloat16(), None, 1e-5)
got = ordo.layer_norm(x, w.bfloat16(), None, order="torch2.15-cpu")[0]
assert torch.equal(want.view(torch.int16), got.view(torch.int16)), "ordo's torch2.15-cpu layer_norm differs from torch's"
import ordo.torch  # installed with the package: torch's own call, routed to ordo
with torch.no_grad(), ordo.torch.pinned("torch2.15-cpu", strict=True):
    pinned = torch.nn.functional.layer_norm(x, [1000], w.bfloat16(), None, 1e-5)
assert torch.equal(want.view(torch.int16), pinned.view(torch.int16)), "ordo.torch.pinned's layer_norm differs from torch's"
print("torch", torch.__version__, ":", ordo.__file__)
'''


def run(cmd, **kw):
    print("$", " ".join(cmd), flush=True)
    return subprocess.run(cmd, **kw)


def main():
    torch2 = subprocess.run([os.path.join(ROOT, "scripts", "torch2-venv"), "--python"], capture_output=True, text=True).stdout.strip()
    site = subprocess.run([torch2, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True)
    if site.returncode != 0:
        print(f"FAIL: the torch 2.15 venv ({torch2}) does not run; scripts/setup.sh makes it")
        return 1
    # The main build's extra configure options (scripts/test adds -DORDO_WERROR=ON under CI) reach
    # scikit-build-core through CMAKE_ARGS: the package is held to the same warnings, and its
    # compiles have the main build's flags, so ccache (CMakeLists.txt) serves them.
    # scikit-build-core would take Python's sysconfig compilers (x86_64-linux-gnu-g++ on Debian):
    # CMake's own defaults, which the main build uses, keep ccache's entries shared.
    pip_env = dict(os.environ)
    pip_env.setdefault("CC", "cc")
    pip_env.setdefault("CXX", "c++")
    if os.environ.get("ORDO_CMAKE_ARGS", "").strip():
        pip_env["CMAKE_ARGS"] = (os.environ.get("CMAKE_ARGS", "") + " " + os.environ["ORDO_CMAKE_ARGS"]).strip()
    tmp = tempfile.mkdtemp(prefix="ordo_pip_")
    failed = 0
    try:
        for name, args, check, see_torch in (("plain", [], CHECK_NUMPY, False), ("no-deps", ["--no-deps"], CHECK_TORCH, True)):
            venv = os.path.join(tmp, name)
            if run(["/usr/bin/python3", "-m", "venv", venv]).returncode != 0:
                print(f"FAIL: python3 -m venv {venv}")
                return 1
            py = os.path.join(venv, "bin", "python3")
            if see_torch:
                purelib = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                         capture_output=True, text=True).stdout.strip()
                with open(os.path.join(purelib, "torch2_venv.pth"), "w") as f:
                    f.write(site.stdout.strip() + "\n")
            r = run([py, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *args, ROOT], env=pip_env)
            if r.returncode != 0:
                print(f"FAIL: pip install {' '.join(args)} . exited {r.returncode}")
                failed += 1
                continue
            r = run([py, "-c", check, ROOT], cwd=tmp)
            if r.returncode != 0:
                print(f"FAIL: import ordo after pip install {' '.join(args)} .")
                failed += 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{2 - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
