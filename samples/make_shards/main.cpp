// samples/make_shards: an ImageFolder (root/<class>/<image>) or a numeric CSV written as
// WebDataset shards: plain tar files of about --shard-size bytes, the samples in a shuffled
// order, each sample "<key>.<jpg|png>" (the file's bytes, not re-encoded) and "<key>.cls" (its
// label), or for a CSV "<key>.npy" (the features, float32) and "<key>.cls". Then it opens them
// with ferry::WebDataset and reads every sample once, as a check.
//
//   make_shards --folder ROOT --out DIR [--shard-size BYTES] [--seed N] [--prefix NAME]
//   make_shards --csv FILE --out DIR [...]

#include <cstdio>
#include <exception>
#include <ferry/ferry.hpp>
#include <string>
#include <vector>

#include "common/cli.hpp"
#include "make_shards/pack.hpp"

namespace {

int usage() {
  std::fprintf(stderr,
               "usage: make_shards (--folder ROOT | --csv FILE) --out DIR [--shard-size BYTES] "
               "[--seed N] [--prefix NAME]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::string folder;
    std::string csv;
    make_shards::PackOptions options;
    for (int i = 1; i < argc; ++i) {
      const std::string flag = argv[i];
      if (i + 1 >= argc) return usage();
      const std::string value = argv[++i];
      if (flag == "--folder") {
        folder = value;
      } else if (flag == "--csv") {
        csv = value;
      } else if (flag == "--out") {
        options.out = value;
      } else if (flag == "--shard-size") {
        options.shard_bytes = common::parse_number(flag, value);
      } else if (flag == "--seed") {
        options.seed = common::parse_number(flag, value);
      } else if (flag == "--prefix") {
        options.prefix = value;
      } else {
        return usage();
      }
    }
    if (folder.empty() == csv.empty() || options.out.empty()) return usage();
    const auto start = common::Clock::now();
    std::vector<std::filesystem::path> shards;
    std::size_t count = 0;
    if (!folder.empty()) {
      const auto images = ferry::ImageFolder::open(folder);
      count = images->size();
      shards = make_shards::pack(
          count,
          [&](std::size_t i) {
            return std::vector<make_shards::Member>{
                {make_shards::extension(images->path(i)), make_shards::file_bytes(images->path(i))},
                {"cls", std::to_string(images->label(i))}};
          },
          options);
    } else {
      const auto ds = ferry::CsvDataset::open(csv);
      count = ds->size();
      const std::size_t f = ds->num_features();
      shards = make_shards::pack(
          count,
          [&](std::size_t i) {
            std::vector<make_shards::Member> m{
                {"npy", make_shards::npy_f32(ds->features().data() + i * f, f)}};
            if (!ds->labels().empty()) m.push_back({"cls", std::to_string(ds->labels()[i])});
            return m;
          },
          options);
    }
    // The check: every sample read back once.
    const auto ds = ferry::WebDataset::open(shards);
    ferry::LoaderOptions lo;
    lo.batch_size = 256;
    lo.device = ferry::Device::cpu();
    ferry::Loader loader(ds, lo);
    std::size_t read = 0;
    for (const ferry::Batch& b : loader.epoch(0)) read += b.size();
    std::printf("%zu samples in %zu shards under %s (%.1f s); all %zu read back\n", count,
                shards.size(), options.out.string().c_str(), common::seconds_since(start), read);
    return read == count ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_shards: %s\n", e.what());
    return 1;
  }
}
