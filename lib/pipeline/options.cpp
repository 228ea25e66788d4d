// LoaderOptions::from_env, LoaderState and LoaderStats: the parts of the loader's surface
// that hold no pipeline.

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

#include "ferry/loader.hpp"

namespace ferry {
namespace {

// The integer value of environment variable `name`, or `fallback` when unset or empty.
long env_int(const char* name, long fallback) {
  const char* text = std::getenv(name);  // NOLINT(concurrency-mt-unsafe): read once, at setup
  if (text == nullptr || *text == '\0') return fallback;
  long value = 0;
  const std::string_view s(text);
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || ptr != s.data() + s.size() || value < 0) {
    throw ConfigError("LoaderOptions::from_env: " + std::string(name) + "=\"" + std::string(s) +
                      "\" is not a non-negative integer");
  }
  return value;
}

}  // namespace

LoaderOptions LoaderOptions::from_env() {
  LoaderOptions o;
  const bool torchrun = std::getenv("WORLD_SIZE") != nullptr;  // NOLINT(concurrency-mt-unsafe)
  const char* rank = torchrun ? "RANK" : "OMPI_COMM_WORLD_RANK";
  const char* size = torchrun ? "WORLD_SIZE" : "OMPI_COMM_WORLD_SIZE";
  const char* local = torchrun ? "LOCAL_RANK" : "OMPI_COMM_WORLD_LOCAL_RANK";
  o.rank = static_cast<int>(env_int(rank, 0));
  o.world_size = static_cast<int>(env_int(size, 1));
  if (o.world_size < 1 || o.rank >= o.world_size) {
    throw ConfigError("LoaderOptions::from_env: " + std::string(rank) + "=" +
                      std::to_string(o.rank) + " is outside " + size + "=" +
                      std::to_string(o.world_size));
  }
  const long local_rank = env_int(local, 0);
  const int gpus = cuda_device_count();
  o.device = local_rank < gpus ? Device::cuda(static_cast<int>(local_rank)) : Device::cpu();
  return o;
}

std::string LoaderState::str() const {
  return "ferry-state v1 seed=" + std::to_string(seed) + " epoch=" + std::to_string(epoch) +
         " next_batch=" + std::to_string(next_batch);
}

LoaderState LoaderState::parse(std::string_view text) {
  LoaderState s;
  unsigned long long seed = 0, epoch = 0, next = 0;
  int consumed = 0;
  const std::string copy(text);
  // NOLINTNEXTLINE(cert-err34-c): the count and the consumed length are both checked
  const int n = std::sscanf(copy.c_str(), "ferry-state v1 seed=%llu epoch=%llu next_batch=%llu%n",
                            &seed, &epoch, &next, &consumed);
  if (n != 3 || static_cast<std::size_t>(consumed) != copy.size()) {
    throw ConfigError("LoaderState: cannot parse \"" + copy +
                      "\": expected \"ferry-state v1 seed=S epoch=E next_batch=K\"");
  }
  s.seed = seed;
  s.epoch = epoch;
  s.next_batch = static_cast<std::size_t>(next);
  return s;
}

double LoaderStats::consumer_wait_fraction() const noexcept {
  return wall_seconds > 0 ? consumer_wait_seconds / wall_seconds : 0;
}

double LoaderStats::worker_busy_fraction() const noexcept {
  return worker_capacity_seconds > 0 ? read_seconds / worker_capacity_seconds : 0;
}

std::string LoaderStats::summary() const {
  const double wait = consumer_wait_fraction();
  const double busy = worker_busy_fraction();
  const double copy = wall_seconds > 0 ? copy_seconds / wall_seconds : 0;
  if (wall_seconds <= 0) return "no epoch has run";
  // Whole percents, but a small non-zero share reads "<1%", not "0%".
  auto pct = [](double fraction) {
    if (fraction > 0 && fraction < 0.005) return std::string("<1%");
    return std::to_string(std::lround(fraction * 100)) + "%";
  };
  std::ostringstream os;
  // Under a tenth of the time waiting for data: the loop itself sets the pace.
  if (wait < 0.10) {
    os << "compute-bound: the consumer waited " << pct(wait) << " of wall time; workers were "
       << pct(busy) << " busy";
  } else if (copy > busy) {
    os << "copy-bound: the consumer waited " << pct(wait) << " of wall time; the copy stage was "
       << pct(copy) << " busy, workers " << pct(busy);
  } else {
    os << "input-bound: the consumer waited " << pct(wait) << " of wall time; workers were "
       << pct(busy) << " busy";
  }
  if (skipped > 0) os << "; " << skipped << " samples skipped";
  return os.str();
}

}  // namespace ferry
