// bench/tokens: TokenDataset windows through the loader against a one-thread gather of the
// same bytes.
//
// The data: N u16 tokens (64 M; --quick 8 M; --tokens) in 4 llm.c shards, written
// deterministically (xorshift) into a temporary directory. Windows of T = 1024 tokens (--seq-len),
// stride T, delivered as "input" and "target" i64 [T] (--dtype i32 for i32).
//
// 1. loader: one epoch of TokenDataset::open() through ferry::Loader (batch 32, shuffle, seed 1,
//    workers 2, device cpu), the consumer reading one byte of each batch's two fields.
// 2. gather: one thread does what a minimal hand-written loader would: for the same windows in
//    the same order (the loader's epoch order, recorded once), memcpy-and-widen the u16 tokens
//    of each window from the mapped shards into a batch buffer of the same layout (input, then
//    target, the target being the tokens one further), and reads one byte of each batch.
//
// 3. read(): TokenDataset::read() of the same windows in the same order on one thread, into a
//    slot laid out as the loader's: the dataset's own cost, without the pipeline.
//
// Each figure is the median of R runs (9; --quick 3; --reps) after a warm-up round that also
// brings the shards into the page cache; the measurements alternate in every round, their order
// reversed every other round. "loader / gather" is the ratio of the medians' windows/s:
// 1 means the loader costs nothing over the simplest copy of the bytes; the target is >= 0.7.
// "paired" is the median of the rounds' own ratios.
//
// Usage: tokens [--quick] [--tokens N] [--reps N] [--seq-len T] [--batch N] [--workers W]
//               [--prefetch N] [--dtype i32|i64] [--dir DIR]

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "ferry/ferry.hpp"
#include "pipeline/staging.hpp"  // SlotLayout, SampleRefs: read() into a slot, as a worker does

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr std::size_t kShards = 4;
constexpr double kTarget = 0.7;
constexpr const char* kUsage =
    "usage: tokens [--quick] [--tokens N] [--reps N] [--seq-len T] [--batch N] [--workers W] "
    "[--prefetch N] [--dtype i32|i64] [--dir DIR]";

struct Options {
  bool quick = false;
  std::size_t tokens = 0;  // 0: the default of the mode
  int reps = 0;
  std::size_t seq_len = 1024;
  int workers = 2;
  int prefetch = 4;
  std::size_t batch = 32;
  ferry::DType dtype = ferry::DType::i64;
  fs::path dir;
};

std::size_t number(const std::string& flag, const char* text) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text, &end, 10);
  if (end == text || *end != '\0' || v == 0) {
    throw std::invalid_argument(flag + " wants a positive integer, not '" + text + "'");
  }
  return static_cast<std::size_t>(v);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--quick") {
      o.quick = true;
      continue;
    }
    if (i + 1 == argc) throw std::invalid_argument(std::string(kUsage));
    const char* value = argv[++i];
    if (flag == "--tokens") {
      o.tokens = number(flag, value);
    } else if (flag == "--reps") {
      o.reps = static_cast<int>(number(flag, value));
    } else if (flag == "--seq-len") {
      o.seq_len = number(flag, value);
    } else if (flag == "--prefetch") {
      o.prefetch = static_cast<int>(number(flag, value));
    } else if (flag == "--batch") {
      o.batch = number(flag, value);
    } else if (flag == "--workers") {
      o.workers = static_cast<int>(number(flag, value));
    } else if (flag == "--dtype") {
      o.dtype = ferry::parse_dtype(value);
    } else if (flag == "--dir") {
      o.dir = value;
    } else {
      throw std::invalid_argument(std::string(kUsage));
    }
  }
  if (o.tokens == 0) o.tokens = o.quick ? std::size_t{8} << 20 : std::size_t{64} << 20;
  if (o.reps == 0) o.reps = o.quick ? 3 : 9;
  return o;
}

// kShards llm.c shards of u16 tokens from xorshift, about tokens / kShards each.
std::vector<fs::path> write_shards(const fs::path& dir, std::size_t tokens) {
  std::vector<fs::path> paths;
  std::uint64_t x = 0x9e3779b97f4a7c15ULL;
  for (std::size_t s = 0; s < kShards; ++s) {
    const std::size_t n = tokens / kShards + s;  // unequal on purpose
    std::vector<std::int32_t> header(256, 0);
    header[0] = 20240520;
    header[1] = 1;
    header[2] = static_cast<std::int32_t>(n);
    std::vector<std::uint16_t> data(n);
    for (std::uint16_t& t : data) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      t = static_cast<std::uint16_t>(x % 50257);  // GPT-2's vocabulary
    }
    paths.push_back(dir / ("shard_" + std::to_string(s) + ".bin"));
    std::ofstream f(paths.back(), std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(header.data()),
            static_cast<std::streamsize>(header.size() * 4));
    f.write(reinterpret_cast<const char*>(data.data()),
            static_cast<std::streamsize>(data.size() * 2));
    if (!f) throw std::runtime_error("cannot write " + paths.back().string());
  }
  return paths;
}

