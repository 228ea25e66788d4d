// WebDataset::read(): each field's member read with pread at the place the index gives, raw
// fields straight into the sample's place in the batch, images through this thread's buffer
// into decode_image() (as ImageFolder decodes its files).

#include <fcntl.h>
#include <unistd.h>

#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "core/checked.hpp"
#include "datasets/common/integer_text.hpp"
#include "datasets/webdataset/webdataset_internal.hpp"
#include "ferry/error.hpp"

namespace ferry {
using detail::wds::Kind;
using detail::wds::Loc;

namespace {

constexpr std::size_t kMaxClsBytes = 64;
// A buffer that grew past this for one large image is released after it.
constexpr std::size_t kKeepImageBytes = std::size_t{16} << 20;

// This thread's buffer for encoded images: never zeroed, reused image after image.
struct ImageScratch {
  std::unique_ptr<std::byte[]> data;
  std::size_t capacity = 0;
};

ImageScratch& image_scratch() noexcept {
  thread_local ImageScratch scratch;
  return scratch;
}

// n bytes of this thread's buffer.
std::span<std::byte> image_buffer(std::size_t n) {
  ImageScratch& s = image_scratch();
  if (n > s.capacity) {
    s.data.reset();  // before allocating the new one: the peak holds one buffer, not two
    s.capacity = 0;
    s.data = std::make_unique_for_overwrite<std::byte[]>(n);
    s.capacity = n;
  }
  return {s.data.get(), n};
}

// Releases the buffer one large image grew, when the image's read ends, however it ends (a
// short read, a failed decode): a scope guard, not a statement after calls that throw.
class TrimImageBuffer {
 public:
  TrimImageBuffer() = default;
  TrimImageBuffer(const TrimImageBuffer&) = delete;
  TrimImageBuffer& operator=(const TrimImageBuffer&) = delete;
  ~TrimImageBuffer() {
    ImageScratch& s = image_scratch();
    if (s.capacity > kKeepImageBytes) {
      s.data.reset();
      s.capacity = 0;
    }
  }
};

std::size_t checked_index(std::size_t i, std::size_t size) {
  if (i >= size) {
    throw ConfigError(std::string(kWebDatasetWho) + ": sample index " + std::to_string(i) +
                      " out of range (" + std::to_string(size) + " samples)");
  }
  return i;
}

// The shard's descriptor: the one kept open, or one opened for this read the one way ferry
// opens files (OpenFile: without blocking, a regular file only, then checked by fstat), which
// must still be the file open() indexed (its size and mtime).
class ShardFd {
 public:
  ShardFd(const detail::wds::Shard& shard, const detail::remote::CachedFile* fetched)
      : fd_(fetched != nullptr ? fetched->fd() : shard.fd.get()) {
    if (fd_ >= 0) return;
    const detail::FileLabel label = shard.label();
    std::optional<detail::OpenFile> file;
    try {
      file.emplace(shard.file, label);
    } catch (const DataError& e) {
      throw DataError(std::string(e.what()) +
                      " (the shard, reopened for this read, vanished or was replaced since the "
                      "dataset was opened)");
    }
    if (detail::ShardStamp{file->size(), file->mtime_ns()} != shard.stamp) {
      throw DataError(label.prefix() + "the shard changed since the dataset was opened (" +
                      std::to_string(file->size()) + " bytes now, " +
                      std::to_string(shard.stamp.size) +
                      " then, or a new modification time): reopen the dataset");
    }
    owned_ = file->take();
    fd_ = owned_.get();
  }
  int get() const noexcept { return fd_; }

 private:
  int fd_;
  detail::FileDescriptor owned_;
};

// A ".cls" member: integer_text.hpp's integer, with ASCII white space around it allowed (such
// files usually end with a newline).
std::int64_t parse_cls(std::string_view text, const detail::FileLabel& label, std::uint64_t at,
                       const std::string& what) {
  const detail::ParsedInteger v = detail::parse_integer_text(detail::trim_ascii_space(text));
  if (v.kind == detail::IntegerText::ok) return v.value;
  // Shown escaped: the member's bytes may be anything.
  std::string shown;
  for (const char c : text.substr(0, std::min<std::size_t>(text.size(), 32))) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte >= 0x7f || c == '"' || c == '\\') {
      constexpr const char* kHex = "0123456789abcdef";
      shown += "\\x";
      shown += kHex[byte >> 4];
      shown += kHex[byte & 15];
    } else {
      shown += c;
    }
  }
  if (text.size() > 32) shown += "...";
  throw DataError(label.at(at) + what + ": \"" + shown + "\" is not a decimal integer label" +
                  (v.kind == detail::IntegerText::malformed
                       ? " (an optional '-' and digits, no '+' or leading zero, blanks around it "
                         "allowed)"
                       : " (beyond the range of i64)"));
}

