// train_tokens: a next-byte language model trained on token windows from ferry's TokenDataset.
//
//   train_tokens --convert --corpus DIR --out DIR [--val-fraction F] [--shard-tokens N]
//   train_tokens --data DIR [--seconds S] [--steps N] [--context K] [--hidden H] [--seq-len T]
//                [--batch N] [--lr X] [--seed S] [--max-ratio R]
//   train_tokens --mix DIR:W --mix DIR:W ... [--epoch-size N] [--epochs E] [--max-bits B] [...]
//
// Copy it as a starting point for language-model data. It has three parts:
//
// 1. --convert writes a text corpus as llm.c shards, the format llm.c and many GPT-2 training
//    scripts read: a header of 256 int32 (magic 20240520, version 1, token count) and then the
//    tokens as u16. The tokenizer here is the simplest there is, bytes as tokens (a vocabulary of
//    256). Each file of the corpus is split: its first 90% go to the training shards
//    (train_000.bin, ...), its last 10% to val_000.bin, so the held-out text is the same kind of
//    text. The corpus used in the tests is Debian's `fortunes` package: /usr/share/games/fortunes.
//
// 2. Training reads the shards with TokenDataset through a ferry::Loader: each sample is a window
//    of T tokens, "input" [T] and "target" [T] (the input shifted by one), i64. The model sees the
//    last K bytes and predicts the next one: input[t - K + 1 .. t] -> target[t] for t >= K - 1, so
//    windows overlap by K - 1 tokens (TokenOptions::stride = T - K + 1) and every byte of a file
//    after its first K is predicted exactly once per epoch.
//
// The model is plain C++: a table per context position gives each byte a vector of H values; the
// K vectors are summed, pass a ReLU, and a dense layer (common/mlp.hpp's Dense) gives the 256
// logits. That is a one-hidden-layer MLP over the one-hot encodings of the K bytes, computed
// sparsely. Adam trains it for a bounded time. At the end it prints the unigram entropy of the
// training bytes (what a model that ignores context could reach) and the held-out loss, both in
// bits per byte; --max-ratio makes the program fail unless held-out / unigram is at most R.
//
// 3. --mix trains on several converted corpora at once, each its own TokenDataset, mixed by
//    weight with ferry::Mixture: `--mix fortunes-tokens:3 --mix licenses-tokens:1` gives every
//    epoch of --epoch-size windows exactly round(size x 3/4) fortune windows and the rest from
//    the licenses (largest remainders, so the two add up), repeating the smaller corpus's windows
//    or drawing a different subset of the larger's each epoch as needed. The mixture's
//    source_field ("source", i64) tells each window's corpus. After every whole epoch the program
//    prints each corpus's windows as the loader's stats counted them (LoaderStats::source_samples)
//    next to the shares it computes itself, and "exact" when they agree. The held-out windows of
//    all corpora go through one loader (a Mixture weighted by their sizes, so every window once)
//    and the loss is split by the source field: bits per byte per corpus. The corpora of the
//    tests: Debian's fortunes and the license texts of /usr/share/common-licenses (base-files).

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "common/cli.hpp"
#include "common/mlp.hpp"
#include "ferry/ferry.hpp"

namespace {

namespace fs = std::filesystem;
using common::Clock;
using common::seconds_since;

constexpr std::size_t kVocab = 256;  // bytes
constexpr double kLn2 = 0.69314718055994530942;

// ---- 1. the converter -----------------------------------------------------------------------

// The corpus's text files, in name order: regular files only (fortunes' *.u8 names are links to
// them), without the *.dat indexes strfile writes beside them.
std::vector<fs::path> corpus_files(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    if (!e.is_regular_file() || e.is_symlink() || e.path().extension() == ".dat") continue;
    files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) throw std::runtime_error("no text files in " + dir.string());
  return files;
}

std::vector<std::uint8_t> read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// One llm.c shard: the 256-int32 header, then the tokens as little-endian u16.
void write_shard(const fs::path& path, const std::uint8_t* bytes, std::size_t count) {
  if (count > 0x7fffffff) throw std::runtime_error("a shard holds at most 2^31 - 1 tokens");
  std::vector<std::int32_t> header(256, 0);
  header[0] = 20240520;  // llm.c's magic for u16 (GPT-2) tokens
  header[1] = 1;         // version
  header[2] = static_cast<std::int32_t>(count);
  std::vector<std::uint8_t> out;
  out.reserve(header.size() * 4 + count * 2);
  for (const std::int32_t h : header) {
    const auto u = static_cast<std::uint32_t>(h);
    for (int b = 0; b < 4; ++b) out.push_back(static_cast<std::uint8_t>(u >> (8 * b)));
  }
  for (std::size_t i = 0; i < count; ++i) {
    out.push_back(bytes[i]);  // the token's low byte; a byte token's high byte is 0
    out.push_back(0);
  }
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file.write(reinterpret_cast<const char*>(out.data()), static_cast<std::streamsize>(out.size()));
  if (!file) throw std::runtime_error("cannot write " + path.string());
}

