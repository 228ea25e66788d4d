// The memory limit behind the default memory budget: the lowest limit of a process's cgroups and
// of every cgroup above them, v2 (memory.max) and v1 (memory.limit_in_bytes), read from a cgroup
// tree written in a temporary folder; and default_memory_budget() on this machine.

#include "pipeline/memory_limit.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "ferry/ferry.hpp"

namespace {

namespace fs = std::filesystem;
using ferry::detail::cgroup_memory_limit;

class CgroupTree : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("ferry-cgroup-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  void write(const std::string& relative, const std::string& text) {
    const fs::path file = root_ / relative;
    fs::create_directories(file.parent_path());
    std::ofstream(file) << text;
  }
  fs::path root_;
};

constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;

TEST_F(CgroupTree, V2TakesTheLowestLimitOfTheCgroupAndThoseAboveIt) {
  write("job/step/memory.max", "max\n");
  write("job/memory.max", std::to_string(3 * kGiB) + "\n");
  write("memory.max", std::to_string(5 * kGiB) + "\n");
  EXPECT_EQ(cgroup_memory_limit("0::/job/step\n", root_), 3 * kGiB);
  write("job/step/memory.max", std::to_string(kGiB) + "\n");
  EXPECT_EQ(cgroup_memory_limit("0::/job/step\n", root_), kGiB);
}

TEST_F(CgroupTree, V1ReadsTheMemoryControllersHierarchyAndIgnoresItsValueForNone) {
  const std::string cgroups =
      "9:name=systemd:/\n8:pids:/\n4:memory:/process_api/abc\n2:cpu,cpuacct:/\n0::/\n";
  write("memory/memory.limit_in_bytes", "9223372036854771712\n");
  write("memory/process_api/abc/memory.limit_in_bytes", "9223372036854771712\n");
  EXPECT_EQ(cgroup_memory_limit(cgroups, root_), 0U);  // none set anywhere
  write("memory/process_api/memory.limit_in_bytes", std::to_string(2 * kGiB) + "\n");
  EXPECT_EQ(cgroup_memory_limit(cgroups, root_), 2 * kGiB);
  // Among other controllers on one hierarchy, mounted under their joined names.
  write("cpu,memory/memory.limit_in_bytes", std::to_string(kGiB) + "\n");
  EXPECT_EQ(cgroup_memory_limit("3:cpu,memory:/\n", root_), kGiB);
}

TEST_F(CgroupTree, BothHierarchiesGiveTheLowerAndNothingReadableGivesNoLimit) {
  write("memory/memory.limit_in_bytes", std::to_string(4 * kGiB));
  write("memory.max", std::to_string(6 * kGiB));
  EXPECT_EQ(cgroup_memory_limit("4:memory:/\n0::/\n", root_), 4 * kGiB);
  EXPECT_EQ(cgroup_memory_limit("", root_), 0U);
  EXPECT_EQ(cgroup_memory_limit("0::/missing/path\n", root_ / "absent"), 0U);
  EXPECT_EQ(cgroup_memory_limit("not a cgroup line\n0:\n", root_), 0U);
  write("bad/memory.max", "12 MiB\n");  // not a number of bytes: ignored
  EXPECT_EQ(cgroup_memory_limit("0::/bad\n", root_), 6 * kGiB);
}

TEST(DefaultMemoryBudget, IsAnEighthOfWhatTheProcessMayUse) {
  const std::uint64_t physical = static_cast<std::uint64_t>(::sysconf(_SC_PHYS_PAGES)) *
                                 static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  const std::uint64_t limit = ferry::detail::process_memory_limit();
  EXPECT_GT(limit, 0U);
  EXPECT_LE(limit, physical);
  EXPECT_EQ(ferry::default_memory_budget(), limit / 8);
}

}  // namespace