// A member of encoded sound: decoded in place from the shard (pread through libsndfile, only the
// parts needed), never copied whole into memory.
constexpr std::uint64_t kMaxAudioMemberBytes = std::uint64_t{1} << 31;

void check_audio_member(const Loc& loc, const detail::FileLabel& label, const std::string& what) {
  if (loc.size > kMaxAudioMemberBytes) {
    throw DataError(label.at(loc.offset) + what + ": a sound file of " + std::to_string(loc.size) +
                    " bytes (at most 2 GiB)");
  }
}

}  // namespace

std::int64_t detail::wds::audio_member_rows(int fd, const Loc& loc, const AudioOptions& options,
                                            const FileLabel& label, const std::string& what) {
  check_audio_member(loc, label, what);
  const std::string name = label.prefix() + what;
  return audio_length(audio_info_at(fd, static_cast<std::int64_t>(loc.offset),
                                    static_cast<std::int64_t>(loc.size), name, options.max_seconds),
                      options, name);
}

std::size_t detail::wds::image_buffer_bytes() noexcept { return image_scratch().capacity; }

void WebDataset::read(std::size_t index, SampleRef out) const {
  const Impl& impl = *impl_;
  checked_index(index, impl.keys.size());
  const detail::wds::Shard& shard = impl.shards[impl.shard_of(index)];
  const detail::FileLabel label = shard.label();
  const std::string& key = impl.keys[index];
  // A shard fetched while reading: its file (waiting for it first where it is not here yet),
  // held until this read ends; the read counts against the plan however it ends.
  std::shared_ptr<const detail::remote::CachedFile> fetched;
  class Done {
   public:
    Done(const Impl& impl, std::size_t fetch) : impl_(impl), fetch_(fetch) {}
    Done(const Done&) = delete;
    Done& operator=(const Done&) = delete;
    ~Done() {
      if (fetch_ != detail::wds::kNotFetched) impl_.prefetcher->read_done(fetch_);
    }

   private:
    const Impl& impl_;
    std::size_t fetch_;
  } done(impl, shard.fetch);
  if (shard.fetch != detail::wds::kNotFetched) fetched = impl.prefetcher->get(shard.fetch);
  const ShardFd fd(shard, fetched.get());
  // What messages name, built in this thread's buffers: they keep their capacity, so a sample
  // costs no allocation of its own.
  thread_local std::string what;
  thread_local std::string name;
  for (std::size_t f = 0; f < impl.fields.size(); ++f) {
    const Loc& loc = impl.loc(index, f);
    const std::string& ext = impl.fields[f].name;
    if (loc.offset == detail::wds::kMissing) {
      throw DataError(label.prefix() + "sample '" + key + "' has no '" + ext +
                      "' member (a field of the first sample)");
    }
    what = "member '";
    what += key;
    what += '.';
    what += ext;
    what += "'";
    switch (impl.kinds[f]) {
      case Kind::bytes:
      case Kind::npy:
        // Straight into the batch: the index fixed the size, and the loader sized the place.
        if (out.nbytes(f) != loc.size) {
          throw DataError(label.at(loc.offset) + what + ": " + std::to_string(loc.size) +
                          " bytes, the field takes " + std::to_string(out.nbytes(f)));
        }
        detail::wds::pread_exact(fd.get(), {static_cast<std::byte*>(out.data(f)), out.nbytes(f)},
                                 loc.offset, label, what);
        break;
      case Kind::cls: {
        if (loc.size > kMaxClsBytes) {
          throw DataError(label.at(loc.offset) + what + ": a label of " + std::to_string(loc.size) +
                          " bytes (at most 64 are read)");
        }
        char text[kMaxClsBytes];
        detail::wds::pread_exact(fd.get(), {reinterpret_cast<std::byte*>(text), loc.size},
                                 loc.offset, label, what);
        *out.as<std::int64_t>(f) = parse_cls({text, loc.size}, label, loc.offset, what);
        break;
      }
      case Kind::video: {
        // Decoded from memory (decode_video()); the member is read into this thread's buffer,
        // released after a large one as for images.
        constexpr std::uint64_t kMaxVideoBytes = std::uint64_t{4} << 30;
        if (loc.size > kMaxVideoBytes) {
          throw DataError(label.at(loc.offset) + what + ": a video of " + std::to_string(loc.size) +
                          " bytes, more than the 4 GiB read at once");
        }
        const TrimImageBuffer trim;
        const std::span<std::byte> bytes = image_buffer(static_cast<std::size_t>(loc.size));
        detail::wds::pread_exact(fd.get(), bytes, loc.offset, label, what);
        name.clear();
        label.append_prefix(name);
        name += what;
        decode_video(bytes, impl.options.video, out.seed(),
                     {out.as<std::uint8_t>(f), out.nbytes(f)}, name);
        break;
      }
      case Kind::audio: {
        check_audio_member(loc, label, what);
        name.clear();
        label.append_prefix(name);
        name += what;
        decode_audio_at(fd.get(), static_cast<std::int64_t>(loc.offset),
                        static_cast<std::int64_t>(loc.size), impl.options.audio, out.seed(),
                        {out.as<float>(f), out.nbytes(f) / sizeof(float)}, name);
        break;
      }
      case Kind::image: {
        const ImageOptions& o = impl.options.image;
        // As ImageFolder: an encoded image larger than 8 bytes a pixel plus 64 MiB is refused.
        const auto most = detail::checked_add<std::uint64_t>(
            detail::checked_mul<std::uint64_t>(o.max_pixels, 8, "ImageOptions::max_pixels"),
            std::uint64_t{64} << 20, "ImageOptions::max_pixels");
        if (loc.size > most) {
          throw DataError(label.at(loc.offset) + what + ": an image of " +
                          std::to_string(loc.size) + " bytes, more than the " +
                          std::to_string(most) + " an image of ImageOptions::max_pixels takes");
        }
        const TrimImageBuffer trim;
        const std::span<std::byte> bytes = image_buffer(static_cast<std::size_t>(loc.size));
        detail::wds::pread_exact(fd.get(), bytes, loc.offset, label, what);
        name.clear();
        label.append_prefix(name);
        name += what;
        decode_image(bytes, o, out.seed(), {out.as<std::uint8_t>(f), out.nbytes(f)}, name);
        break;
      }
    }
  }
}

