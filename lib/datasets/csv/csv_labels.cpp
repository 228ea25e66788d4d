// CsvDataset's parser: the labels, as classes (integer ids, or texts sorted) or as regression
// targets, and the message for an integer label that is no class id.

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "datasets/csv/csv_internal.hpp"

namespace ferry::detail::csv {

void RowParser::flag_bad_id(const char* p, std::size_t c, IntegerText k, std::int64_t id,
                            std::string_view text, Chunk& ch) const {
  const bool negative = k == IntegerText::too_small || (k == IntegerText::ok && id < 0);
  // The text is an integer's ('-' and digits): shown as it is, shortened.
  std::string label(text.substr(0, kShownChars));
  if (text.size() > kShownChars) label.replace(kShownChars - 3, 3, "...");
  s_.flag(
      ch.bad_id, p, c,
      "the label " + label +
          (negative ? " is negative"
                    : " is too large a class id (at most " + std::to_string(kMaxClassId) + ")") +
          ": integer labels are class ids (CsvOptions::classes = false reads them as "
          "regression targets)");
}

void gather_labels(const std::vector<Chunk>& chunks, const Layout& l, const Messages& m,
                   CsvTable& t) {
  if (l.has_label && !l.classes) {
    t.targets.reserve(t.rows);
    for (const Chunk& ch : chunks)
      t.targets.insert(t.targets.end(), ch.targets.begin(), ch.targets.end());
  } else if (l.has_label) {
    t.labels.reserve(t.rows);
    const bool integers =
        std::all_of(chunks.begin(), chunks.end(), [](const Chunk& ch) { return ch.all_integer; });
    if (integers) {
      std::int64_t top = 0;
      for (const Chunk& ch : chunks) {
        if (ch.bad_id.set()) m.raise(ch.bad_id);
        for (const LabelCell& cell : ch.labels) {
          t.labels.push_back(cell.id);
          top = std::max(top, cell.id);
        }
      }
      for (std::int64_t id = 0; id <= top; ++id) t.classes.push_back(std::to_string(id));
    } else {
      std::unordered_map<std::string_view, std::int64_t> ids;
      for (const Chunk& ch : chunks) {
        for (const LabelCell& cell : ch.labels)
          ids.emplace(std::string_view(cell.text, cell.size), 0);
      }
      std::vector<std::string_view> sorted;
      sorted.reserve(ids.size());
      for (const auto& entry : ids) sorted.push_back(entry.first);
      std::sort(sorted.begin(), sorted.end());
      for (std::size_t i = 0; i < sorted.size(); ++i) {
        ids[sorted[i]] = static_cast<std::int64_t>(i);
        t.classes.emplace_back(sorted[i]);
      }
      for (const Chunk& ch : chunks) {
        for (const LabelCell& cell : ch.labels) {
          t.labels.push_back(ids.find(std::string_view(cell.text, cell.size))->second);
        }
      }
    }
  }
}

}  // namespace ferry::detail::csv
