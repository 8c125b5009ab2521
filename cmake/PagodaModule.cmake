# pagoda_module_headers: each library exports only its own headers.
#
# Includes are spelled from the project root ("scheduler/core/scheduler.h"), but no target gets
# the project root as an include directory: a target sees the headers of a module only when it
# links that module's library (directly, or through a PUBLIC/INTERFACE link of a library it
# links). A missing target_link_libraries therefore fails to compile, not just to link.
#
#   pagoda_module_headers(<target> [DIR <dir>] [SUBDIRS <dir>...]
#                         [HEADERS <file>... | EXCLUDE <file>...])
#
# builds ${CMAKE_BINARY_DIR}/include/<target>/<dir relative to the project root>/<header>, one
# symbolic link per header of the module, and makes that tree the target's include directory:
# PUBLIC for a library, INTERFACE for an INTERFACE library, PRIVATE for an executable.
#   DIR      the module's directory (default: the current source directory; relative paths are
#            taken from it).
#   SUBDIRS  subdirectories of DIR whose headers belong to the same target (e.g. jinja/); a
#            subdirectory that is another library's module is not listed.
#   HEADERS  the target's headers, relative to DIR, where DIR holds several libraries (common/,
#            worker/runner/); without it, every *.h, *.inc and *.cuh of DIR (and of SUBDIRS) not
#            named in EXCLUDE. In such a directory the main library takes the rest with EXCLUDE,
#            so a new header always has an owner. New headers appear at the next build (the
#            glob re-runs CMake).
# The tree is remade at every configure, so a deleted header disappears too. The target's
# property PAGODA_HEADER_ROOT holds the tree's path (tests/support/cuda_emulation compiles the
# CUDA backend's sources against it without linking the backend).
function(pagoda_module_headers target)
  cmake_parse_arguments(arg "" "DIR" "SUBDIRS;HEADERS;EXCLUDE" ${ARGN})
  if(arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "pagoda_module_headers(${target}): unknown arguments ${arg_UNPARSED_ARGUMENTS}")
  endif()
  set(dir ${CMAKE_CURRENT_SOURCE_DIR})
  if(arg_DIR)
    get_filename_component(dir ${arg_DIR} ABSOLUTE BASE_DIR ${CMAKE_CURRENT_SOURCE_DIR})
  endif()
  file(RELATIVE_PATH module ${PROJECT_SOURCE_DIR} ${dir})
  if(module MATCHES "^\\.\\./" OR module STREQUAL "")
    message(FATAL_ERROR "pagoda_module_headers(${target}): ${dir} is not below the project root")
  endif()

  set(headers)
  if(arg_HEADERS)
    foreach(h ${arg_HEADERS})
      if(NOT EXISTS ${dir}/${h})
        message(FATAL_ERROR "pagoda_module_headers(${target}): no header ${module}/${h}")
      endif()
      list(APPEND headers ${h})
    endforeach()
  else()
    foreach(sub . ${arg_SUBDIRS})
      file(GLOB found CONFIGURE_DEPENDS RELATIVE ${dir}
           ${dir}/${sub}/*.h ${dir}/${sub}/*.inc ${dir}/${sub}/*.cuh)
      list(APPEND headers ${found})
    endforeach()
    list(TRANSFORM headers REPLACE "^\\./" "")
    if(arg_EXCLUDE)
      list(REMOVE_ITEM headers ${arg_EXCLUDE})
    endif()
  endif()

  set(root ${CMAKE_BINARY_DIR}/include/${target})
  file(REMOVE_RECURSE ${root})
  foreach(h ${headers})
    get_filename_component(link_dir ${root}/${module}/${h} DIRECTORY)
    file(MAKE_DIRECTORY ${link_dir})
    file(CREATE_LINK ${dir}/${h} ${root}/${module}/${h} SYMBOLIC)
  endforeach()
  file(MAKE_DIRECTORY ${root})

  get_target_property(type ${target} TYPE)
  if(type STREQUAL "INTERFACE_LIBRARY")
    set(scope INTERFACE)
  elseif(type STREQUAL "EXECUTABLE")
    set(scope PRIVATE)
  else()
    set(scope PUBLIC)
  endif()
  target_include_directories(${target} ${scope} $<BUILD_INTERFACE:${root}>)
  set_target_properties(${target} PROPERTIES PAGODA_HEADER_ROOT ${root})
endfunction()