std::int64_t WebDataset::length(std::size_t index, std::size_t field) const {
  const Impl& impl = *impl_;
  checked_index(index, impl.keys.size());
  if (field >= impl.fields.size() || !impl.fields[field].is_ragged()) {
    throw ConfigError(std::string(kWebDatasetWho) + ": field " + std::to_string(field) +
                      " is not ragged");
  }
  if (impl.kinds[field] != Kind::audio) return impl.loc(index, field).rows;
  std::atomic<std::int64_t>& kept = impl.audio_rows[index * impl.fields.size() + field];
  std::int64_t rows = kept.load(std::memory_order_relaxed);
  if (rows >= 0) return rows;
  const detail::wds::Shard& shard = impl.shards[impl.shard_of(index)];
  const Loc& loc = impl.loc(index, field);
  const std::string what = "member '" + impl.keys[index] + "." + impl.fields[field].name + "'";
  if (loc.offset == detail::wds::kMissing) {
    throw DataError(shard.label().prefix() + "sample '" + impl.keys[index] + "' has no '" +
                    impl.fields[field].name + "' member (a field of the first sample)");
  }
  if (shard.fetch != detail::wds::kNotFetched) {
    throw ConfigError(std::string(kWebDatasetWho) + ": " + shard.name +
                      ": whole sound files (audio.clip_seconds 0) of a shard fetched while "
                      "reading: their lengths are in their headers, not in the index; give a "
                      "clip_seconds");
  }
  const ShardFd fd(shard, nullptr);
  rows = detail::wds::audio_member_rows(fd.get(), loc, impl.options.audio, shard.label(), what);
  kept.store(rows, std::memory_order_relaxed);
  return rows;
}

std::int64_t WebDataset::max_length(std::size_t field) const {
  const Impl& impl = *impl_;
  if (field >= impl.fields.size() || !impl.fields[field].is_ragged()) {
    throw ConfigError(std::string(kWebDatasetWho) + ": field " + std::to_string(field) +
                      " is not ragged");
  }
  return impl.longest[field];
}

void WebDataset::prefetch(std::size_t index) const noexcept {
  const Impl& impl = *impl_;
  if (index >= impl.keys.size()) return;
  const detail::wds::Shard& shard = impl.shards[impl.shard_of(index)];
  if (!shard.fd) return;
  std::uint64_t lo = ~std::uint64_t{0};
  std::uint64_t hi = 0;
  for (std::size_t f = 0; f < impl.fields.size(); ++f) {
    const Loc& loc = impl.loc(index, f);
    if (loc.offset == detail::wds::kMissing) continue;
    lo = std::min(lo, loc.member);
    hi = std::max(hi, loc.offset + loc.size);
  }
  if (lo < hi) {
    ::posix_fadvise(shard.fd.get(), static_cast<off_t>(lo), static_cast<off_t>(hi - lo),
                    POSIX_FADV_WILLNEED);
  }
}

const std::string& WebDataset::key(std::size_t i) const {
  return impl_->keys[checked_index(i, impl_->keys.size())];
}

std::size_t WebDataset::shard_of(std::size_t i) const {
  return impl_->shard_of(checked_index(i, impl_->keys.size()));
}

}  // namespace ferry
