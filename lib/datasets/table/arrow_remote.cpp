// ArrowDataset over URLs, read by ranges (remote::RangeReader). At open: the file's last 64 KiB
// (its size and ETag learnt), then, in the file format, the footer and each record batch's
// metadata (the blocks' metadata ranges, close ones in one GET); in the stream format, the
// messages from the start, each message's head and metadata in one GET of at least 4 KiB (more
// while the messages are small: up to 256 KiB, several messages a GET).
// Dictionary bodies are fetched only for the dictionaries of the columns read. A record batch
// read fetches only the buffers of the columns read, close ones (kRangeGap) in one GET; the scan
// of ragged and categorical columns at open, only the buffers it reads (arrow_scan.cpp).

#include <algorithm>
#include <cstring>
#include <string>

#include "datasets/table/arrow_table.hpp"
#include "datasets/table/parquet_table.hpp"
#include "ferry/error.hpp"

namespace ferry::detail {
namespace {

using arrow::FormatError;

constexpr std::uint64_t kArrowTail = std::uint64_t{64} << 10;  // what open reads first
constexpr std::uint64_t kHead = std::uint64_t{4} << 10;        // a stream message's first read
constexpr std::uint64_t kMaxHead = std::uint64_t{256} << 10;   // ... grown while messages fit
constexpr std::int64_t kMaxMetadata = std::int64_t{1} << 30;   // a message's flatbuffer

/// A URL's bytes through the last range read and the file's tail: a read of bytes that neither
/// holds fetches them (at least `at_least` from their first byte, within the file).
class Window {
 public:
  Window(remote::RangeReader& r, std::vector<std::byte> tail)
      : reader_(r), tail_at_(r.size() - tail.size()), tail_(std::move(tail)) {}

  /// Bytes [at, at + length), which lie within the file.
  std::span<const std::byte> get(std::uint64_t at, std::uint64_t length, std::uint64_t at_least) {
    if (at >= tail_at_) {
      return std::span<const std::byte>(tail_).subspan(at - tail_at_, length);
    }
    if (at >= last_at_ && at + length <= last_at_ + last_.size()) {
      return std::span<const std::byte>(last_).subspan(at - last_at_, length);
    }
    const std::uint64_t n = std::min(std::max(length, at_least), reader_.size() - at);
    last_ = reader_.read(at, n);
    last_at_ = at;
    return std::span<const std::byte>(last_).subspan(0, length);
  }