// A shard mapped read-only, for the gather.
struct Mapped {
  const std::uint16_t* tokens = nullptr;
  std::size_t count = 0;
  void* base = nullptr;
  std::size_t bytes = 0;

  explicit Mapped(const fs::path& p) {
    const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw std::runtime_error("cannot open " + p.string());
    struct stat st {};
    ::fstat(fd, &st);
    bytes = static_cast<std::size_t>(st.st_size);
    base = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    if (base == MAP_FAILED) throw std::runtime_error("cannot map " + p.string());
    tokens = reinterpret_cast<const std::uint16_t*>(static_cast<const char*>(base) + 1024);
    count = (bytes - 1024) / 2;
  }
  Mapped(const Mapped&) = delete;
  Mapped& operator=(const Mapped&) = delete;
  Mapped(Mapped&& o) noexcept : tokens(o.tokens), count(o.count), base(o.base), bytes(o.bytes) {
    o.base = nullptr;
  }
  Mapped& operator=(Mapped&&) = delete;
  ~Mapped() {
    if (base != nullptr) ::munmap(base, bytes);
  }
};

volatile std::uint64_t g_sink = 0;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

template <class D>
void widen(const std::uint16_t* src, D* dst, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<D>(src[i]);
}

// The gather: windows `order` (dataset indices) in batches of `batch`, one thread.
template <class D>
double gather(const std::vector<Mapped>& shards, const ferry::TokenDataset& ds,
              const std::vector<std::uint64_t>& order, std::size_t batch, std::vector<D>& buffer) {
  const std::size_t t = static_cast<std::size_t>(ds.options().seq_len);
  const std::size_t stride = static_cast<std::size_t>(ds.options().stride);
  std::vector<std::size_t> first(shards.size() + 1, 0);
  for (std::size_t s = 0; s < shards.size(); ++s) first[s + 1] = first[s] + ds.file_windows(s);
  const auto start = Clock::now();
  for (std::size_t b = 0; b < order.size(); b += batch) {
    const std::size_t n = std::min(batch, order.size() - b);
    D* input = buffer.data();
    D* target = buffer.data() + batch * t;
    for (std::size_t j = 0; j < n; ++j) {
      const std::size_t index = order[b + j];
      const std::size_t s =
          static_cast<std::size_t>(std::upper_bound(first.begin(), first.end(), index) -
                                   first.begin()) -
          1;
      const std::uint16_t* src = shards[s].tokens + (index - first[s]) * stride;
      widen(src, input + j * t, t);
      widen(src + 1, target + j * t, t);
    }
    g_sink = g_sink + static_cast<std::uint64_t>(input[0]) + static_cast<std::uint64_t>(target[0]);
  }
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// TokenDataset::read() of the same windows in the same order on one thread, into a slot laid
// out as the loader's: what the dataset costs, without the pipeline.
double read_all(const ferry::TokenDataset& ds, const std::vector<std::uint64_t>& order,
                const ferry::detail::SlotLayout& layout, std::vector<std::byte>& slot) {
  const std::size_t batch = layout.capacity;
  const auto start = Clock::now();
  for (std::size_t b = 0; b < order.size(); b += batch) {
    const std::size_t n = std::min(batch, order.size() - b);
    for (std::size_t j = 0; j < n; ++j) {
      ds.read(order[b + j], ferry::detail::SampleRefs::make(&layout, slot.data(), j, 0));
    }
    g_sink = g_sink + static_cast<std::uint64_t>(slot[layout.offsets[1]]);
  }
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double loader_epoch(ferry::Loader& loader, std::uint64_t epoch) {
  const auto start = Clock::now();
  for (const ferry::Batch& b : loader.epoch(epoch)) {
    g_sink = g_sink + *static_cast<const unsigned char*>(b.at(0).data()) +
             *static_cast<const unsigned char*>(b.at(1).data());
  }
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string load_text() {
  double l[3] = {0, 0, 0};
  if (::getloadavg(l, 3) != 3) return "?";
  char s[64];
  std::snprintf(s, sizeof s, "%.2f %.2f %.2f", l[0], l[1], l[2]);
  return s;
}

template <class D>
int run(const Options& o) {
  const bool keep = !o.dir.empty();
  const fs::path dir =
      keep ? o.dir
           : fs::temp_directory_path() / ("ferry_bench_tokens_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string load_before = load_text();
  const std::vector<fs::path> paths = write_shards(dir, o.tokens);

  ferry::TokenOptions to;
  to.seq_len = static_cast<std::int64_t>(o.seq_len);
  to.dtype = o.dtype;
  const auto ds = ferry::TokenDataset::open(paths, to);
  std::vector<Mapped> shards;
  shards.reserve(paths.size());
  for (const fs::path& p : paths) shards.emplace_back(p);

  ferry::LoaderOptions lo;
  lo.autotune = false;  // the settings this bench states, fixed
  lo.batch_size = o.batch;
  lo.prefetch = o.prefetch;
  lo.shuffle = true;
  lo.seed = 1;
  lo.workers = o.workers;
  lo.device = ferry::Device::cpu();
  ferry::Loader loader(ds, lo);

  // The warm-up: the page cache, the loader's slots, and the epoch order the gather replays
  // (the same in every epoch, since the loaders' epochs below are all epoch 0).
  std::vector<std::uint64_t> order;
  for (const ferry::Batch& b : loader.epoch(0)) {
    order.insert(order.end(), b.indices().begin(), b.indices().end());
  }
  std::vector<D> buffer(2 * o.batch * o.seq_len);
  (void)gather<D>(shards, *ds, order, o.batch, buffer);

  const ferry::detail::SlotLayout layout(ds->fields(), o.batch);
  std::vector<std::byte> slot(layout.bytes);
  (void)read_all(*ds, order, layout, slot);

  std::vector<double> ferry_s, gather_s, read_s;
  for (int r = 0; r < o.reps; ++r) {
    if (r % 2 == 0) {
      ferry_s.push_back(loader_epoch(loader, 0));
      gather_s.push_back(gather<D>(shards, *ds, order, o.batch, buffer));
      read_s.push_back(read_all(*ds, order, layout, slot));
    } else {
      read_s.push_back(read_all(*ds, order, layout, slot));
      gather_s.push_back(gather<D>(shards, *ds, order, o.batch, buffer));
      ferry_s.push_back(loader_epoch(loader, 0));
    }
  }
  const double windows = static_cast<double>(ds->size());
  const double out_bytes = windows * 2.0 * static_cast<double>(o.seq_len * sizeof(D));
  const double f = median(ferry_s), g = median(gather_s), rd = median(read_s);
  const double ratio = g / f;
  std::vector<double> paired;  // each round's own ratio: steadier when the machine's load drifts
  for (std::size_t r = 0; r < ferry_s.size(); ++r) paired.push_back(gather_s[r] / ferry_s[r]);
  std::printf("tokens: %llu u16 tokens in %zu llm.c shards, %zu windows of %zu -> %s, batch %zu\n",
              static_cast<unsigned long long>(ds->num_tokens()), kShards, ds->size(), o.seq_len,
              std::string(ferry::dtype_name(o.dtype)).c_str(), o.batch);
  std::printf("machine: %u hardware threads; load average %s before, %s after\n",
              std::thread::hardware_concurrency(), load_before.c_str(), load_text().c_str());
  std::printf("\n| measurement (median of %d) | epoch s | windows/s | GB/s out |\n", o.reps);
  std::printf("| --- | ---: | ---: | ---: |\n");
  std::printf("| loader, %d workers | %.4f | %.0f | %.2f |\n", o.workers, f, windows / f,
              out_bytes / f / 1e9);
  std::printf("| gather, 1 thread | %.4f | %.0f | %.2f |\n", g, windows / g, out_bytes / g / 1e9);
  std::printf("| TokenDataset::read(), 1 thread | %.4f | %.0f | %.2f |\n", rd, windows / rd,
              out_bytes / rd / 1e9);
  std::printf(
      "\nloader / gather: %.3f (target >= %.2f: %s); paired (median of the rounds' ratios) "
      "%.3f\n",
      ratio, kTarget, ratio >= kTarget ? "met" : "missed", median(paired));
  std::printf("loader: %s\n", loader.stats().summary().c_str());
  if (!keep) fs::remove_all(dir);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse(argc, argv);
    if (o.dtype == ferry::DType::i32) return run<std::int32_t>(o);
    if (o.dtype == ferry::DType::i64) return run<std::int64_t>(o);
    throw std::invalid_argument("--dtype must be i32 or i64");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tokens: %s\n", e.what());
    return 1;
  }
}
