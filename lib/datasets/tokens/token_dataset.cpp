#include "ferry/token_dataset.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>

#include "core/checked.hpp"
#include "datasets/common/file_io.hpp"
#include "datasets/common/npy_header.hpp"
#include "datasets/remote/prefetcher.hpp"
#include "datasets/remote/remote_cache.hpp"
#include "datasets/tokens/token_format.hpp"
#include "ferry/error.hpp"

namespace ferry {
namespace {

using detail::tokens::load_le;
using detail::tokens::npy_header_end;

constexpr const char* kTokenWho = "TokenDataset";

bool is_integer(DType t) noexcept {
  return t == DType::u8 || t == DType::u16 || t == DType::u32 || t == DType::i32 || t == DType::i64;
}

std::string dtype_text(DType t) {
  const std::string_view name = dtype_name(t);
  return name == "?" ? "dtype " + std::to_string(static_cast<int>(t)) : std::string(name);
}

// ---- widening a window ------------------------------------------------------------------

// Whether every value of S fits in D (then no check is needed).
template <class S, class D>
constexpr bool always_fits() {
  return std::cmp_greater_equal(std::numeric_limits<S>::min(), std::numeric_limits<D>::min()) &&
         std::cmp_less_equal(std::numeric_limits<S>::max(), std::numeric_limits<D>::max());
}

template <class D, class S>
constexpr bool fits(S v) noexcept {
  if constexpr (always_fits<S, D>()) {
    return true;
  } else if constexpr (std::is_signed_v<S>) {
    return static_cast<S>(static_cast<D>(v)) == v;  // i64 into i32: C++20 wraps modulo 2^32
  } else {
    return v <= static_cast<S>(std::numeric_limits<D>::max());  // u32 into i32
  }
}

// Copies n tokens of S at src (little-endian, any alignment) into dst as D. A tight loop that
// the compiler vectorizes; the range check, where one is needed, is folded in without a branch.
// Returns whether every token fit.
template <class S, class D>
bool widen(const std::byte* src, D* dst, std::size_t n) noexcept {
  bool ok = true;
  for (std::size_t i = 0; i < n; ++i) {
    const S v = load_le<S>(src + i * sizeof(S));
    ok &= fits<D>(v);
    dst[i] = static_cast<D>(v);
  }
  return ok;
}

// The first of n tokens that does not fit D, and its value.
template <class S, class D>
std::pair<std::size_t, std::int64_t> first_misfit(const std::byte* src, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const S v = load_le<S>(src + i * sizeof(S));
    if (!fits<D>(v)) return {i, static_cast<std::int64_t>(v)};
  }
  return {n, 0};
}

// A URL's head: enough for an llm.c header and a .npy header of any usual length.
constexpr std::uint64_t kHeadBytes = 4096;

// Reads out.size() bytes of `fd` at `offset`. \throws DataError when fewer are there.
void pread_all(int fd, std::span<std::byte> out, std::uint64_t offset,
               const detail::FileLabel& label) {
  std::size_t got = 0;
  while (got < out.size()) {
    const ssize_t n =
        ::pread(fd, out.data() + got, out.size() - got, static_cast<off_t>(offset + got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      throw DataError(label.at(offset + got) +
                      "cannot read the cached file: " + std::system_category().message(errno));
    }
    if (n == 0) {
      throw DataError(label.at(offset + got) + "the cached file ends " +
                      std::to_string(out.size() - got) + " bytes short of the window");
    }
    got += static_cast<std::size_t>(n);
  }
}

}  // namespace

// ---- one file ---------------------------------------------------------------------------

struct TokenDataset::File {
  static constexpr std::size_t kLocal = ~std::size_t{0};

  // A local file: mapped, read in place.
  File(const std::filesystem::path& path, const TokenOptions& options)
      : name(path.string()), label{kTokenWho, name} {
    map.emplace(path, label, /*populate=*/false);
    parse(path, map->bytes(), map->bytes().size(), options);
    data = map->bytes().data() + data_offset;
  }

