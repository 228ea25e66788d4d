#pragma once

// oneTBB as packaged is not instrumented, so ThreadSanitizer cannot see how it hands a task to a
// worker, passes an item between a pipeline's stages, or joins a parallel_for. FERRY_TSAN_RELEASE
// and FERRY_TSAN_ACQUIRE mark exactly those edges for it, on an address both sides name: release
// where work is handed on (before the algorithm, at a task's end), acquire where it is taken up
// (at a task's start, after the algorithm). Outside a ThreadSanitizer build they are nothing.
// (tests/tsan.supp silences the reports whose top frame is inside oneTBB's own headers.)

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#define FERRY_TSAN_RELEASE(p) __tsan_release(const_cast<void*>(static_cast<const void*>(p)))
#define FERRY_TSAN_ACQUIRE(p) __tsan_acquire(const_cast<void*>(static_cast<const void*>(p)))
#else
#define FERRY_TSAN_RELEASE(p) static_cast<void>(p)
#define FERRY_TSAN_ACQUIRE(p) static_cast<void>(p)
#endif
