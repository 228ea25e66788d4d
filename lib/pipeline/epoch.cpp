// The Epoch and Batch classes of the public surface: an Epoch forwards to its run
// (epoch_run.cpp); a Batch finds its fields by name.

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "ferry/loader.hpp"
#include "pipeline/epoch_run.hpp"

namespace ferry {

// ---- Epoch ------------------------------------------------------------------------------

Epoch::Epoch(std::unique_ptr<detail::EpochRun> run) noexcept : run_(std::move(run)) {}
Epoch::Epoch(Epoch&&) noexcept = default;
Epoch& Epoch::operator=(Epoch&&) noexcept = default;
Epoch::~Epoch() = default;

const Batch* Epoch::next() { return run_ ? run_->next() : nullptr; }

bool Epoch::try_next(std::chrono::nanoseconds timeout, const Batch*& batch) {
  batch = nullptr;
  if (!run_) return true;
  const auto now = detail::Clock::now();
  const auto deadline = timeout >= detail::Clock::time_point::max() - now
                            ? detail::Clock::time_point::max()
                            : now + std::chrono::duration_cast<detail::Clock::duration>(timeout);
  return run_->next_until(deadline, batch);
}

std::size_t Epoch::size() const noexcept { return run_ ? run_->size() : 0; }

void Epoch::cancel() noexcept {
  if (run_) run_->cancel();
}

Epoch::iterator Epoch::begin() { return iterator(this); }

Epoch::iterator::iterator(Epoch* epoch) : epoch_(epoch), batch_(epoch->next()) {}

Epoch::iterator& Epoch::iterator::operator++() {
  batch_ = epoch_->next();
  return *this;
}

// ---- Batch ------------------------------------------------------------------------------

const Tensor& Batch::operator[](std::string_view field) const {
  return tensors_[field_index(field)];
}

std::size_t Batch::field_index(std::string_view field) const {
  if (names_) {
    for (std::size_t i = 0; i < names_->size() && i < tensors_.size(); ++i) {
      if ((*names_)[i] == field) return i;
    }
  }
  throw ConfigError("Batch: no field \"" + std::string(field) + "\"");
}

const Tensor& Batch::lengths(std::string_view field) const {
  const std::size_t i = field_index(field);
  if (i >= lengths_.size() || !lengths_[i].defined()) {
    throw ConfigError("Batch: field \"" + std::string(field) + "\" is not ragged");
  }
  return lengths_[i];
}

const Tensor& Batch::offsets(std::string_view field) const {
  const std::size_t i = field_index(field);
  if (i >= offsets_.size() || !offsets_[i].defined()) {
    throw ConfigError("Batch: field \"" + std::string(field) +
                      "\" has no offsets: it is not ragged, or the loader pads it "
                      "(RaggedBatch::pack gives offsets)");
  }
  return offsets_[i];
}

const Tensor& Batch::at(std::size_t field) const {
  if (field >= tensors_.size()) {
    throw ConfigError("Batch: no field " + std::to_string(field) + "; the batch has " +
                      std::to_string(tensors_.size()));
  }
  return tensors_[field];
}

}  // namespace ferry
