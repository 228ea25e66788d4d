# Warnings for ferry's own targets; errors too when FERRY_WARNINGS_AS_ERRORS is on.
function(ferry_set_warnings target)
  set(flags -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wold-style-cast
            -Wcast-align -Woverloaded-virtual -Wconversion -Wsign-conversion
            -Wnull-dereference -Wimplicit-fallthrough)
  if(FERRY_WARNINGS_AS_ERRORS)
    list(APPEND flags -Werror)
  endif()
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${flags}>)
  if(FERRY_WARNINGS_AS_ERRORS)
    target_compile_options(${target} PRIVATE
      $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings -Xcompiler=-Wall,-Wextra>)
  endif()
endfunction()
