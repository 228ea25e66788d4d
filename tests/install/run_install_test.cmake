# Run by ctest (cmake -P): installs a ferry build into a fresh prefix under WORK_DIR, then
# configures, builds and runs the consumer project against it, as a user would. Any failing
# step fails the test with the step's name; the tree under WORK_DIR is kept for a post-mortem
# and wiped at the start of the next run.
#
# Inputs (-D): FERRY_SOURCE_DIR, FERRY_BINARY_DIR, FERRY_LIBRARY, FERRY_SHARED (1 for a shared
# library), FERRY_VERSION, CONFIG, CONSUMER_SOURCE_DIR, WORK_DIR, GENERATOR, MAKE_PROGRAM,
# CXX_COMPILER; optionally GENERATOR_PLATFORM, GENERATOR_TOOLSET.
cmake_minimum_required(VERSION 3.25)

foreach(var IN ITEMS FERRY_SOURCE_DIR FERRY_BINARY_DIR FERRY_LIBRARY FERRY_VERSION
                     CONSUMER_SOURCE_DIR WORK_DIR GENERATOR CXX_COMPILER)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "install test: ${var} is not set")
  endif()
endforeach()
if(NOT EXISTS "${FERRY_LIBRARY}")
  message(FATAL_ERROR "install test: ${FERRY_LIBRARY} does not exist: build ferry first "
                      "(cmake --build ${FERRY_BINARY_DIR})")
endif()

set(prefix "${WORK_DIR}/prefix")
set(consumer_build "${WORK_DIR}/consumer-build")
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

# Runs one step, its output going to the test log; stops the test when it fails.
function(run_step name)
  message(STATUS "install test: ${name}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc STREQUAL "0")
    message(FATAL_ERROR "install test: ${name} failed (${rc}): ${ARGN}")
  endif()
endfunction()

# ---- 1. install ---------------------------------------------------------------------------
set(config_args)
if(CONFIG)
  set(config_args --config "${CONFIG}")
endif()
run_step("cmake --install" "${CMAKE_COMMAND}" --install "${FERRY_BINARY_DIR}" --prefix "${prefix}"
         ${config_args})

if(NOT EXISTS "${prefix}/include/ferry/ferry.hpp")
  message(FATAL_ERROR "install test: ${prefix}/include/ferry/ferry.hpp was not installed")
endif()
file(GLOB_RECURSE config_files "${prefix}/*/ferryConfig.cmake")
list(LENGTH config_files config_count)
if(NOT config_count EQUAL 1)
  message(FATAL_ERROR "install test: expected one ferryConfig.cmake under ${prefix}, found "
                      "${config_count}: ${config_files}")
endif()
get_filename_component(package_dir "${config_files}" DIRECTORY)
foreach(name IN ITEMS ferryConfigVersion.cmake ferryTargets.cmake)
  if(NOT EXISTS "${package_dir}/${name}")
    message(FATAL_ERROR "install test: ${package_dir}/${name} was not installed")
  endif()
endforeach()

# The package must be relocatable: no path into ferry's source or build tree (the prefix lies
# in the build tree, so this also catches an absolute install path).
file(GLOB package_files "${package_dir}/*.cmake")
foreach(file IN LISTS package_files)
  file(READ "${file}" text)
  foreach(tree IN ITEMS "${FERRY_SOURCE_DIR}" "${FERRY_BINARY_DIR}")
    string(FIND "${text}" "${tree}" at)
    if(NOT at EQUAL -1)
      message(FATAL_ERROR "install test: ${file} names ${tree}; an installed package must not "
                          "point into ferry's source or build tree")
    endif()
  endforeach()
endforeach()

# ---- 2. configure the consumer, as a user would -------------------------------------------
set(generator_args -G "${GENERATOR}")
if(GENERATOR_PLATFORM)
  list(APPEND generator_args -A "${GENERATOR_PLATFORM}")
endif()
if(GENERATOR_TOOLSET)
  list(APPEND generator_args -T "${GENERATOR_TOOLSET}")
endif()
if(MAKE_PROGRAM)
  list(APPEND generator_args "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}")
endif()
if(CONFIG)
  list(APPEND generator_args "-DCMAKE_BUILD_TYPE=${CONFIG}")
endif()
run_step("configure the consumer"
         "${CMAKE_COMMAND}" -S "${CONSUMER_SOURCE_DIR}" -B "${consumer_build}" ${generator_args}
         "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}"
         "-DCMAKE_PREFIX_PATH=${prefix}"
         # Only the fresh prefix may provide ferry: not a registry entry, not the system.
         -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
         -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF
         -DCONSUMER_WARNINGS_AS_ERRORS=ON)

file(STRINGS "${consumer_build}/CMakeCache.txt" ferry_dir_line REGEX "^ferry_DIR:")
string(REGEX REPLACE "^ferry_DIR:[A-Z]+=" "" ferry_dir "${ferry_dir_line}")
file(REAL_PATH "${ferry_dir}" ferry_dir)
file(REAL_PATH "${package_dir}" package_dir_real)
if(NOT ferry_dir STREQUAL package_dir_real)
  message(FATAL_ERROR "install test: the consumer found ferry in '${ferry_dir}', not in the "
                      "installed '${package_dir_real}'")
endif()

# ---- 3. build and run it ------------------------------------------------------------------
run_step("build the consumer" "${CMAKE_COMMAND}" --build "${consumer_build}" ${config_args})

set(app "")
foreach(candidate IN ITEMS "${consumer_build}/app" "${consumer_build}/${CONFIG}/app"
                           "${consumer_build}/app.exe" "${consumer_build}/${CONFIG}/app.exe")
  if(EXISTS "${candidate}" AND NOT IS_DIRECTORY "${candidate}")
    set(app "${candidate}")
    break()
  endif()
endforeach()
if(NOT app)
  message(FATAL_ERROR "install test: the consumer's executable is not in ${consumer_build}")
endif()

message(STATUS "install test: run ${app}")
execute_process(COMMAND "${app}" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
message("${out}")
if(NOT rc STREQUAL "0")
  message(FATAL_ERROR "install test: the consumer failed (${rc})")
endif()
if(NOT out MATCHES "ferry ${FERRY_VERSION}")
  message(FATAL_ERROR "install test: the consumer did not report ferry ${FERRY_VERSION}")
endif()
# Where the consumer can tell (Linux), the shared library it loaded must be the installed one,
# not the one in the build tree. (A static ferry lives in the executable itself.)
if(FERRY_SHARED AND out MATCHES "libferry loaded from ([^\n]+)")
  file(REAL_PATH "${CMAKE_MATCH_1}" loaded)
  file(REAL_PATH "${prefix}" prefix_real)
  string(FIND "${loaded}" "${prefix_real}/" at)
  if(NOT at EQUAL 0)
    message(FATAL_ERROR "install test: the consumer loaded ${loaded}, not a library under "
                        "${prefix_real}")
  endif()
endif()
message(STATUS "install test: passed")
