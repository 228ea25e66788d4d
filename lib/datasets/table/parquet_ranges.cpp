// A remote Parquet file's column chunks, fetched by ranges: for a row group, only the chunks of
// the columns read, those that lie close together in one ranged GET; and the chunks open()
// fetched, kept for the first decode of their row group.

#include <algorithm>
#include <string>

#include "datasets/table/parquet_table.hpp"

namespace ferry::detail {

std::int64_t chunk_start(const parquet::ColumnChunk& ch) noexcept {
  return ch.dictionary_page_offset && *ch.dictionary_page_offset > 0 &&
                 *ch.dictionary_page_offset < ch.data_page_offset
             ? *ch.dictionary_page_offset
             : ch.data_page_offset;
}

ParquetTable::FetchedChunks ParquetTable::fetch_chunks(std::size_t g) const {
  const TableGroup& tg = groups[g];
  const ParquetFile& f = files[tg.file];
  const parquet::RowGroup& rg = f.groups[tg.group];
  FetchedChunks out;
  out.chunks.resize(columns.size());
  // The chunks in the file's order (open checked that each lies within the file's data).
  std::vector<std::size_t> order;  // the chunks not kept from open()
  for (std::size_t c = 0; c < columns.size(); ++c) {
    if (!is_kept(g, c)) order.push_back(c);
  }
  const auto start = [&](std::size_t c) {
    return static_cast<std::uint64_t>(chunk_start(rg.columns[f.leaves[c].leaf]));
  };
  const auto end = [&](std::size_t c) {
    return start(c) +
           static_cast<std::uint64_t>(rg.columns[f.leaves[c].leaf].total_compressed_size);
  };
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return start(a) < start(b); });
  for (std::size_t i = 0; i < order.size();) {
    // One range: the chunks from order[i] on while the next starts within kRangeGap of the
    // range's end (a column read twice, or chunks that overlap, share it).
    const std::uint64_t first = start(order[i]);
    std::uint64_t last = end(order[i]);
    std::size_t j = i + 1;
    while (j < order.size() && start(order[j]) <= last + kRangeGap) {
      last = std::max(last, end(order[j]));
      ++j;
    }
    std::vector<std::byte>& buffer = out.buffers.emplace_back(f.remote->read(first, last - first));
    for (std::size_t k = i; k < j; ++k) {
      out.chunks[order[k]] = std::span<const std::byte>(buffer).subspan(
          static_cast<std::size_t>(start(order[k]) - first),
          static_cast<std::size_t>(end(order[k]) - start(order[k])));
    }
    i = j;
  }
  return out;
}

std::vector<std::byte> ParquetTable::fetch_chunk(std::size_t g, std::size_t column) const {
  const TableGroup& tg = groups[g];
  const ParquetFile& f = files[tg.file];
  const parquet::ColumnChunk& ch = f.groups[tg.group].columns[f.leaves[column].leaf];
  return f.remote->read(static_cast<std::uint64_t>(chunk_start(ch)),
                        static_cast<std::uint64_t>(ch.total_compressed_size));
}

void ParquetTable::keep_chunk(std::size_t g, std::size_t column, std::vector<std::byte> bytes) {
  if (bytes.size() > kKeptBudget - kept_bytes) return;
  kept_bytes += bytes.size();
  const std::lock_guard lock(kept_mutex);
  kept[{g, column}] = std::move(bytes);
}

bool ParquetTable::is_kept(std::size_t g, std::size_t column) const {
  const std::lock_guard lock(kept_mutex);
  return kept.find({g, column}) != kept.end();
}

std::vector<std::byte> ParquetTable::take_kept(std::size_t g, std::size_t column) const {
  const std::lock_guard lock(kept_mutex);
  const auto it = kept.find({g, column});
  if (it == kept.end()) return {};
  std::vector<std::byte> out = std::move(it->second);
  kept.erase(it);
  return out;
}

}  // namespace ferry::detail
