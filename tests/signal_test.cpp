// The loader's wake-up counter (lib/pipeline/ring.hpp's Signal): a waiter that saw a version is
// woken by every notify() after it, whether it waits for ever (std::atomic::wait) or until a
// deadline (a futex wait with a timeout, as the consumer's next() does from Python's main thread),
// a timed wait that nobody notifies ends at its deadline with false, and the slices of a long
// wait do not each spin before they sleep.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "pipeline/ring.hpp"

namespace {

using ferry::detail::Clock;
using ferry::detail::Signal;

// Two threads hand a token back and forth through two signals, each waiting with a deadline of
// 10 s: a lost wake-up leaves a wait asleep to its deadline (then it sees the version moved and
// goes on), so a wait of 5 s or more, or one that ends false, counts as lost, and both stop.
TEST(Signal, TimedWaitsAreWokenByEveryNotifyAcrossManyHandOffs) {
  constexpr int kRounds = 20000;
  Signal ping;
  Signal pong;
  std::atomic<int> turn{0};  // 2r + 1: the other thread's move in round r; 2r + 2: this one's
  std::atomic<int> lost{0};
  // Waits on `s` until `turn` is `want`; false once a wake-up was lost (here or there).
  const auto await = [&](Signal& s, int want) {
    for (;;) {
      const std::uint32_t seen = s.version();
      if (turn.load() == want) return true;
      if (lost.load() != 0) return false;
      const auto start = Clock::now();
      const bool moved = s.wait_until(seen, start + std::chrono::seconds(10));
      if (!moved || Clock::now() - start >= std::chrono::seconds(5)) {
        lost.fetch_add(1);
        return false;
      }
    }
  };
  std::thread other([&] {
    for (int r = 0; r < kRounds; ++r) {
      if (!await(ping, 2 * r + 1)) return;
      turn.store(2 * r + 2);
      pong.notify();
    }
  });
  for (int r = 0; r < kRounds; ++r) {
    turn.store(2 * r + 1);
    ping.notify();
    if (!await(pong, 2 * r + 2)) break;
  }
  ping.notify();  // the other thread, if it waits, sees `lost`
  other.join();
  EXPECT_EQ(lost.load(), 0);
  EXPECT_EQ(turn.load(), 2 * kRounds);
}

// Timed and untimed waiters on one signal are all woken by one notify().
TEST(Signal, OneNotifyWakesTimedAndUntimedWaitersAlike) {
  Signal s;
  const std::uint32_t seen = s.version();
  std::atomic<int> woken{0};
  std::vector<std::thread> waiters;
  for (int i = 0; i < 4; ++i) {
    waiters.emplace_back([&, i] {
      if (i % 2 == 0) {
        s.wait(seen);
        woken.fetch_add(1);
      } else {
        // Woken, not out at the deadline (where it would see the version moved, too).
        const auto start = Clock::now();
        const bool moved = s.wait_until(seen, start + std::chrono::seconds(10));
        if (moved && Clock::now() - start < std::chrono::seconds(5)) woken.fetch_add(1);
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // most of them asleep by now
  s.notify();
  for (std::thread& t : waiters) t.join();
  EXPECT_EQ(woken.load(), 4);
}

TEST(Signal, ATimedWaitNobodyNotifiesEndsAtItsDeadlineWithFalse) {
  Signal s;
  const std::uint32_t seen = s.version();
  const auto deadline = Clock::now() + std::chrono::milliseconds(30);
  EXPECT_FALSE(s.wait_until(seen, deadline));
  EXPECT_GE(Clock::now(), deadline);
  // A version that moved before the wait: true at once, whatever the deadline.
  s.notify();
  EXPECT_TRUE(s.wait_until(seen, Clock::now() - std::chrono::seconds(1)));
}

// next() from Python's main thread waits in 20 ms slices: a batch that takes seconds must not
// cost a dozen sched_yield()s a slice. A thread gives up the processor before it sleeps once per
// version it waits on, not again in a wait that comes back to the version its last one timed out
// on; a version that moved (or another signal) brings the looks back.
TEST(Signal, SlicesOfAWaitOnOneVersionLookBeforeSleepingOnlyOnce) {
  Signal s;
  Signal other;
  const std::uint32_t seen = s.version();
  const auto slice = [](auto& signal, std::uint32_t at) {
    const std::uint64_t before = Signal::yields_here();
    EXPECT_FALSE(signal.wait_until(at, Clock::now() + std::chrono::milliseconds(2)));
    return Signal::yields_here() - before;
  };
  EXPECT_GT(slice(s, seen), 0U);  // the first slice looks
  EXPECT_EQ(slice(s, seen), 0U);  // the next ones sleep at once
  EXPECT_EQ(slice(s, seen), 0U);
  EXPECT_GT(slice(other, other.version()), 0U);  // another signal looks again
  EXPECT_GT(slice(s, seen), 0U);                 // and then this one does too
  s.notify();
  EXPECT_GT(slice(s, s.version()), 0U);  // a new version looks again
  EXPECT_EQ(slice(s, s.version()), 0U);
}

}  // namespace