int convert(const fs::path& corpus, const fs::path& out, double val_fraction,
            std::size_t shard_tokens) {
  std::vector<std::uint8_t> train, val;
  const std::vector<fs::path> files = corpus_files(corpus);
  for (const fs::path& f : files) {
    const std::vector<std::uint8_t> text = read_bytes(f);
    const auto cut = static_cast<std::size_t>(
        std::llround((1.0 - val_fraction) * static_cast<double>(text.size())));
    train.insert(train.end(), text.begin(), text.begin() + static_cast<std::ptrdiff_t>(cut));
    val.insert(val.end(), text.begin() + static_cast<std::ptrdiff_t>(cut), text.end());
  }
  fs::create_directories(out);
  // Stale shards of an earlier conversion would be read as part of this one.
  for (const fs::directory_entry& e : fs::directory_iterator(out)) {
    const std::string name = e.path().filename().string();
    if (name.starts_with("train_") || name.starts_with("val_")) fs::remove(e.path());
  }
  std::size_t shards = 0;
  for (std::size_t at = 0; at < train.size(); at += shard_tokens, ++shards) {
    char name[32];
    std::snprintf(name, sizeof name, "train_%03zu.bin", shards);
    write_shard(out / name, train.data() + at, std::min(shard_tokens, train.size() - at));
  }
  write_shard(out / "val_000.bin", val.data(), val.size());
  std::printf("%zu files of %s: %zu training bytes in %zu shards, %zu held-out bytes, in %s\n",
              files.size(), corpus.string().c_str(), train.size(), shards, val.size(),
              out.string().c_str());
  return 0;
}

// ---- 2. the model ---------------------------------------------------------------------------

// logits = W2 · relu(b1 + sum over j of E_j[byte at position t - j]) + b2.
class ByteModel {
 public:
  ByteModel(std::size_t context, std::size_t hidden, std::uint64_t seed)
      : context_(context),
        hidden_(hidden),
        embed_(context * kVocab * hidden),
        b1_(hidden),
        out_(hidden, kVocab) {
    std::mt19937_64 rng(seed);
    // The sum of K rows then has a variance of about 1; the output layer's fan-in is H.
    std::normal_distribution<float> rows(0.0f, 1.0f / std::sqrt(static_cast<float>(context)));
    for (float& w : embed_.value) w = rows(rng);
    std::normal_distribution<float> dense(0.0f, 1.0f / std::sqrt(static_cast<float>(hidden)));
    for (float& w : out_.w.value) w = dense(rng);
  }

  std::size_t context() const { return context_; }

  // Hidden activations h [n, H] of n positions, each K bytes `ctx` [n, K] (ctx[r * K + j] is
  // the byte j positions back).
  void hidden(const std::uint8_t* ctx, std::size_t n, float* h) const {
    for (std::size_t r = 0; r < n; ++r) {
      float* hr = h + r * hidden_;
      std::copy(b1_.value.begin(), b1_.value.end(), hr);
      for (std::size_t j = 0; j < context_; ++j) {
        const float* row = &embed_.value[(j * kVocab + ctx[r * context_ + j]) * hidden_];
        for (std::size_t k = 0; k < hidden_; ++k) hr[k] += row[k];
      }
      for (std::size_t k = 0; k < hidden_; ++k) hr[k] = std::max(hr[k], 0.0f);
    }
  }

