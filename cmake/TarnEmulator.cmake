# The CUDA emulator and everything built around it (docs/design.md section 4, kernels/emu/README.md).
# Included from three places, and does what fits each:
#   kernels/CMakeLists.txt  tarn_emu (the emulator), tarn_kernels_emu (every kernels/cuda/*.cu
#                           compiled by g++ against it, for tests), and, when nvcc builds
#                           tarn_kernels_cuda, <build>/cuda_resource_usage.txt from ptxas' report
#   tests/CMakeLists.txt    the lint_cuda test (tools/lint_cuda.sh) and the register budget
#                           of every nvcc-built kernel (tools/check_register_budget.py)
#   cmake -P (script mode)  the helpers behind the resource-usage file: TARN_RU_MODE=compile runs
#                           one nvcc command and keeps its ptxas report beside the object;
#                           TARN_RU_MODE=collect gathers the reports into one file with a summary

# ---------------------------------------------------------------------------------------------
# Script mode.
if(CMAKE_SCRIPT_MODE_FILE)
  if(TARN_RU_MODE STREQUAL "compile")
    # cmake -DTARN_RU_MODE=compile -P TarnEmulator.cmake -- <launcher...> nvcc <args...>
    set(cmd)
    set(object)
    set(after_dashes OFF)
    set(take_object OFF)
    math(EXPR last "${CMAKE_ARGC} - 1")
    foreach(i RANGE 1 ${last})
      set(arg "${CMAKE_ARGV${i}}")
      if(after_dashes)
        list(APPEND cmd "${arg}")
        if(take_object)
          set(object "${arg}")
          set(take_object OFF)
        elseif(arg STREQUAL "-o")
          set(take_object ON)
        endif()
      elseif(arg STREQUAL "--")
        set(after_dashes ON)
      endif()
    endforeach()
    execute_process(COMMAND ${cmd} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
    if(object)
      file(WRITE "${object}.resource-usage.txt" "${err}")
    endif()
    # Echo everything but the per-function "ptxas info" lines, which go to the file instead.
    string(REGEX REPLACE "ptxas info[^\n]*\n" "" shown "${err}")
    string(REGEX REPLACE "(\n|^)[ \t]+[0-9]+ bytes stack frame[^\n]*" "" shown "${shown}")
    string(STRIP "${shown}" shown)
    if(out)
      message(NOTICE "${out}")
    endif()
    if(shown)
      message(NOTICE "${shown}")
    endif()
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "nvcc failed (${rc})")
    endif()
  elseif(TARN_RU_MODE STREQUAL "collect")
    function(tarn_pad out value width)
      string(LENGTH "${value}" len)
      set(padded "${value}")
      while(len LESS width)
        string(PREPEND padded " ")
        math(EXPR len "${len} + 1")
      endwhile()
      set(${out} "${padded}" PARENT_SCOPE)
    endfunction()
    file(GLOB_RECURSE reports "${TARN_RU_DIR}/*.resource-usage.txt")
    list(SORT reports)
    set(body "")
    set(rows "")
    foreach(report ${reports})
      file(READ "${report}" text)
      get_filename_component(name "${report}" NAME)
      string(REPLACE ".o.resource-usage.txt" "" name "${name}")
      string(APPEND body "==== ${name}\n${text}\n")
      # ptxas prints per function: "Compiling entry function 'X' for 'sm_NN'", then
      # "N bytes stack frame, N bytes spill stores, N bytes spill loads" and
      # "Used N registers, ... N bytes smem ...".
      string(REPLACE "\n" ";" lines "${text}")
      set(fn "")
      set(arch "")
      set(stack 0)
      set(st 0)
      set(ld 0)
      foreach(line IN LISTS lines)
        if(line MATCHES "Compiling entry function '([^']+)' for '([^']+)'")
          set(fn "${CMAKE_MATCH_1}")
          set(arch "${CMAKE_MATCH_2}")
        elseif(line MATCHES "([0-9]+) bytes stack frame, ([0-9]+) bytes spill stores, ([0-9]+) bytes spill loads")
          set(stack "${CMAKE_MATCH_1}")
          set(st "${CMAKE_MATCH_2}")
          set(ld "${CMAKE_MATCH_3}")
        elseif(line MATCHES "Used ([0-9]+) registers" AND fn)
          set(regs "${CMAKE_MATCH_1}")
          set(smem "0")
          if(line MATCHES "([0-9]+) bytes smem")
            set(smem "${CMAKE_MATCH_1}")
          endif()
          tarn_pad(regs "${regs}" 4)
          tarn_pad(stack "${stack}" 5)
          tarn_pad(st "${st}" 5)
          tarn_pad(ld "${ld}" 5)
          tarn_pad(smem "${smem}" 6)
          string(APPEND rows "${arch} ${regs} ${stack} ${st} ${ld} ${smem}  ${fn}\n")
          set(fn "")
          set(stack 0)
          set(st 0)
          set(ld 0)
        endif()
      endforeach()
    endforeach()
    set(summary "${rows}")
    if(TARN_RU_CXXFILT AND rows)
      file(WRITE "${TARN_RU_OUT}.mangled" "${rows}")
      execute_process(COMMAND "${TARN_RU_CXXFILT}" INPUT_FILE "${TARN_RU_OUT}.mangled" OUTPUT_VARIABLE summary
                      RESULT_VARIABLE rc)
      file(REMOVE "${TARN_RU_OUT}.mangled")
      if(NOT rc EQUAL 0)
        set(summary "${rows}")
      endif()
      string(REPLACE "tarn::kernels::cuda::(anonymous namespace)::" "" summary "${summary}")
      string(REPLACE "tarn::kernels::cpu::" "" summary "${summary}")
    endif()
    file(WRITE "${TARN_RU_OUT}"
         "# nvcc --resource-usage of tarn_kernels_cuda, rewritten by every build of it.\n"
         "# regs: registers per thread; stack: stack frame bytes; spill st/ld: spill stores/loads\n"
         "# bytes; smem: static shared memory bytes (dynamic shared memory is sized at launch).\n"
         "# arch regs stack spill st spill ld   smem  kernel\n"
         "${summary}\n# ptxas reports, per source file\n${body}")
  endif()
  return()
