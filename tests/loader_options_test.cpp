// LoaderOptions::from_env (through detail::options_from_env, with the environment and the GPU
// count given) and LoaderState's text: what they accept, what they refuse, and what the errors
// say.

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>  // setenv, unsetenv (POSIX)
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/error.hpp"
#include "ferry/loader.hpp"
#include "pipeline/options.hpp"

namespace {

using ferry::ConfigError;
using ferry::Device;
using ferry::DeviceError;
using ferry::LoaderOptions;
using ferry::LoaderState;
using Env = std::map<std::string, std::string>;

LoaderOptions from(const Env& env, int gpus) {
  return ferry::detail::options_from_env(
      [&env](const char* name) -> std::optional<std::string_view> {
        const auto it = env.find(name);
        if (it == env.end()) return {};
        return std::string_view(it->second);
      },
      gpus);
}

// The message of the E that from(env, gpus) throws; fails the test when it throws none.
template <class E>
std::string error_of(const Env& env, int gpus) {
  try {
    (void)from(env, gpus);
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return {};
}

std::string describe(const Env& env) {
  std::string s;
  for (const auto& [k, v] : env) s += k + "=\"" + v + "\" ";
  return s;
}

constexpr const char* kAllVariables[] = {"RANK",
                                         "WORLD_SIZE",
                                         "LOCAL_RANK",
                                         "OMPI_COMM_WORLD_RANK",
                                         "OMPI_COMM_WORLD_SIZE",
                                         "OMPI_COMM_WORLD_LOCAL_RANK"};

TEST(LoaderOptionsFromEnv, NoVariablesMeanOneProcessOnTheBestDevice) {
  LoaderOptions o = from({}, 0);
  EXPECT_EQ(o.rank, 0);
  EXPECT_EQ(o.world_size, 1);
  EXPECT_EQ(o.device, Device::cpu());
  o = from({}, 3);
  EXPECT_EQ(o.device, Device::cuda(0));
}

TEST(LoaderOptionsFromEnv, ReadsTorchrunsAndMpirunsVariables) {
  LoaderOptions o = from({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}}, 2);
  EXPECT_EQ(o.rank, 3);
  EXPECT_EQ(o.world_size, 4);
  EXPECT_EQ(o.device, Device::cuda(1));
  o = from({{"OMPI_COMM_WORLD_RANK", "5"},
            {"OMPI_COMM_WORLD_SIZE", "6"},
            {"OMPI_COMM_WORLD_LOCAL_RANK", "2"}},
           4);
  EXPECT_EQ(o.rank, 5);
  EXPECT_EQ(o.world_size, 6);
  EXPECT_EQ(o.device, Device::cuda(2));
  // Without LOCAL_RANK (a job started by hand for env:// initialisation): the first GPU.
  o = from({{"RANK", "1"}, {"WORLD_SIZE", "2"}}, 2);
  EXPECT_EQ(o.rank, 1);
  EXPECT_EQ(o.device, Device::cuda(0));
}

TEST(LoaderOptionsFromEnv, TakesEveryIntAndLeadingZeros) {
  const LoaderOptions o = from({{"RANK", "2147483646"}, {"WORLD_SIZE", "2147483647"}}, 0);
  EXPECT_EQ(o.rank, 2147483646);
  EXPECT_EQ(o.world_size, 2147483647);
  const LoaderOptions z = from({{"RANK", "007"}, {"WORLD_SIZE", "010"}}, 0);
  EXPECT_EQ(z.rank, 7);
  EXPECT_EQ(z.world_size, 10);
}

TEST(LoaderOptionsFromEnv, RefusesAnyValueButDigitsThatFitInt) {
  // 4294967296 = 2^32 used to become rank 0: one shard read twice, another never.
  const std::vector<std::string> bad = {"",
                                        " 1",
                                        "1 ",
                                        "+1",
                                        "-1",
                                        "-0",
                                        "0x1",
                                        "1e3",
                                        "1.0",
                                        "3abc",
                                        "1,000",
                                        "\xd9\xa3",  // ARABIC-INDIC DIGIT THREE
                                        "2147483648",
                                        "4294967296",
                                        "4294967299",
                                        "18446744073709551616",
                                        "99999999999999999999999999999999"};
  for (const char* name : kAllVariables) {
    for (const std::string& text : bad) {
      // Every other variable of the launcher well set, so only `name` is wrong.
      const bool mpi = std::string_view(name).starts_with("OMPI");
      Env env = mpi ? Env{{"OMPI_COMM_WORLD_RANK", "0"},
                          {"OMPI_COMM_WORLD_SIZE", "2"},
                          {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}}
                    : Env{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}};
      env[name] = text;
      const std::string what = error_of<ConfigError>(env, 1);
      EXPECT_NE(what.find("LoaderOptions::from_env"), std::string::npos) << what;
      if (text == "\xd9\xa3") {
        EXPECT_NE(what.find(std::string(name) + "=\"\\xd9\\xa3\""), std::string::npos) << what;
      } else {
        EXPECT_NE(what.find(std::string(name) + "=\"" + text + "\""), std::string::npos) << what;
      }
    }
  }
  const std::string what = error_of<ConfigError>({{"RANK", "1\n"}, {"WORLD_SIZE", "2"}}, 0);
  EXPECT_NE(what.find("RANK=\"1\\x0a\""), std::string::npos) << what;
}

