# The project's layers, and the check that no include runs back up one.
#
# Each folder below (a "unit": a top-level folder, or a sub-folder of daemon/, engine/ and kernels/
# that is a library of its own) names the units its files may include besides its own. The table is
# a graph without cycles, read from the bottom up; tests/ may include anything. The build runs
# this check (target anvil_layers), so a file that includes against the table fails the build with
# the file, the include and what the unit may use.
#
#   cmake -DROOT=<source dir> [-DSTAMP=<file>] -P cmake/layers.cmake
cmake_minimum_required(VERSION 3.25)

set(ANVIL_LAYERS
  "support:"
  "formats:support"
  "registry:support,formats"
  "state:support,registry"
  "kernels/hardware:support"
  "kernels:support"
  "kernels/cuda:kernels"
  "engine/http:support"
  "engine:support,formats,kernels,kernels/cuda,engine/http"
  "daemon/drivers:support,registry,state"
  "daemon/host:support,registry,kernels/hardware"
  "daemon/qualify:support,registry,state"
  "daemon/endpoint:support,engine/http"
  "daemon/config:support,registry,daemon/drivers,daemon/qualify"
  "daemon/controller:support,registry,state,daemon/config,daemon/drivers,daemon/host,daemon/qualify,daemon/endpoint"
  "daemon/anvild:support,registry,state,kernels/hardware,engine/http,daemon/config,daemon/drivers,daemon/host,daemon/qualify,daemon/endpoint,daemon/controller"
  "daemon/cli:support,registry,kernels/hardware,daemon/host,daemon/config")

# The unit a project path belongs to ("daemon/controller/reconciler.hpp" -> "daemon/controller"),
# or "" for a path outside every unit (third-party headers, tests).
function(anvil_layer_unit path out)
  set(unit "")
  foreach(entry IN LISTS ANVIL_LAYERS)
    string(REGEX REPLACE ":.*" "" name "${entry}")
    string(LENGTH "${name}" length)
    string(LENGTH "${unit}" best)
    if(path MATCHES "^${name}/" AND length GREATER best)
      set(unit "${name}")
    endif()
  endforeach()
  set(${out} "${unit}" PARENT_SCOPE)
endfunction()

function(anvil_layer_allowed unit out)
  foreach(entry IN LISTS ANVIL_LAYERS)
    if(entry MATCHES "^${unit}:(.*)$")
      string(REPLACE "," ";" allowed "${CMAKE_MATCH_1}")
      set(${out} "${allowed}" PARENT_SCOPE)
      return()
    endif()
  endforeach()
  set(${out} "" PARENT_SCOPE)
endfunction()

if(NOT ROOT)
  message(FATAL_ERROR "layers.cmake: pass -DROOT=<source dir>")
endif()
set(violations "")
file(GLOB_RECURSE sources RELATIVE "${ROOT}" "${ROOT}/*.cpp" "${ROOT}/*.hpp" "${ROOT}/*.cu" "${ROOT}/*.cuh" "${ROOT}/*.h")
foreach(file IN LISTS sources)
  if(file MATCHES "(^|/)(build|node_modules|tests)/")
    continue()
  endif()
  anvil_layer_unit("${file}" unit)
  if(unit STREQUAL "")
    continue()
  endif()
  anvil_layer_allowed("${unit}" allowed)
  file(STRINGS "${ROOT}/${file}" includes REGEX "^[ \t]*#[ \t]*include[ \t]+\"")
  foreach(line IN LISTS includes)
    string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]+\"([^\"]+)\".*" "\\1" header "${line}")
    anvil_layer_unit("${header}" target)
    if(target STREQUAL "" OR target STREQUAL unit OR target IN_LIST allowed)
      continue()
    endif()
    string(REPLACE ";" ", " readable "${allowed}")
    string(APPEND violations "\n  ${file} includes ${header}: ${unit}/ may include only ${readable}")
  endforeach()
endforeach()
if(violations)
  message(FATAL_ERROR "includes that run against the layers (cmake/layers.cmake):${violations}")
endif()
if(STAMP)
  file(WRITE "${STAMP}" "layers checked\n")
endif()
