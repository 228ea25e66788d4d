// LoaderOptions::from_env, LoaderState and LoaderStats: the parts of the loader's surface
// that hold no pipeline.

#include "pipeline/options.hpp"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <string>
#include <system_error>

#include "ferry/loader.hpp"

namespace ferry {
namespace {

// `text` in double quotes for an error message: printable ASCII as it is, '"' and '\' escaped,
// any other byte as \xNN; cut after 120 bytes (a hostile text can be long).
std::string quoted(std::string_view text) {
  constexpr std::size_t kMax = 120;
  constexpr std::string_view kHex = "0123456789abcdef";
  std::string q = "\"";
  for (std::size_t i = 0; i < text.size() && i < kMax; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '"' || c == '\\') {
      q += '\\';
      q += static_cast<char>(c);
    } else if (c >= 0x20 && c < 0x7f) {
      q += static_cast<char>(c);
    } else {
      q += "\\x";
      q += kHex[c >> 4U];
      q += kHex[c & 0xfU];
    }
  }
  q += '"';
  if (text.size() > kMax) q += "... (" + std::to_string(text.size()) + " bytes)";
  return q;
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// The length of the run of ASCII digits at the front of `text`.
std::size_t digits_at_front(std::string_view text) {
  std::size_t n = 0;
  while (n < text.size() && is_digit(text[n])) ++n;
  return n;
}

// ASCII digits as a number: nothing when it exceeds `max`. \pre `digits` is 1+ ASCII digits.
std::optional<std::uint64_t> digits_value(std::string_view digits, std::uint64_t max) {
  std::uint64_t value = 0;
  const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec != std::errc() || ptr != digits.data() + digits.size() || value > max) return {};
  return value;
}

// ---- from_env --------------------------------------------------------------------------

// One launcher's variables.
struct Launcher {
  const char* rank;
  const char* size;
  const char* local;
};
constexpr Launcher kTorchrun{"RANK", "WORLD_SIZE", "LOCAL_RANK"};
constexpr Launcher kMpirun{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                           "OMPI_COMM_WORLD_LOCAL_RANK"};

[[noreturn]] void env_error(const std::string& why) {
  throw ConfigError("LoaderOptions::from_env: " + why);
}

// Variable `name` as an int: nothing when unset. Set, it is one or more ASCII digits (no sign,
// no blanks, nothing else) whose value fits int.
std::optional<int> env_int(const detail::EnvLookup& env, const char* name) {
  const std::optional<std::string_view> text = env(name);
  if (!text) return {};
  const std::string shown = std::string(name) + "=" + quoted(*text);
  if (text->empty()) env_error(shown + " is empty; expected a decimal integer (digits only)");
  if (digits_at_front(*text) != text->size()) {
    env_error(shown + " is not a decimal integer (digits only, no sign or blanks)");
  }
  constexpr int kMax = std::numeric_limits<int>::max();
  const auto value = digits_value(*text, kMax);
  if (!value) env_error(shown + " is too large (at most " + std::to_string(kMax) + ")");
  return static_cast<int>(*value);
}

// What one launcher's variables say; nothing when none of them is set.
struct Placement {
  int rank = 0;
  int size = 1;
  std::optional<int> local;
};

std::optional<Placement> read_launcher(const detail::EnvLookup& env, const Launcher& l) {
  const std::optional<int> rank = env_int(env, l.rank);
  const std::optional<int> size = env_int(env, l.size);
  const std::optional<int> local = env_int(env, l.local);
  if (!rank && !size && !local) return {};
  const std::string s = l.size, r = l.rank, lr = l.local;
  if (!size) {
    env_error(rank ? r + " is set but " + s + " is not"
                   : lr + " is set but " + r + " and " + s + " are not");
  }
  if (!rank) env_error(s + " is set but " + r + " is not");
  if (*size == 0) env_error(s + "=0: a job has at least one process");
  if (*rank >= *size) {
    env_error(r + "=" + std::to_string(*rank) + " is not below " + s + "=" + std::to_string(*size));
  }
  if (local && *local >= *size) {
    env_error(lr + "=" + std::to_string(*local) + " is not below " + s + "=" +
              std::to_string(*size));
  }
  return Placement{*rank, *size, local};
}

std::string describe(const Launcher& l, const Placement& p) {
  std::string s = std::string(l.rank) + "=" + std::to_string(p.rank) + " " + l.size + "=" +
                  std::to_string(p.size);
  if (p.local) s += std::string(" ") + l.local + "=" + std::to_string(*p.local);
  return s;
}

}  // namespace