TEST(LoaderOptionsFromEnv, RefusesRanksThatDoNotFitTogether) {
  struct Case {
    Env env;
    std::vector<std::string> named;  // what the message must name
  };
  const std::vector<Case> cases = {
      {{{"RANK", "0"}, {"WORLD_SIZE", "0"}}, {"WORLD_SIZE=0"}},
      {{{"RANK", "4"}, {"WORLD_SIZE", "4"}}, {"RANK=4", "WORLD_SIZE=4"}},
      {{{"RANK", "4294967296"}, {"WORLD_SIZE", "4294967297"}}, {"RANK=\"4294967296\""}},
      {{{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "4"}}, {"LOCAL_RANK=4", "WORLD_SIZE=4"}},
      {{{"RANK", "1"}}, {"RANK", "WORLD_SIZE"}},
      {{{"WORLD_SIZE", "2"}}, {"WORLD_SIZE", "RANK"}},
      {{{"LOCAL_RANK", "0"}}, {"LOCAL_RANK", "WORLD_SIZE"}},
      {{{"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}}, {"WORLD_SIZE", "RANK"}},
      {{{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "2"}},
       {"OMPI_COMM_WORLD_RANK=2", "OMPI_COMM_WORLD_SIZE=2"}},
      {{{"OMPI_COMM_WORLD_LOCAL_RANK", "0"}}, {"OMPI_COMM_WORLD_LOCAL_RANK"}},
      // Half of one launcher, half of the other.
      {{{"RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}}, {"RANK", "WORLD_SIZE"}},
      {{{"OMPI_COMM_WORLD_RANK", "1"}, {"WORLD_SIZE", "2"}}, {"WORLD_SIZE", "RANK"}},
      // Both launchers, disagreeing.
      {{{"RANK", "1"},
        {"WORLD_SIZE", "2"},
        {"OMPI_COMM_WORLD_RANK", "0"},
        {"OMPI_COMM_WORLD_SIZE", "2"}},
       {"RANK=1", "OMPI_COMM_WORLD_RANK=0"}},
      {{{"RANK", "1"},
        {"WORLD_SIZE", "2"},
        {"OMPI_COMM_WORLD_RANK", "1"},
        {"OMPI_COMM_WORLD_SIZE", "4"}},
       {"WORLD_SIZE=2", "OMPI_COMM_WORLD_SIZE=4"}},
      {{{"RANK", "1"},
        {"WORLD_SIZE", "2"},
        {"LOCAL_RANK", "1"},
        {"OMPI_COMM_WORLD_RANK", "1"},
        {"OMPI_COMM_WORLD_SIZE", "2"},
        {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}},
       {"LOCAL_RANK=1", "OMPI_COMM_WORLD_LOCAL_RANK=0"}},
  };
  for (const Case& c : cases) {
    for (const int gpus : {0, 8}) {
      const std::string what = error_of<ConfigError>(c.env, gpus);
      for (const std::string& n : c.named) {
        EXPECT_NE(what.find(n), std::string::npos) << describe(c.env) << "-> " << what;
      }
    }
  }
}

TEST(LoaderOptionsFromEnv, TakesBothLaunchersWhenTheyAgree) {
  // A script that exports RANK=$OMPI_COMM_WORLD_RANK ... under mpirun.
  LoaderOptions o = from({{"RANK", "1"},
                          {"WORLD_SIZE", "2"},
                          {"OMPI_COMM_WORLD_RANK", "1"},
                          {"OMPI_COMM_WORLD_SIZE", "2"},
                          {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}},
                         2);
  EXPECT_EQ(o.rank, 1);
  EXPECT_EQ(o.world_size, 2);
  EXPECT_EQ(o.device, Device::cuda(1));
}

TEST(LoaderOptionsFromEnv, LocalRankBeyondTheGpusIsADeviceError) {
  std::string what =
      error_of<DeviceError>({{"RANK", "2"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}}, 2);
  EXPECT_NE(what.find("LOCAL_RANK=2"), std::string::npos) << what;
  EXPECT_NE(what.find("2 GPUs"), std::string::npos) << what;
  what = error_of<DeviceError>({{"OMPI_COMM_WORLD_RANK", "3"},
                                {"OMPI_COMM_WORLD_SIZE", "4"},
                                {"OMPI_COMM_WORLD_LOCAL_RANK", "3"}},
                               1);
  EXPECT_NE(what.find("OMPI_COMM_WORLD_LOCAL_RANK=3"), std::string::npos) << what;
  EXPECT_NE(what.find("1 GPU"), std::string::npos) << what;
  // The last GPU there is.
  EXPECT_EQ(from({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "3"}}, 4).device,
            Device::cuda(3));
}

TEST(LoaderOptionsFromEnv, WithoutAnyGpuEveryLocalRankRunsOnTheCpu) {
  for (const char* local : {"0", "1", "7"}) {
    const LoaderOptions o = from({{"RANK", "7"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", local}}, 0);
    EXPECT_EQ(o.rank, 7);
    EXPECT_EQ(o.world_size, 8);
    EXPECT_EQ(o.device, Device::cpu());
  }
}

// Sets the variables for the test's length, and unsets all of them after.
class ProcessEnv {
 public:
  explicit ProcessEnv(const Env& env) {
    clear();
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
  }
  ProcessEnv(const ProcessEnv&) = delete;
  ProcessEnv& operator=(const ProcessEnv&) = delete;
  ~ProcessEnv() { clear(); }

 private:
  static void clear() {
    for (const char* v : kAllVariables) unsetenv(v);
  }
};

TEST(LoaderOptionsFromEnv, ThePublicFunctionReadsTheProcessEnvironment) {
  {
    const ProcessEnv env({{"RANK", "4294967296"}, {"WORLD_SIZE", "4294967297"}});
    EXPECT_THROW((void)LoaderOptions::from_env(), ConfigError);
  }
  {
    const ProcessEnv env({{"RANK", ""}, {"WORLD_SIZE", "2"}});  // empty is not unset
    EXPECT_THROW((void)LoaderOptions::from_env(), ConfigError);
  }
  const ProcessEnv env({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "3"}});
  const LoaderOptions o = LoaderOptions::from_env();
  EXPECT_EQ(o.rank, 2);
  EXPECT_EQ(o.world_size, 3);
  EXPECT_EQ(o.device, Device::best());
}

// ---- LoaderState -------------------------------------------------------------------------

constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();

TEST(LoaderStateText, IsTheDocumentedLine) {
  EXPECT_EQ((LoaderState{1, 2, 3, 40, true, 5, 6}.str()),
            "ferry-state v2 seed=1 epoch=2 next_batch=3 samples=40 shuffle=1 position=5 plan=6");
  EXPECT_EQ((LoaderState{}.str()),
            "ferry-state v2 seed=0 epoch=0 next_batch=0 samples=0 shuffle=0 position=0 plan=0");
  EXPECT_EQ((LoaderState{kMax, kMax, kMax, kMax, true, kMax, kMax}.str()),
            "ferry-state v2 seed=18446744073709551615 epoch=18446744073709551615 "
            "next_batch=18446744073709551615 samples=18446744073709551615 shuffle=1 "
            "position=18446744073709551615 plan=18446744073709551615");
}

TEST(LoaderStateText, RoundTripsEveryState) {
  std::vector<std::uint64_t> values = {0, 1, 9, 10, 99, 100, kMax / 10, kMax - 1, kMax};
  std::vector<LoaderState> states;
  for (const std::uint64_t a : values) {
    for (const std::uint64_t b : values) {
      for (const std::uint64_t c : values) {
        states.push_back({a, b, c, b, (a & 1) != 0, c, a});
        states.push_back({a, b, c, c, (b & 1) != 0, a, b});
      }
    }
  }
  std::mt19937_64 rng(20240917);
  for (int i = 0; i < 2000; ++i) {
    // Values of every length: a random number shifted right by a random amount.
    auto draw = [&] { return rng() >> (rng() % 64); };
    LoaderState s;
    s.seed = draw();
    s.epoch = draw();
    s.next_batch = draw();
    s.samples = draw();
    s.shuffle = (rng() & 1) != 0;
    s.position = draw();
    s.plan = draw();
    states.push_back(s);
  }
  for (const LoaderState& s : states) {
    const std::string text = s.str();
    const LoaderState back = LoaderState::parse(text);
    ASSERT_EQ(back, s) << text;
    ASSERT_EQ(back.str(), text);
  }
}

TEST(LoaderStateText, RefusesNearMissesQuotingThem) {
  const std::string good =
      "ferry-state v2 seed=1 epoch=2 next_batch=3 samples=40 shuffle=1 position=5 plan=6";
  // `good` with its text `from` replaced by `to`.
  const auto edit = [&](const std::string& from, const std::string& to) {
    std::string t = good;
    t.replace(t.find(from), from.size(), to);
    return t;
  };
  const std::vector<std::string> bad = {
      "",
      "ferry-state v2",
      "ferry-state v2 seed=1 epoch=x",
      "ferry-state v2 seed=1 epoch=2 next_batch=3",
      "ferry-state v2 seed=1 epoch=2 next_batch=3 samples=40 shuffle=1 position=5",
      "ferry-state v2 seed=1 epoch=2 next_batch=3 samples=40 shuffle=1 position=5 plan=",
      edit("seed=1", "seed=+1"),
      edit("seed=1", "seed=-1"),
      edit("epoch=2", "epoch=-0"),
      edit("seed=1", "seed= 1"),
      edit(" epoch", "  epoch"),
      edit(" seed", "  seed"),
      edit(" epoch", "epoch"),
      good + " ",
      " " + good,
      good + "x",
      good + ".0",
      edit("seed=1", "seed=01"),
      edit("epoch=2", "epoch=00"),
      edit("next_batch=3", "next_batch=007"),
      edit("samples=40", "samples=040"),
      edit("shuffle=1", "shuffle=2"),
      edit("shuffle=1", "shuffle=01"),
      edit("shuffle=1", "shuffle=true"),
      edit("shuffle=1", "shuffle="),
      edit("position=5", "position=-5"),
      edit("plan=6", "plan=0x6"),
      edit("seed=1", "seed=0x10"),
      edit("seed=1", "seed=1e3"),
      edit("seed=1", "seed=18446744073709551616"),
      edit("epoch=2", "epoch=99999999999999999999999"),
      edit("next_batch=3", "next_batch=18446744073709551616"),
      edit("samples=40", "samples=18446744073709551616"),
      edit("position=5", "position=18446744073709551616"),
      edit("plan=6", "plan=18446744073709551616"),
      edit("v2", "v3"),
      edit("ferry", "Ferry"),
      edit("seed=1 epoch=2", "epoch=2 seed=1"),
      edit("position=5 plan=6", "plan=6 position=5"),
      edit("samples=40 shuffle=1", "shuffle=1 samples=40"),
      good + " seed=1",
      // A v1 state has no global position: refused, saying so.
      "ferry-state v1 seed=1 epoch=2 next_batch=3",
  };
  for (const std::string& text : bad) {
    try {
      (void)LoaderState::parse(text);
      ADD_FAILURE() << "accepted \"" << text << "\"";
    } catch (const ConfigError& e) {
      const std::string what = e.what();
      EXPECT_TRUE(what.starts_with("LoaderState::parse: \"" + text + "\"")) << what;
      if (text.starts_with("ferry-state v1")) {
        EXPECT_NE(what.find("v1 state"), std::string::npos) << what;
      }
    }
  }
  // Bytes a line read from a file may carry: quoted as escapes.
  for (const std::string& text : {good + "\n", good + "\r\n", good + '\0', good + "\t"}) {
    try {
      (void)LoaderState::parse(text);
      ADD_FAILURE() << "accepted " << testing::PrintToString(text);
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("plan=6\\x"), std::string::npos) << e.what();
    }
  }
  // A long text is cut in the message.
  const std::string huge = good + std::string(100000, '9');
  try {
    (void)LoaderState::parse(huge);
    ADD_FAILURE() << "accepted a huge number";
  } catch (const ConfigError& e) {
    EXPECT_LT(std::string(e.what()).size(), 400U);
    EXPECT_NE(std::string(e.what()).find(std::to_string(huge.size()) + " bytes"), std::string::npos)
        << e.what();
  }
}

TEST(LoaderStateText, WhatParseAcceptsIsWhatStrWrites) {
  // Mutations of written states: where parse accepts one, str() gives the same text back.
  const std::string alphabet = "0123456789 =+-xe\nferry-statev2sdopchnxb_mlufin";
  std::mt19937_64 rng(7);
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    auto draw = [&] { return rng() >> (rng() % 64); };
    std::string text =
        LoaderState{draw(), draw(), draw(), draw(), (rng() & 1) != 0, draw(), draw()}.str();
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < edits; ++k) {
      const std::size_t at = rng() % (text.size() + 1);
      const char c = alphabet[rng() % alphabet.size()];
      switch (rng() % 3) {
        case 0:
          text.insert(at, 1, c);
          break;
        case 1:
          if (at < text.size()) text.erase(at, 1);
          break;
        default:
          if (at < text.size()) text[at] = c;
      }
    }
    try {
      const LoaderState s = LoaderState::parse(text);
      ++accepted;
      ASSERT_EQ(s.str(), text);
    } catch (const ConfigError&) {
    }
  }
  EXPECT_GT(accepted, 100);  // the check above ran on many accepted texts
}

}  // namespace
