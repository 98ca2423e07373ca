# The instruction set the C and C++ code is compiled for (TARN_ARCH_FLAGS), checked at
# configure time by a canary of known miscompilations (tests/compiler/miscompile_canary.cpp).
#
# Why not -march=native: GCC 12.2 (Debian 12's compiler) stores constants whose tail is zeros
# as a broadcast of their first element when AVX-512 is on or the tuning is an Intel server's
# (`std::vector<float>{1,1,1,1,1,1,0,0}` holds eight ones). -march=native turns one or the other
# on for every AVX-512 machine, so what a build computed depended on the CPU it was built on.
# -march=x86-64-v3 (AVX2, FMA, F16C, BMI2) with generic tuning is compiled right, runs on every
# x86-64 CPU since Haswell and Zen 1, and the kernels that gain from AVX-512 pick it at run
# time (target("avx512f") functions, kernels/cpu/linear_attention_simd.cpp); OpenBLAS and
# oneDNN choose their own kernels by the CPU as always.
#
#   -DTARN_ARCH_FLAGS=AUTO    (default) -march=x86-64-v3 on x86-64 when the canary passes with
#                             it, else the compiler's default instruction set
#   -DTARN_ARCH_FLAGS=NONE    the compiler's default (x86-64: SSE2 only), e.g. for a bundle that
#                             runs on another machine (tools/gpu_check.sh)
#   -DTARN_ARCH_FLAGS="..."   these flags as given: the canary still runs and warns, and the
#                             ctest compiler_canary fails, when they miscompile
set(TARN_ARCH_FLAGS "AUTO" CACHE STRING
    "C/C++ instruction-set flags: AUTO (-march=x86-64-v3 when the miscompilation canary passes), NONE, or flags as given")

set(tarn_canary_source ${CMAKE_CURRENT_LIST_DIR}/../tests/compiler/miscompile_canary.cpp)

# tarn_canary_passes(<out_var> <flags...>): builds the canary with the flags at -O2 and at -O3
# (the bug needs -O2 or more) and runs it; <out_var> is TRUE when every pattern holds, and
# TARN_CANARY_REPORT says what failed otherwise.
function(tarn_canary_passes out_var)
  set(report "")
  set(ok TRUE)
  foreach(level -O2 -O3)
    set(bindir ${CMAKE_BINARY_DIR}/CMakeFiles/tarn_canary${level})
    unset(tarn_canary_run CACHE)
    unset(tarn_canary_compiled CACHE)
    try_run(tarn_canary_run tarn_canary_compiled ${bindir} ${tarn_canary_source}
            COMPILE_DEFINITIONS ${ARGN} ${level}
            CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON
            COMPILE_OUTPUT_VARIABLE compile_out RUN_OUTPUT_VARIABLE run_out)
    if(NOT tarn_canary_compiled)
      set(ok FALSE)
      string(APPEND report "${level}: does not compile; ")
    elseif(NOT tarn_canary_run STREQUAL "0")
      set(ok FALSE)
      string(REGEX REPLACE "\n" "; " run_out "${run_out}")
      string(APPEND report "${level}: exit ${tarn_canary_run}: ${run_out}")
      break()  # the first optimisation level that fails says enough
    endif()
  endforeach()
  unset(tarn_canary_run CACHE)
  unset(tarn_canary_compiled CACHE)
  set(${out_var} ${ok} PARENT_SCOPE)
  set(TARN_CANARY_REPORT "${report}" PARENT_SCOPE)
endfunction()

set(TARN_ARCH_FLAGS_USED "")  # the list the project compiles C and C++ with
string(TOUPPER "${TARN_ARCH_FLAGS}" tarn_arch_upper)
if(tarn_arch_upper STREQUAL "AUTO")
  if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
    tarn_canary_passes(tarn_v3_ok -march=x86-64-v3)
    if(tarn_v3_ok)
      set(TARN_ARCH_FLAGS_USED -march=x86-64-v3)
      message(STATUS "tarn: compiling for -march=x86-64-v3 (generic tuning; the miscompilation canary passed)")
    else()
      message(STATUS "tarn: the miscompilation canary failed with -march=x86-64-v3 (${TARN_CANARY_REPORT}); "
                     "compiling for the compiler's default instruction set instead")
      tarn_canary_passes(tarn_default_ok)
      if(NOT tarn_default_ok)
        message(WARNING "tarn: the compiler miscompiles the canary even with its default instruction set "
                        "(${TARN_CANARY_REPORT}); check CMAKE_CXX_FLAGS, or build with another compiler (clang).")
      endif()
    endif()
  else()
    message(STATUS "tarn: compiling for the compiler's default instruction set (${CMAKE_SYSTEM_PROCESSOR})")
  endif()
elseif(NOT tarn_arch_upper STREQUAL "NONE")
  separate_arguments(TARN_ARCH_FLAGS_USED UNIX_COMMAND "${TARN_ARCH_FLAGS}")
  tarn_canary_passes(tarn_given_ok ${TARN_ARCH_FLAGS_USED})
  if(tarn_given_ok)
    message(STATUS "tarn: compiling with TARN_ARCH_FLAGS=${TARN_ARCH_FLAGS} (the miscompilation canary passed)")
  else()
    message(WARNING "tarn: TARN_ARCH_FLAGS=${TARN_ARCH_FLAGS} miscompiles the canary (${TARN_CANARY_REPORT}). "
                    "Kept because you set them; results may be wrong, and the ctest compiler_canary will fail. "
                    "Configure with -DTARN_ARCH_FLAGS=AUTO for flags that pass.")
  endif()
else()
  message(STATUS "tarn: compiling for the compiler's default instruction set (TARN_ARCH_FLAGS=NONE)")
endif()
foreach(flag ${TARN_ARCH_FLAGS_USED})
  add_compile_options($<$<COMPILE_LANGUAGE:CXX,C>:${flag}>)
endforeach()
