// bench/remote: WebDataset shards read from a server against the same shards read locally.
//
//   ferry_bench_remote --shards DIR --base URL --cache DIR [--connections N] [--workers W]
//                      [--batch B] [--part-bytes P]
//
// DIR's *.tar (samples/make_shards' PNG shards, with the "<shard>.idx" a local open writes) are
// read through the loader three ways, each an epoch of every sample, PNGs decoded to 28x28 and
// normalized on the CPU: from DIR; as URLs "<URL>/<name>" into an empty cache (epoch 1: the
// shards fetched while the epoch runs, in parts of P bytes, RemoteOptions::part_bytes, whose
// default is the library's); and again from the same dataset (epoch 2: the cache).
// Prints, for each, samples/s, the time to the first batch, and the loader's network wait.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "ferry/ferry.hpp"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

struct Run {
  double seconds = 0;
  double first_batch = 0;
  std::size_t samples = 0;
};

Run epoch(ferry::Loader& loader, std::uint64_t e) {
  Run r;
  const auto start = Clock::now();
  for (const ferry::Batch& b : loader.epoch(e)) {
    if (r.samples == 0) r.first_batch = seconds_since(start);
    r.samples += b.size();
  }
  r.seconds = seconds_since(start);
  return r;
}

void print(const char* what, const Run& r, double open_s, const ferry::LoaderStats& s) {
  std::printf(
      "%-28s %9.0f samples/s  %7.2f s  first batch %6.3f s  open %6.3f s  network wait %6.2f s\n",
      what, static_cast<double>(r.samples) / r.seconds, r.seconds, r.first_batch, open_s,
      s.network_wait_seconds);
  std::printf("%-28s %s\n", "", s.summary().c_str());
}

}  // namespace

int main(int argc, char** argv) {
  fs::path shards, cache;
  std::string base;
  int connections = 8, workers = 4;
  std::size_t batch = 256;
  std::uint64_t part_bytes = ferry::RemoteOptions{}.part_bytes;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--shards")
      shards = v;
    else if (k == "--base")
      base = v;
    else if (k == "--cache")
      cache = v;
    else if (k == "--connections")
      connections = std::atoi(v.c_str());
    else if (k == "--workers")
      workers = std::atoi(v.c_str());
    else if (k == "--batch")
      batch = static_cast<std::size_t>(std::atoll(v.c_str()));
    else if (k == "--part-bytes")
      part_bytes = std::strtoull(v.c_str(), nullptr, 10);
  }
  if (shards.empty() || base.empty() || cache.empty()) {
    std::fprintf(stderr,
                 "usage: ferry_bench_remote --shards DIR --base URL --cache DIR [--connections N] "
                 "[--workers W] [--batch B] [--part-bytes P]\n");
    return 2;
  }
  std::vector<fs::path> local, urls;
  for (const auto& e : fs::directory_iterator(shards)) {
    if (e.path().extension() == ".tar") local.push_back(e.path());
  }
  std::sort(local.begin(), local.end());
  std::uint64_t bytes = 0;
  for (const fs::path& p : local) {
    urls.emplace_back(base + "/" + p.filename().string());
    bytes += fs::file_size(p);
  }
  ferry::WebDatasetOptions o;
  o.image.height = 28;
  o.image.width = 28;
  o.image.channels = 1;
  o.image.geometry = ferry::Geometry::resize;
  o.image.normalize = ferry::Normalize{};
  ferry::LoaderOptions lo;
  lo.autotune = false;  // the settings this bench states, fixed
  lo.batch_size = batch;
  lo.workers = workers;
  lo.device = ferry::Device::cpu();
  lo.pin_memory = false;
  std::printf("%zu shards, %.1f MB; %d workers, batch %zu, %d connections, parts of %llu bytes\n",
              local.size(), static_cast<double>(bytes) / 1e6, workers, batch, connections,
              static_cast<unsigned long long>(part_bytes));

  auto t = Clock::now();
  const auto l = ferry::WebDataset::open(local, o);
  double open_s = seconds_since(t);
  {
    ferry::Loader loader(l, lo);
    (void)epoch(loader, 0);  // warm the page cache and the decoder
    ferry::Loader again(l, lo);
    const Run r = epoch(again, 0);
    print("local shards", r, open_s, again.stats());
  }
  o.remote.cache_dir = cache;
  o.remote.connections = connections;
  o.remote.part_bytes = part_bytes;
  t = Clock::now();
  const auto u = ferry::WebDataset::open(urls, o);
  open_s = seconds_since(t);
  ferry::Loader loader(u, lo);
  const Run cold = epoch(loader, 0);
  print("URLs, epoch 1 (cold cache)", cold, open_s, loader.stats());
  const double waited = loader.stats().network_wait_seconds;
  ferry::Loader warm(u, lo);
  const Run hot = epoch(warm, 1);  // NOLINT(readability-suspicious-call-argument)
  print("URLs, epoch 2 (the cache)", hot, 0, warm.stats());
  std::printf("epoch 1 moved %.1f MB/s; epoch 2 waited %.2f s on the network (epoch 1: %.2f s)\n",
              static_cast<double>(bytes) / 1e6 / cold.seconds, warm.stats().network_wait_seconds,
              waited);
  return 0;
}
