# Tests of the dashboard layer (`lockstep dashboard`, `lockstep report`).
# test_dashboard_e2e drives Debian's headless chromium (scripts/setup.sh installs
# it) and fails when /usr/bin/chromium is missing.
lockstep_add_test(NAME test_dashboard_reader SOURCES dashboard/test_run_reader.cpp LABELS unit)
target_link_libraries(test_dashboard_reader PRIVATE lockstep_dashboard)

lockstep_add_test(NAME test_dashboard_server SOURCES dashboard/test_dashboard_server.cpp LABELS unit TIMEOUT 120)
target_link_libraries(test_dashboard_server PRIVATE lockstep_dashboard PkgConfig::LOCKSTEP_HTTPLIB)
target_compile_definitions(test_dashboard_server PRIVATE LOCKSTEP_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
add_dependencies(test_dashboard_server lockstep_cli)

lockstep_add_test(NAME test_dashboard_e2e SOURCES dashboard/test_dashboard_e2e.cpp LABELS multiprocess TIMEOUT 300)
target_link_libraries(test_dashboard_e2e PRIVATE lockstep_dashboard)
add_dependencies(test_dashboard_e2e lockstep_cli)
# Its real run samples GPUs through the suite's scripted NVML (tests/monitor/tests.cmake).
target_compile_definitions(test_dashboard_e2e PRIVATE LOCKSTEP_FAKE_NVML="$<TARGET_SONAME_FILE:fake_nvml>")
add_dependencies(test_dashboard_e2e fake_nvml)
