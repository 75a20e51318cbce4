#!/usr/bin/env bash
# Installs what is missing (Debian packages, and onnxruntime from PyPI into a venv), then
# configures and builds ordo into build/.
# Safe to run again: it installs nothing that is present and rebuilds incrementally.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(cmake make g++ llvm-19-dev libfmt-dev doctest-dev python3-torch python3-numpy python3-venv python3-pip python3-dev pybind11-dev ccache)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# onnxruntime is a reference for tests only. Debian has no package, and its system python is
# externally managed, so it goes into a venv that also sees the system's torch and numpy.
onnxruntime_version=1.32.0
pyenv=build/pyenv
if ! "$pyenv/bin/python3" -c "import onnxruntime, sys; sys.exit(onnxruntime.__version__ != '$onnxruntime_version')" 2>/dev/null; then
  echo "setup: installing onnxruntime $onnxruntime_version into $pyenv"
  /usr/bin/python3 -m venv --system-site-packages "$pyenv"
  "$pyenv/bin/pip" install --quiet --disable-pip-version-check "onnxruntime==$onnxruntime_version"
fi

# PyTorch 2.15 (the reference users run) and transformers 5.23 (its RMSNorm classes), from PyPI.
# The default wheel pulls CUDA runtime packages (about 5 GB) and runs on a CPU. The venv lives in
# the user's cache, outside build/, so a fresh clone reuses it; ORDO_TORCH2_VENV moves it.
torch2_venv=$(scripts/torch2-venv --path)
if ! scripts/torch2-venv --check 2>/dev/null; then
  echo "setup: installing torch 2.15.0, transformers 5.23.0 and numpy into $torch2_venv (first time: about 5 GB)"
  rm -rf "$torch2_venv"
  mkdir -p "$(dirname "$torch2_venv")"
  /usr/bin/python3 -m venv "$torch2_venv"
  "$torch2_venv/bin/pip" install --quiet --disable-pip-version-check torch==2.15.0 transformers==5.23.0 numpy
  scripts/torch2-venv --check
fi

echo "setup: packages and venvs ready after ${SECONDS}s"
# ORDO_CMAKE_ARGS: extra configure options (scripts/test adds -DORDO_WERROR=ON under CI).
# shellcheck disable=SC2086
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release ${ORDO_CMAKE_ARGS:-} >/dev/null
cmake --build build -j"$(nproc)"
echo "setup: done in ${SECONDS}s"