 private:
  remote::RangeReader& reader_;
  std::uint64_t tail_at_;
  std::vector<std::byte> tail_;
  std::uint64_t last_at_ = 0;
  std::vector<std::byte> last_;
};

/// The message at byte `at` (its places in the file; its flatbuffer copied into `metadata`), as
/// arrow::read_frame() reads one from a mapped file. \throws FormatError.
arrow::Frame remote_frame(Window& w, std::uint64_t size, std::uint64_t at, std::uint64_t at_least,
                          std::vector<std::byte>& metadata) {
  arrow::Frame f;
  if (at >= size) {
    f.end = true;
    return f;
  }
  const std::uint64_t left = size - at;
  if (left < 4) throw FormatError("truncated: " + std::to_string(left) + " bytes left");
  const auto head = w.get(at, std::min<std::uint64_t>(8, left), at_least);
  std::uint32_t first = 0;
  std::memcpy(&first, head.data(), 4);
  std::int32_t length = 0;
  if (first == 0xFFFFFFFFU) {
    if (left < 8) throw FormatError("truncated: the message's length is cut off");
    std::memcpy(&length, head.data() + 4, 4);
    f.metadata = at + 8;
  } else {
    length = static_cast<std::int32_t>(first);
    f.metadata = at + 4;
  }
  if (length == 0) {
    f.end = true;
    return f;
  }
  if (length < 0 || length > kMaxMetadata ||
      static_cast<std::uint64_t>(length) > size - f.metadata) {
    throw FormatError("truncated: metadata of " + std::to_string(length) + " bytes where " +
                      std::to_string(size - f.metadata) + " are left");
  }
  f.metadata_length = static_cast<std::size_t>(length);
  const auto m = w.get(f.metadata, f.metadata_length, at_least);
  metadata.assign(m.begin(), m.end());
  f.message = arrow::parse_message(metadata);
  f.body = f.metadata + f.metadata_length;
  if (f.message.body_length < 0 ||
      static_cast<std::uint64_t>(f.message.body_length) > size - f.body) {
    throw FormatError("truncated: a body of " + std::to_string(f.message.body_length) +
                      " bytes where " + std::to_string(size - f.body) + " are left");
  }
  f.next = f.body + static_cast<std::size_t>(f.message.body_length);
  return f;
}

/// A dictionary message's body, when a column read uses its dictionary.
void remote_dictionary(ArrowTable& t, ArrowFile& f, Window& w, const arrow::Frame& fr) {
  if (!reads_dictionary(t, f, fr.message.dictionary_id)) return;
  add_dictionary(t, f, fr.message, w.get(fr.body, fr.next - fr.body, 0));
}

void add_remote_batch(ArrowTable& t, ArrowFile& f, const arrow::Frame& fr, std::size_t message,
                      std::size_t& file_row, std::size_t& number,
                      std::vector<std::byte>& metadata) {
  const std::size_t before = t.batches.size();
  add_batch(t, f, fr, message, file_row, number);
  if (t.batches.size() > before) t.batches.back().metadata_bytes = std::move(metadata);
}

void index_remote_file(ArrowTable& t, ArrowFile& f, Window& w, bool first) {
  const FileLabel label{"ArrowDataset", f.name};
  const std::uint64_t size = f.remote->size();
  arrow::Footer footer;
  try {
    const auto end = w.get(size - 10, 10, 0);
    std::int32_t length = 0;
    std::memcpy(&length, end.data(), 4);
    if (length <= 0 || static_cast<std::uint64_t>(length) > size - 18) {
      throw FormatError("a length of " + std::to_string(length) + " in a file of " +
                        std::to_string(size) + " bytes");
    }
    const auto n = static_cast<std::uint64_t>(length);
    const auto bytes = w.get(size - 10 - n, n, 0);
    footer = arrow::parse_footer(bytes);
  } catch (const FormatError& e) {
    throw DataError(label.prefix() + "footer: " + e.what());
  }
  f.schema = std::move(footer.schema.fields);
  f.huggingface = std::move(footer.schema.huggingface);
  map_schema(t, f, first);
  std::size_t file_row = 0;
  std::size_t number = 0;
  for (int pass = 0; pass < 2; ++pass) {
    const auto& blocks = pass == 0 ? footer.dictionaries : footer.batches;
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      const arrow::Block& bl = blocks[i];
      try {
        if (bl.offset < 8 || static_cast<std::uint64_t>(bl.offset) >= size ||
            bl.metadata_length < 8 ||
            static_cast<std::uint64_t>(bl.metadata_length) >
                size - static_cast<std::uint64_t>(bl.offset)) {
          throw FormatError("metadata of " + std::to_string(bl.metadata_length) + " bytes at " +
                            std::to_string(bl.offset) + ", outside the file");
        }
        // The metadata of this block and of the next ones that start within kRangeGap of its
        // end, in one GET.
        auto last =
            static_cast<std::uint64_t>(bl.offset) + static_cast<std::uint64_t>(bl.metadata_length);
        for (std::size_t j = i + 1; j < blocks.size(); ++j) {
          const auto o = static_cast<std::uint64_t>(blocks[j].offset);
          const auto e = o + static_cast<std::uint64_t>(std::max(blocks[j].metadata_length, 0));
          if (o < last || o > last + kRangeGap || e > size) break;
          last = e;
        }
        std::vector<std::byte> metadata;
        const arrow::Frame fr =
            remote_frame(w, size, static_cast<std::uint64_t>(bl.offset),
                         last - static_cast<std::uint64_t>(bl.offset), metadata);
        const auto want =
            pass == 0 ? arrow::HeaderType::dictionary_batch : arrow::HeaderType::record_batch;
        if (fr.end || fr.message.type != want) throw FormatError("not the message it should be");
        if (pass == 0) {
          remote_dictionary(t, f, w, fr);
        } else {
          add_remote_batch(t, f, fr, i, file_row, number, metadata);
        }
      } catch (const FormatError& e) {
        throw DataError(
            label.prefix() + "footer: " + (pass == 0 ? "dictionary " : "record batch ") +
            std::to_string(i) + " (byte " + std::to_string(bl.offset) + "): " + e.what());
      }
    }
  }
}

void index_remote_stream(ArrowTable& t, ArrowFile& f, Window& w, bool first) {
  const FileLabel label{"ArrowDataset", f.name};
  const std::uint64_t size = f.remote->size();
  std::uint64_t at = 0;
  std::size_t file_row = 0;
  std::size_t number = 0;
  // A stream has no index of its messages: each is found from the end of the one before. A read
  // from a message's start holds its head and metadata, and, where the messages are small, the
  // next ones too: after a message of at most kMaxHead / 4 bytes the next read is twice as long
  // as that message or the last read (up to kMaxHead), so that a stream of small record batches
  // takes a few GETs, not one each (their bodies come along: a round trip saved is worth more
  // than a few KiB); after a larger one, kHead again.
  std::uint64_t ahead = kHead;
  for (std::size_t m = 0;; ++m) {
    try {
      std::vector<std::byte> metadata;
      const arrow::Frame fr = remote_frame(w, size, at, ahead, metadata);
      if (fr.end) {
        if (m == 0) throw FormatError("no schema: an empty stream");
        break;
      }
      if ((m == 0) != (fr.message.type == arrow::HeaderType::schema)) {
        throw FormatError(m == 0 ? "the stream does not start with its schema" : "a second schema");
      }
      if (m == 0) {
        f.schema = fr.message.schema.fields;
        f.huggingface = fr.message.schema.huggingface;
        map_schema(t, f, first);
      } else if (fr.message.type == arrow::HeaderType::dictionary_batch) {
        remote_dictionary(t, f, w, fr);
      } else {
        add_remote_batch(t, f, fr, m, file_row, number, metadata);
      }
      const std::uint64_t length = fr.next - at;
      ahead = length <= kMaxHead / 4 ? std::min(2 * std::max(ahead, length), kMaxHead) : kHead;
      at = fr.next;
    } catch (const FormatError& e) {
      throw DataError(label.prefix() + "message " + std::to_string(m) + " (byte " +
                      std::to_string(at) + "): " + e.what());
    }
  }
}

}  // namespace