  // Summed cross-entropy (nats) of n positions; with `train`, one Adam step on its mean. With
  // `each`, also each position's own (for a loss per corpus).
  double loss(const std::uint8_t* ctx, const std::uint8_t* next, std::size_t n, bool train,
              std::vector<double>* each = nullptr) {
    h_.resize(n * hidden_);
    z_.resize(n * kVocab);
    hidden(ctx, n, h_.data());
    out_.forward(h_.data(), n, z_.data());
    double total = 0;
    if (each != nullptr) each->clear();
    for (std::size_t r = 0; r < n; ++r) {
      float* zr = &z_[r * kVocab];
      const float z_next = zr[next[r]];
      const double nats = common::softmax(zr, kVocab) - z_next;  // zr: the probabilities now
      total += nats;
      if (each != nullptr) each->push_back(nats);
      zr[next[r]] -= 1.0f;  // dL/dz = p - onehot
      for (std::size_t k = 0; k < kVocab; ++k) zr[k] /= static_cast<float>(n);
    }
    if (!train) return total;

    for (common::Param* p : {&embed_, &b1_, &out_.w, &out_.b}) {
      std::fill(p->grad.begin(), p->grad.end(), 0.0f);
    }
    dh_.resize(n * hidden_);
    out_.backward(h_.data(), z_.data(), n, dh_.data());
    for (std::size_t r = 0; r < n; ++r) {
      const float* hr = &h_[r * hidden_];
      float* dr = &dh_[r * hidden_];
      for (std::size_t k = 0; k < hidden_; ++k) dr[k] = hr[k] > 0.0f ? dr[k] : 0.0f;  // ReLU
      for (std::size_t k = 0; k < hidden_; ++k) b1_.grad[k] += dr[k];
      for (std::size_t j = 0; j < context_; ++j) {
        float* g = &embed_.grad[(j * kVocab + ctx[r * context_ + j]) * hidden_];
        for (std::size_t k = 0; k < hidden_; ++k) g[k] += dr[k];
      }
    }
    ++steps_;
    for (common::Param* p : {&embed_, &b1_, &out_.w, &out_.b}) adam(*p);
    return total;
  }

  void set_learning_rate(float lr) { lr_ = lr; }

 private:
  // Adam (Kingma & Ba, 2015), its bias correction folded into the step size.
  void adam(common::Param& p) const {
    constexpr float kBeta1 = 0.9f, kBeta2 = 0.999f, kEps = 1e-8f;
    const auto t = static_cast<double>(steps_);
    const auto lr = static_cast<float>(lr_ * std::sqrt(1.0 - std::pow(kBeta2, t)) /
                                       (1.0 - std::pow(kBeta1, t)));
    for (std::size_t i = 0; i < p.value.size(); ++i) {
      p.m[i] = kBeta1 * p.m[i] + (1.0f - kBeta1) * p.grad[i];
      p.v[i] = kBeta2 * p.v[i] + (1.0f - kBeta2) * p.grad[i] * p.grad[i];
      p.value[i] -= lr * p.m[i] / (std::sqrt(p.v[i]) + kEps);
    }
  }

  std::size_t context_, hidden_;
  common::Param embed_, b1_;  // [K, 256, H], [H]
  common::Dense out_;         // [H] -> [256]
  float lr_ = 1e-3f;
  std::uint64_t steps_ = 0;
  std::vector<float> h_, z_, dh_;
};

// The positions of a batch of windows the model predicts: for each window and each t in
// [K - 1, T), its K context bytes (most recent first) and the byte after them.
struct Positions {
  std::vector<std::uint8_t> ctx, next;

  void from(const ferry::Batch& batch, std::size_t context) {
    const ferry::Tensor input = batch["input"].cpu();  // i64 [n, T]; on the CPU: itself
    const ferry::Tensor target = batch["target"].cpu();
    const auto n = static_cast<std::size_t>(input.shape(0));
    const auto t_len = static_cast<std::size_t>(input.shape(1));
    const std::int64_t* in = input.data<std::int64_t>();
    const std::int64_t* out = target.data<std::int64_t>();
    ctx.clear();
    next.clear();
    for (std::size_t r = 0; r < n; ++r) {
      for (std::size_t t = context - 1; t < t_len; ++t) {
        for (std::size_t j = 0; j < context; ++j) {
          ctx.push_back(static_cast<std::uint8_t>(in[r * t_len + t - j]));
        }
        next.push_back(static_cast<std::uint8_t>(out[r * t_len + t]));
      }
    }
  }
};

// ---- command line ---------------------------------------------------------------------------

struct Options {
  bool convert = false;
  fs::path corpus, out, data;
  double val_fraction = 0.1;
  std::size_t shard_tokens = 1000000;
  double seconds = 30;
  std::size_t steps = 0;  // 0: as many as the time allows
  std::size_t context = 8;
  std::size_t hidden = 128;
  std::size_t seq_len = 64;
  std::size_t batch = 8;
  double lr = 1e-2;
  std::uint64_t seed = 1;
  double max_ratio = 0;  // 0: no check
  // --mix: the corpora (converted directories) and their weights.
  std::vector<std::pair<fs::path, double>> mix;
  std::size_t epoch_size = 0;  // 0: the sum of the corpora's training windows
  std::size_t epochs = 0;      // 0: as many as the time allows
  double max_bits = 0;         // 0: no check
};

