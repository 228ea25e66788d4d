// CsvDataset's parser: the categorical columns. Each piece of the rows numbers the texts it
// meets in a dictionary of its own (views of the bytes, no copies) and keeps a local id per row;
// then, per column, the pieces' dictionaries are merged into one, its texts sorted (or taken
// from the given vocabulary), and every local id mapped to its code in a second pass. The codes
// are the sorted ranks of the texts, so they do not depend on how the rows were cut.

#include <algorithm>
#include <array>
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

// The text's first 8 bytes (zero-padded) as a big-endian number, from its key's first word
// (those bytes in memory order): texts in byte order have these in numeric order (or equal).
std::uint64_t big_endian_head(const Dictionary::Entry& entry) noexcept {
  if constexpr (std::endian::native == std::endian::little) {
    return __builtin_bswap64(entry.w0);
  } else {
    return entry.w0;
  }
}

// The entry's text as a string: a text of up to 16 bytes from its key's words.
std::string text_of(const Dictionary::Entry& entry) {
  if (entry.text.size() > 16) return std::string(entry.text);
  char bytes[16];
  std::memcpy(bytes, &entry.w0, 8);
  std::memcpy(bytes + 8, &entry.w1, 8);
  return std::string(bytes, entry.text.size());
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
  if ((entries_.size() + 1) * 8 > slots_.size() * 7) grow();
  const std::size_t mask = slots_.size() - 1;
  std::size_t i = key.hash & mask;
  while (slots_[i].id != kAbsent) i = (i + 1) & mask;
  const auto id = static_cast<std::uint32_t>(entries_.size());
  slots_[i] = {key.hash, id, static_cast<std::uint32_t>(key.text.size()), key.w0, key.w1};
  entries_.push_back({key.text, offset, key.hash, key.w0, key.w1});
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
  // 8 bytes at a time: the first of the delimiter, '\n', '\r' and '"' in them is the lowest
  // marked byte (a byte of w ^ c is zero where w has c; (x - 0x01..) & ~x & 0x80.. marks the
  // zero bytes of x exactly up to its first one: a borrow only reaches the bytes above), so the
  // field's end is found without a loop over its last bytes, whose count varies from field to
  // field and would be mispredicted. The last bytes of the text, byte by byte.
  bool found = false;
  if constexpr (std::endian::native == std::endian::little) {
    constexpr std::uint64_t kOnes = 0x0101010101010101ULL;
    constexpr std::uint64_t kHigh = 0x8080808080808080ULL;
    const std::uint64_t dd = kOnes * static_cast<unsigned char>(d);
    const auto zeros = [](std::uint64_t x) { return (x - kOnes) & ~x & kHigh; };
    while (end - q >= 8) {
      std::uint64_t w = 0;
      std::memcpy(&w, q, 8);
      const std::uint64_t marks = zeros(w ^ dd) | zeros(w ^ (kOnes * '\n')) |
                                  zeros(w ^ (kOnes * '\r')) | zeros(w ^ (kOnes * '"'));
      if (marks != 0) {
        q += std::countr_zero(marks) >> 3;
        found = true;
        break;
      }
      q += 8;
    }
  }
  if (!found) {
    while (q != end && *q != d && *q != '\n' && *q != '\r' && *q != '"') ++q;
  }
  if ((q != end && *q != d && *q != '\n') || (q != p && (s_.blank(*p) || s_.blank(q[-1])))) {
    return quoted_category(p, c, k, ch, out);
  }
  if (q == p) {
    if (!l_.missing_nan) return quoted_category(p, c, k, ch, out);  // its message
    out = -1;
    return q;
  }
  const std::size_t n = static_cast<std::size_t>(q - p);
  Chunk::Pending& wait = ch.pending[((ch.rows - 1) & (Chunk::kWaitRows - 1)) * l_.categorical + k];
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
  // Looked up at the next row's end, as the plain texts are: the dictionary then meets the
  // texts in the file's order, and keeps each one's first offset.
  Chunk::Pending& wait = ch.pending[((ch.rows - 1) & (Chunk::kWaitRows - 1)) * l_.categorical + k];
  if (f.doubled) {
    const std::string& text = ch.intern_unquoted(f);
    wait.key = text_key(text, text.data() + text.size());
  } else {
    wait.key = text_key(f.view(), s_.end());
  }
  wait.offset = s_.offset(p);
  out = Chunk::kPending;
  return f.next;
}

