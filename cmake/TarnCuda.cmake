# TARN_CUDA=AUTO builds the CUDA backend whenever nvcc is found; ON requires it; OFF skips it.
# The build must configure, compile and link on a machine with no GPU and no driver: libcuda
# is never linked directly (the runtime loads it), and cuBLAS/cuRAND link from the toolkit.

# NCCL (kernels/cuda/collectives.cu), linked only when found: the toolkit's own copy
# (/usr/local/cuda/include/nccl.h, lib/libnccl.so), else NCCL_ROOT or the system's. Without it
# the CUDA backend still builds and its NCCL entry points throw "built without NCCL".
# tarn_kernels_cuda does not exist yet here (kernels/ is added after this file), so the link is
# deferred to the end of the top-level directory.
function(tarn_find_nccl)
  find_path(TARN_NCCL_INCLUDE_DIR nccl.h
            HINTS ${NCCL_ROOT} $ENV{NCCL_ROOT} ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
  find_library(TARN_NCCL_LIBRARY nccl
               HINTS ${NCCL_ROOT} $ENV{NCCL_ROOT} ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}
               PATH_SUFFIXES lib lib64)
  if(TARN_NCCL_INCLUDE_DIR AND TARN_NCCL_LIBRARY)
    add_library(tarn_nccl INTERFACE)
    target_include_directories(tarn_nccl INTERFACE ${TARN_NCCL_INCLUDE_DIR})
    target_link_libraries(tarn_nccl INTERFACE ${TARN_NCCL_LIBRARY})
    target_compile_definitions(tarn_nccl INTERFACE TARN_WITH_NCCL=1)
    cmake_language(DEFER DIRECTORY ${PROJECT_SOURCE_DIR} CALL tarn_link_nccl)
    message(STATUS "tarn: NCCL ON (${TARN_NCCL_LIBRARY})")
  else()
    message(STATUS "tarn: NCCL OFF (nccl.h or libnccl not found; set NCCL_ROOT): collectives on GPUs unavailable")
  endif()
endfunction()
function(tarn_link_nccl)
  if(TARGET tarn_kernels_cuda)
    target_link_libraries(tarn_kernels_cuda PUBLIC tarn_nccl)
  endif()
endfunction()

set(TARN_HAVE_CUDA OFF)
if(NOT TARN_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER)
    find_program(TARN_NVCC nvcc PATHS /usr/local/cuda/bin)
    if(TARN_NVCC)
      set(CMAKE_CUDA_COMPILER ${TARN_NVCC})
    endif()
  endif()
  if(CMAKE_CUDA_COMPILER)
    if(NOT CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 80 90)
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(TARN_HAVE_CUDA ON)
    message(STATUS "tarn: CUDA backend ON (${CMAKE_CUDA_COMPILER}, sm ${CMAKE_CUDA_ARCHITECTURES})")
    tarn_find_nccl()
  elseif(TARN_CUDA STREQUAL "ON")
    message(FATAL_ERROR "TARN_CUDA=ON but nvcc was not found (looked in PATH and /usr/local/cuda/bin)")
  else()
    message(STATUS "tarn: CUDA backend OFF (nvcc not found)")
  endif()
endif()
