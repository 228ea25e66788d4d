// bench/ragged: variable-length samples through the loader (CPU device, 2 workers, shuffle).
//
// A dataset of 200,000 documents of i32 tokens in memory, lengths 1..512 spread unevenly (most
// short, some long), about 100 tokens on average. Each configuration runs whole epochs; the
// figure is bytes of real tokens delivered per second. Compared in the same run, interleaved:
//   fixed    the same token bytes as fixed-shape samples (every sample the mean length), batch 64
//   packed   ragged, RaggedBatch::pack, batch 64
//   padded   ragged, RaggedBatch::pad, batch 64 (bytes delivered include padding; the figure
//            counts real tokens only)
//   budget   ragged, pack, max_tokens = 8192 (dynamic batches)
//   bucketed ragged, pad, max_tokens = 8192, bucket_window = 1024
// Also the machine's memcpy limit: one thread copying every document, packed, in a shuffled
// order. Target: packed >= 0.5 of fixed. It also reports the padding waste of padded batches with
// and without bucketing (share of delivered token slots that are padding).
//
// Usage: ragged [--reps N]   (default 5: medians of N runs after one warm-up)

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/ferry.hpp"

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t kDocuments = 200'000;

std::int64_t length_of(std::size_t i) {
  const std::uint64_t h = (i * 2654435761ULL) % 1000;
  if (h < 800) return 1 + static_cast<std::int64_t>(h % 80);  // short
  return 80 + static_cast<std::int64_t>((h * 7) % 433);       // up to 512
}

/// Documents in one token array, with their starts.
class Documents : public ferry::Dataset {
 public:
  Documents() {
    starts_.push_back(0);
    for (std::size_t i = 0; i < kDocuments; ++i) {
      starts_.push_back(starts_.back() + static_cast<std::uint64_t>(length_of(i)));
    }
    tokens_.resize(starts_.back());
    for (std::size_t t = 0; t < tokens_.size(); ++t)
      tokens_[t] = static_cast<std::int32_t>(t % 50257);
  }
  std::size_t size() const override { return kDocuments; }
  std::vector<ferry::FieldSpec> fields() const override {
    return {{"tokens", ferry::DType::i32, {ferry::ragged}}};
  }
  std::int64_t length(std::size_t index, std::size_t /*field*/) const override {
    return static_cast<std::int64_t>(starts_[index + 1] - starts_[index]);
  }
  void read(std::size_t index, ferry::SampleRef out) const override {
    std::memcpy(out.data(0), tokens_.data() + starts_[index], out.nbytes(0));
  }
  std::uint64_t total_tokens() const { return starts_.back(); }
  /// The memcpy limit: one thread copies every document, in `order`, packed one after another
  /// into `out` (batch after batch, as a packed loader's slots would hold them).
  void copy_packed(const std::vector<std::uint64_t>& order, std::vector<std::int32_t>& out) const {
    std::size_t at = 0;
    for (const std::uint64_t i : order) {
      const std::size_t n = starts_[i + 1] - starts_[i];
      std::memcpy(out.data() + at, tokens_.data() + starts_[i], n * sizeof(std::int32_t));
      at += n;
    }
  }

 private:
  std::vector<std::uint64_t> starts_;
  std::vector<std::int32_t> tokens_;
};

/// The same bytes as fixed-shape samples of the mean length.
class FixedDocuments : public ferry::Dataset {
 public:
  explicit FixedDocuments(std::int64_t width)
      : width_(width), tokens_(kDocuments * static_cast<std::size_t>(width), 7) {}
  std::size_t size() const override { return kDocuments; }
  std::vector<ferry::FieldSpec> fields() const override {
    return {{"tokens", ferry::DType::i32, {width_}}};
  }
  void read(std::size_t index, ferry::SampleRef out) const override {
    std::memcpy(out.data(0), tokens_.data() + index * static_cast<std::size_t>(width_),
                out.nbytes(0));
  }

 private:
  std::int64_t width_;
  std::vector<std::int32_t> tokens_;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : (v[m - 1] + v[m]) / 2.0;
}

volatile std::uint64_t g_sink = 0;

struct Config {
  std::string name;
  std::shared_ptr<const ferry::Dataset> data;
  ferry::LoaderOptions options;
  std::vector<double> seconds;
  std::uint64_t slots = 0;  // token slots delivered (padding included), last run
};

