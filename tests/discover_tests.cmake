# Writes the ctest file of one GoogleTest binary (cmake -P, after each build of it:
# segtrain_discover_tests in tests/CMakeLists.txt): one ctest test per test of BINARY (its
# --gtest_list_tests), with LABEL (if any), under TIMEOUT seconds, run in WORKING_DIRECTORY.
# A test is "Skipped" only when its output has SKIP_REGEX, the text of test::SKIP_NOT_APPLICABLE
# (tests/test_util.h: a test that says it does not apply here, and why), and Failed when its output
# has "[  SKIPPED ]" without it: a skip for any other reason, or the tests of a suite whose set-up
# failed, which GoogleTest prints as skipped (and exits 1).
# Not gtest_discover_tests: it gives every test SKIP_REGULAR_EXPRESSION "\[  SKIPPED \]", ctest adds
# up a test's skip expressions (a later one cannot replace it) and a skip expression wins over the
# exit code and over FAIL_REGULAR_EXPRESSION, so a binary that could not run read as "Skipped".
# Arguments (-D): BINARY, OUT, SKIP_REGEX, TIMEOUT, WORKING_DIRECTORY, LABEL (may be empty).
execute_process(COMMAND "${BINARY}" --gtest_list_tests OUTPUT_VARIABLE listing ERROR_VARIABLE errors
                RESULT_VARIABLE status TIMEOUT 120)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "${BINARY} --gtest_list_tests: ${status}: ${errors}")
endif()
set(label "")
if(LABEL)
  set(label "LABELS ${LABEL} ")
endif()
string(REPLACE "\n" ";" lines "${listing}")
set(script "# Written by tests/discover_tests.cmake from ${BINARY} --gtest_list_tests.\n")
set(count 0)
foreach(line IN LISTS lines)
  if(line MATCHES "^([^ #][^ ]*)\\.( .*)?$")  # a suite, "Prefix/Suite."
    set(suite "${CMAKE_MATCH_1}")
  elseif(line MATCHES "^  ([^ ]+)")  # a test of it, "  Name/param  # GetParam() = ..."
    set(name "${suite}.${CMAKE_MATCH_1}")
    string(APPEND script "add_test([==[${name}]==] \"${BINARY}\" [==[--gtest_filter=${name}]==])\n"
           "set_tests_properties([==[${name}]==] PROPERTIES ${label}TIMEOUT ${TIMEOUT} "
           "WORKING_DIRECTORY \"${WORKING_DIRECTORY}\" SKIP_REGULAR_EXPRESSION [==[${SKIP_REGEX}]==] "
           "FAIL_REGULAR_EXPRESSION [==[\\[  SKIPPED \\]]==])\n")
    math(EXPR count "${count} + 1")
  endif()
endforeach()
if(count EQUAL 0)
  message(FATAL_ERROR "${BINARY} --gtest_list_tests listed no test:\n${listing}")
endif()
file(WRITE "${OUT}" "${script}")
