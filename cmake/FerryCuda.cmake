# Decides whether ferry's CUDA backend is built.
#   FERRY_WITH_CUDA=OFF  never; AUTO  when find_package(CUDAToolkit) finds a toolkit;
#   ON  always (a missing toolkit is an error).
#   SIM  against cudasim (tests/cudasim), a CPU model of CUDA devices instead of the CUDA
#        runtime: the CUDA backend and its kernels, unchanged, run on the CPU; for CI without a
#        GPU.
# Sets FERRY_HAS_CUDA (runtime calls through CUDA::cudart_static) and FERRY_HAS_CUDA_KERNELS
# (a working CUDA compiler: kernels for sm_90 plus PTX, so newer GPUs JIT them).
set(FERRY_HAS_CUDA OFF)
set(FERRY_HAS_CUDA_KERNELS OFF)
set(FERRY_CUDA_SIM OFF)
set(FERRY_CUDA_ARCHITECTURES "90" CACHE STRING "CUDA architectures (90 = sm_90 SASS + compute_90 PTX)")

if(FERRY_WITH_CUDA STREQUAL "SIM")
  set(FERRY_HAS_CUDA ON)
  set(FERRY_CUDA_SIM ON)
elseif(NOT FERRY_WITH_CUDA STREQUAL "OFF")
  if(NOT DEFINED CUDAToolkit_ROOT AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CUDAToolkit_ROOT /usr/local/cuda)
  endif()
  if(NOT DEFINED CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  if(FERRY_WITH_CUDA STREQUAL "ON")
    find_package(CUDAToolkit REQUIRED)
  else()
    find_package(CUDAToolkit QUIET)
  endif()
  if(CUDAToolkit_FOUND)
    set(FERRY_HAS_CUDA ON)
    include(CheckLanguage)
    check_language(CUDA)
    if(CMAKE_CUDA_COMPILER)
      set(CMAKE_CUDA_ARCHITECTURES ${FERRY_CUDA_ARCHITECTURES})
      enable_language(CUDA)
      # CMake 3.25 does not know that nvcc 12+ takes -std=c++20; tell it.
      if(CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.0
         AND NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
        set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
        set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
      endif()
      set(CMAKE_CUDA_STANDARD 20)
      set(CMAKE_CUDA_STANDARD_REQUIRED ON)
      set(FERRY_HAS_CUDA_KERNELS ON)
    elseif(FERRY_WITH_CUDA STREQUAL "ON")
      message(FATAL_ERROR "FERRY_WITH_CUDA=ON but no working CUDA compiler was found")
    endif()
  endif()
endif()
message(STATUS "ferry: CUDA backend ${FERRY_HAS_CUDA}, CUDA kernels ${FERRY_HAS_CUDA_KERNELS}, "
               "cudasim ${FERRY_CUDA_SIM}")
