// WebDataset's "npy" members: the header of each is read at open (one small read), so that the
// field's dtype and shape are known and each sample's rows are, for a ragged first dimension.

#include <array>
#include <cstring>
#include <string>
#include <string_view>

#include "core/checked.hpp"
#include "datasets/common/npy_header.hpp"
#include "datasets/webdataset/webdataset_internal.hpp"
#include "ferry/error.hpp"

namespace ferry::detail::wds {
namespace {

constexpr std::string_view kNpyMagic = "\x93NUMPY";
constexpr std::uint64_t kMaxNpyHeader = std::uint64_t{1} << 16;

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ",";
  s += ")";
  return s;
}

DType npy_descr_dtype(const std::string& descr, const FileLabel& label, std::uint64_t at,
                      const std::string& what) {
  struct Kind {
    std::string_view text;
    DType dtype;
  };
  static constexpr std::array<Kind, 8> kKinds = {{{"u1", DType::u8},
                                                  {"u2", DType::u16},
                                                  {"u4", DType::u32},
                                                  {"i4", DType::i32},
                                                  {"i8", DType::i64},
                                                  {"f2", DType::f16},
                                                  {"f4", DType::f32},
                                                  {"f8", DType::f64}}};
  if (descr.size() == 3) {
    const char order = descr[0];
    for (const Kind& k : kKinds) {
      if (k.text != std::string_view(descr).substr(1)) continue;
      if (order == '<' || (k.dtype == DType::u8 && (order == '|' || order == '>'))) return k.dtype;
    }
  }
  throw DataError(label.at(at) + what + ": .npy dtype '" + descr +
                  "' is not one ferry reads (little-endian u1, u2, u4, i4, i8, f2, f4 or f8)");
}

}  // namespace

NpyArray read_npy_header(int fd, std::uint64_t offset, std::uint64_t size, const FileLabel& label,
                         const std::string& what) {
  std::array<std::byte, 12> head{};
  const auto bad = [&](std::uint64_t byte, const std::string& why) {
    return DataError(label.at(offset + byte) + what + ": " + why);
  };
  if (size < 10) throw bad(0, "not a .npy file (" + std::to_string(size) + " bytes)");
  pread_exact(fd, {head.data(), std::min<std::size_t>(12, size)}, offset, label, what);
  if (std::memcmp(head.data(), kNpyMagic.data(), kNpyMagic.size()) != 0) {
    throw bad(0, "not a .npy file: it does not start with \\x93NUMPY");
  }
  const auto major = static_cast<unsigned>(head[6]);
  std::uint64_t header_at = 10;
  std::uint64_t len = static_cast<unsigned>(head[8]) | (static_cast<unsigned>(head[9]) << 8);
  if (major == 2 || major == 3) {
    if (size < 12) throw bad(8, ".npy header length cut short");
    header_at = 12;
    len |= (std::uint64_t{static_cast<unsigned>(head[10])} << 16) |
           (std::uint64_t{static_cast<unsigned>(head[11])} << 24);
  } else if (major != 1) {
    throw bad(6, "unsupported .npy format version " + std::to_string(major));
  }
  if (len > kMaxNpyHeader || header_at + len > size) {
    throw bad(8, ".npy header of " + std::to_string(len) + " bytes runs past the member (" +
                     std::to_string(size) + " bytes)");
  }
  std::string text(static_cast<std::size_t>(len), '\0');
  pread_exact(fd, {reinterpret_cast<std::byte*>(text.data()), text.size()}, offset + header_at,
              label, what);
  const std::string name = std::string(label.name) + ": " + what;
  const FileLabel member{label.who, name};
  const NpyHeader h = parse_npy_header(text, static_cast<std::size_t>(offset + header_at), member);
  NpyArray a;
  a.dtype = npy_descr_dtype(h.descr, label, offset + header_at, what);
  if (h.fortran_order && h.shape.size() > 1) {
    throw bad(header_at, ".npy array in Fortran order; save it in C order");
  }
  for (const std::uint64_t d : h.shape) {
    if (d > static_cast<std::uint64_t>(INT64_MAX)) throw bad(header_at, ".npy dimension too large");
    a.shape.push_back(static_cast<std::int64_t>(d));
  }
  const std::string where = label.at(offset + header_at) + what + ": .npy shape";
  const auto numel = checked_numel<DataError>(a.shape, where);
  const auto bytes = checked_mul<std::uint64_t, DataError>(numel, dtype_size(a.dtype), where);
  a.data = offset + header_at + len;
  if (bytes != size - header_at - len) {
    throw bad(header_at, ".npy array " + shape_text(a.shape) + " of " +
                             std::string(dtype_name(a.dtype)) + " is " + std::to_string(bytes) +
                             " bytes, the member has " + std::to_string(size - header_at - len) +
                             " after its header");
  }
  return a;
}

void npy_field(Loc& loc, NpyFirst& first, const Shard& shard, const std::string& what) {
  const FileLabel label = shard.label();
  const NpyArray a = read_npy_header(shard.fd.get(), loc.offset, loc.size, label, what);
  loc.size -= a.data - loc.offset;
  loc.offset = a.data;
  loc.rows = a.shape.empty() ? 1 : a.shape[0];
  if (!first.set) {
    first = {true, a.dtype, a.shape, what, false};
    return;
  }
  const bool same_rest = a.shape.size() == first.shape.size() && !a.shape.empty() &&
                         std::equal(a.shape.begin() + 1, a.shape.end(), first.shape.begin() + 1);
  if (a.dtype != first.dtype || (a.shape != first.shape && !same_rest)) {
    throw DataError(label.at(loc.member) + what + ": .npy array " + shape_text(a.shape) + " of " +
                    std::string(dtype_name(a.dtype)) + ", but the first sample's (" + first.what +
                    ") is " + shape_text(first.shape) + " of " +
                    std::string(dtype_name(first.dtype)) + " (only the first dimension may vary)");
  }
  if (a.shape[0] != first.shape[0]) first.varies = true;
}

void finish_npy_fields(WebDataset::Impl& impl, const std::vector<NpyFirst>& first) {
  for (std::size_t f = 0; f < impl.fields.size(); ++f) {
    if (impl.kinds[f] != Kind::npy) continue;
    FieldSpec& spec = impl.fields[f];
    spec.dtype = first[f].dtype;
    spec.shape = first[f].shape;
    if (first[f].varies) spec.shape[0] = ragged;
  }
}

}  // namespace ferry::detail::wds