namespace detail {

std::optional<std::string_view> process_env(const char* name) {
  const char* text = std::getenv(name);  // NOLINT(concurrency-mt-unsafe): read at setup
  if (text == nullptr) return {};
  return std::string_view(text);
}

LoaderOptions options_from_env(const EnvLookup& env, int gpu_count) {
  const std::optional<Placement> torchrun = read_launcher(env, kTorchrun);
  const std::optional<Placement> mpirun = read_launcher(env, kMpirun);
  // Both sets (a script exporting RANK=$OMPI_COMM_WORLD_RANK): they must say the same.
  if (torchrun && mpirun &&
      (torchrun->rank != mpirun->rank || torchrun->size != mpirun->size ||
       (torchrun->local && mpirun->local && *torchrun->local != *mpirun->local))) {
    env_error("torchrun's " + describe(kTorchrun, *torchrun) + " and mpirun's " +
              describe(kMpirun, *mpirun) +
              " disagree; unset one launcher's variables or set rank and world_size yourself");
  }
  LoaderOptions o;
  const Launcher& from = torchrun ? kTorchrun : kMpirun;
  const std::optional<Placement> placed = torchrun ? torchrun : mpirun;
  const char* local_name = from.local;
  std::optional<int> local;
  if (placed) {
    o.rank = placed->rank;
    o.world_size = placed->size;
    local = placed->local;
    if (!local && torchrun && mpirun && mpirun->local) {
      local = mpirun->local;
      local_name = kMpirun.local;
    }
  }
  // No GPU at all: the CPU, as Device::best(), so the same job runs unchanged on a CPU-only
  // machine. GPUs, but not this one: an error, not a silent fall back to the CPU.
  if (gpu_count <= 0) {
    o.device = Device::cpu();
  } else if (!local) {
    o.device = Device::cuda(0);
  } else if (*local < gpu_count) {
    o.device = Device::cuda(*local);
  } else {
    throw DeviceError("LoaderOptions::from_env: " + std::string(local_name) + "=" +
                      std::to_string(*local) + " asks for cuda:" + std::to_string(*local) +
                      " but only " + std::to_string(gpu_count) + " GPU" +
                      (gpu_count == 1 ? " is" : "s are") +
                      " usable (cuda_device_count()); when each process sees only its own GPU "
                      "(CUDA_VISIBLE_DEVICES), set device yourself");
  }
  return o;
}

}  // namespace detail

LoaderOptions LoaderOptions::from_env() {
  return detail::options_from_env(detail::process_env, cuda_device_count());
}

// ---- LoaderState -----------------------------------------------------------------------

std::string LoaderState::str() const {
  std::string s = "ferry-state v2 seed=";
  s += std::to_string(seed);
  s += " epoch=";
  s += std::to_string(epoch);
  s += " next_batch=";
  s += std::to_string(next_batch);
  s += " samples=";
  s += std::to_string(samples);
  s += " shuffle=";
  s += shuffle ? '1' : '0';
  s += " position=";
  s += std::to_string(position);
  s += " plan=";
  s += std::to_string(plan);
  if (selection != 0) {
    s += " selection=";
    s += std::to_string(selection);
  }
  return s;
}

namespace {

// Reads str()'s grammar from the front of a text; a failure names what was expected and the
// byte where it was not found.
class StateReader {
 public:
  explicit StateReader(std::string_view text) : text_(text) {}

  void literal(std::string_view expected) {
    if (!text_.substr(pos_).starts_with(expected))
      fail("expected \"" + std::string(expected) + "\"");
    pos_ += expected.size();
  }

  // "ferry-state v2"; a v1 state is named as such.
  void version() {
    if (text_.starts_with("ferry-state v1 ")) {
      fail(
          "a v1 state (of ferry before elastic resume) has no global position; its run "
          "cannot be resumed by this version");
    }
    literal("ferry-state v2");
  }

  // A decimal number without sign or leading zero ("0" aside), at most `max`.
  std::uint64_t number(const char* field, std::uint64_t max) {
    const std::size_t n = digits_at_front(text_.substr(pos_));
    const std::string f(field);
    if (n == 0) fail("expected the " + f + " as decimal digits");
    if (n > 1 && text_[pos_] == '0') fail(f + " has a leading zero");
    const auto value = digits_value(text_.substr(pos_, n), max);
    if (!value) fail(f + " is larger than " + std::to_string(max));
    pos_ += n;
    return *value;
  }

