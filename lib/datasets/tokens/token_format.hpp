#pragma once

// The token file formats TokenDataset reads, told apart by their first bytes: an llm.c shard
// (256 int32 of header: magic, version, token count), a NumPy .npy file (1-D, its header dict
// parsed by npy_header.*), or raw tokens of TokenOptions::raw_dtype. Works from a file's head
// and size alone, so that a URL's format is known before the file is fetched.

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>

#include "datasets/common/file_io.hpp"
#include "ferry/dtype.hpp"

namespace ferry::detail::tokens {

// A little-endian integer of type T at p (any alignment).
template <class T>
T load_le(const std::byte* p) noexcept {
  T v{};
  std::memcpy(&v, p, sizeof v);
  if constexpr (std::endian::native == std::endian::big && sizeof(T) > 1) {
    using U = std::make_unsigned_t<T>;
    auto u = static_cast<U>(v);
    U r = 0;
    for (std::size_t i = 0; i < sizeof(T); ++i) {
      r = static_cast<U>((r << 8) | (u & 0xffu));
      u = static_cast<U>(u >> 8);
    }
    v = static_cast<T>(r);
  }
  return v;
}

/// Where the tokens of a file are, and what they are.
struct TokenLayout {
  std::size_t data_offset = 0;  ///< the first token's byte in the file
  std::uint64_t tokens = 0;
  DType dtype = DType::u16;
  const char* format = "";  ///< "llm.c shard", ".npy file", "raw file", for messages
};

/// The layout of a file of `size` bytes whose first bytes are `head` (all of them up to a
/// header's end): a .npy file when its name ends in .npy or it starts as one, an llm.c shard when
/// it starts with one's magic, else raw tokens of `raw_dtype`. Checks the header against the
/// size. \throws DataError naming the file (`label`) and the byte where the header is wrong.
TokenLayout parse_token_file(bool npy_name, std::span<const std::byte> head, std::uint64_t size,
                             DType raw_dtype, const FileLabel& label);

/// Where the header of a .npy file whose first bytes are `head` ends, or 0 when they do not
/// tell (not a .npy file, or too few bytes).
std::uint64_t npy_header_end(std::span<const std::byte> head) noexcept;

}  // namespace ferry::detail::tokens
