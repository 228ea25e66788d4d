// BufferRing under autotune: slots are made lazily up to the limit, and lowering the limit frees
// the staging buffers of the slots above it (memory given back, not only left unused), which are
// made again when the limit rises.

#include "pipeline/ring.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace {

using ferry::detail::BufferRing;

BufferRing::Sizes lazy_sizes() {
  BufferRing::Sizes s;
  s.slots = 1;
  s.max_slots = 6;
  s.staging_bytes = 4096;
  s.capacity = 4;
  return s;
}

std::uint32_t take(BufferRing& ring) {
  const std::optional<std::uint32_t> id =
      ring.acquire_slot([] { return false; }, nullptr, [] { return true; });
  EXPECT_TRUE(id.has_value());
  return id.value_or(0);
}

TEST(BufferRing, SlotsAreMadeLazilyUpToTheLimit) {
  BufferRing ring(lazy_sizes(), nullptr);
  EXPECT_EQ(ring.slot_count(), 1U);
  ring.set_limit(4);
  std::vector<std::uint32_t> ids;
  for (int i = 0; i < 4; ++i) ids.push_back(take(ring));
  EXPECT_EQ(ring.slot_count(), 4U);
  EXPECT_EQ(ring.slot_allocations(), 4U);
  for (const std::uint32_t id : ids) ring.release_slot(id);
}

TEST(BufferRing, ALowerLimitFreesTheSlotsAboveItAndARaiseMakesThemAgain) {
  BufferRing ring(lazy_sizes(), nullptr);
  ring.set_limit(6);
  std::vector<std::uint32_t> ids;
  for (int i = 0; i < 6; ++i) ids.push_back(take(ring));
  ASSERT_EQ(ring.slot_count(), 6U);
  // Two stay with the consumer (in use); the other four come back free.
  for (int i = 2; i < 6; ++i) ring.release_slot(ids[static_cast<std::size_t>(i)]);
  ring.set_limit(3);
  const std::uint32_t a = take(ring);  // frees free slots down to the limit, then takes one
  EXPECT_EQ(ring.slot_count(), 3U);
  EXPECT_NE(ring.slot(a).data, nullptr);
  // Three made, all in use; once they are back, a limit of one frees two of them.
  ring.release_slot(ids[0]);
  ring.release_slot(ids[1]);
  ring.release_slot(a);
  ring.set_limit(1);
  const std::uint32_t b = take(ring);
  EXPECT_EQ(ring.slot_count(), 1U);  // the buffers of the other two are freed
  ring.release_slot(b);
  EXPECT_EQ(ring.slot_allocations(), 6U);
  // Raised again: freed ids are made anew, each a fresh allocation, and every slot is usable.
  ring.set_limit(5);
  ids.clear();
  for (int i = 0; i < 5; ++i) ids.push_back(take(ring));
  EXPECT_EQ(ring.slot_count(), 5U);
  EXPECT_EQ(ring.slot_allocations(), 10U);
  for (const std::uint32_t id : ids) {
    ASSERT_NE(ring.slot(id).data, nullptr);
    ring.slot(id).data[4095] = std::byte{1};  // the whole buffer is there (ASan checks)
    EXPECT_EQ(ring.slot(id).indices.capacity(), 4U);
  }
  for (const std::uint32_t id : ids) ring.release_slot(id);
}

TEST(BufferRing, SlotsInUseAreFreedOnlyOnceTheyComeBack) {
  BufferRing ring(lazy_sizes(), nullptr);
  ring.set_limit(4);
  std::vector<std::uint32_t> ids;
  for (int i = 0; i < 4; ++i) ids.push_back(take(ring));
  ring.set_limit(2);
  ring.release_slot(ids[0]);
  ring.release_slot(ids[1]);
  // Two made slots are free, two in use: the limit allows two in use, so acquiring waits
  // unless one comes back; first it frees the two free ones (four made, limit two).
  ring.release_slot(ids[2]);
  const std::uint32_t c = take(ring);
  EXPECT_EQ(ring.slot_count(), 2U);  // ids[3] in use and the one taken
  EXPECT_NE(ring.slot(c).data, nullptr);
  EXPECT_NE(ring.slot(ids[3]).data, nullptr);  // in use: kept
  ring.release_slot(ids[3]);
  ring.release_slot(c);
}

TEST(BufferRing, KeptBatchesGetNewSlotsInTheirPlaceWithinTheBudget) {
  BufferRing ring(lazy_sizes(), nullptr);
  ring.set_limit(2);
  const std::uint32_t a = take(ring);
  const std::uint32_t b = take(ring);
  // Both batches kept past their iteration (list(loader)): without new slots the consumer would
  // wait for ever; the budget allowing, the planner makes two more, beyond the capacity too.
  ring.add_kept();
  ring.add_kept();
  EXPECT_TRUE(ring.stalled(/*may_make=*/false));
  EXPECT_FALSE(ring.stalled(/*may_make=*/true));
  std::vector<std::uint32_t> more;
  for (int i = 0; i < 8; ++i) {
    more.push_back(take(ring));
    ring.add_kept();
  }
  EXPECT_EQ(ring.slot_count(), 10U);
  EXPECT_GT(ring.slot_ids(), ring.slot_capacity());
  for (const std::uint32_t id : more) EXPECT_NE(ring.slot(id).data, nullptr);
  // No budget left: none is made, and it says so.
  const std::optional<std::uint32_t> refused = ring.acquire_slot(
      [] { return true; }, nullptr, [] { return false; });  // stops at once when it would wait
  EXPECT_FALSE(refused.has_value());
  // The kept batches let go: the slots above the limit are freed again.
  for (int i = 0; i < 10; ++i) ring.remove_kept();
  ring.release_slot(a);
  ring.release_slot(b);
  for (const std::uint32_t id : more) ring.release_slot(id);
  const std::uint32_t again = take(ring);
  EXPECT_EQ(ring.slot_count(), 2U);
  ring.release_slot(again);
}

}  // namespace
