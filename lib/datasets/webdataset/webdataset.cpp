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

constexpr std::size_t kNoShard = ~std::size_t{0};

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

Kind kind_of(std::string_view ext) {
  const std::string e = lower(ext);
  if (e == "jpg" || e == "jpeg" || e == "png") return Kind::image;
  if (e == "cls") return Kind::cls;
  if (e == "npy") return Kind::npy;
  return Kind::bytes;
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
  // Shards given as URLs are fetched into the cache first, all of them, each with its index
  // "<url>.idx" where the server has one (else it is built from the shard, as for a local one).
  std::vector<fs::path> local(impl.paths);
  std::vector<bool> remote(impl.paths.size(), false);
  {
    std::vector<detail::remote::Request> requests;
    std::vector<std::size_t> shard_of_request;
    std::optional<fs::path> dir;
    for (std::size_t s = 0; s < impl.paths.size(); ++s) {
      const std::string& name = impl.paths[s].native();
      if (!detail::remote::is_url(name)) continue;
      if (!dir) dir = detail::remote::cache_dir(impl.options.remote);
      remote[s] = true;
      requests.push_back({name, {}, false});
      shard_of_request.push_back(s);
      const fs::path sidecar = detail::sidecar_path(detail::remote::entry_path(*dir, name));
      std::error_code ec;
      if (impl.options.index_files && !fs::exists(sidecar, ec)) {
        requests.push_back({name + ".idx", sidecar, true});
        shard_of_request.push_back(kNoShard);
      }
    }
    if (!requests.empty()) {
      auto cached = detail::remote::fetch_files(requests, impl.options.remote, who);
      for (std::size_t r = 0; r < cached.size(); ++r) {
        if (!cached[r]) continue;
        if (shard_of_request[r] != kNoShard) local[shard_of_request[r]] = cached[r]->path();
        impl.cached.push_back(std::move(*cached[r]));
      }
    }
  }
  for (std::size_t s = 0; s < impl.paths.size(); ++s) {
    impl.shards.push_back(open_shard(impl.paths[s], local[s], remote[s]));
    detail::wds::Shard& shard = impl.shards.back();
    CloseUnlessKept close_after(shard);
    refuse_compressed(shard);
    const std::vector<detail::TarMember> members = index_shard(shard, impl.options.index_files);
    const detail::FileLabel label = shard.label();
    const std::vector<Group> groups = group_members(members, label);
    impl.shard_starts.push_back(impl.keys.size());
    if (groups.empty()) continue;
    if (exts.empty()) {
      for (const auto& [ext, m] : groups.front().members) exts.push_back(ext);
      std::sort(exts.begin(), exts.end());
      for (const std::string& ext : exts) {
        impl.kinds.push_back(kind_of(ext));
        impl.fields.push_back(
            impl.kinds.back() == Kind::image ? image_field(impl.options.image, ext)
            : impl.kinds.back() == Kind::cls ? FieldSpec{ext, DType::i64, {}}
                                             : FieldSpec{ext, DType::u8, {ragged}});
      }
      npy_first.resize(exts.size());
    }
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

}  // namespace ferry