namespace {

// The merge of the pieces' dictionaries runs in parallel over this many parts of the texts, by
// their hash (its high bits: the tables' slots take the low ones).
constexpr std::size_t kParts = 64;

std::size_t part_of(std::uint64_t hash) noexcept { return (hash >> 40) % kParts; }

// The codes of distinct texts given in runs (the parts' dictionaries), their sorted ranks:
// code[base + i] for text i of a run whose texts start at `base` in the runs' order; and the
// texts sorted. The texts are sorted by their first 8 bytes as a big-endian number (zero-padded:
// a prefix of a text sorts before it, as it should) with a radix sort, a byte a pass from the
// lowest (the passes in which every text has the same byte skipped), and then by their whole
// bytes only within the stretches whose first 8 bytes are equal: no comparison reads a text
// unless it has to, and none of the passes reads memory far away. (On one thread: a radix sort
// of 100,000 texts takes a few milliseconds, less than the comparison sort of parts at once.)
void sort_runs(const std::vector<const std::vector<Dictionary::Entry>*>& runs,
               std::vector<std::int64_t>& code, std::vector<std::string>& sorted) {
  struct Key {
    std::uint64_t head;
    std::uint32_t id;
    std::uint32_t run;
  };
  std::vector<std::size_t> base(runs.size() + 1);
  for (std::size_t r = 0; r < runs.size(); ++r) base[r + 1] = base[r] + runs[r]->size();
  const std::size_t total = base.back();
  std::vector<Key> keys(total);
  std::vector<Key> other(total);
  std::array<std::array<std::uint32_t, 256>, 8> counts{};
  std::size_t at = 0;
  for (std::size_t r = 0; r < runs.size(); ++r) {
    const std::vector<Dictionary::Entry>& entries = *runs[r];
    for (std::uint32_t id = 0; id < entries.size(); ++id, ++at) {
      const std::uint64_t head = big_endian_head(entries[id]);
      keys[at] = {head, id, static_cast<std::uint32_t>(r)};
      for (std::size_t byte = 0; byte < 8; ++byte) ++counts[byte][(head >> (8 * byte)) & 0xFF];
    }
  }
  for (std::size_t byte = 0; byte < 8; ++byte) {
    std::array<std::uint32_t, 256>& count = counts[byte];
    if (std::find(count.begin(), count.end(), total) != count.end()) continue;  // one value
    std::uint32_t start = 0;
    for (std::uint32_t& c : count) start += std::exchange(c, start);
    for (const Key& k : keys) other[count[(k.head >> (8 * byte)) & 0xFF]++] = k;
    keys.swap(other);
  }
  other = {};
  const auto entry = [&](const Key& k) -> const Dictionary::Entry& { return (*runs[k.run])[k.id]; };
  const auto text = [&](const Key& k) { return entry(k).text; };
  for (std::size_t i = 0; i < total;) {
    std::size_t j = i + 1;
    while (j < total && keys[j].head == keys[i].head) ++j;
    if (j - i > 1) {
      std::sort(keys.begin() + static_cast<std::ptrdiff_t>(i),
                keys.begin() + static_cast<std::ptrdiff_t>(j),
                [&](const Key& a, const Key& b) { return text(a) < text(b); });
    }
    i = j;
  }
  code.resize(total);
  sorted.clear();
  sorted.reserve(total);
  constexpr std::size_t kAhead = 16;  // the entries are read in the texts' order: at random
  for (std::size_t rank = 0; rank < total; ++rank) {
    if (rank + kAhead < total) {
      const Key& later = keys[rank + kAhead];
      __builtin_prefetch(&entry(later));
      __builtin_prefetch(&code[base[later.run] + later.id], 1);
    }
    const Key& k = keys[rank];
    code[base[k.run] + k.id] = static_cast<std::int64_t>(rank);
    sorted.push_back(text_of(entry(k)));
  }
}

TextKey key_of(const Dictionary::Entry& entry) noexcept {
  return {entry.w0, entry.w1, entry.hash, entry.text};
}

}  // namespace

