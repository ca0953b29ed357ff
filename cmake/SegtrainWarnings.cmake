# Warnings for our own targets only: third-party headers come in as SYSTEM.
function(segtrain_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wno-unused-parameter
    # GCC 12 false positive inside yaml-cpp's node templates.
    $<$<CXX_COMPILER_ID:GNU>:-Wno-dangling-pointer>
    # GCC 12 false positive on std::string concatenation at -O2 (GCC bug 105651).
    $<$<CXX_COMPILER_ID:GNU>:-Wno-restrict>)
endfunction()
