# Finds LibTorch in the Python environment scripts/setup.sh made (PyPI's torch wheel carries
# LibTorch: headers, libraries and TorchConfig.cmake), and nothing else: another LibTorch on the
# machine (a Debian package, a download) is never mixed in.
#
#   LOCKSTEP_VENV            the environment (default /opt/lockstep/venv, as scripts/setup.sh)
#   TORCH_CUDA_ARCH_LIST     GPUs the CUDA code is built for (default 8.0;9.0: A100, H100/H200);
#                            explicit, because the build machine may have no GPU to ask
#
# Sets LOCKSTEP_TORCH_ROOT (site-packages/torch), LOCKSTEP_TORCH_RPATH (the folders of
# LibTorch and the CUDA libraries its wheel depends on), LOCKSTEP_NCCL_INCLUDE_DIR (the wheel's
# nccl.h) and the `torch` target.

set(LOCKSTEP_VENV "/opt/lockstep/venv" CACHE PATH "Python environment holding the torch wheel (scripts/setup.sh)")
# The version lockstep builds against, pinned in one file that scripts/setup_venv.sh reads too;
# another is an error.
file(STRINGS "${CMAKE_CURRENT_LIST_DIR}/torch-version.txt" LOCKSTEP_TORCH_VERSION LIMIT_COUNT 1)
set(TORCH_CUDA_ARCH_LIST "8.0;9.0" CACHE STRING "CUDA architectures of LibTorch CUDA code")

set(_lockstep_setup_hint "run scripts/setup.sh (it installs torch==${LOCKSTEP_TORCH_VERSION} into ${LOCKSTEP_VENV}), or pass -DLOCKSTEP_VENV=<a venv holding it>")

# site-packages/torch without importing torch (that takes seconds and may warn).
set(_lockstep_python "${LOCKSTEP_VENV}/bin/python3")
if(NOT EXISTS "${_lockstep_python}")
  message(FATAL_ERROR "lockstep: no Python environment at LOCKSTEP_VENV=${LOCKSTEP_VENV} (wanted: LibTorch ${LOCKSTEP_TORCH_VERSION} from PyPI's torch wheel); ${_lockstep_setup_hint}")
endif()
execute_process(
  COMMAND "${_lockstep_python}" -c "import importlib.util as u; s = u.find_spec('torch'); print(s.submodule_search_locations[0] if s else '')"
  OUTPUT_VARIABLE LOCKSTEP_TORCH_ROOT OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _lockstep_rc)
if(NOT _lockstep_rc EQUAL 0 OR LOCKSTEP_TORCH_ROOT STREQUAL "" OR NOT EXISTS "${LOCKSTEP_TORCH_ROOT}/share/cmake/Torch/TorchConfig.cmake")
  message(FATAL_ERROR "lockstep: torch is not installed in ${LOCKSTEP_VENV} (found: none, wanted: LibTorch ${LOCKSTEP_TORCH_VERSION}); ${_lockstep_setup_hint}")
endif()

# The wheel's version, read before TorchConfig runs (it fails on its own terms otherwise).
file(STRINGS "${LOCKSTEP_TORCH_ROOT}/version.py" _lockstep_version_line REGEX "^__version__")
string(REGEX MATCH "[0-9]+\\.[0-9]+\\.[0-9]+" _lockstep_found_version "${_lockstep_version_line}")
if(NOT _lockstep_found_version STREQUAL LOCKSTEP_TORCH_VERSION)
  message(FATAL_ERROR "lockstep: ${LOCKSTEP_VENV} holds LibTorch ${_lockstep_found_version} (${_lockstep_version_line}); lockstep builds against ${LOCKSTEP_TORCH_VERSION}; ${_lockstep_setup_hint}")
endif()

# TorchConfig looks for the CUDA toolkit (nvcc, cudart, nvrtc) at configure time.
if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
  set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
endif()
# The wheel's own folders first, so that find_library never picks another LibTorch from /usr/lib.
list(PREPEND CMAKE_PREFIX_PATH "${LOCKSTEP_TORCH_ROOT}")
find_package(Torch ${LOCKSTEP_TORCH_VERSION} EXACT REQUIRED CONFIG PATHS "${LOCKSTEP_TORCH_ROOT}/share/cmake" NO_DEFAULT_PATH)
if(NOT TORCH_LIBRARY MATCHES "^${LOCKSTEP_TORCH_ROOT}/")
  message(FATAL_ERROR "lockstep: TorchConfig picked ${TORCH_LIBRARY}, outside ${LOCKSTEP_TORCH_ROOT}")
endif()

# Programs and libraries find LibTorch and the wheel's CUDA libraries without LD_LIBRARY_PATH.
get_filename_component(_lockstep_site "${LOCKSTEP_TORCH_ROOT}" DIRECTORY)
set(LOCKSTEP_TORCH_RPATH "${LOCKSTEP_TORCH_ROOT}/lib")
foreach(_lockstep_nv cu13 cudnn nccl nvshmem cusparselt)
  if(EXISTS "${_lockstep_site}/nvidia/${_lockstep_nv}/lib")
    list(APPEND LOCKSTEP_TORCH_RPATH "${_lockstep_site}/nvidia/${_lockstep_nv}/lib")
  endif()
endforeach()
if(EXISTS "${_lockstep_site}/nvidia/nccl/include/nccl.h")
  set(LOCKSTEP_NCCL_INCLUDE_DIR "${_lockstep_site}/nvidia/nccl/include")
endif()
message(STATUS "lockstep: LibTorch ${Torch_VERSION} from ${LOCKSTEP_TORCH_ROOT}")
