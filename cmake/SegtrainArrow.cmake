# Apache Arrow and Parquet C++, which `segtrain prepare` reads .parquet files and `datasets`
# folders with (data/arrow_documents.h), from the pyarrow wheel of the build's Python: Debian 12
# packages no Arrow C++, and the wheel ships its libraries (libarrow.so.N, libparquet.so.N, no
# CMake config) and headers; docs/data.md says why. SEGTRAIN_ARROW_DIR names the wheel's pyarrow
# folder instead (an unzipped wheel, offline). Without a pyarrow >= 21 (the first whose headers
# segtrain compiles against) the build goes on without Arrow, says so here, and prepare refuses
# those inputs naming what to install: a GPU image's Python need not carry pyarrow.
# Defines SEGTRAIN_WITH_ARROW (0/1) and, with it, the imported targets segtrain_arrow and segtrain_parquet.
set(SEGTRAIN_ARROW_DIR "" CACHE PATH "pyarrow's package folder (include/, libarrow.so.N, libparquet.so.N)")
set(SEGTRAIN_WITH_ARROW 0)
set(_arrow_dir "${SEGTRAIN_ARROW_DIR}")
if(NOT _arrow_dir AND Python3_EXECUTABLE)
  execute_process(
    COMMAND ${Python3_EXECUTABLE} -c
            "import os, pyarrow; print(pyarrow.__version__.split('.')[0]); print(os.path.dirname(pyarrow.__file__))"
    OUTPUT_VARIABLE _arrow_out OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _arrow_rc ERROR_QUIET)
  if(_arrow_rc EQUAL 0)
    string(REPLACE "\n" ";" _arrow_out "${_arrow_out}")
    list(GET _arrow_out 0 _arrow_major)
    list(GET _arrow_out 1 _arrow_found)
    if(_arrow_major GREATER_EQUAL 21)
      set(_arrow_dir "${_arrow_found}")
    else()
      message(STATUS "Arrow C++: pyarrow ${_arrow_major} in ${Python3_EXECUTABLE} is older than 21: built without it")
    endif()
  endif()
endif()
if(_arrow_dir)
  # The wheel names its libraries by version alone (libarrow.so.2600): found by glob, no symlinks.
  file(GLOB _arrow_lib "${_arrow_dir}/libarrow.so.[0-9]*")
  file(GLOB _parquet_lib "${_arrow_dir}/libparquet.so.[0-9]*")
  list(FILTER _arrow_lib INCLUDE REGEX "libarrow\\.so\\.[0-9]+$")
  list(FILTER _parquet_lib INCLUDE REGEX "libparquet\\.so\\.[0-9]+$")
  if(_arrow_lib AND _parquet_lib AND EXISTS "${_arrow_dir}/include/parquet/arrow/reader.h")
    add_library(segtrain_arrow SHARED IMPORTED)
    set_target_properties(segtrain_arrow PROPERTIES IMPORTED_LOCATION "${_arrow_lib}")
    # SYSTEM: Arrow's headers are not held to the project's warnings.
    target_include_directories(segtrain_arrow SYSTEM INTERFACE "${_arrow_dir}/include")
    add_library(segtrain_parquet SHARED IMPORTED)
    set_target_properties(segtrain_parquet PROPERTIES IMPORTED_LOCATION "${_parquet_lib}")
    target_link_libraries(segtrain_parquet INTERFACE segtrain_arrow)
    set(SEGTRAIN_WITH_ARROW 1)
    message(STATUS "Arrow C++: ${_arrow_lib} and ${_parquet_lib}")
  else()
    message(STATUS "Arrow C++: ${_arrow_dir} lacks libarrow.so.N, libparquet.so.N or include/parquet: built without it")
  endif()
elseif(NOT _arrow_rc EQUAL 0)
  message(STATUS "Arrow C++: no pyarrow in ${Python3_EXECUTABLE}: built without it (prepare reads no .parquet)")
endif()
