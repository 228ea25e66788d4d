// CsvDataset's parser: the text's layout (fields, records, quotes) and its pieces.
//
// The rows are parsed in pieces ("chunks") of the bytes after the header, in parallel. A
// piece's first record starts after its first line break that lies outside quotes, and it
// parses every record that starts inside it, to the record's end (past the piece if need be).
// Whether a piece starts inside quotes follows from the parity of the quotes before it: a
// first pass counts each piece's quotes (a count of one byte value, fast), and a prefix sum
// gives every piece its state (see csv_parse.cpp for why that is exact).

#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include "datasets/csv/csv_internal.hpp"

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#endif

namespace ferry::detail::csv {
namespace {

constexpr std::size_t kMinChunk = std::size_t{64} << 10;
constexpr std::size_t kMaxChunk = std::size_t{8} << 20;

// How many quotes [p, e) holds: memchr to the first (numeric files often have none), then
// 64 bytes at a time, which the compiler vectorizes.
std::size_t count_quotes(const char* p, const char* e) {
  const void* first = p == e ? nullptr : std::memchr(p, '"', static_cast<std::size_t>(e - p));
  if (first == nullptr) return 0;
  p = static_cast<const char*>(first);
  constexpr std::ptrdiff_t kBlock = 64;
  std::size_t n = 0;
  for (; e - p >= kBlock; p += kBlock) {
    std::uint8_t block = 0;
    for (std::ptrdiff_t i = 0; i < kBlock; ++i)
      block = static_cast<std::uint8_t>(block + (p[i] == '"' ? 1 : 0));
    n += block;
  }
  for (; p != e; ++p) n += *p == '"' ? 1U : 0U;
  return n;
}

// oneTBB as packaged is not instrumented, so ThreadSanitizer cannot see it hand the chunks to
// its workers and join them; the body below marks those edges for it, on one address.
#if defined(__SANITIZE_THREAD__)
char tsan_edge = 0;
void edge_release() { __tsan_release(&tsan_edge); }
void edge_acquire() { __tsan_acquire(&tsan_edge); }
#else
void edge_release() {}
void edge_acquire() {}
#endif

// The body of the parallel_for over the chunks: f(i), with the edges marked (oneTBB copies
// the body, on this thread and on its workers).
struct ChunkBody {
  const std::function<void(std::size_t)>* f;
  explicit ChunkBody(const std::function<void(std::size_t)>* fn) : f(fn) { edge_release(); }
  ChunkBody(const ChunkBody& other) : f((edge_acquire(), other.f)) { edge_release(); }
  ChunkBody& operator=(const ChunkBody&) = delete;
  ~ChunkBody() = default;
  void operator()(std::size_t i) const {
    edge_acquire();
    (*f)(i);
    edge_release();
  }
};

}  // namespace

bool Scanner::field(const char* p, std::size_t column, Field& f, Fault& fault) const {
  while (p != end_ && blank(*p)) ++p;
  if (p != end_ && *p == '"') {
    const char* const open = p++;
    bool doubled = false;
    for (;;) {
      const void* hit =
          p == end_ ? nullptr : std::memchr(p, '"', static_cast<std::size_t>(end_ - p));
      if (hit == nullptr) {
        return flag(fault, open, column, "a quoted field starts here and never ends");
      }
      const char* const q = static_cast<const char*>(hit);
      if (q + 1 != end_ && q[1] == '"') {
        doubled = true;
        p = q + 2;
        continue;
      }
      f.begin = open + 1;
      f.size = static_cast<std::size_t>(q - f.begin);
      f.doubled = doubled;
      p = q + 1;
      break;
    }
    while (p != end_ && blank(*p)) ++p;
    if (!field_ends(p)) {
      return flag(fault, p, column,
                  "text after a closing quote (a quote inside a quoted field is written \"\")");
    }
    f.next = p;
    return true;
  }
  const char* const b = p;
  while (!field_ends(p) && *p != '"') ++p;
  if (p != end_ && *p == '"') {
    return flag(fault, p, column,
                "a quote inside an unquoted field (quote the whole field and write the quote "
                "twice)");
  }
  const char* e = p;
  while (e != b && blank(e[-1])) --e;
  f.begin = b;
  f.size = static_cast<std::size_t>(e - b);
  f.doubled = false;
  f.next = p;
  return true;
}

const char* Scanner::skip_record(const char* p, std::size_t& count, Fault& fault) const {
  count = 0;
  for (;;) {
    Field f;
    if (!field(p, count, f, fault)) return nullptr;
    ++count;
    p = f.next;
    if (p == end_ || *p != delimiter_) return next_record(p);
    ++p;
  }
}

const char* Scanner::record(const char* p, std::vector<Field>& fields, Fault& fault) const {
  fields.clear();
  for (;;) {
    Field f;
    if (!field(p, fields.size(), f, fault)) return nullptr;
    fields.push_back(f);
    p = f.next;
    if (p == end_ || *p != delimiter_) return next_record(p);
    ++p;
  }
}

const char* RowParser::first_record(const Chunk& ch) const {
  bool quoted = ch.starts_in_quote;
  if (!quoted && ch.lo[-1] == '\n') return ch.lo;
  for (const char* p = ch.lo; p < ch.hi; ++p) {
    if (*p == '"') {
      quoted = !quoted;
    } else if (*p == '\n' && !quoted) {
      return p + 1;
    }
  }
  return ch.hi;
}

void each_chunk(std::size_t n, bool parallel, const std::function<void(std::size_t)>& f) {
  if (parallel && n > 1) {
    tbb::parallel_for(std::size_t{0}, n, ChunkBody(&f));
    edge_acquire();
  } else {
    for (std::size_t i = 0; i < n; ++i) f(i);
  }
}

std::vector<Chunk> make_chunks(const char* data, const char* end, const CsvSplit& split) {
  const auto body = static_cast<std::size_t>(end - data);
  std::size_t chunk = split.chunk_bytes;
  if (chunk == 0) {
    const auto threads = static_cast<std::size_t>(
        split.parallel ? std::max(1, tbb::this_task_arena::max_concurrency()) : 1);
    // One thread: one piece, whose rows then need no copy.
    chunk = threads == 1 ? std::max<std::size_t>(body, 1)
                         : std::clamp(body / (threads * 8), kMinChunk, kMaxChunk);
  }
  const std::size_t n = std::max<std::size_t>(1, (body + chunk - 1) / chunk);
  std::vector<Chunk> chunks(n);
  std::vector<std::size_t> quotes(n);
  for (std::size_t i = 0; i < n; ++i) {
    chunks[i].lo = data + std::min(body, i * chunk);
    chunks[i].hi = data + std::min(body, (i + 1) * chunk);
  }
  each_chunk(n, split.parallel,
             [&](std::size_t i) { quotes[i] = count_quotes(chunks[i].lo, chunks[i].hi); });
  std::size_t before = 0;
  for (std::size_t i = 0; i < n; ++i) {
    chunks[i].starts_in_quote = (before & 1) != 0;
    before += quotes[i];
  }
  return chunks;
}

}  // namespace ferry::detail::csv
