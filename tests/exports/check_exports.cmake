# Run by ctest (cmake -P): fails when LIBRARY (libferry.so) exports an internal symbol, anything
# of ferry::detail or of the CUDA runtime (cuda*, __cuda*), naming them; and when it does not
# export a few public functions, so that an empty or unreadable symbol table cannot pass.
# Inputs (-D): NM, LIBRARY.
cmake_minimum_required(VERSION 3.25)

foreach(var IN ITEMS NM LIBRARY)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "exports test: ${var} is not set")
  endif()
endforeach()

execute_process(COMMAND "${NM}" -D -C --defined-only "${LIBRARY}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE symbols ERROR_VARIABLE error)
if(NOT rc STREQUAL "0")
  message(FATAL_ERROR "exports test: ${NM} -DC --defined-only ${LIBRARY} failed (${rc}): ${error}")
endif()

# One symbol per line: "<address> <type> <demangled name>".
string(REGEX MATCHALL "[^\n]*ferry::detail[^\n]*" detail "${symbols}")
string(REGEX MATCHALL "[^\n]* [A-Za-z] _*cuda[^\n]*" cuda "${symbols}")
set(failed OFF)
foreach(kind IN ITEMS detail cuda)
  list(LENGTH ${kind} count)
  if(count GREATER 0)
    list(JOIN ${kind} "\n  " text)
    message(SEND_ERROR "exports test: ${LIBRARY} exports ${count} internal symbols (${kind}):\n  ${text}")
    set(failed ON)
  endif()
endforeach()

# The public API is there: a function, a class's members, an exception's type info, a dataset.
foreach(name IN ITEMS "ferry::cuda_device_count()" "ferry::Tensor::to(ferry::Device, bool) const"
                      "ferry::Loader::Loader(" "typeinfo for ferry::ConfigError"
                      "ferry::CsvDataset::open(" "ferry::SampleRef::data(unsigned long) const")
  string(FIND "${symbols}" " ${name}" at)
  if(at EQUAL -1)
    message(SEND_ERROR "exports test: ${LIBRARY} does not export ${name}")
    set(failed ON)
  endif()
endforeach()

if(failed)
  message(FATAL_ERROR "exports test: failed")
endif()
message(STATUS "exports test: ${LIBRARY} exports the public API only")