constexpr const char* kUsage =
    "usage: train_tokens --convert --corpus DIR --out DIR [--val-fraction F] [--shard-tokens N]\n"
    "       train_tokens --data DIR [--seconds S] [--steps N] [--context K] [--hidden H]\n"
    "                    [--seq-len T] [--batch N] [--lr X] [--seed S] [--max-ratio R]\n"
    "       train_tokens --mix DIR:W --mix DIR:W ... [--epoch-size N] [--epochs E]\n"
    "                    [--max-bits B] [the options of --data]\n"
    "  --convert          write the text files of --corpus as llm.c shards (u16 byte tokens)\n"
    "                     into --out: train_000.bin, ... and val_000.bin\n"
    "  --val-fraction F   the last fraction of every file that is held out (default 0.1)\n"
    "  --shard-tokens N   tokens per training shard (default 1000000)\n"
    "  --data DIR         train on DIR/train_*.bin, measure on DIR/val_*.bin\n"
    "  --seconds S        stop training after S seconds (default 30)\n"
    "  --steps N          or after N steps, whichever comes first (default: no limit)\n"
    "  --context K        bytes the model sees (default 8)\n"
    "  --hidden H         hidden units (default 128)\n"
    "  --seq-len T        tokens per window (default 64)\n"
    "  --batch N          windows per batch (default 8)\n"
    "  --lr X             Adam's learning rate (default 0.01)\n"
    "  --seed S           seed of the shuffle and the initial weights (default 1)\n"
    "  --max-ratio R      exit 1 unless held-out loss / unigram entropy <= R (with --mix: of\n"
    "                     every corpus)\n"
    "  --mix DIR:W        train on a mixture instead: the converted corpus DIR with weight W;\n"
    "                     give it once per corpus (e.g. --mix fortunes:3 --mix licenses:1)\n"
    "  --epoch-size N     with --mix: windows an epoch (default: all corpora's together)\n"
    "  --epochs E         with --mix: stop after E whole epochs (default: no limit)\n"
    "  --max-bits B       with --mix: exit 1 unless every corpus's held-out loss is at most B\n"
    "                     bits/byte\n";

Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (flag == "--convert") {
      o.convert = true;
      continue;
    }
    if (i + 1 == argc) throw std::invalid_argument("unknown option or missing value: " + flag);
    const std::string value = argv[++i];
    if (flag == "--corpus") {
      o.corpus = value;
    } else if (flag == "--out") {
      o.out = value;
    } else if (flag == "--data") {
      o.data = value;
    } else if (flag == "--val-fraction") {
      o.val_fraction = common::parse_real(flag, value);
    } else if (flag == "--shard-tokens") {
      o.shard_tokens = common::parse_number(flag, value);
    } else if (flag == "--seconds") {
      o.seconds = common::parse_real(flag, value);
    } else if (flag == "--steps") {
      o.steps = common::parse_number(flag, value);
    } else if (flag == "--context") {
      o.context = common::parse_number(flag, value);
    } else if (flag == "--hidden") {
      o.hidden = common::parse_number(flag, value);
    } else if (flag == "--seq-len") {
      o.seq_len = common::parse_number(flag, value);
    } else if (flag == "--batch") {
      o.batch = common::parse_number(flag, value);
    } else if (flag == "--lr") {
      o.lr = common::parse_real(flag, value);
    } else if (flag == "--seed") {
      o.seed = common::parse_number(flag, value);
    } else if (flag == "--max-ratio") {
      o.max_ratio = common::parse_real(flag, value);
    } else if (flag == "--mix") {
      const std::size_t colon = value.rfind(':');
      if (colon == std::string::npos || colon == 0) {
        throw std::invalid_argument("--mix wants DIR:WEIGHT, not '" + value + "'");
      }
      const double weight = common::parse_real(flag, value.substr(colon + 1));
      if (!(weight > 0) || !std::isfinite(weight)) {
        throw std::invalid_argument("--mix: the weight of " + value + " must be positive");
      }
      o.mix.emplace_back(value.substr(0, colon), weight);
    } else if (flag == "--epoch-size") {
      o.epoch_size = common::parse_number(flag, value);
    } else if (flag == "--epochs") {
      o.epochs = common::parse_number(flag, value);
    } else if (flag == "--max-bits") {
      o.max_bits = common::parse_real(flag, value);
    } else {
      throw std::invalid_argument("unknown option: " + flag);
    }
  }
  if (o.convert) {
    if (o.corpus.empty() || o.out.empty()) {
      throw std::invalid_argument("--convert needs --corpus DIR and --out DIR");
    }
    if (!(o.val_fraction > 0 && o.val_fraction < 1)) {
      throw std::invalid_argument("--val-fraction must be between 0 and 1");
    }
    if (o.shard_tokens == 0) throw std::invalid_argument("--shard-tokens must be at least 1");
    return o;
  }
  if (o.data.empty() == o.mix.empty()) {
    throw std::invalid_argument("one of --data DIR, --mix DIR:W or --convert is required");
  }
  if (o.context == 0 || o.context > o.seq_len) {
    throw std::invalid_argument("--context must be between 1 and --seq-len");
  }
  if (o.hidden == 0 || o.batch == 0) {
    throw std::invalid_argument("--hidden and --batch must be at least 1");
  }
  if (!(o.lr > 0) || !(o.seconds > 0)) {
    throw std::invalid_argument("--lr and --seconds must be positive");
  }
  return o;
}

