# loom_python_wheel_roots(OUT NAME...): prefixes of NVIDIA's pip wheels
# (site-packages/nvidia/NAME, each with include/ and lib/) found in the
# search path of the `python3` on PATH — how cuDNN and NCCL come on machines
# whose only copies are PyTorch's wheels. The wheels ship only versioned
# libraries (libcudnn.so.9, libnccl.so.2); the find modules look for those.
# Every entry of sys.path counts (so PYTHONPATH, user and venv
# site-packages are searched too). Set LOOM_PYTHON_WHEELS=OFF to skip.
function(loom_python_wheel_roots out)
  set(roots "")
  if(NOT DEFINED LOOM_PYTHON_WHEELS OR LOOM_PYTHON_WHEELS)
    if(NOT DEFINED LOOM_PYTHON_SITE_DIRS)
      find_program(LOOM_WHEEL_PYTHON3 NAMES python3)
      set(dirs "")
      if(LOOM_WHEEL_PYTHON3)
        execute_process(COMMAND ${LOOM_WHEEL_PYTHON3} -c
          "import sys, site\nps = list(sys.path)\ntry:\n    ps += site.getsitepackages() + [site.getusersitepackages()]\nexcept Exception:\n    pass\nprint(';'.join(p for p in ps if p))"
          OUTPUT_VARIABLE dirs OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc TIMEOUT 30)
        if(NOT rc EQUAL 0)
          set(dirs "")
        endif()
      endif()
      set(LOOM_PYTHON_SITE_DIRS "${dirs}" PARENT_SCOPE)
    else()
      set(dirs "${LOOM_PYTHON_SITE_DIRS}")
    endif()
    foreach(d IN LISTS dirs)
      foreach(name IN LISTS ARGN)
        if(IS_DIRECTORY "${d}/nvidia/${name}")
          list(APPEND roots "${d}/nvidia/${name}")
        endif()
      endforeach()
    endforeach()
  endif()
  list(REMOVE_DUPLICATES roots)
  set(${out} "${roots}" PARENT_SCOPE)
endfunction()
