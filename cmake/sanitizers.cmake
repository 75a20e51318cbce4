# Sanitizer and fuzzing builds, used by scripts/hardening. Both are off by default, and a plain
# build is unchanged by this file.
#
#   -DORDO_SANITIZE=address,undefined  ASan + UBSan. Every UBSan check aborts (no recovery), so
#                                      any report fails the program that hit it.
#   -DORDO_SANITIZE=thread             TSan.
#   -DORDO_FUZZ=ON                     libFuzzer coverage on all host code, and the targets in
#                                      tests/fuzz. Needs clang (Debian's clang-19).
#
# Only the host code compiled here is instrumented. Debian's libLLVM-19.so is not, and neither is
# the machine code ordo JIT-compiles: ASan and TSan see their memory only through the host code
# around them (the buffers it allocates, the locks it takes).

set(ORDO_SANITIZE "" CACHE STRING "Sanitizers for ordo's host code: address,undefined or thread (empty: none)")
option(ORDO_FUZZ "Build the libFuzzer targets in tests/fuzz (needs clang)" OFF)

if(ORDO_SANITIZE)
  if(ORDO_SANITIZE MATCHES "thread" AND ORDO_SANITIZE MATCHES "address")
    message(FATAL_ERROR "ORDO_SANITIZE=${ORDO_SANITIZE}: ThreadSanitizer cannot be combined with AddressSanitizer")
  endif()
  # -O0 instead of Release's -O3: under the sanitizers (and libFuzzer's coverage counters) -O1
  # took four times as long to compile (gen/blocks/reductions.cpp: 25 s against 6 s), and -O0 gives the
  # most exact stack traces. But the sanitized tests ran 2.8 times as long with all of it at -O0
  # (784 s against 277 s): their hot code is the interpreter (perf: over two thirds of test_ir's
  # time, with ASan's stack and shadow upkeep). So ir/ keeps -O1, as do the other hot files
  # (ORDO_SANITIZE_HOT_OPTIONS, applied in CMakeLists.txt). -g1 gives the reports file:line at
  # little cost.
  add_compile_options(-fsanitize=${ORDO_SANITIZE} -fno-omit-frame-pointer -O0 -g1)
  set(ORDO_SANITIZE_HOT_OPTIONS -O1)
  if(ORDO_SANITIZE MATCHES "undefined")
    add_compile_options(-fno-sanitize-recover=all)
    # Clang's -fsanitize=function checks an indirect call by reading a type signature from the 8
    # bytes before the callee. Code the JIT emits has no signature there, and when a kernel
    # starts on a page boundary the read faults (a SEGV in CompiledKernel::run). The check needs
    # instrumented callees, which JIT-compiled kernels never are, so it is off.
    if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
      add_compile_options(-fno-sanitize=function)
    endif()
  endif()
  add_link_options(-fsanitize=${ORDO_SANITIZE})
endif()

if(ORDO_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "ORDO_FUZZ needs clang for libFuzzer (e.g. -DCMAKE_CXX_COMPILER=clang++-19), not ${CMAKE_CXX_COMPILER_ID}")
  endif()
  # Coverage counters in every object, so the fuzzers are guided by ordo's code and not only by
  # their own. The libFuzzer runtime (and its main) is linked into the fuzz targets alone.
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()
