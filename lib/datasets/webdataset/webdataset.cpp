#include "ferry/webdataset.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <optional>
#include <string_view>
#include <system_error>
#include <unordered_set>
#include <utility>

#include "datasets/webdataset/tar_index.hpp"
#include "datasets/webdataset/tar_sidecar.hpp"
#include "datasets/webdataset/webdataset_internal.hpp"
#include "ferry/error.hpp"

namespace ferry {
namespace fs = std::filesystem;
using detail::wds::Kind;
using detail::wds::Loc;

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

Kind kind_of(std::string_view ext) {
  const std::string e = lower(ext);
  if (e == "jpg" || e == "jpeg" || e == "png") return Kind::image;
  if (e == "mp4" || e == "mkv" || e == "webm" || e == "avi") return Kind::video;
  if (e == "cls") return Kind::cls;
  if (e == "npy") return Kind::npy;
  if (e == "wav" || e == "flac" || e == "ogg" || e == "opus" || e == "mp3") return Kind::audio;
  return Kind::bytes;
}

// An audio member's field; the options must name the rate and channels (a shard has no first
// file to take them from).
FieldSpec wds_audio_field(const AudioOptions& o, const std::string& ext) {
  if (o.sample_rate == 0 || o.channels == 0) {
    throw ConfigError(std::string(kWebDatasetWho) +
                      ": audio.sample_rate and audio.channels must be given (not 0) for '" + ext +
                      "' members");
  }
  return audio_field(o, o.channels, ext);
}

// Opens a shard (OpenFile: once, without blocking, a regular file only) and stamps it from
// the same descriptor. \throws DataError naming it.
detail::wds::Shard open_shard(const fs::path& path, const fs::path& local, bool remote) {
  detail::wds::Shard shard;
  shard.name = path.string();
  shard.file = local.string();
  shard.remote = remote;
  detail::OpenFile file(local, shard.label());
  shard.stamp = {file.size(), file.mtime_ns()};
  shard.fd = file.take();
  return shard;
}

// Refuses a compressed tar by its first bytes: random access needs it plain.
void refuse_compressed(const detail::wds::Shard& shard) {
  std::array<unsigned char, 6> head{};
  const ssize_t n = ::pread(shard.fd.get(), head.data(), head.size(), 0);
  const auto starts = [&](std::initializer_list<unsigned char> magic) {
    return n >= static_cast<ssize_t>(magic.size()) &&
           std::equal(magic.begin(), magic.end(), head.begin());
  };
  const char* what = starts({0x1f, 0x8b})                       ? "gzip"
                     : starts({'B', 'Z', 'h'})                  ? "bzip2"
                     : starts({0xfd, '7', 'z', 'X', 'Z', 0x00}) ? "xz"
                     : starts({0x28, 0xb5, 0x2f, 0xfd})         ? "zstd"
                                                                : nullptr;
  if (what != nullptr) {
    throw DataError(shard.label().prefix() + "the shard is " + what +
                    "-compressed; WebDataset reads plain tar files by random access: store the "
                    "shards uncompressed (e.g. `gunzip shard.tar.gz`)");
  }
}

std::vector<detail::TarMember> index_shard(const detail::wds::Shard& shard, bool index_files) {
  const fs::path sidecar = detail::sidecar_path(shard.file);
  if (index_files) {
    // A cached shard never changes; its index may come from the server (another mtime).
    if (auto members = detail::load_sidecar(sidecar, shard.stamp, !shard.remote)) {
      return std::move(*members);
    }
  }
  const detail::FileLabel label = shard.label();
  const int fd = shard.fd.get();
  auto members = detail::index_tar(
      shard.stamp.size,
      [&](std::uint64_t offset, std::span<std::byte> out) -> std::size_t {
        std::size_t got = 0;
        while (got < out.size()) {
          const ssize_t n =
              ::pread(fd, out.data() + got, out.size() - got, static_cast<off_t>(offset + got));
          if (n < 0 && errno == EINTR) continue;
          if (n < 0) {
            throw DataError(label.at(offset) +
                            "cannot read: " + std::system_category().message(errno));
          }
          if (n == 0) break;
          got += static_cast<std::size_t>(n);
        }
        return got;
      },
      label);
  if (index_files && !members.empty()) detail::save_sidecar(sidecar, shard.stamp, members);
  return members;
}

// One sample being grouped: its key and members by extension.
struct Group {
  std::string key;
  std::vector<std::pair<std::string, const detail::TarMember*>> members;
};

// The samples of one shard: members grouped by key, in order. A key whose members are not
// consecutive, or that has an extension twice, is a duplicate.
std::vector<Group> group_members(const std::vector<detail::TarMember>& members,
                                 const detail::FileLabel& label) {
  std::vector<Group> groups;
  std::unordered_set<std::string> seen;
  for (const detail::TarMember& m : members) {
    const std::size_t slash = m.name.rfind('/');
    const std::size_t base = slash == std::string::npos ? 0 : slash + 1;
    const std::size_t dot = m.name.find('.', base);
    if (dot == std::string::npos || dot == base) continue;  // no key or no extension
    std::string key = m.name.substr(0, dot);
    std::string ext = m.name.substr(dot + 1);
    if (groups.empty() || groups.back().key != key) {
      if (!seen.insert(key).second) {
        throw DataError(label.at(m.header) + "duplicate key '" + key + "': member '" + m.name +
                        "' follows other keys' members after this key's (keys must be unique "
                        "and a sample's members next to each other)");
      }
      groups.push_back({std::move(key), {}});
    }
    Group& g = groups.back();
    for (const auto& [e, prev] : g.members) {
      if (e == ext) {
        throw DataError(label.at(m.header) + "duplicate key '" + g.key + "': member '" + m.name +
                        "' appears twice (first at byte " + std::to_string(prev->header) + ")");
      }
    }
    g.members.emplace_back(std::move(ext), &m);
  }
  return groups;
}

}  // namespace

