# cmake --install BUILD [--prefix P]: what a user of Sundial gets.
#
#   P/bin/sundial, P/bin/sundialctl           the runner and its command-line client
#   P/include/sundial/*.h                     the C SDK's public headers (they include only
#                                             <sundial/...> and the C library)
#   P/lib/libsundial.so.X.Y.Z (+ soname link) the C SDK, shared; only sd_* API symbols exported
#   P/lib/libsundial.a                        the same, static
#   P/lib/libsundial_embedded.{so*,a}         the embedded runner (sd_pipeline_run without an
#                                             endpoint); the SDK never links it
#   P/lib/cmake/Sundial/                      find_package(Sundial): Sundial::sundial (shared),
#                                             Sundial::sundial_static, Sundial::embedded(_static)
#   P/lib/pkgconfig/sundial.pc                pkg-config --cflags --libs sundial
#   P/lib/pkgconfig/sundial-embedded.pc       ... sundial-embedded (the SDK plus the runner)
#
# Everything is relocatable: the CMake package and the .pc file find the prefix from their
# own location, so `--prefix` at install time works without reconfiguring.

include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

if(TARGET sd_sdk)
    include(${CMAKE_CURRENT_LIST_DIR}/SundialLibrary.cmake)
endif()

set(SD_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/Sundial)

foreach(bin sundial sundialctl)
    if(TARGET ${bin})
        install(TARGETS ${bin} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
    endif()
endforeach()

if(TARGET sundial_shared)
    install(TARGETS sundial_shared sundial_static sundial_embedded_shared sundial_embedded_static
        EXPORT SundialTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
    install(DIRECTORY ${CMAKE_SOURCE_DIR}/sdk-harness/include/sundial
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h")
    install(FILES ${CMAKE_BINARY_DIR}/include/sundial/version.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/sundial)

    install(EXPORT SundialTargets NAMESPACE Sundial:: DESTINATION ${SD_INSTALL_CMAKEDIR})
    # The static archive's system libraries, as linker words, for SundialConfig.cmake.
    set(SD_CONFIG_STATIC_LIBS)
    foreach(f ${SD_SUNDIAL_LINK_FLAGS})
        string(REGEX REPLACE "^-l" "" f "${f}")
        list(APPEND SD_CONFIG_STATIC_LIBS ${f})
    endforeach()
    set(SD_CONFIG_EMBEDDED_LIBS)
    foreach(f ${SD_EMBEDDED_LINK_FLAGS})
        string(REGEX REPLACE "^-l" "" f "${f}")
        list(APPEND SD_CONFIG_EMBEDDED_LIBS ${f})
    endforeach()
    configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/SundialConfig.cmake.in
        ${CMAKE_BINARY_DIR}/cmake/SundialConfig.cmake
        INSTALL_DESTINATION ${SD_INSTALL_CMAKEDIR})
    # 0.x releases promise nothing across minor versions; from 1.0 on, the major version.
    if(PROJECT_VERSION_MAJOR EQUAL 0)
        set(_sd_compat SameMinorVersion)
    else()
        set(_sd_compat SameMajorVersion)
    endif()
    write_basic_package_version_file(${CMAKE_BINARY_DIR}/cmake/SundialConfigVersion.cmake
        VERSION ${PROJECT_VERSION} COMPATIBILITY ${_sd_compat})
    install(FILES ${CMAKE_BINARY_DIR}/cmake/SundialConfig.cmake
        ${CMAKE_BINARY_DIR}/cmake/SundialConfigVersion.cmake
        DESTINATION ${SD_INSTALL_CMAKEDIR})

    # sundial.pc: the prefix is found from the file's own place (${pcfiledir}).
    set(_sd_pcdir ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
    list(JOIN SD_SUNDIAL_LINK_FLAGS " " SD_PC_LIBS_PRIVATE)
    file(RELATIVE_PATH SD_PC_TO_PREFIX /sd-prefix/${_sd_pcdir} /sd-prefix)
    string(REGEX REPLACE "/$" "" SD_PC_TO_PREFIX "${SD_PC_TO_PREFIX}")
    configure_file(${CMAKE_SOURCE_DIR}/cmake/sundial.pc.in ${CMAKE_BINARY_DIR}/cmake/sundial.pc
        @ONLY)
    list(JOIN SD_EMBEDDED_LINK_FLAGS " " SD_PC_EMBEDDED_LIBS_PRIVATE)
    configure_file(${CMAKE_SOURCE_DIR}/cmake/sundial-embedded.pc.in
        ${CMAKE_BINARY_DIR}/cmake/sundial-embedded.pc @ONLY)
    install(FILES ${CMAKE_BINARY_DIR}/cmake/sundial.pc ${CMAKE_BINARY_DIR}/cmake/sundial-embedded.pc
        DESTINATION ${_sd_pcdir})
endif()
