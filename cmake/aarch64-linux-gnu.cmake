# Cross-compiling for 64-bit Arm Linux (Grace-class hosts) on a Debian x86-64
# machine: Debian's cross compiler (gcc-aarch64-linux-gnu) and the target's
# libraries installed as :arm64 packages through multiarch, i.e. under
# /usr/lib/aarch64-linux-gnu and /usr/include/aarch64-linux-gnu next to the
# build machine's own. tools/cross-aarch64.sh installs both and builds.
#
#   cmake -S . -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(HY_CROSS_TRIPLET aarch64-linux-gnu)

set(CMAKE_C_COMPILER ${HY_CROSS_TRIPLET}-gcc)
set(CMAKE_CXX_COMPILER ${HY_CROSS_TRIPLET}-g++)
# The multiarch directory names: find_library and find_path look in
# /usr/lib/aarch64-linux-gnu and /usr/include/aarch64-linux-gnu, and the
# build's own /usr/lib/x86_64-linux-gnu is never searched.
set(CMAKE_LIBRARY_ARCHITECTURE ${HY_CROSS_TRIPLET})

# Multiarch keeps every architecture under one root, /, so the root path is
# / and what separates the target's libraries from the build machine's is
# the directory name above. Programs (pkg-config, the compiler) are the build
# machine's; libraries, headers and CMake packages the target's.
set(CMAKE_FIND_ROOT_PATH /)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# pkg-config (the build machine's pkgconf) reads only the target's .pc files:
# PKG_CONFIG_LIBDIR replaces its default search path, which would find the
# x86-64 ones. PKG_CONFIG_PATH, searched first, is left to the project (the
# top CMakeLists.txt puts the pthreads OpenBLAS directory there).
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/${HY_CROSS_TRIPLET}/pkgconfig:/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_SYSROOT_DIR} "")
