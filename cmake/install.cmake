# install.cmake - `cmake --install` rules (included from the top-level
# CMakeLists.txt after every sub-directory, so all targets exist):
#
#   bin/                          ringmaster (coordinator + CLI), ringmaster-worker
#   lib/                          libringmaster.so.0.1.0, .so.0, .so; libringmaster.a
#   lib/pkgconfig/                ringmaster.pc
#   lib/cmake/ringmaster/         ringmasterConfig.cmake, ...ConfigVersion.cmake,
#                                 ringmasterTargets*.cmake: find_package(ringmaster CONFIG)
#                                 -> ringmaster::ringmaster (shared), ringmaster::ringmaster_static
#   include/ringmaster/           the public header(s)
#   <python dir>/ringmaster/      the Python package (RINGMASTER_INSTALL_PYTHONDIR)
#   lib/systemd/system/           ringmaster.service (ExecStart follows the prefix)
#   share/ringmaster/web/         the dashboard files (the binary embeds its own copy)
#   share/ringmaster/openapi.json the REST API description
#   share/doc/ringmaster/examples the examples' sources
#
# Targets are referred to by name only (ringmaster, ringmaster_static,
# ringmaster_bin, ringmaster-worker); the folders that define them may move.
# Every path below is relative to the prefix, so `cmake --install build
# --prefix DIR` and DESTDIR both work; files that name a path (ringmaster.pc,
# the unit) are written at install time with the prefix actually used.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(RINGMASTER_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/ringmaster" CACHE STRING
    "Where ringmasterConfig.cmake goes (relative to the prefix)")
# systemd looks in <prefix>/lib/systemd/system for /usr and /usr/local (not
# in a multiarch libdir).
set(RINGMASTER_INSTALL_SYSTEMDDIR "lib/systemd/system" CACHE STRING
    "Where ringmaster.service goes (relative to the prefix)")

# The Python package goes where the system interpreter looks under the
# prefix. Debian's /usr/bin/python3 (site.py) searches
# /usr/local/lib/python3.X/dist-packages and /usr/lib/python3/dist-packages;
# other distributions' interpreters lib/python3.X/site-packages.
if(NOT DEFINED RINGMASTER_INSTALL_PYTHONDIR)
  find_program(RM_SYSTEM_PYTHON3 NAMES python3 PATHS /usr/bin NO_DEFAULT_PATH)
  find_program(RM_SYSTEM_PYTHON3 NAMES python3)
  set(rm_pydir "lib/python3/dist-packages")
  if(RM_SYSTEM_PYTHON3)
    execute_process(
      COMMAND ${RM_SYSTEM_PYTHON3} -c
              "import sys; print('%d.%d %d' % (sys.version_info[0], sys.version_info[1], any(p.endswith('dist-packages') for p in sys.path)))"
      OUTPUT_VARIABLE rm_py OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rm_py_rc)
    if(rm_py_rc EQUAL 0 AND rm_py MATCHES "^([0-9]+\\.[0-9]+) ([01])$")
      set(rm_py_ver ${CMAKE_MATCH_1})
      if(CMAKE_MATCH_2 STREQUAL "0")
        set(rm_pydir "lib/python${rm_py_ver}/site-packages")
      elseif(NOT CMAKE_INSTALL_PREFIX STREQUAL "/usr")
        set(rm_pydir "lib/python${rm_py_ver}/dist-packages")
      endif()
    endif()
  endif()
  set(RINGMASTER_INSTALL_PYTHONDIR "${rm_pydir}" CACHE STRING
      "Where the Python package ringmaster/ goes (relative to the prefix)")
endif()

# ---- the exported library targets ------------------------------------------
# worker/CMakeLists.txt gives both libraries include/ and their private
# dependencies (rm_proto, gRPC, CUDA, ibverbs) for the build tree only
# ($<BUILD_INTERFACE:...>) and puts rm_proto's objects into libringmaster.a;
# the installed static target links instead ringmaster::private_deps, which
# ringmasterConfig.cmake defines (grpc, libprotobuf-c and libsodium from pkg-config, plus
# CUDA/ibverbs when built with them).
target_link_libraries(ringmaster_static INTERFACE
                      "$<INSTALL_INTERFACE:$<LINK_ONLY:ringmaster::private_deps>>")

