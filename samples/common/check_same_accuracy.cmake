# Runs two samples on the same data in two formats and fails unless both exit 0 and print the
# same last "test accuracy: X" line, with X >= MIN_ACCURACY.
#   cmake -DFIRST=prog "-DFIRST_ARGS=..." -DSECOND=prog "-DSECOND_ARGS=..." -DMIN_ACCURACY=0.8
#         -P check_same_accuracy.cmake
foreach(side FIRST SECOND)
  execute_process(COMMAND ${${side}} ${${side}_ARGS} OUTPUT_VARIABLE out RESULT_VARIABLE rc)
  message("${out}")
  get_filename_component(name "${${side}}" NAME)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${name} exited with ${rc}")
  endif()
  string(REGEX MATCHALL "test accuracy: [0-9.]+" lines "${out}")
  list(POP_BACK lines last)
  string(REGEX REPLACE "test accuracy: " "" ${side}_accuracy "${last}")
  if(${side}_accuracy STREQUAL "" OR ${side}_accuracy LESS MIN_ACCURACY)
    message(FATAL_ERROR "${name}: test accuracy '${${side}_accuracy}' is below ${MIN_ACCURACY}")
  endif()
endforeach()
if(NOT FIRST_accuracy STREQUAL SECOND_accuracy)
  message(FATAL_ERROR "test accuracy ${FIRST_accuracy} from one format, ${SECOND_accuracy} from the other")
endif()
message("test accuracy ${FIRST_accuracy} from both, >= ${MIN_ACCURACY}: ok")
