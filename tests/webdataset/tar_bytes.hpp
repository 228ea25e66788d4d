#pragma once

// Tar headers and members written byte by byte, for tests that need a particular (or a
// broken) header: ustar layout, checksum computed over the block as written.

#include <cstdio>
#include <cstring>
#include <string>

namespace ferry::testing {

/// One 512-byte ustar header for `name` whose size field holds `size_field` (up to 12 bytes,
/// as given: octal text, or base-256 bytes) and type `type`, with a correct checksum.
inline std::string tar_header(const std::string& name, const std::string& size_field,
                              char type = '0') {
  std::string h(512, '\0');
  std::memcpy(h.data(), name.data(), std::min<std::size_t>(name.size(), 100));
  std::memcpy(h.data() + 100, "0000644", 7);
  std::memcpy(h.data() + 108, "0000000", 7);
  std::memcpy(h.data() + 116, "0000000", 7);
  std::memcpy(h.data() + 124, size_field.data(), std::min<std::size_t>(size_field.size(), 12));
  std::memcpy(h.data() + 136, "14000000000", 11);
  h[156] = type;
  std::memcpy(h.data() + 257,
              "ustar\0"
              "00",
              8);
  std::memset(h.data() + 148, ' ', 8);
  unsigned sum = 0;
  for (const char c : h) sum += static_cast<unsigned char>(c);
  std::snprintf(h.data() + 148, 8, "%06o", sum);
  h[155] = ' ';
  return h;
}

/// A regular file member: its header, then `data` padded to 512 bytes.
inline std::string tar_member(const std::string& name, const std::string& data) {
  char size[12];
  std::snprintf(size, sizeof size, "%011o", static_cast<unsigned>(data.size()));
  std::string m = tar_header(name, std::string(size, 11)) + data;
  m.append((512 - data.size() % 512) % 512, '\0');
  return m;
}

}  // namespace ferry::testing
