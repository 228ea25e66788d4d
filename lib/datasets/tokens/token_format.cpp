#include "datasets/tokens/token_format.hpp"

#include <string_view>
#include <vector>

#include "core/checked.hpp"
#include "datasets/common/npy_header.hpp"
#include "ferry/error.hpp"

namespace ferry::detail::tokens {
namespace {

// llm.c's shards (dev/data/data_common.py): 256 int32, then the tokens.
constexpr std::size_t kLlmcHeaderBytes = std::size_t{256} * 4;
constexpr std::int32_t kLlmcMagicU16 = 20240520;  // GPT-2 tokens, version 1
constexpr std::int32_t kLlmcMagicU32 = 20240801;  // Llama 3 tokens, version 7

constexpr std::string_view kNpyMagic = "\x93NUMPY";

// One file's parse: its head and size, and the layout found.
struct Parser {
  const FileLabel& label;
  std::span<const std::byte> head_;
  std::uint64_t size_ = 0;
  struct Out : TokenLayout {
    void set(std::size_t offset, std::uint64_t count, DType t, const char* what) {
      data_offset = offset;
      tokens = count;
      dtype = t;
      format = what;
    }
  } out;

  void open_llmc(std::int32_t magic) {
    const std::span<const std::byte> bytes = head_;
    if (size_ < kLlmcHeaderBytes || bytes.size() < kLlmcHeaderBytes) {
      throw ferry::DataError(label.prefix() + "an llm.c shard (magic " + std::to_string(magic) +
                             ") cut short: " + std::to_string(size_) +
                             " bytes, less than its header of 256 int32 (1024 bytes)");
    }
    const auto version = load_le<std::int32_t>(bytes.data() + 4);
    const auto count = load_le<std::int32_t>(bytes.data() + 8);
    const bool u16 = magic == kLlmcMagicU16;
    // llm.c writes version 1 for u16 tokens and 7 for u32; 1 is taken for either.
    if (version != 1 && (u16 || version != 7)) {
      throw ferry::DataError(label.at(4) + "llm.c shard of version " + std::to_string(version) +
                             " for magic " + std::to_string(magic) + "; expected " +
                             (u16 ? "1" : "7 (or 1)"));
    }
    if (count < 0) {
      throw ferry::DataError(label.at(8) + "llm.c shard with a negative token count, " +
                             std::to_string(count));
    }
    const DType t = u16 ? DType::u16 : DType::u32;
    const std::string what = label.at(8) + "the llm.c header's token count";
    const auto data_bytes = checked_mul<std::uint64_t, DataError>(static_cast<std::uint64_t>(count),
                                                                  dtype_size(t), what);
    const std::uint64_t after = size_ - kLlmcHeaderBytes;
    if (data_bytes != after) {
      throw ferry::DataError(label.at(8) + "the llm.c header says " + std::to_string(count) + " " +
                             std::string(dtype_name(t)) + " tokens (" + std::to_string(data_bytes) +
                             " bytes after the 1024-byte header), the file has " +
                             std::to_string(after) +
                             (data_bytes > after ? " (cut short)" : " (bytes beyond the tokens)"));
    }
    out.set(kLlmcHeaderBytes, static_cast<std::uint64_t>(count), t, "llm.c shard");
  }

