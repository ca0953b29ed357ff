# Warnings for our own targets only: third-party headers come in as SYSTEM.
function(segtrain_warnings target)
  # C++ sources only: nvcc takes its host compiler's warnings otherwise (kernels/).
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wno-unused-parameter>
    # GCC 12 false positive inside yaml-cpp's node templates.
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>>:-Wno-dangling-pointer>
    # GCC 12 false positive on std::string concatenation at -O2 (GCC bug 105651).
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>>:-Wno-restrict>)
endfunction()