namespace detail::wds {

void pread_exact(int fd, std::span<std::byte> out, std::uint64_t offset, const FileLabel& label,
                 const std::string& what) {
  std::size_t got = 0;
  while (got < out.size()) {
    const ssize_t n =
        ::pread(fd, out.data() + got, out.size() - got, static_cast<off_t>(offset + got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      throw DataError(label.at(offset) + what +
                      ": cannot read: " + std::system_category().message(errno));
    }
    if (n == 0) {
      throw DataError(label.at(offset + got) + what + " of " + std::to_string(out.size()) +
                      " bytes is cut short: the shard shrank or was replaced since it was opened");
    }
    got += static_cast<std::size_t>(n);
  }
}

}  // namespace detail::wds

std::size_t WebDataset::Impl::shard_of(std::size_t index) const {
  const auto it = std::upper_bound(shard_starts.begin(), shard_starts.end(), index);
  return static_cast<std::size_t>(it - shard_starts.begin()) - 1;
}

std::shared_ptr<WebDataset> WebDataset::open(std::vector<fs::path> shards,
                                             WebDatasetOptions options) {
  const std::string who = kWebDatasetWho;
  if (shards.empty()) throw ConfigError(who + ": no shards given");
  static_cast<void>(image_shape(options.image));  // ConfigError for bad options
  check_audio_options(options.audio);
  std::shared_ptr<WebDataset> ds(new WebDataset());
  ds->impl_ = std::make_unique<Impl>();
  Impl& impl = *ds->impl_;
  impl.options = std::move(options);
  impl.paths = std::move(shards);
  std::vector<std::string> exts;  // the fields' extensions, sorted
  std::vector<detail::wds::NpyFirst> npy_first;
  // A shard's descriptor is kept (for read()) only when it has samples and there are at most
  // kMaxOpenShards shards; otherwise it goes once the shard is indexed, however its indexing
  // ends (a shard without samples, an error), and read() opens the shard again.
  const bool keep_open = impl.paths.size() <= detail::wds::kMaxOpenShards;
  class CloseUnlessKept {
   public:
    explicit CloseUnlessKept(detail::wds::Shard& shard) : shard_(shard) {}
    CloseUnlessKept(const CloseUnlessKept&) = delete;
    CloseUnlessKept& operator=(const CloseUnlessKept&) = delete;
    ~CloseUnlessKept() {
      if (!keep_) shard_.fd.reset();
    }
    void keep() noexcept { keep_ = true; }

   private:
    detail::wds::Shard& shard_;
    bool keep_ = false;
  };
  // Shards given as URLs: their indexes "<url>.idx" are fetched at open (where the server has
  // one; small files), all at once. A shard with an index is fetched later, while the epochs
  // run (the Prefetcher, in the order the loader hints); one without is fetched now, and its
  // index built from it and kept beside it in the cache, as for a local shard.
  std::vector<fs::path> local(impl.paths);
  std::vector<bool> remote(impl.paths.size(), false);
  std::vector<std::optional<std::uint64_t>> later(impl.paths.size());  // a deferred shard's size
  std::optional<fs::path> dir;
  const auto fetch_now = [&](const std::vector<std::size_t>& which) {
    std::vector<detail::remote::Request> requests;
    requests.reserve(which.size());
    for (const std::size_t s : which) requests.push_back({impl.paths[s].native(), {}, false});
    auto cached = detail::remote::fetch_files(requests, impl.options.remote, who);
    for (std::size_t r = 0; r < cached.size(); ++r) {
      local[which[r]] = cached[r]->path();
      impl.cached.push_back(std::move(*cached[r]));
    }
  };
  {
    std::vector<detail::remote::Request> requests;
    for (std::size_t s = 0; s < impl.paths.size(); ++s) {
      const std::string& name = impl.paths[s].native();
      if (!detail::remote::is_url(name)) continue;
      if (!dir) dir = detail::remote::cache_dir(impl.options.remote);
      remote[s] = true;
      local[s] = detail::remote::entry_path(*dir, name);
      const fs::path sidecar = detail::sidecar_path(local[s]);
      std::error_code ec;
      if (impl.options.index_files && !fs::exists(sidecar, ec)) {
        // "<url>.idx" at the end of the path (a presigned URL's query stays last); optional:
        // a server that has none, or forbids it (401, 403), gives none.
        requests.push_back({detail::remote::url_with_suffix(name, ".idx"), sidecar, true});
      }
    }
    if (!requests.empty()) {
      for (auto& held : detail::remote::fetch_files(requests, impl.options.remote, who)) {
        if (held) impl.cached.push_back(std::move(*held));
      }
    }
    std::vector<std::size_t> now;
    for (std::size_t s = 0; s < impl.paths.size(); ++s) {
      if (!remote[s]) continue;
      if (impl.options.index_files)
        later[s] = detail::sidecar_shard_size(detail::sidecar_path(local[s]));
      if (!later[s]) now.push_back(s);
    }
    if (!now.empty()) fetch_now(now);
  }
  std::vector<std::string> deferred_urls;  // the shards the Prefetcher fetches, and their sizes
  std::vector<std::uint64_t> deferred_sizes;
  for (std::size_t s = 0; s < impl.paths.size(); ++s) {
    std::optional<std::vector<detail::TarMember>> deferred_members;
    if (later[s]) {
      // Its index is here, its data not yet: the index as the server gave it, for the size the
      // index states (checked again when the shard comes).
      deferred_members = detail::load_sidecar(detail::sidecar_path(local[s]), {*later[s], 0},
                                              /*match_mtime=*/false);
      if (!deferred_members) {  // an index that does not parse: fetch the shard, build its own
        later[s].reset();
        fetch_now({s});
        std::error_code ec;
        fs::remove(detail::sidecar_path(local[s]), ec);
      }
    }
    if (later[s]) {
      detail::wds::Shard shard;
      shard.name = impl.paths[s].string();
      shard.file = local[s].string();
      shard.remote = true;
      shard.fetch = deferred_urls.size();
      shard.stamp = {*later[s], 0};
      deferred_urls.push_back(impl.paths[s].native());
      deferred_sizes.push_back(*later[s]);
      impl.shards.push_back(std::move(shard));
    } else {
      impl.shards.push_back(open_shard(impl.paths[s], local[s], remote[s]));
    }
    detail::wds::Shard* shard_ptr = &impl.shards.back();
    CloseUnlessKept close_after(*shard_ptr);
    if (!later[s]) refuse_compressed(*shard_ptr);
    const std::vector<detail::TarMember> members =
        later[s] ? std::move(*deferred_members) : index_shard(*shard_ptr, impl.options.index_files);
    const detail::FileLabel label = shard_ptr->label();
    const std::vector<Group> groups = group_members(members, label);
    impl.shard_starts.push_back(impl.keys.size());
    if (groups.empty()) continue;
    if (exts.empty()) {
      for (const auto& [ext, m] : groups.front().members) exts.push_back(ext);
      std::sort(exts.begin(), exts.end());
      for (const std::string& ext : exts) {
        impl.kinds.push_back(kind_of(ext));
        impl.fields.push_back(
            impl.kinds.back() == Kind::image   ? image_field(impl.options.image, ext)
            : impl.kinds.back() == Kind::video ? video_field(impl.options.video, ext)
            : impl.kinds.back() == Kind::audio ? wds_audio_field(impl.options.audio, ext)
            : impl.kinds.back() == Kind::cls   ? FieldSpec{ext, DType::i64, {}}
                                               : FieldSpec{ext, DType::u8, {ragged}});
      }
      npy_first.resize(exts.size());
    }
    if (later[s] &&
        std::find(impl.kinds.begin(), impl.kinds.end(), Kind::npy) != impl.kinds.end()) {
      // "npy" members' headers say the fields' shapes: the shard is needed now.
      const std::uint64_t indexed = *later[s];
      fetch_now({s});
      later[s].reset();
      deferred_urls.pop_back();
      deferred_sizes.pop_back();
      impl.shards.back() = open_shard(impl.paths[s], local[s], true);
      if (impl.shards.back().stamp.size != indexed) {
        throw DataError(label.prefix() + "the downloaded shard has " +
                        std::to_string(impl.shards.back().stamp.size) + " bytes, its index says " +
                        std::to_string(indexed));
      }
    }
    const detail::wds::Shard& shard = *shard_ptr;
    for (const Group& g : groups) {
      for (std::size_t f = 0; f < exts.size(); ++f) {
        Loc loc{detail::wds::kMissing, 0, 0, 0};
        for (const auto& [ext, m] : g.members) {
          if (ext != exts[f]) continue;
          loc = {m->offset, m->size, static_cast<std::int64_t>(m->size), m->header};
          if (impl.kinds[f] == Kind::npy) {
            detail::wds::npy_field(loc, npy_first[f], shard, g.key + "." + ext);
          }
        }
        impl.locs.push_back(loc);
      }
      impl.keys.push_back(g.key);
    }
    if (keep_open) close_after.keep();
  }
  impl.shard_starts.push_back(impl.keys.size());
  if (impl.keys.empty()) {
    throw DataError(who + ": " + impl.paths.front().string() +
                    (impl.paths.size() > 1 ? " and the other shards" : "") +
                    ": no samples (members named <key>.<extension>)");
  }
  detail::wds::finish_npy_fields(impl, npy_first);
  // Each ragged field's longest sample, for max_length(): the loader sizes its slots by it.
  impl.longest.assign(impl.fields.size(), 0);
  for (std::size_t f = 0; f < impl.fields.size(); ++f) {
    if (!impl.fields[f].is_ragged()) continue;
    if (impl.kinds[f] == Kind::audio) {  // known only from each member's header
      impl.longest[f] = -1;
      if (!impl.audio_rows) {
        impl.audio_rows = std::make_unique<std::atomic<std::int64_t>[]>(impl.locs.size());
        for (std::size_t k = 0; k < impl.locs.size(); ++k) impl.audio_rows[k].store(-1);
      }
      continue;
    }
    for (std::size_t i = 0; i < impl.keys.size(); ++i) {
      impl.longest[f] = std::max(impl.longest[f], impl.loc(i, f).rows);
    }
  }
  if (!deferred_urls.empty()) {
    impl.prefetcher = std::make_unique<detail::remote::Prefetcher>(
        std::move(deferred_urls), std::move(deferred_sizes), impl.options.remote, who);
  }
  return ds;
}

WebDataset::~WebDataset() = default;

std::size_t WebDataset::size() const { return impl_->keys.size(); }
std::vector<FieldSpec> WebDataset::fields() const { return impl_->fields; }
const std::vector<fs::path>& WebDataset::shards() const noexcept { return impl_->paths; }
std::span<const std::size_t> WebDataset::shard_starts() const noexcept {
  return impl_->shard_starts;
}
const WebDatasetOptions& WebDataset::options() const noexcept { return impl_->options; }

void WebDataset::will_read(std::span<const std::size_t> indices) const noexcept {
  const Impl& impl = *impl_;
  if (!impl.prefetcher) return;
  try {
    // The shards fetched while reading, in the order of their first sample among `indices`,
    // and how many reads each will have.
    std::vector<std::size_t> order;
    std::vector<std::size_t> reads(impl.prefetcher->size(), 0);
    for (const std::size_t i : indices) {
      if (i >= impl.keys.size()) continue;
      const std::size_t f = impl.shards[impl.shard_of(i)].fetch;
      if (f == detail::wds::kNotFetched) continue;
      if (reads[f]++ == 0) order.push_back(f);
    }
    impl.prefetcher->plan(order, reads);
  } catch (...) {  // NOLINT(bugprone-empty-catch): a hint; without it, fetching goes in order
  }
}

bool WebDataset::wants_read_order() const noexcept { return impl_->prefetcher != nullptr; }

double WebDataset::network_wait_seconds() const noexcept {
  return impl_->prefetcher ? impl_->prefetcher->wait_seconds() : 0.0;
}

}  // namespace ferry
