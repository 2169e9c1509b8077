# The dashboard layer (`lockstep dashboard`, `lockstep report`): a small static
# library linked into the CLI and its tests. It reads only the files the monitor
# layer writes, so it needs no LibTorch headers; lockstep itself is linked for
# lockstep::Error and the logger.
# include()d from the top CMakeLists after lockstep_cli is defined, so
# CMAKE_CURRENT_SOURCE_DIR is the project root.
find_package(PkgConfig REQUIRED)
# Debian's libcpp-httplib-dev is a compiled library; its .pc file carries the
# -DCPPHTTPLIB_*_SUPPORT flags the library was built with (they change its ABI).
pkg_check_modules(LOCKSTEP_HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)

set(LOCKSTEP_DASHBOARD_ASSETS index.html charts.js sweep.js app.js style.css)
set(LOCKSTEP_DASHBOARD_ASSET_FILES "")
foreach(asset IN LISTS LOCKSTEP_DASHBOARD_ASSETS)
  list(APPEND LOCKSTEP_DASHBOARD_ASSET_FILES ${CMAKE_CURRENT_LIST_DIR}/assets/${asset})
endforeach()
set(LOCKSTEP_DASHBOARD_ASSETS_CPP ${CMAKE_CURRENT_BINARY_DIR}/generated/dashboard_assets.cpp)
add_custom_command(
  OUTPUT ${LOCKSTEP_DASHBOARD_ASSETS_CPP}
  COMMAND ${CMAKE_COMMAND} -DOUTPUT=${LOCKSTEP_DASHBOARD_ASSETS_CPP}
          -DASSET_DIR=${CMAKE_CURRENT_LIST_DIR}/assets "-DASSETS=${LOCKSTEP_DASHBOARD_ASSETS}"
          -P ${CMAKE_CURRENT_LIST_DIR}/embed_assets.cmake
  DEPENDS ${LOCKSTEP_DASHBOARD_ASSET_FILES} ${CMAKE_CURRENT_LIST_DIR}/embed_assets.cmake
  COMMENT "Embedding the dashboard's assets"
  VERBATIM)

add_library(lockstep_dashboard STATIC
  ${CMAKE_CURRENT_LIST_DIR}/jsonl_file.cpp
  ${CMAKE_CURRENT_LIST_DIR}/run_reader.cpp
  ${CMAKE_CURRENT_LIST_DIR}/server.cpp
  ${CMAKE_CURRENT_LIST_DIR}/report.cpp
  ${CMAKE_CURRENT_LIST_DIR}/sweep_reader.cpp
  ${LOCKSTEP_DASHBOARD_ASSETS_CPP}
)
target_include_directories(lockstep_dashboard PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/src)
target_link_libraries(lockstep_dashboard
  PUBLIC lockstep nlohmann_json::nlohmann_json
  PRIVATE fmt::fmt PkgConfig::LOCKSTEP_HTTPLIB)
lockstep_target_warnings(lockstep_dashboard)

target_sources(lockstep_cli PRIVATE
  ${CMAKE_CURRENT_SOURCE_DIR}/src/cli/cmd_dashboard.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/src/cli/cmd_report.cpp
)
target_link_libraries(lockstep_cli PRIVATE lockstep_dashboard)