install(TARGETS ringmaster ringmaster_static EXPORT ringmasterTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS ringmaster_bin ringmaster-worker
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# include/ringmaster/ is the public API, every header in it (ringmaster.h
# includes its siblings as "ringmaster/NAME.h").
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/ringmaster
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h")

# ---- CMake package ---------------------------------------------------------
# What the static library needs besides pkg-config's grpc/libprotobuf-c/libsodium:
# spelled for ringmasterConfig.cmake (RM_CFG_*) and ringmaster.pc.
set(RM_CFG_HAVE_CUDA 0)
set(RM_CFG_HAVE_RDMA 0)
set(RM_CFG_IBVERBS_DIR "")
set(RM_PC_LIBS_PRIVATE "-lpthread -lm")
if(RM_HAVE_CUDA)
  set(RM_CFG_HAVE_CUDA 1)
  # -lstdc++: the kernels' host code that nvcc generates needs the C++ runtime
  set(RM_PC_LIBS_PRIVATE "-L${CUDAToolkit_LIBRARY_DIR} -lcudart_static -lstdc++ -ldl -lrt ${RM_PC_LIBS_PRIVATE}")
endif()
if(RM_HAVE_RDMA)
  set(RM_CFG_HAVE_RDMA 1)
  get_filename_component(RM_CFG_IBVERBS_DIR "${IBVERBS_LIB}" DIRECTORY)
  set(RM_PC_LIBS_PRIVATE "-libverbs ${RM_PC_LIBS_PRIVATE}")
endif()

install(EXPORT ringmasterTargets NAMESPACE ringmaster::
        DESTINATION ${RINGMASTER_INSTALL_CMAKEDIR})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/ringmasterConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/install/ringmasterConfig.cmake
                              INSTALL_DESTINATION ${RINGMASTER_INSTALL_CMAKEDIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/install/ringmasterConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/install/ringmasterConfig.cmake
              ${PROJECT_BINARY_DIR}/install/ringmasterConfigVersion.cmake
        DESTINATION ${RINGMASTER_INSTALL_CMAKEDIR})

# ---- files written at install time -----------------------------------------
# rm_install_configured(IN NAME DEST): configure IN (@VAR@ only) when
# `cmake --install` runs, with RM_PREFIX = the install prefix in effect, and
# install the result as DEST/NAME. Configure-time values are passed through
# the RM_PC_*/PROJECT_* variables listed here.
function(rm_install_configured in name dest)
  set(out ${PROJECT_BINARY_DIR}/install/at-install/${name})
  if(IS_ABSOLUTE "${dest}")
    set(dest_expr "${dest}")
  else()
    set(dest_expr "\${CMAKE_INSTALL_PREFIX}/${dest}")
  endif()
  install(CODE "
    set(RM_PREFIX \"\${CMAKE_INSTALL_PREFIX}\")
    set(PROJECT_VERSION [[${PROJECT_VERSION}]])
    set(CMAKE_INSTALL_LIBDIR [[${CMAKE_INSTALL_LIBDIR}]])
    set(CMAKE_INSTALL_INCLUDEDIR [[${CMAKE_INSTALL_INCLUDEDIR}]])
    set(CMAKE_INSTALL_BINDIR [[${CMAKE_INSTALL_BINDIR}]])
    set(RM_PC_LIBS_PRIVATE [[${RM_PC_LIBS_PRIVATE}]])
    configure_file([[${in}]] [[${out}]] @ONLY)
    file(INSTALL DESTINATION \"${dest_expr}\" TYPE FILE FILES [[${out}]])
  ")
endfunction()

rm_install_configured(${CMAKE_CURRENT_LIST_DIR}/ringmaster.pc.in ringmaster.pc
                      ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
# The unit in deploy/systemd names /usr/local/bin/ringmaster and
# /usr/local/share/doc/ringmaster (the default prefix) so that it is usable as
# it is; the installed copy names them under the prefix actually used.
set(RM_UNIT_SRC ${PROJECT_SOURCE_DIR}/deploy/systemd/ringmaster.service)
set(RM_UNIT_OUT ${PROJECT_BINARY_DIR}/install/at-install/ringmaster.service)
if(IS_ABSOLUTE "${RINGMASTER_INSTALL_SYSTEMDDIR}")
  set(rm_unit_dest "${RINGMASTER_INSTALL_SYSTEMDDIR}")
else()
  set(rm_unit_dest "\${CMAKE_INSTALL_PREFIX}/${RINGMASTER_INSTALL_SYSTEMDDIR}")
endif()
install(CODE "
  file(READ [[${RM_UNIT_SRC}]] rm_unit)
  string(REPLACE /usr/local/bin/ \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_BINDIR}/\" rm_unit \"\${rm_unit}\")
  string(REPLACE /usr/local/share/doc/ringmaster/ \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_DOCDIR}/\" rm_unit \"\${rm_unit}\")
  file(WRITE [[${RM_UNIT_OUT}]] \"\${rm_unit}\")
  file(INSTALL DESTINATION \"${rm_unit_dest}\" TYPE FILE FILES [[${RM_UNIT_OUT}]])
")

# ---- the rest: Python, dashboard, examples, docs -----------------------------
install(DIRECTORY ${PROJECT_SOURCE_DIR}/python/ringmaster
        DESTINATION ${RINGMASTER_INSTALL_PYTHONDIR}
        FILES_MATCHING PATTERN "*.py"
        PATTERN "__pycache__" EXCLUDE)
# ringmaster/_installed.py: LIBRARY = <prefix>/<libdir>/libringmaster.so, so
# that the installed package can load the library of its own install wherever
# RINGMASTER_INSTALL_PYTHONDIR points (_lib.py finds <prefix>/lib from
# <prefix>/lib/python3*/dist-packages by itself).
rm_install_configured(${CMAKE_CURRENT_LIST_DIR}/ringmaster_installed.py.in _installed.py
                      ${RINGMASTER_INSTALL_PYTHONDIR}/ringmaster)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/web/
        DESTINATION ${CMAKE_INSTALL_DATADIR}/ringmaster/web)
if(EXISTS ${PROJECT_SOURCE_DIR}/api/openapi.json)
  install(FILES ${PROJECT_SOURCE_DIR}/api/openapi.json DESTINATION ${CMAKE_INSTALL_DATADIR}/ringmaster)
endif()
foreach(sub c pytorch)
  if(IS_DIRECTORY ${PROJECT_SOURCE_DIR}/examples/${sub})
    install(DIRECTORY ${PROJECT_SOURCE_DIR}/examples/${sub}
            DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples
            PATTERN "__pycache__" EXCLUDE)
  endif()
endforeach()
install(FILES ${PROJECT_SOURCE_DIR}/deploy/systemd/README.md
        DESTINATION ${CMAKE_INSTALL_DOCDIR} RENAME systemd.md)

# The layout, for tests/install/run.sh (which runs `cmake --install` into a
# temporary prefix and needs to know where things land).
file(CONFIGURE OUTPUT ${PROJECT_BINARY_DIR}/install/layout.env CONTENT
"RM_LIBDIR='${CMAKE_INSTALL_LIBDIR}'
RM_BINDIR='${CMAKE_INSTALL_BINDIR}'
RM_INCLUDEDIR='${CMAKE_INSTALL_INCLUDEDIR}'
RM_DATADIR='${CMAKE_INSTALL_DATADIR}'
RM_DOCDIR='${CMAKE_INSTALL_DOCDIR}'
RM_CMAKEDIR='${RINGMASTER_INSTALL_CMAKEDIR}'
RM_PYTHONDIR='${RINGMASTER_INSTALL_PYTHONDIR}'
RM_SYSTEMDDIR='${RINGMASTER_INSTALL_SYSTEMDDIR}'
")