endif()

# ---------------------------------------------------------------------------------------------
# tests/: the lint that keeps raw launches and `extern __shared__` in their two homes.
if(CMAKE_CURRENT_SOURCE_DIR STREQUAL "${PROJECT_SOURCE_DIR}/tests")
  add_test(NAME lint_cuda COMMAND bash ${PROJECT_SOURCE_DIR}/tools/lint_cuda.sh ${PROJECT_SOURCE_DIR})
  add_test(NAME lint_cuda_self_test COMMAND bash ${PROJECT_SOURCE_DIR}/tools/lint_cuda.sh --self-test)
  # Registers x threads of every kernel within a block's register file, from ptxas' report
  # (tools/check_register_budget.py): a launch that would fail only on hardware fails here.
  add_test(NAME cuda_register_budget_self_test
           COMMAND python3 ${PROJECT_SOURCE_DIR}/tools/check_register_budget.py --self-test)
  if(TARGET tarn_kernels_cuda)
    add_test(NAME cuda_register_budget
             COMMAND python3 ${PROJECT_SOURCE_DIR}/tools/check_register_budget.py
                     ${CMAKE_BINARY_DIR}/cuda_resource_usage.txt ${PROJECT_SOURCE_DIR}/kernels/cuda)
  endif()
  return()
endif()

