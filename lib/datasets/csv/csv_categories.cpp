// CsvDataset's parser: the categorical columns. Each piece of the rows numbers the texts it
// meets in a dictionary of its own (views of the bytes, no copies) and keeps a local id per row;
// then, per column, the pieces' dictionaries are merged into one, its texts sorted (or taken
// from the given vocabulary), and every local id mapped to its code in a second pass. The codes
// are the sorted ranks of the texts, so they do not depend on how the rows were cut.

#include <oneapi/tbb/parallel_sort.h>

#include <algorithm>
#include <bit>
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

bool Dictionary::long_matches(const Slot& slot, const TextKey& key) const noexcept {
  return std::memcmp(entries_[slot.id].text.data() + 16, key.text.data() + 16,
                     key.text.size() - 16) == 0;
}

std::uint32_t Dictionary::find(const TextKey& key) const noexcept {
  if (slots_.empty()) return kAbsent;
  const std::size_t mask = slots_.size() - 1;
  for (std::size_t i = key.hash & mask;; i = (i + 1) & mask) {
    const Slot& slot = slots_[i];
    if (slot.id == kAbsent) return kAbsent;
    if (matches(slot, key)) return slot.id;
  }
}

std::uint32_t Dictionary::add(const TextKey& key, std::size_t offset) {
  if ((entries_.size() + 1) * 4 > slots_.size() * 3) grow();
  const std::size_t mask = slots_.size() - 1;
  std::size_t i = key.hash & mask;
  while (slots_[i].id != kAbsent) i = (i + 1) & mask;
  const auto id = static_cast<std::uint32_t>(entries_.size());
  slots_[i] = {key.hash, id, static_cast<std::uint32_t>(key.text.size()), key.w0, key.w1};
  entries_.push_back({key.text, offset});
  return id;
}

void Dictionary::grow() {
  std::vector<Slot> old = std::move(slots_);
  const std::size_t size = old.empty() ? 64 : old.size() * 2;
  slots_.clear();
  slots_.reserve(size);
  advise_huge_pages(slots_.data(), size * sizeof(Slot));  // a large table: fewer TLB misses
  slots_.assign(size, Slot{0, kAbsent, 0, 0, 0});
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
  // 8 bytes at a time while they hold none of the delimiter, '\n', '\r' and '"' (a byte of
  // w ^ c is zero where w has c; (x - 0x01..) & ~x & 0x80.. is nonzero when x has a zero byte),
  // then byte by byte.
  if constexpr (std::endian::native == std::endian::little) {
    constexpr std::uint64_t kOnes = 0x0101010101010101ULL;
    constexpr std::uint64_t kHigh = 0x8080808080808080ULL;
    const std::uint64_t dd = kOnes * static_cast<unsigned char>(d);
    const auto has_zero = [](std::uint64_t x) { return (x - kOnes) & ~x & kHigh; };
    while (end - q >= 8) {
      std::uint64_t w = 0;
      std::memcpy(&w, q, 8);
      if ((has_zero(w ^ dd) | has_zero(w ^ (kOnes * '\n')) | has_zero(w ^ (kOnes * '\r')) |
           has_zero(w ^ (kOnes * '"'))) != 0) {
        break;
      }
      q += 8;
    }
  }
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
  Chunk::Pending& wait = ch.pending[((ch.rows - 1) & 1) * l_.categorical + k];
  wait.key = text_key({p, n}, end);
  wait.offset = s_.offset(p);
  ch.dictionaries[k].prefetch(wait.key);
  out = Chunk::kPending;  // looked up at the next row's end
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
  if (f.doubled) {
    const std::string& text = ch.unquoted.emplace_back(unquote(f));
    out = static_cast<std::int32_t>(
        ch.dictionaries[k].insert(text_key(text, text.data() + text.size()), s_.offset(p)));
  } else {
    out = static_cast<std::int32_t>(
        ch.dictionaries[k].insert(text_key(f.view(), s_.end()), s_.offset(p)));
  }
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
        (void)all.insert(text_key(text, text.data() + text.size()), 0);
      }
    }
    const auto reserved = static_cast<std::uint32_t>(all.size());
    std::size_t first_unknown = kNone;
    std::size_t from = 0;
    if (!has_vocabulary) {
      // The first piece's dictionary is the start of the merged one, ids unchanged.
      all = chunks[0].dictionaries[k];
      ids[0].resize(all.size());
      std::iota(ids[0].begin(), ids[0].end(), std::uint32_t{0});
      from = 1;
    }
    for (std::size_t i = from; i < n; ++i) {
      const std::vector<Dictionary::Entry>& entries = chunks[i].dictionaries[k].entries();
      ids[i].resize(entries.size());
      for (std::size_t e = 0; e < entries.size(); ++e) {
        const Dictionary::Entry& entry = entries[e];
        const TextKey key = text_key(entry.text, entry.text.data() + entry.text.size());
        if (!has_vocabulary) {
          ids[i][e] = all.insert(key, entry.offset);
          continue;
        }
        const std::uint32_t id = all.find(key);
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
  for (CsvCategorical& c : t.categorical) resize_large(c.codes, t.rows);
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