  bool at_end() const noexcept { return pos_ == text_.size(); }

  void end() const {
    if (pos_ != text_.size()) fail("unexpected text after plan or selection");
  }

  [[noreturn]] void fail(const std::string& why) const {
    throw ConfigError("LoaderState::parse: " + quoted(text_) +
                      " is not \"ferry-state v2 seed=S epoch=E next_batch=K samples=N "
                      "shuffle=0|1 position=P plan=H[ selection=X]\": " +
                      why + " at byte " + std::to_string(pos_));
  }

 private:
  std::string_view text_;
  std::size_t pos_ = 0;
};

}  // namespace

LoaderState LoaderState::parse(std::string_view text) {
  constexpr std::uint64_t kU64 = std::numeric_limits<std::uint64_t>::max();
  StateReader in(text);
  LoaderState s;
  in.version();
  in.literal(" seed=");
  s.seed = in.number("seed", kU64);
  in.literal(" epoch=");
  s.epoch = in.number("epoch", kU64);
  in.literal(" next_batch=");
  s.next_batch =
      static_cast<std::size_t>(in.number("next_batch", std::numeric_limits<std::size_t>::max()));
  in.literal(" samples=");
  s.samples = in.number("samples", kU64);
  in.literal(" shuffle=");
  s.shuffle = in.number("shuffle", 1) == 1;
  in.literal(" position=");
  s.position = in.number("position", kU64);
  in.literal(" plan=");
  s.plan = in.number("plan", kU64);
  if (!in.at_end()) {
    // Only a state of a dataset that chooses its epochs' samples has it, and never 0.
    in.literal(" selection=");
    s.selection = in.number("selection", kU64);
    if (s.selection == 0) in.fail("selection is 0 (a state without one omits it)");
  }
  in.end();
  return s;
}

// ---- LoaderStats -----------------------------------------------------------------------

double LoaderStats::consumer_wait_fraction() const noexcept {
  return wall_seconds > 0 ? consumer_wait_seconds / wall_seconds : 0;
}

double LoaderStats::worker_busy_fraction() const noexcept {
  return worker_capacity_seconds > 0 ? read_seconds / worker_capacity_seconds : 0;
}

namespace {

// Bytes as MiB with one decimal ("0.4", "3072.0").
std::string mebibytes(std::uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return text;
}

}  // namespace

std::string LoaderStats::summary() const {
  const double wait = consumer_wait_fraction();
  const double busy = worker_busy_fraction();
  const double copy = wall_seconds > 0 ? copy_seconds / wall_seconds : 0;
  if (wall_seconds <= 0) {
    std::string text = "no epoch has run";
    for (const std::string& note : notes) text += "; " + note;
    return text;
  }
  // Whole percents, but a small non-zero share reads "<1%", not "0%".
  auto pct = [](double fraction) {
    if (fraction > 0 && fraction < 0.005) return std::string("<1%");
    return std::to_string(std::lround(fraction * 100)) + "%";
  };
  std::ostringstream os;
  // Under a tenth of the time waiting for data: the loop itself sets the pace.
  if (wait < 0.10) {
    os << "compute-bound: the consumer waited " << pct(wait) << " of wall time; workers were "
       << pct(busy) << " busy";
  } else if (network_wait_seconds > 0.5 * read_seconds && network_wait_seconds > 0) {
    os << "network-bound: the consumer waited " << pct(wait) << " of wall time; reads spent "
       << pct(network_wait_seconds / read_seconds) << " of their time waiting for the server";
  } else if (copy > busy) {
    os << "copy-bound: the consumer waited " << pct(wait) << " of wall time; the copy stage was "
       << pct(copy) << " busy, workers " << pct(busy);
  } else {
    os << "input-bound: the consumer waited " << pct(wait) << " of wall time; workers were "
       << pct(busy) << " busy";
  }
  if (skipped > 0) os << "; " << skipped << " samples skipped";
  if (autotune) {
    os << "; autotune: " << workers << (workers == 1 ? " worker" : " workers") << ", prefetch "
       << prefetch << ", " << mebibytes(memory_bytes) << " MiB";
    if (memory_budget > 0) os << " of a " << mebibytes(memory_budget) << " MiB budget";
    if (autotune_decisions.empty()) {
      os << " (as started)";
    } else {
      os << " (" << autotune_decisions.back().reason << ")";
    }
  }
  for (const std::string& note : notes) os << "; " << note;
  return os.str();
}

}  // namespace ferry