// The files DIR/<prefix>*.bin, in name order.
std::vector<fs::path> shards(const fs::path& dir, const std::string& prefix) {
  std::vector<fs::path> files;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.starts_with(prefix) && e.path().extension() == ".bin") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    throw std::runtime_error("no " + prefix + "*.bin in " + dir.string() +
                             " (write them with --convert)");
  }
  return files;
}

// Mean cross-entropy in bits per byte of `model` over one epoch of `loader`.
double held_out_bits(ByteModel& model, ferry::Loader& loader) {
  Positions p;
  double nats = 0;
  std::size_t count = 0;
  for (const ferry::Batch& batch : loader.epoch(0)) {
    p.from(batch, model.context());
    nats += model.loss(p.ctx.data(), p.next.data(), p.next.size(), /*train=*/false);
    count += p.next.size();
  }
  return nats / static_cast<double>(count) / kLn2;
}

// Windows of T tokens whose starts are T - K + 1 apart, so that the predicted positions
// (t >= K - 1) of consecutive windows meet exactly. i64, as embedding lookups take.
ferry::TokenOptions window_options(const Options& o) {
  ferry::TokenOptions tokens;
  tokens.seq_len = static_cast<std::int64_t>(o.seq_len);
  tokens.stride = static_cast<std::int64_t>(o.seq_len - o.context + 1);
  tokens.dtype = ferry::DType::i64;
  return tokens;
}

// The unigram entropy of the predicted bytes of `data`'s windows, H = -sum p log2 p, in bits.
// No model that ignores the context does better on text like this.
double unigram_entropy(std::shared_ptr<const ferry::Dataset> data, const ferry::LoaderOptions& eval,
                       std::size_t context) {
  std::vector<double> counts(kVocab, 0.0);
  Positions p;
  ferry::Loader loader(std::move(data), eval);
  for (const ferry::Batch& batch : loader.epoch(0)) {
    p.from(batch, context);
    for (const std::uint8_t b : p.next) counts[b] += 1;
  }
  double total = 0, entropy = 0;
  for (const double c : counts) total += c;
  for (const double c : counts) {
    if (c > 0) entropy -= c / total * std::log2(c / total);
  }
  return entropy;
}