  // A URL: its head (first bytes) and size read at open; the file itself is fetch number
  // `fetch_index` of the dataset's Prefetcher.
  File(const std::filesystem::path& path, std::span<const std::byte> head, std::uint64_t size,
       std::size_t fetch_index, const TokenOptions& options)
      : name(path.string()), label{kTokenWho, name}, fetch(fetch_index) {
    parse(path, head, size, options);
  }

  // Where token k of a local file is.
  const std::byte* token(std::uint64_t k) const noexcept {
    return data + static_cast<std::size_t>(k) * dtype_size(dtype);
  }

  std::string name;
  detail::FileLabel label;                // views name
  std::optional<detail::MappedFile> map;  // a local file's
  std::size_t fetch = kLocal;             // a URL's number in the Prefetcher
  std::uint64_t file_size = 0;
  const std::byte* data = nullptr;  // a local file's first token
  std::size_t data_offset = 0;      // its byte in the file
  std::uint64_t tokens = 0;
  DType dtype = DType::u16;
  std::string format;  // "llm.c shard", ".npy file", "raw file", for messages
  std::size_t windows = 0;

 private:
  // Decides the format from the first bytes (`head`, all of them up to a header's end) and
  // the file's size, and checks them against each other.
  void parse(const std::filesystem::path& path, std::span<const std::byte> head, std::uint64_t size,
             const TokenOptions& options) {
    file_size = size;
    const detail::tokens::TokenLayout l = detail::tokens::parse_token_file(
        path.extension() == ".npy", head, size, options.raw_dtype, label);
    data_offset = l.data_offset;
    tokens = l.tokens;
    dtype = l.dtype;
    format = l.format;
  }
};

// ---- the dataset ------------------------------------------------------------------------

struct TokenDataset::Remote {
  std::unique_ptr<detail::remote::Prefetcher> prefetcher;  // file i: the i-th URL given
};

std::shared_ptr<TokenDataset> TokenDataset::open(std::vector<std::filesystem::path> files,
                                                 TokenOptions options) {
  const std::string who = kTokenWho;
  if (files.empty()) throw ConfigError(who + ": no files given");
  if (options.seq_len < 1) {
    throw ConfigError(who + ": TokenOptions::seq_len is " + std::to_string(options.seq_len) +
                      "; it must be at least 1");
  }
  if (options.stride < 0) {
    throw ConfigError(who + ": TokenOptions::stride is " + std::to_string(options.stride) +
                      "; it must be >= 0 (0: seq_len)");
  }
  if (options.dtype != DType::i32 && options.dtype != DType::i64) {
    throw ConfigError(who + ": TokenOptions::dtype is " + dtype_text(options.dtype) +
                      "; it must be i32 or i64");
  }
  if (!is_integer(options.raw_dtype)) {
    throw ConfigError(who + ": TokenOptions::raw_dtype is " + dtype_text(options.raw_dtype) +
                      "; it must be an integer type: u8, u16, u32, i32 or i64");
  }
  if (options.stride == 0) options.stride = options.seq_len;
  // A window reads T + 1 tokens: at most 2^63, no overflow in uint64.
  const std::uint64_t span = static_cast<std::uint64_t>(options.seq_len) + 1;
  const auto stride = static_cast<std::uint64_t>(options.stride);

  std::shared_ptr<TokenDataset> ds(new TokenDataset());
  ds->options_ = options;
  ds->files_.reserve(files.size());
  ds->first_window_.reserve(files.size() + 1);
  // Of URLs, the heads only: the files come while reading.
  std::vector<std::string> urls;
  for (const auto& path : files) {
    if (detail::remote::is_url(path.native())) urls.push_back(path.string());
  }
  std::vector<detail::remote::Head> heads;
  std::vector<std::uint64_t> sizes;
  if (!urls.empty()) {
    heads = detail::remote::read_heads(urls, kHeadBytes, options.remote, who);
    for (std::size_t i = 0; i < urls.size(); ++i) {
      // A .npy header longer than the head: read up to its end.
      const std::uint64_t end = npy_header_end(heads[i].bytes);
      if (end > heads[i].bytes.size() && end <= heads[i].size) {
        heads[i] = detail::remote::read_head(urls[i], end, options.remote, who);
      }
      sizes.push_back(heads[i].size);
    }
  }
  std::size_t total = 0;
  const File* longest = nullptr;
  std::size_t next_url = 0;
  for (const auto& path : files) {
    std::unique_ptr<File> f;
    if (detail::remote::is_url(path.native())) {
      const detail::remote::Head& head = heads[next_url];
      f = std::make_unique<File>(path, head.bytes, head.size, next_url, options);
      ++next_url;
    } else {
      f = std::make_unique<File>(path, options);
    }
    if (f->tokens >= span) f->windows = static_cast<std::size_t>((f->tokens - span) / stride + 1);
    ds->first_window_.push_back(total);
    total = detail::checked_add<std::size_t, DataError>(total, f->windows,
                                                        who + ": windows of all the files");
    ds->num_tokens_ = detail::checked_add<std::uint64_t, DataError>(
        ds->num_tokens_, f->tokens, who + ": tokens of all the files");
    if (longest == nullptr || f->tokens > longest->tokens) longest = f.get();
    ds->files_.push_back(std::move(f));
  }
  ds->first_window_.push_back(total);
  if (total == 0) {
    throw ConfigError(who + ": no window: TokenOptions::seq_len " +
                      std::to_string(options.seq_len) + " needs " + std::to_string(span) +
                      " tokens in one file, and the longest of the " +
                      std::to_string(files.size()) + " file" + (files.size() == 1 ? "" : "s") +
                      ", " + longest->name + ", has " + std::to_string(longest->tokens));
  }
  ds->size_ = total;
  ds->paths_ = std::move(files);
  if (!urls.empty()) {
    ds->remote_ = std::make_unique<Remote>();
    ds->remote_->prefetcher = std::make_unique<detail::remote::Prefetcher>(
        std::move(urls), std::move(sizes), options.remote, who);
  }
  return ds;
}

TokenDataset::~TokenDataset() = default;

std::size_t TokenDataset::file_of(std::size_t index) const noexcept {
  // The last file whose first window is at or before index: the one holding it (a file of no
  // windows shares its first window with the next, which upper_bound steps past).
  const auto it = std::upper_bound(first_window_.begin(), first_window_.end(), index) - 1;
  return static_cast<std::size_t>(it - first_window_.begin());
}

void TokenDataset::will_read(std::span<const std::size_t> indices) const noexcept {
  if (!remote_) return;
  try {
    // The files fetched while reading, in the order of their first window among `indices`,
    // and how many reads each will have.
    detail::remote::Prefetcher& p = *remote_->prefetcher;
    std::vector<std::size_t> order;
    std::vector<std::size_t> reads(p.size(), 0);
    for (const std::size_t i : indices) {
      if (i >= size_) continue;
      const std::size_t fetch = files_[file_of(i)]->fetch;
      if (fetch == File::kLocal) continue;
      if (reads[fetch]++ == 0) order.push_back(fetch);
    }
    p.plan(order, reads);
  } catch (...) {  // NOLINT(bugprone-empty-catch): a hint; without it, fetching goes in order
  }
}

bool TokenDataset::wants_read_order() const noexcept { return remote_ != nullptr; }

double TokenDataset::network_wait_seconds() const noexcept {
  return remote_ ? remote_->prefetcher->wait_seconds() : 0.0;
}

std::vector<FieldSpec> TokenDataset::fields() const {
  return {{"input", options_.dtype, {options_.seq_len}},
          {"target", options_.dtype, {options_.seq_len}}};
}

std::size_t TokenDataset::num_files() const noexcept { return files_.size(); }

const TokenDataset::File& TokenDataset::file_at(std::size_t file) const {
  if (file >= files_.size()) {
    throw ConfigError(std::string(kTokenWho) + ": file " + std::to_string(file) +
                      " out of range (" + std::to_string(files_.size()) + " files)");
  }
  return *files_[file];
}

std::uint64_t TokenDataset::file_tokens(std::size_t file) const { return file_at(file).tokens; }

DType TokenDataset::file_dtype(std::size_t file) const { return file_at(file).dtype; }

std::size_t TokenDataset::file_windows(std::size_t file) const { return file_at(file).windows; }

namespace {

// Widens T + 1 tokens at src into input [T] and target [T] of D: input from the tokens, target
// from input shifted by one and the last token. Returns whether every token fit D.
template <class S, class D>
bool fill_window(const std::byte* src, std::size_t t, void* input, void* target) noexcept {
  auto* in = static_cast<D*>(input);
  auto* out = static_cast<D*>(target);
  bool ok = widen<S, D>(src, in, t);
  if (t > 1) std::memcpy(out, in + 1, (t - 1) * sizeof(D));
  ok &= widen<S, D>(src + t * sizeof(S), out + t - 1, 1);
  return ok;
}

template <class D>
bool fill_as(DType from, const std::byte* src, std::size_t t, void* input, void* target) noexcept {
  switch (from) {
    case DType::u8:
      return fill_window<std::uint8_t, D>(src, t, input, target);
    case DType::u16:
      return fill_window<std::uint16_t, D>(src, t, input, target);
    case DType::u32:
      return fill_window<std::uint32_t, D>(src, t, input, target);
    case DType::i32:
      return fill_window<std::int32_t, D>(src, t, input, target);
    default:
      return fill_window<std::int64_t, D>(src, t, input, target);
  }
}

template <class D>
std::pair<std::size_t, std::int64_t> misfit_as(DType from, const std::byte* src, std::size_t n) {
  switch (from) {
    case DType::u32:
      return first_misfit<std::uint32_t, D>(src, n);
    case DType::i64:
      return first_misfit<std::int64_t, D>(src, n);
    default:
      return {n, 0};  // u8, u16 and i32 fit both outputs
  }
}

}  // namespace

void TokenDataset::read(std::size_t index, SampleRef out) const {
  if (index >= size_) {
    throw ConfigError(std::string(kTokenWho) + ": sample index " + std::to_string(index) +
                      " out of range (" + std::to_string(size_) + " windows)");
  }
  const std::size_t file = file_of(index);
  const File& f = *files_[file];
  const std::uint64_t start = static_cast<std::uint64_t>(index - first_window_[file]) *
                              static_cast<std::uint64_t>(options_.stride);
  const auto t = static_cast<std::size_t>(options_.seq_len);
  const std::byte* src = nullptr;
  // A URL's file: fetched (waiting for it first where it is not here yet) and held while its
  // window is read into this thread's buffer; the read counts against the plan however it ends.
  class Done {
   public:
    explicit Done(detail::remote::Prefetcher* p, std::size_t i) : p_(p), i_(i) {}
    Done(const Done&) = delete;
    Done& operator=(const Done&) = delete;
    ~Done() {
      if (p_ != nullptr) p_->read_done(i_);
    }

   private:
    detail::remote::Prefetcher* p_;
    std::size_t i_;
  } done(f.fetch == File::kLocal ? nullptr : remote_->prefetcher.get(), f.fetch);
  if (f.fetch == File::kLocal) {
    src = f.token(start);
  } else {
    const std::shared_ptr<const detail::remote::CachedFile> held =
        remote_->prefetcher->get(f.fetch);
    thread_local std::vector<std::byte> window;
    window.resize((t + 1) * dtype_size(f.dtype));
    const std::uint64_t at = f.data_offset + start * dtype_size(f.dtype);
    pread_all(held->fd(), window, at, f.label);
    src = window.data();
  }
  const bool ok = options_.dtype == DType::i32
                      ? fill_as<std::int32_t>(f.dtype, src, t, out.data(0), out.data(1))
                      : fill_as<std::int64_t>(f.dtype, src, t, out.data(0), out.data(1));
  if (ok) return;
  const auto [i, value] = options_.dtype == DType::i32
                              ? misfit_as<std::int32_t>(f.dtype, src, t + 1)
                              : misfit_as<std::int64_t>(f.dtype, src, t + 1);
  const std::uint64_t k = start + i;
  throw DataError(f.label.at(f.data_offset + k * dtype_size(f.dtype)) + "token " +
                  std::to_string(k) + " of the " + f.format + " is " + std::to_string(value) +
                  ", beyond " + dtype_text(options_.dtype) +
                  " (TokenOptions::dtype; i64 holds every token)");
}

}  // namespace ferry