# ---------------------------------------------------------------------------------------------
# kernels/: the emulator, and the kernels built against it.
file(GLOB TARN_EMU_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/kernels/emu/*.cpp)
add_library(tarn_emu STATIC ${TARN_EMU_SOURCES})
target_include_directories(tarn_emu PUBLIC ${PROJECT_SOURCE_DIR})
target_compile_definitions(tarn_emu PRIVATE TARN_EMU_SOURCE_ROOT="${PROJECT_SOURCE_DIR}/")
target_link_libraries(tarn_emu PUBLIC Threads::Threads)

# Each .cu becomes a generated .cpp that #includes it, so that the same file can be CUDA in
# tarn_kernels_cuda and C++ here (a source's language is one per directory). runtime.cu wraps
# the real runtime for the framework's allocator and has no emulated twin.
file(GLOB TARN_EMU_CU_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/kernels/cuda/*.cu)
list(FILTER TARN_EMU_CU_SOURCES EXCLUDE REGEX "/runtime\\.cu$")
set(TARN_EMU_WRAPPERS)
foreach(src ${TARN_EMU_CU_SOURCES})
  get_filename_component(name ${src} NAME_WE)
  set(wrapper ${CMAKE_CURRENT_BINARY_DIR}/emu/${name}.emu.cpp)
  file(CONFIGURE OUTPUT ${wrapper}
       CONTENT "// Generated by cmake/TarnEmulator.cmake: ${name}.cu as C++ against the CUDA emulator.\n#include \"${src}\"\n")
  list(APPEND TARN_EMU_WRAPPERS ${wrapper})
endforeach()
if(TARN_EMU_WRAPPERS)
  add_library(tarn_kernels_emu STATIC ${TARN_EMU_WRAPPERS})
else()
  add_library(tarn_kernels_emu INTERFACE)
endif()
get_target_property(tarn_emu_kind tarn_kernels_emu TYPE)
if(tarn_emu_kind STREQUAL "INTERFACE_LIBRARY")
  target_compile_definitions(tarn_kernels_emu INTERFACE TARN_CUDA_EMULATED=1)
  target_link_libraries(tarn_kernels_emu INTERFACE tarn_emu)
else()
  target_compile_definitions(tarn_kernels_emu PUBLIC TARN_CUDA_EMULATED=1)
  # Kernels carry `#pragma unroll`, which g++ does not know.
  target_compile_options(tarn_kernels_emu PRIVATE -Wno-unknown-pragmas)
  # Emulated kernels share CPU code (feature-map names, rank-order reductions, thread groups).
  target_link_libraries(tarn_kernels_emu PUBLIC tarn_emu tarn_kernels)
endif()

# ---------------------------------------------------------------------------------------------
# <build>/cuda_resource_usage.txt: registers, spills and shared memory of every kernel, from
# ptxas (--resource-usage is on for tarn_kernels_cuda). Each nvcc call goes through the
# compile helper above, in front of any launcher already configured (ccache replays ptxas'
# output on a cache hit, so the report survives it).
if(TARGET tarn_kernels_cuda)
  set_property(TARGET tarn_kernels_cuda PROPERTY CUDA_COMPILER_LAUNCHER
               ${CMAKE_COMMAND} -DTARN_RU_MODE=compile -P ${CMAKE_CURRENT_LIST_FILE} -- ${CMAKE_CUDA_COMPILER_LAUNCHER})
  find_program(TARN_CXXFILT c++filt)
  set(tarn_cxxfilt_arg)
  if(TARN_CXXFILT)
    set(tarn_cxxfilt_arg -DTARN_RU_CXXFILT=${TARN_CXXFILT})
  endif()
  add_custom_command(TARGET tarn_kernels_cuda POST_BUILD
                     COMMAND ${CMAKE_COMMAND} -DTARN_RU_MODE=collect
                             -DTARN_RU_DIR=${CMAKE_CURRENT_BINARY_DIR}/CMakeFiles/tarn_kernels_cuda.dir
                             -DTARN_RU_OUT=${CMAKE_BINARY_DIR}/cuda_resource_usage.txt ${tarn_cxxfilt_arg}
                             -P ${CMAKE_CURRENT_LIST_FILE}
                     COMMENT "Writing ${CMAKE_BINARY_DIR}/cuda_resource_usage.txt"
                     VERBATIM)
endif()
