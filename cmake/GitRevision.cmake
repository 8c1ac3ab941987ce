# Writes ${OUT} with the current `git describe` of ${SRC}, touching it only when it changed, so
# results.json names the revision the binary was built from (run at every build).
# REPLAY_GIT_REVISION in the build's environment wins: a copy of the tree whose .git is missing or
# stale (as on a machine the tree was copied to) would otherwise record the wrong revision.
if(DEFINED ENV{REPLAY_GIT_REVISION} AND NOT "$ENV{REPLAY_GIT_REVISION}" STREQUAL "")
  set(rev "$ENV{REPLAY_GIT_REVISION}")
else()
  execute_process(COMMAND git describe --always --dirty --abbrev=12
    WORKING_DIRECTORY "${SRC}" OUTPUT_VARIABLE rev OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
endif()
if(NOT rev)
  set(rev unknown)
endif()
set(text "#pragma once\n#define REPLAY_GIT_REVISION \"${rev}\"\n")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT "${old}" STREQUAL "${text}")
  file(WRITE "${OUT}" "${text}")
endif()
