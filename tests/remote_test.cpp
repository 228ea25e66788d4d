// Files given as URLs: expand_braces, webdataset's brace notation for naming many of them.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "expect_error.hpp"
#include "ferry/ferry.hpp"
#include "webdataset/tar_bytes.hpp"

namespace fs = std::filesystem;
using ferry::ConfigError;
using ferry::DataError;
using ferry::expand_braces;
using ferry::testing::expect_error;
using Clock = std::chrono::steady_clock;

namespace {

// ---- expand_braces ------------------------------------------------------------------------

using Names = std::vector<std::string>;

TEST(ExpandBraces, RangesKeepTheirWidthListsAndProductsGoInOrder) {
  EXPECT_EQ(expand_braces("s3://b/train-{0000..0003}.tar"),
            (Names{"s3://b/train-0000.tar", "s3://b/train-0001.tar", "s3://b/train-0002.tar",
                   "s3://b/train-0003.tar"}));
  EXPECT_EQ(expand_braces("x{8..11}"), (Names{"x8", "x9", "x10", "x11"}));
  EXPECT_EQ(expand_braces("x{098..101}"), (Names{"x098", "x099", "x100", "x101"}));
  EXPECT_EQ(expand_braces("{a,bb}-{0..1}.tar"),
            (Names{"a-0.tar", "a-1.tar", "bb-0.tar", "bb-1.tar"}));
  EXPECT_EQ(expand_braces("plain.tar"), (Names{"plain.tar"}));
  EXPECT_EQ(expand_braces(""), (Names{""}));
  EXPECT_EQ(expand_braces("{7..7}"), (Names{"7"}));
  EXPECT_EQ(expand_braces("{0..999999}").size(), 1'000'000U);
}

TEST(ExpandBraces, MalformedPatternsAreConfigErrorsQuotingThem) {
  const auto bad = [](const char* pattern, const char* why) {
    expect_error<ConfigError>([&] { (void)expand_braces(pattern); },
                              {std::string("\"") + pattern + "\"", why});
  };
  bad("a{0..3", "without its '}'");
  bad("a}0", "without its '{'");
  bad("a{}b", "empty group");
  bad("{a,,b}", "empty item");
  bad("{a,}", "empty item");
  bad("{3..1}", "reversed");
  bad("{a..c}", "not of two decimal numbers");
  bad("{1..}", "not of two decimal numbers");
  bad("{abc}", "neither a list");
  bad("{a{b,c}}", "nested");
  bad("{0..1000000}", "more than 1000000 names");
  bad("{0..999}{0..999}{0..9}", "more than 1000000 names");
}

}  // namespace
