# libsundial: the C SDK as users link it, one shared library (versioned soname) and one static
# archive, both made of the objects of sd_sdk_core and of every internal static library it
# links, found by walking the link closure (so a module the SDK starts to need is picked up
# with no list to keep in step). It holds no runner: the embedded runner is
# libsundial_embedded (Sundial::embedded), which the SDK reaches through <sundial/embedded.h>
# without linking it. Included from the top level after every directory is added.
#
# Only SD_API functions leave the shared library: everything is compiled with hidden
# visibility, so the protobuf-c generated code and the runner's internals cannot clash with a
# program's own symbols. The shared library records its system dependencies itself; the
# static archive names them for its users (Sundial::sundial_deps in SundialConfig.cmake,
# Libs.private in sundial.pc).

# sd_link_closure(<parts-var> <system-var> targets...): the internal static libraries (sd_*)
# reachable from targets, and everything else they link (imported targets, library names and
# paths), each once, in first-seen order.
function(sd_link_closure parts_var system_var)
    set(parts)
    set(system)
    set(seen)
    set(todo ${ARGN})
    while(todo)
        list(POP_FRONT todo item)
        string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" item "${item}")
        # sd_static_or_shared's choices (top CMakeLists.txt): the static archives are for the
        # sundial binary only; libsundial and its users get the shared libraries.
        if(item MATCHES "TARGET_PROPERTY:SD_STATIC_DEPS")
            if(item MATCHES "^\\$<\\$<NOT:\\$<BOOL:\\$<TARGET_PROPERTY:SD_STATIC_DEPS>>>:(.*)>$")
                set(item ${CMAKE_MATCH_1})
            else()
                continue()
            endif()
        endif()
        if(item IN_LIST seen OR item STREQUAL "")
            continue()
        endif()
        # A target_link_libraries() call made in another directory (the top level links sd_urns
        # so) brackets its items in LINK_LIBRARIES with "::@(directory-id)" and "::@": markers,
        # not libraries.
        if(item MATCHES "^::@")
            continue()
        endif()
        list(APPEND seen ${item})
        if(NOT TARGET ${item} AND item MATCHES "^PkgConfig::(.+)$")
            # An imported target of pkg_check_modules made in another directory, so not visible
            # here; its libraries are still in the cache, as pkgcfg_lib_<PREFIX>_<name>.
            set(prefix ${CMAKE_MATCH_1})
            get_cmake_property(cached CACHE_VARIABLES)
            list(FILTER cached INCLUDE REGEX "^pkgcfg_lib_${prefix}_")
            foreach(var ${cached})
                if(${var})
                    list(APPEND system ${${var}})
                endif()
            endforeach()
            continue()
        endif()
        if(NOT TARGET ${item})
            list(APPEND system ${item})
            continue()
        endif()
        get_target_property(type ${item} TYPE)
        get_target_property(imported ${item} IMPORTED)
        if(imported)
            list(APPEND system ${item})
        elseif(type STREQUAL "STATIC_LIBRARY")
            list(APPEND parts ${item})
            get_target_property(libs ${item} LINK_LIBRARIES)
            if(libs)
                list(APPEND todo ${libs})
            endif()
        elseif(type STREQUAL "INTERFACE_LIBRARY")
            get_target_property(libs ${item} INTERFACE_LINK_LIBRARIES)
            if(libs)
                list(APPEND todo ${libs})
            endif()
        endif()
    endwhile()
    set(${parts_var} ${parts} PARENT_SCOPE)
    set(${system_var} ${system} PARENT_SCOPE)
endfunction()

# sd_link_flags(<var> items...): the system libraries as plain linker words: -lNAME for a
# library path or name, -pthread for Threads::Threads, imported targets expanded.
function(sd_link_flags out_var)
    set(flags)
    set(todo ${ARGN})
    while(todo)
        list(POP_FRONT todo item)
        if(item STREQUAL "Threads::Threads")
            list(APPEND flags -pthread)
        elseif(TARGET ${item})
            get_target_property(libs ${item} INTERFACE_LINK_LIBRARIES)
            if(libs)
                list(PREPEND todo ${libs})
            endif()
        elseif(item MATCHES "^-")
            list(APPEND flags ${item})
        else()
            get_filename_component(stem ${item} NAME_WE)
            string(REGEX REPLACE "^lib" "" stem "${stem}")
            list(APPEND flags -l${stem})
        endif()
    endwhile()
    list(REMOVE_DUPLICATES flags)
    set(${out_var} ${flags} PARENT_SCOPE)
endfunction()

sd_link_closure(SD_SUNDIAL_PARTS SD_SUNDIAL_SYSTEM_LIBS sd_sdk_core)
sd_link_flags(SD_SUNDIAL_LINK_FLAGS ${SD_SUNDIAL_SYSTEM_LIBS})
set(SD_SUNDIAL_OBJECTS)
foreach(part ${SD_SUNDIAL_PARTS})
    list(APPEND SD_SUNDIAL_OBJECTS $<TARGET_OBJECTS:${part}>)