ferry::LoaderOptions base() {
  ferry::LoaderOptions o;
  o.autotune = false;  // the settings this bench states, fixed
  o.batch_size = 64;
  o.shuffle = true;
  o.seed = 1;
  o.workers = 2;
  o.device = ferry::Device::cpu();
  return o;
}

double run(Config& c, std::uint64_t epoch) {
  ferry::Loader loader(c.data, c.options);
  const auto start = Clock::now();
  std::uint64_t slots = 0;
  for (const ferry::Batch& b : loader.epoch(epoch)) {
    const ferry::Tensor& t = b.at(0);
    slots += static_cast<std::uint64_t>(t.numel());
    g_sink = g_sink + static_cast<std::uint64_t>(t.data<std::int32_t>()[0]);
  }
  c.slots = slots;
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 5;
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: ragged [--reps N]\n");
      return 2;
    }
  }
  auto docs = std::make_shared<Documents>();
  const auto total = docs->total_tokens();
  const auto mean = static_cast<std::int64_t>((total + kDocuments / 2) / kDocuments);
  auto fixed = std::make_shared<FixedDocuments>(mean);
  std::vector<Config> configs;
  configs.push_back({"fixed (mean length)", fixed, base(), {}, 0});
  ferry::LoaderOptions packed = base();
  packed.ragged = ferry::RaggedBatch::pack;
  configs.push_back({"packed", docs, packed, {}, 0});
  configs.push_back({"padded", docs, base(), {}, 0});
  ferry::LoaderOptions budget = packed;
  budget.max_tokens = 8192;
  configs.push_back({"packed, max_tokens 8192", docs, budget, {}, 0});
  ferry::LoaderOptions padded_budget = base();
  padded_budget.max_tokens = 8192;
  configs.push_back({"padded, max_tokens 8192", docs, padded_budget, {}, 0});
  ferry::LoaderOptions bucketed = padded_budget;
  bucketed.bucket_window = 1024;
  configs.push_back({"  + bucket_window 1024", docs, bucketed, {}, 0});

  std::printf("== ragged: %zu documents, %llu tokens (mean %lld), i32, batch 64, 2 workers ==\n",
              kDocuments, static_cast<unsigned long long>(total), static_cast<long long>(mean));
  // The limit's order: a fixed shuffle of the documents.
  std::vector<std::uint64_t> order(kDocuments);
  for (std::size_t i = 0; i < kDocuments; ++i) order[i] = (i * 7919) % kDocuments;
  std::vector<std::int32_t> packed_out(total);
  std::vector<double> limit;
  for (int r = -1; r < reps; ++r) {  // interleaved; r = -1 warms up
    for (Config& c : configs) {
      const double s = run(c, static_cast<std::uint64_t>(r + 1));
      if (r >= 0) c.seconds.push_back(s);
    }
    const auto start = Clock::now();
    docs->copy_packed(order, packed_out);
    g_sink = g_sink + static_cast<std::uint64_t>(packed_out[total / 2]);
    if (r >= 0) limit.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  const double fixed_rate =
      static_cast<double>(kDocuments) * static_cast<double>(mean) * 4 / median(configs[0].seconds);
  std::printf("%-28s %10s %14s %12s %14s\n", "", "epoch ms", "real GB/s", "vs fixed",
              "padding waste");
  for (const Config& c : configs) {
    const bool is_fixed = &c == &configs[0];
    const double real_bytes =
        static_cast<double>(is_fixed ? kDocuments * static_cast<std::uint64_t>(mean) : total) * 4;
    const double rate = real_bytes / median(c.seconds);
    const double waste =
        is_fixed ? 0.0 : 1.0 - static_cast<double>(total) / static_cast<double>(c.slots);
    std::printf("%-28s %10.1f %14.2f %12.2f %13.1f%%\n", c.name.c_str(), median(c.seconds) * 1e3,
                rate / 1e9, rate / fixed_rate, waste * 100);
  }
  const double packed_ratio =
      static_cast<double>(total) * 4 / median(configs[1].seconds) / fixed_rate;
  const double limit_rate = static_cast<double>(total) * 4 / median(limit);
  std::printf("%-28s %10.1f %14.2f   (packed / limit: %.2f)\n", "memcpy limit, 1 thread",
              median(limit) * 1e3, limit_rate / 1e9,
              static_cast<double>(total) * 4 / median(configs[1].seconds) / limit_rate);
  std::printf("\ntarget: packed >= 0.5 of fixed: %s (%.2f, medians of %d runs)\n",
              packed_ratio >= 0.5 ? "MET" : "MISSED", packed_ratio, reps);
  return 0;
}