  void open_npy() {
    const std::span<const std::byte> bytes = head_;
    if (bytes.size() < 10 || std::memcmp(bytes.data(), kNpyMagic.data(), kNpyMagic.size()) != 0) {
      throw ferry::DataError(
          label.at(0) + "not a NumPy .npy file: it does not start with \\x93NUMPY" +
          (bytes.size() < 10 ? " and a version (" + std::to_string(bytes.size()) + " bytes)" : ""));
    }
    const auto major = static_cast<unsigned>(bytes[6]);
    const auto minor = static_cast<unsigned>(bytes[7]);
    std::size_t header_at = 0;
    std::uint64_t header_len = 0;
    if (major == 1) {
      header_at = 10;
      header_len = load_le<std::uint16_t>(bytes.data() + 8);
    } else if (major == 2 || major == 3) {
      if (bytes.size() < 12) {
        throw ferry::DataError(label.at(8) + ".npy version " + std::to_string(major) +
                               ".0 header length cut short");
      }
      header_at = 12;
      header_len = load_le<std::uint32_t>(bytes.data() + 8);
    } else {
      throw ferry::DataError(label.at(6) + "unsupported .npy format version " +
                             std::to_string(major) + "." + std::to_string(minor) +
                             " (1.0, 2.0 and 3.0 are read)");
    }
    const std::uint64_t header_end = header_at + header_len;  // at most 12 + 2^32
    if (header_end > size_) {
      throw ferry::DataError(label.at(8) + ".npy header of " + std::to_string(header_len) +
                             " bytes runs past the end of the file (" + std::to_string(size_) +
                             " bytes)");
    }
    if (header_end > bytes.size()) {  // open() reads a URL's head up to the header's end
      throw ferry::DataError(label.at(8) + ".npy header of " + std::to_string(header_len) +
                             " bytes not read whole (" + std::to_string(bytes.size()) +
                             " bytes read)");
    }
    const std::string_view text(reinterpret_cast<const char*>(bytes.data()) + header_at,
                                static_cast<std::size_t>(header_len));
    const NpyHeader h = parse_npy_header(text, header_at, label);
    const DType t = npy_dtype(h.descr, label, header_at);
    if (h.shape.size() != 1) {
      throw ferry::DataError(label.at(header_at) + ".npy array of shape (" + shape_text(h.shape) +
                             "), " + std::to_string(h.shape.size()) +
                             "-D; token files are 1-D, shape (n,)");
    }
    // A 1-D array is laid out alike in C and Fortran order, so fortran_order does not matter.
    const std::uint64_t n = h.shape[0];
    const std::string what = label.at(header_at) + ".npy shape (" + std::to_string(n) + ",)";
    const auto data_bytes = checked_mul<std::uint64_t, DataError>(n, dtype_size(t), what);
    const std::uint64_t after = size_ - header_end;
    if (data_bytes != after) {
      throw ferry::DataError(what + " of " + std::string(dtype_name(t)) + " is " +
                             std::to_string(data_bytes) + " bytes of data, the file has " +
                             std::to_string(after) + " after its header" +
                             (data_bytes > after ? " (cut short)" : ""));
    }
    out.set(static_cast<std::size_t>(header_end), n, t, ".npy file");
  }

  void open_raw(DType t) {
    const std::uint64_t size = size_;
    if (size % dtype_size(t) != 0) {
      throw ferry::DataError(label.prefix() + "a raw token file (no llm.c or .npy header) of " +
                             std::to_string(size) + " bytes is not a whole number of " +
                             std::string(dtype_name(t)) + " tokens of " +
                             std::to_string(dtype_size(t)) + " bytes (TokenOptions::raw_dtype)");
    }
    out.set(0, size / dtype_size(t), t, "raw file");
  }

  static std::string shape_text(const std::vector<std::uint64_t>& shape) {
    std::string s;
    for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return shape.size() == 1 ? s + "," : s;
  }
};

}  // namespace

TokenLayout parse_token_file(bool npy_name, std::span<const std::byte> head, std::uint64_t size,
                             DType raw_dtype, const FileLabel& label) {
  Parser p{label, head, size, {}};
  const bool npy_magic = head.size() >= kNpyMagic.size() &&
                         std::memcmp(head.data(), kNpyMagic.data(), kNpyMagic.size()) == 0;
  std::int32_t magic = 0;
  if (head.size() >= 4) magic = load_le<std::int32_t>(head.data());
  if (npy_name || npy_magic) {
    p.open_npy();
  } else if (magic == kLlmcMagicU16 || magic == kLlmcMagicU32) {
    p.open_llmc(magic);
  } else {
    p.open_raw(raw_dtype);
  }
  return p.out;
}

// Where the header of a .npy file whose first bytes are `head` ends, or 0 when they do not
// tell (not a .npy file, or too few bytes).
std::uint64_t npy_header_end(std::span<const std::byte> head) noexcept {
  if (head.size() < 12 || std::memcmp(head.data(), kNpyMagic.data(), kNpyMagic.size()) != 0) {
    return 0;
  }
  const auto major = static_cast<unsigned>(head[6]);
  if (major == 1) return 10 + std::uint64_t{load_le<std::uint16_t>(head.data() + 8)};
  if (major == 2 || major == 3) return 12 + std::uint64_t{load_le<std::uint32_t>(head.data() + 8)};
  return 0;
}

}  // namespace ferry::detail::tokens