int train(const Options& o) {
  // 1. The data: windows of T tokens (window_options).
  const ferry::TokenOptions tokens = window_options(o);
  const auto train_set = ferry::TokenDataset::open(shards(o.data, "train_"), tokens);
  const auto val_set = ferry::TokenDataset::open(shards(o.data, "val_"), tokens);

  // 2. Loaders. The model computes on the CPU, so batches are delivered there (zero copy: the
  //    loop reads the staging slot itself). One worker keeps up: a window is a copy of 1 KB.
  ferry::LoaderOptions lo;
  lo.batch_size = o.batch;
  lo.shuffle = true;
  lo.seed = o.seed;
  lo.workers = 1;
  lo.device = ferry::Device::cpu();
  ferry::Loader train_loader(train_set, lo);
  ferry::LoaderOptions eval = lo;
  eval.shuffle = false;
  eval.batch_size = 256;
  ferry::Loader val_loader(val_set, eval);

  // 3. The baseline: the unigram entropy of the predicted training bytes.
  const double entropy = unigram_entropy(train_set, eval, o.context);
  std::printf(
      "ferry %s: %zu training windows (%llu tokens in %zu shards), %zu held-out windows (%llu "
      "tokens), seq_len %zu, stride %lld\n",
      ferry::kVersion, train_set->size(), static_cast<unsigned long long>(train_set->num_tokens()),
      train_set->num_files(), val_set->size(),
      static_cast<unsigned long long>(val_set->num_tokens()), o.seq_len,
      static_cast<long long>(train_set->options().stride));
  std::printf("unigram entropy of the training bytes: %.4f bits/byte\n", entropy);
  std::printf("model: %zu bytes of context, %zu hidden units, Adam lr %g, batches of %zu windows\n",
              o.context, o.hidden, o.lr, o.batch);
  std::fflush(stdout);

  // 4. Training, for a bounded time: epoch after epoch until the clock or the step count says
  //    stop. Leaving an epoch's loop early stops its loader promptly.
  ByteModel model(o.context, o.hidden, o.seed);
  model.set_learning_rate(static_cast<float>(o.lr));
  Positions p;
  const auto start = Clock::now();
  std::size_t steps = 0;
  std::uint64_t positions = 0;
  double recent_nats = 0;
  std::size_t recent = 0;
  bool done = false;
  for (std::uint64_t epoch = 0; !done; ++epoch) {
    for (const ferry::Batch& batch : train_loader.epoch(epoch)) {
      p.from(batch, o.context);
      recent_nats += model.loss(p.ctx.data(), p.next.data(), p.next.size(), /*train=*/true);
      recent += p.next.size();
      positions += p.next.size();
      ++steps;
      const double elapsed = seconds_since(start);
      done = elapsed >= o.seconds || (o.steps != 0 && steps >= o.steps);
      if (steps % 200 == 0 || done) {
        std::printf("step %zu (epoch %llu, %.1f s): training loss %.4f bits/byte\n", steps,
                    static_cast<unsigned long long>(epoch), elapsed,
                    recent_nats / static_cast<double>(recent) / kLn2);
        std::fflush(stdout);
        recent_nats = 0;
        recent = 0;
      }
      if (done) break;
    }
  }
  const double train_seconds = seconds_since(start);

  // 5. The held-out bytes, which training never saw.
  const double held_out = held_out_bits(model, val_loader);
  const double ratio = held_out / entropy;
  std::printf("trained %zu steps, %.2f M positions in %.1f s (%.0f positions/s)\n", steps,
              static_cast<double>(positions) / 1e6, train_seconds,
              static_cast<double>(positions) / train_seconds);
  std::printf("held-out loss: %.4f bits/byte (%.1f%% below the unigram entropy %.4f)\n", held_out,
              100 * (1 - ratio), entropy);
  std::printf("loader: %s\n", train_loader.stats().summary().c_str());
  if (o.max_ratio > 0 && !(ratio <= o.max_ratio)) {
    std::fprintf(stderr, "train_tokens: held-out / unigram = %.4f is above --max-ratio %.4f\n",
                 ratio, o.max_ratio);
    return 1;
  }
  return 0;
}

// ---- 3. a mixture of corpora ----------------------------------------------------------------

// What Mixture promises each source an epoch, computed here from the weights alone: the floors of
// epoch_size x w_k / sum w, then one more for the sources with the largest fractional parts
// (ties to the earlier source) until the shares add up to epoch_size.
std::vector<std::size_t> largest_remainder_shares(const std::vector<double>& weights,
                                                  std::size_t epoch_size) {
  double sum = 0;
  for (const double w : weights) sum += w;
  std::vector<std::size_t> shares(weights.size());
  std::vector<double> rest(weights.size());
  std::size_t given = 0;
  for (std::size_t k = 0; k < weights.size(); ++k) {
    const double exact = static_cast<double>(epoch_size) * weights[k] / sum;
    shares[k] = static_cast<std::size_t>(std::floor(exact));
    rest[k] = exact - std::floor(exact);
    given += shares[k];
  }
  std::vector<std::size_t> order(weights.size());
  for (std::size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return rest[a] > rest[b]; });
  for (std::size_t i = 0; given < epoch_size; ++i, ++given) ++shares[order[i % order.size()]];
  return shares;
}

// One converted corpus of the mixture.
struct Corpus {
  std::string name;  // its directory's name
  double weight = 1;
  std::shared_ptr<ferry::TokenDataset> train, val;
  double entropy = 0;  // unigram, of its training bytes
};

// The summed loss and the counts of a pass, per corpus.
struct PerCorpus {
  std::vector<double> nats;
  std::vector<std::uint64_t> positions, windows;

  explicit PerCorpus(std::size_t corpora)
      : nats(corpora, 0.0), positions(corpora, 0), windows(corpora, 0) {}

  // Adds a batch whose positions `p` lost `each` nats; the batch's "source" field (the mixture's
  // source_field, i64 [n]) says which corpus each window comes from.
  void add(const ferry::Batch& batch, const std::vector<double>& each) {
    const ferry::Tensor source = batch["source"].cpu();
    const std::int64_t* k = source.data<std::int64_t>();
    const std::size_t n = batch.size();
    const std::size_t per_window = each.size() / n;
    for (std::size_t r = 0; r < n; ++r) {
      const auto c = static_cast<std::size_t>(k[r]);
      ++windows[c];
      positions[c] += per_window;
      for (std::size_t j = 0; j < per_window; ++j) nats[c] += each[r * per_window + j];
    }
  }
  double bits(std::size_t c) const { return nats[c] / static_cast<double>(positions[c]) / kLn2; }
};