void index_remote(ArrowTable& t, ArrowFile& f, bool first) {
  Window w(*f.remote, f.remote->tail(kArrowTail));
  const std::uint64_t size = f.remote->size();
  const auto starts = [&](std::uint64_t at) {
    return size >= at + 6 && std::memcmp(w.get(at, 6, kHead).data(), "ARROW1", 6) == 0;
  };
  // A stream ends with its end-of-stream marker, never with "ARROW1".
  f.file_format = size >= 18 && starts(size - 6);
  if (f.file_format) {
    index_remote_file(t, f, w, first);
  } else if (starts(0)) {
    throw DataError(FileLabel{"ArrowDataset", f.name}.prefix() +
                    "footer: no ARROW1 at the file's end: a truncated file?");
  } else {
    index_remote_stream(t, f, w, first);
  }
}

std::vector<std::span<const std::byte>> fetch_buffers(const ArrowTable& t, std::size_t b,
                                                      const arrow::RecordBatch& batch,
                                                      ArrowBatchData& d,
                                                      const std::vector<bool>* only) {
  const ArrowBatch& ab = t.batches[b];
  const ArrowFile& f = t.files[ab.file];
  // The buffers of the columns read: stepping over the schema's fields as decode() does.
  std::vector<bool> read(f.schema.size(), false);
  for (const std::size_t top : f.tops) read[top] = true;
  std::vector<std::span<const std::byte>> raw(batch.buffers.size());
  struct Range {
    std::uint64_t first = 0;
    std::uint64_t end = 0;
    std::size_t buffer = 0;
  };
  std::vector<Range> ranges;
  std::size_t node = 0;
  std::size_t buffer = 0;
  std::size_t variadic = 0;
  for (std::size_t i = 0; i < f.schema.size(); ++i) {
    const std::size_t from = buffer;
    (void)arrow::field_arrays(f.schema[i], batch, raw, node, buffer, variadic, false);
    if (!read[i]) continue;
    for (std::size_t k = from; k < buffer; ++k) {
      if (only != nullptr && !(*only)[k]) continue;
      const arrow::Buffer& bu = batch.buffers[k];
      if (bu.offset < 0 || bu.length < 0 ||
          static_cast<std::uint64_t>(bu.offset) > ab.body_length ||
          static_cast<std::uint64_t>(bu.length) >
              ab.body_length - static_cast<std::uint64_t>(bu.offset)) {
        throw FormatError("buffer " + std::to_string(k) + ": " + std::to_string(bu.length) +
                          " bytes at " + std::to_string(bu.offset) +
                          ", outside the message body of " + std::to_string(ab.body_length) +
                          " bytes");
      }
      if (bu.length == 0) continue;
      const std::uint64_t at = ab.body + static_cast<std::uint64_t>(bu.offset);
      ranges.push_back({at, at + static_cast<std::uint64_t>(bu.length), k});
    }
  }
  std::sort(ranges.begin(), ranges.end(),
            [](const Range& x, const Range& y) { return x.first < y.first; });
  for (std::size_t i = 0; i < ranges.size();) {
    std::uint64_t last = ranges[i].end;
    std::size_t j = i + 1;
    while (j < ranges.size() && ranges[j].first <= last + kRangeGap) {
      last = std::max(last, ranges[j].end);
      ++j;
    }
    const std::uint64_t first = ranges[i].first;
    std::vector<std::byte>* fetched = nullptr;
    try {
      fetched = &d.fetched.emplace_back(f.remote->read(first, last - first));
    } catch (const DataError& e) {  // named by the record batch too
      std::string why = e.what();
      const std::string label = FileLabel{"ArrowDataset", f.name}.prefix();
      if (why.starts_with(label)) why.erase(0, label.size());
      throw DataError(t.where(b) + why);
    }
    const std::vector<std::byte>& bytes = *fetched;
    d.owned_bytes += bytes.size();
    for (std::size_t k = i; k < j; ++k) {
      raw[ranges[k].buffer] = std::span<const std::byte>(bytes).subspan(
          static_cast<std::size_t>(ranges[k].first - first),
          static_cast<std::size_t>(ranges[k].end - ranges[k].first));
    }
    i = j;
  }
  return arrow::unpack_buffers(batch, raw, d.owned, d.owned_bytes);
}

}  // namespace ferry::detail
