// CsvDataset's parser: the categorical columns. Each piece of the rows numbers the texts it
// meets in a dictionary of its own (views of the bytes, no copies) and keeps a local id per row;
// then, per column, the pieces' dictionaries are merged into one, its texts sorted (or taken
// from the given vocabulary), and every local id mapped to its code in a second pass. The codes
// are the sorted ranks of the texts, so they do not depend on how the rows were cut.

#include <oneapi/tbb/parallel_sort.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "datasets/csv/csv_internal.hpp"
#include "ferry/error.hpp"

namespace ferry::detail::csv {
namespace {

constexpr std::uint64_t kMul1 = 0x9e3779b97f4a7c15ULL;
constexpr std::uint64_t kMul2 = 0xd6e8feb86659fd93ULL;

std::uint64_t mix(std::uint64_t h) noexcept {
  h ^= h >> 32;
  h *= kMul2;
  h ^= h >> 29;
  return h;
}

// The text's first 8 bytes (zero-padded) as a big-endian number: texts in byte order have
// these in numeric order (or equal).
std::uint64_t big_endian_head(std::string_view text) noexcept {
  std::uint64_t h = 0;
  const std::size_t n = std::min<std::size_t>(text.size(), 8);
  for (std::size_t i = 0; i < 8; ++i) {
    h = (h << 8) | (i < n ? static_cast<unsigned char>(text[i]) : 0U);
  }
  return h;
}

}  // namespace

std::uint64_t text_hash(const char* p, std::size_t n) noexcept {
  std::uint64_t h = (n + 1) * kMul1;
  for (; n >= 8; p += 8, n -= 8) {
    std::uint64_t w = 0;
    std::memcpy(&w, p, 8);
    h = mix((h ^ w) * kMul1);
  }
  if (n != 0) {
    std::uint64_t w = 0;
    std::memcpy(&w, p, n);
    h = mix((h ^ w) * kMul1);
  }
  return mix(h * kMul1);
}

bool Dictionary::matches(const Slot& slot, std::string_view text,
                         std::uint64_t hash) const noexcept {
  if (slot.hash != hash || slot.size != text.size()) return false;
  const std::size_t head = std::min(text.size(), kHead);
  if (std::memcmp(slot.head, text.data(), head) != 0) return false;
  return text.size() <= kHead || std::memcmp(entries_[slot.id].text.data() + kHead,
                                             text.data() + kHead, text.size() - kHead) == 0;
}

std::uint32_t Dictionary::find(std::string_view text, std::uint64_t hash) const noexcept {
  if (slots_.empty()) return kAbsent;
  const std::size_t mask = slots_.size() - 1;
  for (std::size_t i = hash & mask;; i = (i + 1) & mask) {
    const Slot& slot = slots_[i];
    if (slot.id == kAbsent) return kAbsent;
    if (matches(slot, text, hash)) return slot.id;
  }
}

std::uint32_t Dictionary::insert(std::string_view text, std::uint64_t hash, std::size_t offset) {
  if ((entries_.size() + 1) * 4 > slots_.size() * 3) grow();
  const std::size_t mask = slots_.size() - 1;
  std::size_t i = hash & mask;
  for (;; i = (i + 1) & mask) {
    const Slot& slot = slots_[i];
    if (slot.id == kAbsent) break;
    if (matches(slot, text, hash)) return slot.id;
  }
  Slot& slot = slots_[i];
  const auto id = static_cast<std::uint32_t>(entries_.size());
  slot.hash = hash;
  slot.id = id;
  slot.size = static_cast<std::uint32_t>(text.size());
  std::memset(slot.head, 0, kHead);
  std::memcpy(slot.head, text.data(), std::min(text.size(), kHead));
  entries_.push_back({text, hash, offset});
  return id;
}

void Dictionary::grow() {
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(old.empty() ? 16 : old.size() * 2, Slot{0, kAbsent, 0, {}});
  const std::size_t mask = slots_.size() - 1;
  for (const Slot& slot : old) {
    if (slot.id == kAbsent) continue;
    std::size_t i = slot.hash & mask;
    while (slots_[i].id != kAbsent) i = (i + 1) & mask;
    slots_[i] = slot;
  }
}

const char* RowParser::category(const char* p, std::size_t c, std::size_t k, Chunk& ch,
                                std::int32_t& out) const {
  // The common field: unquoted, without blanks around it.
  const char* q = p;
  const char* const end = s_.end();
  const char d = s_.delimiter();
  while (q != end && *q != d && *q != '\n' && *q != '\r' && *q != '"') ++q;
  if ((q != end && *q != d && *q != '\n') || (q != p && (s_.blank(*p) || s_.blank(q[-1])))) {
    return quoted_category(p, c, k, ch, out);
  }
  if (q == p) {
    if (!l_.missing_nan) return quoted_category(p, c, k, ch, out);  // its message
    out = -1;
    return q;
  }
  const std::size_t n = static_cast<std::size_t>(q - p);
  out = static_cast<std::int32_t>(ch.dictionaries[k].insert({p, n}, text_hash(p, n), s_.offset(p)));
  return q;
}

const char* RowParser::quoted_category(const char* p, std::size_t c, std::size_t k, Chunk& ch,
                                       std::int32_t& out) const {
  Field f;
  if (!s_.field(p, c, f, ch.fault)) return nullptr;
  if (f.size == 0) {
    if (l_.missing_nan) {
      out = -1;
      return f.next;
    }
    s_.flag(ch.fault, p, c,
            "an empty field, expected a category (CsvOptions::missing = Missing::nan reads it "
            "as the code -1)");
    return nullptr;
  }
  std::string_view text = f.view();
  if (f.doubled) text = ch.unquoted.emplace_back(unquote(f));
  out = static_cast<std::int32_t>(
      ch.dictionaries[k].insert(text, text_hash(text.data(), text.size()), s_.offset(p)));
  return f.next;
}

void gather_categories(const std::vector<Chunk>& chunks, const Layout& l, const Messages& m,
                       const CsvOptions& options, const std::vector<std::size_t>& columns,
                       bool parallel, CsvTable& t) {
  const std::size_t n = chunks.size();
  const std::size_t width = l.categorical;
  if (width == 0) return;
  // remap[k][i][local]: the code of chunk i's local id in column k.
  std::vector<std::vector<std::vector<std::int64_t>>> remap(width);
  std::vector<Fault> unknown(width);
  each_chunk(width, parallel, [&](std::size_t k) {
    CsvCategorical& out = t.categorical[k];
    const auto given = options.vocabulary.find(out.name);
    const bool has_vocabulary = given != options.vocabulary.end();
    Dictionary all;
    std::vector<std::vector<std::uint32_t>> ids(n);
    if (has_vocabulary) {
      for (const std::string& text : given->second) {
        (void)all.insert(text, text_hash(text.data(), text.size()), 0);
      }
    }
    const auto reserved = static_cast<std::uint32_t>(all.size());
    std::size_t first_unknown = kNone;
    for (std::size_t i = 0; i < n; ++i) {
      const std::vector<Dictionary::Entry>& entries = chunks[i].dictionaries[k].entries();
      ids[i].resize(entries.size());
      for (std::size_t e = 0; e < entries.size(); ++e) {
        const Dictionary::Entry& entry = entries[e];
        if (!has_vocabulary) {
          ids[i][e] = all.insert(entry.text, entry.hash, entry.offset);
          continue;
        }
        const std::uint32_t id = all.find(entry.text, entry.hash);
        if (id == Dictionary::kAbsent && options.unknown == Unknown::error &&
            entry.offset < first_unknown) {
          first_unknown = entry.offset;
          unknown[k].offset = entry.offset;
          unknown[k].column = columns[k];
          unknown[k].what = shown(entry.text) + " is not among the " + std::to_string(reserved) +
                            " categories of the vocabulary given for " + shown(out.name) +
                            " (CsvOptions::unknown = Unknown::reserved gives it the code " +
                            std::to_string(reserved) + ")";
        }
        ids[i][e] = id == Dictionary::kAbsent ? reserved : id;
      }
    }
    // Codes: the sorted ranks of the texts, or the vocabulary's own order.
    std::vector<std::int64_t> code(all.size() + 1);
    if (has_vocabulary) {
      std::iota(code.begin(), code.end(), std::int64_t{0});
      out.categories = given->second;
    } else {
      // Sorted by the first 8 bytes as a big-endian number (zero-padded: a prefix of a text
      // sorts before it, as it should), and by the whole texts only where those are equal: most
      // comparisons then read neither the text nor memory far away.
      const std::vector<Dictionary::Entry>& entries = all.entries();
      struct Key {
        std::uint64_t head;
        std::uint32_t id;
      };
      std::vector<Key> order(entries.size());
      for (std::uint32_t id = 0; id < order.size(); ++id) {
        order[id] = {big_endian_head(entries[id].text), id};
      }
      const auto before = [&](const Key& a, const Key& b) {
        return a.head != b.head ? a.head < b.head : entries[a.id].text < entries[b.id].text;
      };
      if (parallel) {
        tbb::parallel_sort(order.begin(), order.end(), before);
      } else {
        std::sort(order.begin(), order.end(), before);
      }
      out.categories.reserve(order.size());
      for (std::size_t r = 0; r < order.size(); ++r) {
        code[order[r].id] = static_cast<std::int64_t>(r);
        out.categories.emplace_back(entries[order[r].id].text);
      }
    }
    remap[k].resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      remap[k][i].resize(ids[i].size());
      for (std::size_t e = 0; e < ids[i].size(); ++e) remap[k][i][e] = code[ids[i][e]];
    }
  });
  // The first value outside its vocabulary in the file, whichever column it is in.
  const Fault* first = nullptr;
  for (const Fault& f : unknown) {
    if (f.set() && (first == nullptr || f.offset < first->offset)) first = &f;
  }
  if (first != nullptr) m.raise(*first);

  // The codes, piece by piece.
  std::vector<std::size_t> first_row(n);
  for (std::size_t i = 1; i < n; ++i) first_row[i] = first_row[i - 1] + chunks[i - 1].rows;
  for (CsvCategorical& c : t.categorical) c.codes.resize(t.rows);
  each_chunk(n, parallel, [&](std::size_t i) {
    const Chunk& ch = chunks[i];
    for (std::size_t k = 0; k < width; ++k) {
      const std::int32_t* ids = ch.ids.data() + k;
      const std::vector<std::int64_t>& map = remap[k][i];
      std::int64_t* const codes = t.categorical[k].codes.data() + first_row[i];
      for (std::size_t r = 0; r < ch.rows; ++r, ids += width) {
        codes[r] = *ids < 0 ? -1 : map[static_cast<std::size_t>(*ids)];
      }
    }
  });
}

}  // namespace ferry::detail::csv
