# Third-party libraries, all from Debian packages installed by tools/setup.sh.
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(Threads REQUIRED)

# Open MPI (libopenmpi-dev): the launcher and CPU transport of data-parallel runs
# (kernels/mpi/mpi.h). Only the C API is used; the deprecated C++ bindings are left out.
set(MPI_CXX_SKIP_MPICXX ON)
find_package(MPI REQUIRED COMPONENTS CXX)

# OpenBLAS: link the OpenMP build by its full path and put its folder first in the run path,
# so that neither the reference BLAS nor OpenBLAS' pthread build (which fights OpenMP for the
# cores) can be picked by update-alternatives. framework/blas_info.cpp checks it at start-up.
set(TARN_OPENBLAS_DIR "/usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp"
    CACHE PATH "Folder holding OpenBLAS' OpenMP build")
find_library(TARN_OPENBLAS_LIB NAMES libopenblas.so.0 openblas PATHS ${TARN_OPENBLAS_DIR} NO_DEFAULT_PATH)
find_path(TARN_OPENBLAS_INCLUDE cblas.h
          PATHS /usr/include/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp NO_DEFAULT_PATH)
if(NOT TARN_OPENBLAS_LIB OR NOT TARN_OPENBLAS_INCLUDE)
  message(FATAL_ERROR "OpenBLAS (OpenMP build) not found in ${TARN_OPENBLAS_DIR}: run tools/setup.sh")
endif()
add_library(tarn_openblas INTERFACE)
target_link_libraries(tarn_openblas INTERFACE ${TARN_OPENBLAS_LIB})
target_include_directories(tarn_openblas INTERFACE ${TARN_OPENBLAS_INCLUDE})
set(CMAKE_BUILD_RPATH "${TARN_OPENBLAS_DIR}")
set(CMAKE_INSTALL_RPATH "${TARN_OPENBLAS_DIR}")

# oneDNN (libdnnl-dev): the CPU's bf16 GEMM engine for `training.precision: bf16`
# (kernels/cpu/gemm_bf16.cpp). Optional: without it bf16 GEMMs widen to f32 and sgemm, and
# tarn says so when a recipe asks for bf16. TARN_WITH_DNNL=OFF leaves it out on purpose.
option(TARN_WITH_DNNL "Use oneDNN for bf16 GEMMs on the CPU when it is installed" ON)
set(TARN_HAVE_DNNL OFF)
if(TARN_WITH_DNNL)
  find_path(TARN_DNNL_INCLUDE oneapi/dnnl/dnnl.hpp)
  find_library(TARN_DNNL_LIB dnnl)
  if(TARN_DNNL_INCLUDE AND TARN_DNNL_LIB)
    set(TARN_HAVE_DNNL ON)
    message(STATUS "oneDNN: ${TARN_DNNL_LIB} (bf16 GEMMs on the CPU)")
  else()
    message(WARNING "oneDNN (libdnnl-dev) not found: bf16 training on the CPU will fall back to f32 "
                    "(run tools/setup.sh to install it)")
  endif()
endif()

find_package(PkgConfig REQUIRED)
pkg_check_modules(YAMLCPP REQUIRED IMPORTED_TARGET yaml-cpp)
pkg_check_modules(SENTENCEPIECE REQUIRED IMPORTED_TARGET sentencepiece)
find_library(TARN_SENTENCEPIECE_TRAIN sentencepiece_train REQUIRED)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)  # byte-level BPE's pre-tokenisation regex

# nlohmann-json (nlohmann-json3-dev, header-only): the JSON values and grammar behind framework/io/json.h.
# zlib (zlib1g-dev): the CRC-32 of checkpoint files (framework/io/crc32.h).
find_package(nlohmann_json 3 REQUIRED)
find_package(ZLIB REQUIRED)
# Boost (libboost-dev, header-only here): crc_optimal's CRC-32C for TensorBoard's event files
# (framework/log/tensorboard.cpp).
find_package(Boost 1.74 REQUIRED)

# CLI11 (libcli11-dev, header-only): the command lines of tarn and the benches (tools/cli.h).
find_package(CLI11 2 CONFIG REQUIRED)

if(TARN_BUILD_TESTS)
  find_package(GTest REQUIRED)
  include(GoogleTest)
endif()

# tarn_library(NAME FOLDER DEPS...): a static library from every .cpp below FOLDER, or an
# interface library while the folder has none yet. Globbing keeps new files from needing
# CMake edits; CONFIGURE_DEPENDS re-globs on every build.
function(tarn_library name folder)
  file(GLOB_RECURSE sources CONFIGURE_DEPENDS ${folder}/*.cpp)
  if(sources)
    add_library(${name} STATIC ${sources})
    target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR})
    target_link_libraries(${name} PUBLIC ${ARGN})
  else()
    add_library(${name} INTERFACE)
    target_include_directories(${name} INTERFACE ${PROJECT_SOURCE_DIR})
    target_link_libraries(${name} INTERFACE ${ARGN})
  endif()
endfunction()
