# Warning flags and sanitizers shared by every loom target.
set(LOOM_C_WARNINGS -Wall -Wextra -Wno-unused-parameter)
if(CMAKE_C_COMPILER_ID STREQUAL "GNU")
  list(APPEND LOOM_C_WARNINGS -Wshadow=local)
endif()
if(LOOM_WERROR)
  list(APPEND LOOM_C_WARNINGS -Werror)
endif()

set(LOOM_SAN_FLAGS "")
if(LOOM_SANITIZE)
  set(LOOM_SAN_FLAGS -fsanitize=${LOOM_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
endif()

# loom_target_defaults(target): warnings + sanitizers for a C target.
function(loom_target_defaults tgt)
  target_compile_options(${tgt} PRIVATE $<$<COMPILE_LANGUAGE:C>:${LOOM_C_WARNINGS}>)
  if(LOOM_SAN_FLAGS)
    target_compile_options(${tgt} PRIVATE $<$<COMPILE_LANGUAGE:C>:${LOOM_SAN_FLAGS}>)
    target_link_options(${tgt} PRIVATE ${LOOM_SAN_FLAGS})
  endif()
endfunction()

# loom_cxx_target_defaults(target): a C++17 program over include/loom/loom.hpp
# (-Wall -Wextra, -Werror with LOOM_WERROR, the same sanitizers).
function(loom_cxx_target_defaults tgt)
  set_target_properties(${tgt} PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON CXX_EXTENSIONS OFF)
  target_compile_options(${tgt} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow>)
  if(LOOM_WERROR)
    target_compile_options(${tgt} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
  endif()
  if(LOOM_SAN_FLAGS)
    target_compile_options(${tgt} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${LOOM_SAN_FLAGS}>)
    target_link_options(${tgt} PRIVATE ${LOOM_SAN_FLAGS})
  endif()
endfunction()