void gather_categories(const std::vector<Chunk>& chunks, const Layout& l, const Messages& m,
                       const CsvOptions& options, const std::vector<std::size_t>& columns,
                       bool parallel, CsvTable& t) {
  const std::size_t n = chunks.size();
  const std::size_t width = l.categorical;
  if (width == 0) return;
  // remap[k][i][local]: the code of chunk i's local id in column k.
  std::vector<std::vector<std::vector<std::int64_t>>> remap(width);
  std::vector<Fault> faults(width);  // per column, its first value outside the vocabulary
  // The columns at once, each in parallel too: while one column's step waits for its last
  // task, the others' tasks keep the workers busy.
  each_chunk(width, parallel, [&](std::size_t k) {
    CsvCategorical& out = t.categorical[k];
    std::vector<std::vector<std::int64_t>>& to_code = remap[k];
    to_code.resize(n);
    const auto entries_of = [&](std::size_t i) -> const std::vector<Dictionary::Entry>& {
      return chunks[i].dictionaries[k].entries();
    };
    const auto given = options.vocabulary.find(out.name);
    if (given != options.vocabulary.end()) {
      // Codes are places in the vocabulary: lookups, every piece at once.
      Dictionary all;
      for (const std::string& text : given->second) {
        (void)all.insert(text_key(text, text.data() + text.size()), 0);
      }
      const auto reserved = static_cast<std::int64_t>(all.size());
      std::vector<const Dictionary::Entry*> unknown(n, nullptr);  // per piece, its first
      each_chunk(n, parallel, [&](std::size_t i) {
        const std::vector<Dictionary::Entry>& entries = entries_of(i);
        to_code[i].resize(entries.size());
        for (std::size_t e = 0; e < entries.size(); ++e) {
          const std::uint32_t id = all.find(key_of(entries[e]));
          if (id != Dictionary::kAbsent) {
            to_code[i][e] = id;
            continue;
          }
          to_code[i][e] = reserved;
          if (unknown[i] == nullptr || entries[e].offset < unknown[i]->offset) {
            unknown[i] = &entries[e];
          }
        }
      });
      if (options.unknown == Unknown::error) {
        // The first in the file: in the first piece that has one.
        const auto at = std::find_if(unknown.begin(), unknown.end(),
                                     [](const Dictionary::Entry* e) { return e != nullptr; });
        if (at != unknown.end()) {
          Fault& f = faults[k];
          f.offset = (*at)->offset;
          f.column = columns[k];
          f.what = shown((*at)->text) + " is not among the " + std::to_string(reserved) +
                   " categories of the vocabulary given for " + shown(out.name) +
                   " (CsvOptions::unknown = Unknown::reserved gives it the code " +
                   std::to_string(reserved) + ")";
        }
      }
      out.categories = given->second;
      return;
    }
    if (n == 1) {
      // One piece: its dictionary is the column's.
      sort_runs({&entries_of(0)}, to_code[0], out.categories);
      return;
    }
    // Several pieces: the texts split into parts by hash; each part merges its texts of every
    // piece into a dictionary of its own (the parts at once), then all are sorted together.
    // Per piece, its texts' keys in the order of the parts (items), which text each is
    // (order), where each part's begin (starts), and each one's id in its part (ids): every
    // part then reads and writes its own stretch of each piece's arrays.
    struct Item {
      TextKey key;
      std::size_t offset;
    };
    std::vector<std::vector<Item>> items(n);
    std::vector<std::vector<std::uint32_t>> order(n);
    std::vector<std::array<std::uint32_t, kParts + 1>> starts(n);
    std::vector<std::vector<std::uint32_t>> ids(n);
    each_chunk(n, parallel, [&](std::size_t i) {
      const std::vector<Dictionary::Entry>& entries = entries_of(i);
      std::array<std::uint32_t, kParts + 1>& start = starts[i];
      start.fill(0);
      for (const Dictionary::Entry& e : entries) ++start[part_of(e.hash) + 1];
      for (std::size_t p = 0; p < kParts; ++p) start[p + 1] += start[p];
      std::array<std::uint32_t, kParts> fill{};
      std::copy_n(start.begin(), kParts, fill.begin());
      order[i].resize(entries.size());
      items[i].resize(entries.size());
      for (std::uint32_t e = 0; e < entries.size(); ++e) {
        const std::uint32_t at = fill[part_of(entries[e].hash)]++;
        order[i][at] = e;
        items[i][at] = {key_of(entries[e]), entries[e].offset};
      }
      ids[i].resize(entries.size());
    });
    std::vector<Dictionary> parts(kParts);
    each_chunk(kParts, parallel, [&](std::size_t p) {
      for (std::size_t i = 0; i < n; ++i) {
        for (std::uint32_t at = starts[i][p]; at < starts[i][p + 1]; ++at) {
          ids[i][at] = parts[p].insert(items[i][at].key, items[i][at].offset);
        }
      }
    });
    items.clear();
    items.shrink_to_fit();
    std::array<std::size_t, kParts + 1> base{};
    for (std::size_t p = 0; p < kParts; ++p) base[p + 1] = base[p] + parts[p].size();
    std::vector<const std::vector<Dictionary::Entry>*> runs(kParts);
    for (std::size_t p = 0; p < kParts; ++p) runs[p] = &parts[p].entries();
    std::vector<std::int64_t> code;
    sort_runs(runs, code, out.categories);
    each_chunk(n, parallel, [&](std::size_t i) {
      to_code[i].resize(order[i].size());
      for (std::size_t p = 0; p < kParts; ++p) {
        for (std::uint32_t at = starts[i][p]; at < starts[i][p + 1]; ++at) {
          to_code[i][order[i][at]] = code[base[p] + ids[i][at]];
        }
      }
    });
  });

  // The first value outside its vocabulary in the file, whichever column it is in.
  const Fault* first = nullptr;
  for (const Fault& f : faults) {
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
