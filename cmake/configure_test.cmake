# Helpers of the configure tests that CTest runs as `cmake -P` scripts
# (test_cuda_choice.cmake, test_library_build.cmake).

# Stops unless each variable named after `script` was given with -D.
function(require_defined script)
  foreach(var IN LISTS ARGN)
    if(NOT DEFINED ${var})
      message(FATAL_ERROR "${script} needs -D${var}=...")
    endif()
  endforeach()
endfunction()

# Configures SOURCE_DIR afresh in WORK_DIR/<name>: `cmake -E env <ENV...> cmake -S -B <ARGS...>`.
# out_var: what it printed, each run of blanks and line breaks as one space (CMake wraps
# its messages); result_var: its exit code.
function(configure_in name out_var result_var)
  cmake_parse_arguments(arg "" "" "ENV;ARGS" ${ARGN})
  set(dir "${WORK_DIR}/${name}")
  file(REMOVE_RECURSE "${dir}")
  execute_process(
    COMMAND "${CMAKE_COMMAND}" -E env ${arg_ENV} "${CMAKE_COMMAND}" -S "${SOURCE_DIR}" -B "${dir}" ${arg_ARGS}
    RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(REGEX REPLACE "[ \n]+" " " out "${out}${err}")
  set(${out_var} "${out}" PARENT_SCOPE)
  set(${result_var} "${result}" PARENT_SCOPE)
endfunction()
