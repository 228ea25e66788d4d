# Runs a sample and fails unless it exits 0, prints EXPECT (a regular expression) when that is
# given, and, when MIN_ACCURACY is given, its last "test accuracy: X" line says X >= MIN_ACCURACY.
# ARGS is the sample's arguments as a list.
#   cmake -DPROGRAM=... "-DARGS=--train;a.csv" [-DEXPECT=regex] [-DMIN_ACCURACY=0.7] -P check_run.cmake
execute_process(COMMAND ${PROGRAM} ${ARGS} OUTPUT_VARIABLE out RESULT_VARIABLE rc)
message("${out}")
get_filename_component(name "${PROGRAM}" NAME)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${name} exited with ${rc}")
endif()
if(DEFINED EXPECT AND NOT out MATCHES "${EXPECT}")
  message(FATAL_ERROR "${name} did not print '${EXPECT}'")
endif()
if(DEFINED MIN_ACCURACY)
  string(REGEX MATCHALL "test accuracy: [0-9.]+" lines "${out}")
  list(POP_BACK lines last)
  string(REGEX REPLACE "test accuracy: " "" accuracy "${last}")
  if(accuracy STREQUAL "" OR accuracy LESS MIN_ACCURACY)
    message(FATAL_ERROR "test accuracy '${accuracy}' is below ${MIN_ACCURACY}")
  endif()
  message("test accuracy ${accuracy} >= ${MIN_ACCURACY}: ok")
endif()
