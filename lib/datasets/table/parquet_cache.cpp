#include "datasets/table/parquet_cache.hpp"

#include "datasets/table/parquet_table.hpp"

namespace ferry::detail {

std::size_t decoded_bytes(const DecodedGroup& d) noexcept {
  std::size_t n = 0;
  for (const parquet::RawColumn& c : d.columns) {
    n += c.valid.size() + c.fixed.size() + c.offsets.size() * sizeof(std::uint64_t) +
         c.bytes.size() + c.lengths.size() * sizeof(std::uint32_t) + c.null_inside.size() +
         c.wrong.size() * sizeof(parquet::RawColumn::WrongLength);
  }
  return n;
}

}  // namespace ferry::detail
