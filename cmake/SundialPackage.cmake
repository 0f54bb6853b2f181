# The Debian package (cpack -G DEB, run by tools/package.sh) and what only it needs:
#
#   /usr/bin/sundial, /usr/bin/sundialctl     the runner and its client (SundialInstall.cmake)
#   /usr/include, /usr/lib/...                the C SDK: headers, libraries, CMake and
#                                             pkg-config files (SundialInstall.cmake)
#   /usr/share/man/man1/sundial.1.gz, sundialctl.1.gz
#                                             made by help2man from the binaries' own --help
#                                             and --version, so the two never differ
#   /usr/lib/systemd/system/sundial.service   a loopback job server; installed, not enabled
#
# Its dependencies are computed by dpkg-shlibdeps from what the binaries and libraries link
# (CPACK_DEBIAN_PACKAGE_SHLIBDEPS), so they are Debian 12's own package names.

find_program(SD_HELP2MAN help2man)
if(SD_HELP2MAN AND TARGET sundial AND TARGET sundialctl)
    set(_man ${CMAKE_BINARY_DIR}/man)
    file(MAKE_DIRECTORY ${_man})
    set(_pages)
    foreach(bin sundial sundialctl)
        if(bin STREQUAL sundial)
            set(_name "a local Apache Beam runner with a synthetic processing-time clock")
        else()
            set(_name "command-line client of a Sundial job server")
        endif()
        add_custom_command(OUTPUT ${_man}/${bin}.1.gz
            COMMAND ${SD_HELP2MAN} --no-info --section=1 --name=${_name}
                    --output=${_man}/${bin}.1 $<TARGET_FILE:${bin}>
            COMMAND gzip -9nf ${_man}/${bin}.1
            DEPENDS ${bin}
            COMMENT "help2man: man page of ${bin} from its --help"
            VERBATIM)
        list(APPEND _pages ${_man}/${bin}.1.gz)
    endforeach()
    add_custom_target(sd_man_pages ALL DEPENDS ${_pages})
    install(FILES ${_pages} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
else()
    message(STATUS "help2man not found: no man pages (tools/setup.sh installs it)")
endif()

install(FILES ${CMAKE_SOURCE_DIR}/packaging/sundial.service
    DESTINATION lib/systemd/system)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME sundial)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR "Sundial")
set(CPACK_PACKAGE_CONTACT "Sundial developers <sundial@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "Local Apache Beam runner with a synthetic processing-time clock")
set(CPACK_PACKAGE_DESCRIPTION
    "Sundial runs Apache Beam pipelines (Python, Java, Go, TypeScript SDKs) on one machine:\n\
a drop-in for Beam's Prism runner whose processing-time clock is synthetic, so tests whose\n\
timers wait for hours finish in milliseconds. Also the C SDK: headers, libraries,\n\
pkg-config and CMake package files.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "pkg-config, cmake")
set(CPACK_OUTPUT_FILE_PREFIX ${CMAKE_BINARY_DIR}/pkg)
include(CPack)
