#pragma once

// The header of a NumPy .npy file (TokenDataset reads 1-D token arrays): its Python dict literal,
// read strictly, and the token dtype its descr names.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "datasets/common/file_io.hpp"
#include "ferry/dtype.hpp"

namespace ferry::detail {

// The three keys of a .npy header dict, as NumPy writes it:
//   {'descr': '<u2', 'fortran_order': False, 'shape': (1000,), }
struct NpyHeader {
  std::string descr;
  bool fortran_order = false;
  std::vector<std::uint64_t> shape;
};

/// Parses the header dict literal `text`, which starts at byte `offset` of the file: string keys
/// whose values are a string, True/False or a tuple of non-negative integers.
/// \throws DataError naming the file and the byte.
NpyHeader parse_npy_header(std::string_view text, std::size_t offset, const FileLabel& label);

/// The token type of a .npy descr ('<u2', ...).
/// \throws DataError for one that is not a little-endian integer TokenDataset reads.
DType npy_dtype(const std::string& descr, const FileLabel& label, std::size_t at);

}  // namespace ferry::detail
