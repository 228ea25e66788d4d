#pragma once

/// \file What libferry exports. It is built with -fvisibility=hidden (and links the static CUDA
/// runtime with --exclude-libs), so only what is marked here leaves the library:
/// FERRY_API     the public classes and functions of include/ferry/;
/// FERRY_HIDDEN  a member of such a class that only libferry itself calls, because it takes an
///               internal type (ferry::detail): it stays inside.

#if defined(__GNUC__) || defined(__clang__)
#define FERRY_API __attribute__((visibility("default")))
#define FERRY_HIDDEN __attribute__((visibility("hidden")))
#else
#define FERRY_API
#define FERRY_HIDDEN
#endif
