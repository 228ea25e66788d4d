// LoaderState's text on arbitrary bytes, both ways round:
// * any text parse() accepts is what str() writes for the state it returns (parse(t).str() == t),
//   and only ConfigError may come out of parse() for the others;
// * any state, from the input's first 64 bytes, reads back as itself (parse(s.str()) == s).

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "ferry/error.hpp"
#include "ferry/loader.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const ferry::LoaderState s = ferry::LoaderState::parse(text);
    if (s.str() != text) __builtin_trap();
    if (ferry::LoaderState::parse(s.str()) != s) __builtin_trap();
  } catch (const ferry::ConfigError&) {
  }

  std::uint64_t words[8] = {};
  std::memcpy(words, data, size < sizeof words ? size : sizeof words);
  ferry::LoaderState s;
  s.seed = words[0];
  s.epoch = words[1];
  s.next_batch = static_cast<std::size_t>(words[2]);
  s.samples = words[3];
  s.shuffle = (words[4] & 1U) != 0;
  s.position = words[5];
  s.plan = words[6];
  s.selection = words[7];
  const std::string written = s.str();
  const ferry::LoaderState back = ferry::LoaderState::parse(written);  // must not throw
  if (back != s || back.str() != written) __builtin_trap();
  return 0;
}
