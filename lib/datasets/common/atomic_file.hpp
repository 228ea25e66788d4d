#pragma once

// How ferry writes a file, written once: the bytes go to a temporary file beside the target,
// made exclusively under a name nobody can guess (O_CREAT | O_EXCL | O_NOFOLLOW: a symbolic
// link, a FIFO or any file already at that name is never opened, so nothing planted can
// redirect or block the write), then the temporary is renamed over the target in one step, so
// a reader sees the old file or the new one, never part of one. rename() replaces whatever
// entry the target's name holds (a symbolic link there is replaced, not followed). On any
// failure, and when the writer goes uncommitted, the temporary file is removed.
//
// The sidecar index of a tar shard (tar_sidecar.*) writes through this, and so will anything
// else ferry caches on disk. Nothing is synced to the disk: what is written here is a cache
// that its readers check (a crash may leave the old file, or a new one the reader refuses).

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>

#include "datasets/common/file_io.hpp"

namespace ferry::detail {

/// A file being written: write() appends, commit() publishes it under its name.
class AtomicFileWriter {
 public:
  /// Makes the temporary file "<target's folder>/.<target's name>.<16 random hex>.tmp"
  /// (mode 0644, less the umask), exclusively; a name taken is retried with other random
  /// digits. `label` (the target, for messages) must outlive the object.
  /// \throws DataError label.prefix() + "cannot write: <why>".
  AtomicFileWriter(std::filesystem::path target, FileLabel label);
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  /// Removes the temporary file unless commit() succeeded.
  ~AtomicFileWriter();

  /// Appends `bytes`. \throws DataError label.prefix() + "cannot write: <why>".
  void write(std::span<const std::byte> bytes);
  /// Writes `bytes` at byte `offset` of the file (pwrite: the file position stays; several
  /// threads may write disjoint ranges at once, not while commit() runs).
  /// \throws DataError label.prefix() + "cannot write: <why>".
  void write_at(std::uint64_t offset, std::span<const std::byte> bytes);
  /// Closes the temporary file and renames it over the target. \throws DataError
  /// label.prefix() + "cannot write: <why>" (the temporary file is then removed).
  void commit();

  /// The temporary file's path (for tests).
  const std::filesystem::path& temporary() const noexcept { return temporary_; }

 private:
  std::filesystem::path target_;
  std::filesystem::path temporary_;
  FileLabel label_;
  FileDescriptor fd_;
  bool committed_ = false;
};

/// Writes `bytes` to `target` with an AtomicFileWriter.
/// \throws DataError label.prefix() + "cannot write: <why>"; nothing is left behind then.
void write_file_atomically(const std::filesystem::path& target, std::span<const std::byte> bytes,
                           FileLabel label);

}  // namespace ferry::detail
