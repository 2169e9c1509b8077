# Configures lockstep against Python environments that lack torch or hold another version of
# it: each must stop at configure time with a message naming the version found, the one wanted
# and the setup command (cmake/LockstepTorch.cmake).
set(WORK ${BUILD_DIR}/torch-errors)
file(STRINGS ${SOURCE_DIR}/cmake/torch-version.txt wanted LIMIT_COUNT 1)
file(REMOVE_RECURSE ${WORK})
find_program(PYTHON python3 REQUIRED)
execute_process(COMMAND ${PYTHON} -m venv --without-pip ${WORK}/venv RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "python3 -m venv failed: ${rc}")
endif()

# expect_configure_error(<case> <venv> <text>...): configuring fails, and its output holds every text.
function(expect_configure_error case venv)
  execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK}/build-${case} -G Ninja
                          -DLOCKSTEP_VENV=${venv} -DLOCKSTEP_BUILD_TESTS=OFF
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(REGEX REPLACE "[ \t\r\n]+" " " text "${out}${err}")  # CMake wraps long messages
  if(rc EQUAL 0)
    message(FATAL_ERROR "${case}: configuring against ${venv} succeeded; expected an error")
  endif()
  foreach(expected ${ARGN})
    string(FIND "${text}" "${expected}" at)
    if(at EQUAL -1)
      message(FATAL_ERROR "${case}: the configure error lacks \"${expected}\":\n${out}${err}")
    endif()
  endforeach()
  message(STATUS "${case}: configure stopped as expected")
endfunction()

expect_configure_error(no-venv ${WORK}/none "no Python environment at LOCKSTEP_VENV=${WORK}/none"
                       "LibTorch ${wanted}" "run scripts/setup.sh")
expect_configure_error(no-torch ${WORK}/venv "torch is not installed in ${WORK}/venv" "found: none"
                       "LibTorch ${wanted}" "run scripts/setup.sh")

# A torch package of another version, as far as CMake looks before TorchConfig runs.
execute_process(COMMAND ${WORK}/venv/bin/python3 -c "import sysconfig; print(sysconfig.get_paths()['purelib'])"
                OUTPUT_VARIABLE site OUTPUT_STRIP_TRAILING_WHITESPACE)
file(WRITE ${site}/torch/__init__.py "")
file(WRITE ${site}/torch/version.py "__version__ = '1.13.1+cpu'\n")
file(WRITE ${site}/torch/share/cmake/Torch/TorchConfig.cmake "message(FATAL_ERROR \"not reached\")\n")
expect_configure_error(other-version ${WORK}/venv "holds LibTorch 1.13.1" "builds against ${wanted}"
                       "run scripts/setup.sh")
file(REMOVE_RECURSE ${WORK})
