# Runs train_fashion_mnist for one epoch and fails unless it exits 0 and its last
# "test accuracy: X" line says X >= MIN_ACCURACY.
#   cmake -DPROGRAM=... -DDATA=... -DMIN_ACCURACY=0.75 -P check_accuracy.cmake
execute_process(COMMAND ${PROGRAM} --epochs 1 --data ${DATA}
                OUTPUT_VARIABLE out RESULT_VARIABLE rc)
message("${out}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "train_fashion_mnist exited with ${rc}")
endif()
string(REGEX MATCHALL "test accuracy: [0-9.]+" lines "${out}")
list(POP_BACK lines last)
string(REGEX REPLACE "test accuracy: " "" accuracy "${last}")
if(accuracy STREQUAL "" OR accuracy LESS MIN_ACCURACY)
  message(FATAL_ERROR "test accuracy '${accuracy}' is below ${MIN_ACCURACY}")
endif()
message("test accuracy ${accuracy} >= ${MIN_ACCURACY}: ok")