endforeach()

add_library(sundial_shared SHARED ${SD_SUNDIAL_OBJECTS})
set_target_properties(sundial_shared PROPERTIES
    OUTPUT_NAME sundial
    EXPORT_NAME sundial
    VERSION ${PROJECT_VERSION}
    SOVERSION ${PROJECT_VERSION_MAJOR})
target_link_libraries(sundial_shared PRIVATE ${SD_SUNDIAL_SYSTEM_LIBS})
# A shared library with an undefined symbol is a broken install: fail at link time instead.
# (Not under sanitizers: clang leaves their runtime to the executable.)
if(NOT SD_SANITIZE AND NOT SD_FUZZ)
    target_link_options(sundial_shared PRIVATE -Wl,--no-undefined)
endif()

add_library(sundial_static STATIC ${SD_SUNDIAL_OBJECTS})
set_target_properties(sundial_static PROPERTIES
    OUTPUT_NAME sundial
    EXPORT_NAME sundial_static)
target_link_libraries(sundial_static INTERFACE
    "$<BUILD_INTERFACE:${SD_SUNDIAL_SYSTEM_LIBS}>"
    "$<INSTALL_INTERFACE:Sundial::sundial_deps>")

foreach(lib sundial_shared sundial_static)
    target_include_directories(${lib} INTERFACE
        $<BUILD_INTERFACE:${CMAKE_SOURCE_DIR}/sdk-harness/include>
        $<BUILD_INTERFACE:${CMAKE_BINARY_DIR}/include>
        $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
endforeach()
add_library(Sundial::sundial ALIAS sundial_shared)
add_library(Sundial::sundial_static ALIAS sundial_static)

# libsundial_embedded: the runner behind sd_pipeline_run without an endpoint. The shared one
# carries private copies of everything it needs (hidden, and a version script lets exactly
# one symbol out: sd_embedded_runner_v1), so it depends on nothing of libsundial's. The static
# one holds only what libsundial.a lacks and links libsundial.a; --undefined makes the linker
# take its interface object, which the SDK refers to only weakly.
sd_link_closure(SD_EMBEDDED_PARTS SD_EMBEDDED_SYSTEM_LIBS sd_server)
sd_link_flags(SD_EMBEDDED_LINK_FLAGS ${SD_EMBEDDED_SYSTEM_LIBS})
set(SD_EMBEDDED_OBJECTS $<TARGET_OBJECTS:sd_sdk>)
set(SD_EMBEDDED_ONLY_OBJECTS $<TARGET_OBJECTS:sd_sdk>)
foreach(part ${SD_EMBEDDED_PARTS})
    list(APPEND SD_EMBEDDED_OBJECTS $<TARGET_OBJECTS:${part}>)
    if(NOT part IN_LIST SD_SUNDIAL_PARTS)
        list(APPEND SD_EMBEDDED_ONLY_OBJECTS $<TARGET_OBJECTS:${part}>)
    endif()
endforeach()

add_library(sundial_embedded_shared SHARED ${SD_EMBEDDED_OBJECTS})
set_target_properties(sundial_embedded_shared PROPERTIES
    OUTPUT_NAME sundial_embedded
    EXPORT_NAME embedded
    VERSION ${PROJECT_VERSION}
    SOVERSION ${PROJECT_VERSION_MAJOR}
    LINK_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/embedded.map)
target_link_libraries(sundial_embedded_shared PRIVATE ${SD_EMBEDDED_SYSTEM_LIBS})
target_link_options(sundial_embedded_shared PRIVATE
    -Wl,--version-script=${CMAKE_CURRENT_LIST_DIR}/embedded.map)
if(NOT SD_SANITIZE AND NOT SD_FUZZ)
    target_link_options(sundial_embedded_shared PRIVATE -Wl,--no-undefined)
endif()
# Linking Sundial::embedded means linking the SDK too.
target_link_libraries(sundial_embedded_shared INTERFACE sundial_shared)

add_library(sundial_embedded_static STATIC ${SD_EMBEDDED_ONLY_OBJECTS})
set_target_properties(sundial_embedded_static PROPERTIES
    OUTPUT_NAME sundial_embedded
    EXPORT_NAME embedded_static)
target_link_libraries(sundial_embedded_static INTERFACE sundial_static
    "$<BUILD_INTERFACE:${SD_EMBEDDED_SYSTEM_LIBS}>"
    "$<INSTALL_INTERFACE:Sundial::embedded_deps>")
target_link_options(sundial_embedded_static INTERFACE "LINKER:--undefined=sd_embedded_runner_v1")

add_library(Sundial::embedded ALIAS sundial_embedded_shared)
add_library(Sundial::embedded_static ALIAS sundial_embedded_static)