int train_mix(const Options& o) {
  // 1. Each corpus its own pair of TokenDatasets, as --data opens one.
  const ferry::TokenOptions tokens = window_options(o);
  std::vector<Corpus> corpora;
  std::vector<ferry::MixtureSource> sources;
  std::vector<double> weights;
  corpora.reserve(o.mix.size());
  sources.reserve(o.mix.size());
  weights.reserve(o.mix.size());
  for (const auto& [dir, weight] : o.mix) {
    Corpus c;
    c.name = fs::path(dir).lexically_normal().filename().string();
    if (c.name.empty()) c.name = fs::path(dir).lexically_normal().parent_path().filename().string();
    c.weight = weight;
    c.train = ferry::TokenDataset::open(shards(dir, "train_"), tokens);
    c.val = ferry::TokenDataset::open(shards(dir, "val_"), tokens);
    sources.push_back({c.train, weight});
    weights.push_back(weight);
    corpora.push_back(std::move(c));
  }

  // 2. The mixture: every epoch of epoch_size windows holds exactly shares()[k] of corpus k.
  //    source_field adds "source", i64 [], the corpus of each window.
  ferry::MixtureOptions mo;
  mo.epoch_size = o.epoch_size;
  mo.source_field = "source";
  const auto mixture = ferry::Mixture::open(std::move(sources), mo);
  const std::vector<std::size_t> expected =
      largest_remainder_shares(weights, mixture->epoch_size());
  if (expected != mixture->shares()) {
    throw std::runtime_error("the mixture's shares differ from the largest remainders");
  }

  ferry::LoaderOptions lo;
  lo.batch_size = o.batch;
  lo.shuffle = true;
  lo.seed = o.seed;
  lo.workers = 1;
  lo.device = ferry::Device::cpu();
  ferry::Loader train_loader(mixture, lo);
  ferry::LoaderOptions eval = lo;
  eval.shuffle = false;
  eval.batch_size = 256;

  std::printf(
      "ferry %s: a mixture of %zu corpora, %zu windows an epoch, seq_len %zu, stride %lld\n",
      ferry::kVersion, corpora.size(), mixture->epoch_size(), o.seq_len,
      static_cast<long long>(tokens.stride));
  for (std::size_t k = 0; k < corpora.size(); ++k) {
    Corpus& c = corpora[k];
    c.entropy = unigram_entropy(c.train, eval, o.context);
    const double per_window =
        static_cast<double>(expected[k]) / static_cast<double>(c.train->size());
    std::printf(
        "  %s: weight %g, %zu training windows, %zu held-out; share %zu an epoch (%.3f of each "
        "window); unigram entropy %.4f bits/byte\n",
        c.name.c_str(), c.weight, c.train->size(), c.val->size(), expected[k], per_window,
        c.entropy);
  }
  std::printf("model: %zu bytes of context, %zu hidden units, Adam lr %g, batches of %zu windows\n",
              o.context, o.hidden, o.lr, o.batch);
  std::fflush(stdout);

  // 3. Training, epoch after epoch. After each whole epoch, the windows each corpus gave, as the
  //    loader's stats count them (cumulative: this epoch's is the difference) and as the source
  //    field shows them, against the shares.
  ByteModel model(o.context, o.hidden, o.seed);
  model.set_learning_rate(static_cast<float>(o.lr));
  Positions p;
  std::vector<double> each;
  const auto start = Clock::now();
  std::size_t steps = 0;
  std::uint64_t positions = 0;
  bool done = false, exact = true;
  std::vector<std::uint64_t> counted(corpora.size(), 0);  // source_samples before the epoch
  for (std::uint64_t epoch = 0; !done; ++epoch) {
    PerCorpus seen(corpora.size());
    bool whole = true;
    for (const ferry::Batch& batch : train_loader.epoch(epoch)) {
      p.from(batch, o.context);
      model.loss(p.ctx.data(), p.next.data(), p.next.size(), /*train=*/true, &each);
      seen.add(batch, each);
      positions += p.next.size();
      ++steps;
      if (seconds_since(start) >= o.seconds || (o.steps != 0 && steps >= o.steps)) {
        done = true;
        whole = false;
        break;
      }
    }
    const ferry::LoaderStats stats = train_loader.stats();
    std::printf("epoch %llu (%zu steps, %.1f s): training loss",
                static_cast<unsigned long long>(epoch), steps, seconds_since(start));
    for (std::size_t k = 0; k < corpora.size(); ++k) {
      std::printf(" %s %.4f", corpora[k].name.c_str(), seen.bits(k));
    }
    std::printf(" bits/byte\n");
    if (!whole) {
      std::printf("epoch %llu stopped early by the clock or --steps: its shares are not checked\n",
                  static_cast<unsigned long long>(epoch));
      break;
    }
    bool agree = stats.source_samples.size() == corpora.size();
    std::printf("epoch %llu shares (loader stats / source field / largest remainders):",
                static_cast<unsigned long long>(epoch));
    for (std::size_t k = 0; k < corpora.size(); ++k) {
      const std::uint64_t now = k < stats.source_samples.size() ? stats.source_samples[k] : 0;
      const std::uint64_t given = now - counted[k];
      counted[k] = now;
      agree = agree && given == expected[k] && seen.windows[k] == expected[k];
      std::printf(" %s %llu / %llu / %zu", corpora[k].name.c_str(),
                  static_cast<unsigned long long>(given),
                  static_cast<unsigned long long>(seen.windows[k]), expected[k]);
    }
    std::printf(": %s\n", agree ? "exact" : "NOT EXACT");
    std::fflush(stdout);
    exact = exact && agree;
    done = o.epochs != 0 && epoch + 1 >= o.epochs;
  }
  const double train_seconds = seconds_since(start);
  std::printf("trained %zu steps, %.2f M positions in %.1f s (%.0f positions/s)\n", steps,
              static_cast<double>(positions) / 1e6, train_seconds,
              static_cast<double>(positions) / train_seconds);

  // 4. The held-out windows of every corpus through one loader: a Mixture weighted by their
  //    sizes gives each window exactly once, and the source field splits the loss by corpus.
  std::vector<ferry::MixtureSource> held_out;
  held_out.reserve(corpora.size());
  for (const Corpus& c : corpora) {
    held_out.push_back({c.val, static_cast<double>(c.val->size())});
  }
  ferry::MixtureOptions ho;
  ho.source_field = "source";
  ferry::Loader val_loader(ferry::Mixture::open(std::move(held_out), ho), eval);
  PerCorpus val(corpora.size());
  for (const ferry::Batch& batch : val_loader.epoch(0)) {
    p.from(batch, o.context);
    model.loss(p.ctx.data(), p.next.data(), p.next.size(), /*train=*/false, &each);
    val.add(batch, each);
  }
  bool within = true;
  for (std::size_t k = 0; k < corpora.size(); ++k) {
    const Corpus& c = corpora[k];
    const double bits = val.bits(k);
    const double ratio = bits / c.entropy;
    std::printf(
        "held-out %s: %.4f bits/byte over %llu bytes of %llu windows (%.1f%% below its unigram "
        "entropy %.4f)\n",
        c.name.c_str(), bits, static_cast<unsigned long long>(val.positions[k]),
        static_cast<unsigned long long>(val.windows[k]), 100 * (1 - ratio), c.entropy);
    if (val.windows[k] != c.val->size()) {
      std::fprintf(stderr, "train_tokens: %s: %llu held-out windows read, %zu expected\n",
                   c.name.c_str(), static_cast<unsigned long long>(val.windows[k]), c.val->size());
      within = false;
    }
    if (!std::isfinite(bits) || (o.max_bits > 0 && !(bits <= o.max_bits))) {
      std::fprintf(stderr, "train_tokens: %s: held-out %.4f bits/byte is above --max-bits %.4f\n",
                   c.name.c_str(), bits, o.max_bits);
      within = false;
    }
    if (o.max_ratio > 0 && !(ratio <= o.max_ratio)) {
      std::fprintf(stderr,
                   "train_tokens: %s: held-out / unigram = %.4f is above --max-ratio %.4f\n",
                   c.name.c_str(), ratio, o.max_ratio);
      within = false;
    }
  }
  std::printf("loader: %s\n", train_loader.stats().summary().c_str());
  if (!exact) {
    std::fprintf(stderr, "train_tokens: an epoch's shares were not exact\n");
    return 1;
  }
  return within ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  try {
    options = parse_options(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_tokens: %s\n%s", e.what(), kUsage);
    return 2;
  }
  try {
    if (options.convert) {
      return convert(options.corpus, options.out, options.val_fraction, options.shard_tokens);
    }
    return options.mix.empty() ? train(options) : train_mix(options);
  } catch (const std::exception& e) {
    // ferry::DataError names the shard and what is wrong with it (a bad header, a short file).
    std::fprintf(stderr, "train_tokens: %s\n", e.what());
    return 1;
  }
}
