// samples/make_shards: an ImageFolder (root/<class>/<image>) or a numeric CSV written as
// WebDataset shards: plain tar files of about --shard-size bytes, the samples in a shuffled
// order, each sample "<key>.<jpg|png>" (the file's bytes, not re-encoded) and "<key>.cls" (its
// label), or for a CSV "<key>.npy" (the features, float32) and "<key>.cls". Then it opens them
// with ferry::WebDataset and reads every sample once, as a check (which writes each shard's
// index, "<shard>.idx", beside it).
//
// With --upload s3://bucket/prefix, the shards and their indexes are then PUT to
// s3://bucket/prefix/<name> (upload.hpp: libcurl, SigV4; $AWS_ENDPOINT_URL, $AWS_REGION,
// $AWS_ACCESS_KEY_ID, $AWS_SECRET_ACCESS_KEY, $AWS_SESSION_TOKEN as ferry reads them), and
// read back from there once, as a check: a WebDataset over the s3:// URLs, which fetches the
// indexes at open and the shards while it reads.
//
//   make_shards --folder ROOT --out DIR [--shard-size BYTES] [--seed N] [--prefix NAME]
//               [--upload s3://BUCKET/PREFIX]
//   make_shards --csv FILE --out DIR [...]

#include <cstdint>
#include <cstdio>
#include <exception>
#include <ferry/ferry.hpp>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/cli.hpp"
#include "make_shards/pack.hpp"
#include "make_shards/upload.hpp"

namespace {

int usage() {
  std::fprintf(stderr,
               "usage: make_shards (--folder ROOT | --csv FILE) --out DIR [--shard-size BYTES] "
               "[--seed N] [--prefix NAME] [--upload s3://BUCKET/PREFIX]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::string folder;
    std::string csv;
    std::string upload;
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
      } else if (flag == "--upload") {
        upload = value;
      } else {
        return usage();
      }
    }
    if (folder.empty() == csv.empty() || options.out.empty()) return usage();
    std::pair<std::string, std::string> target;  // bucket, key prefix
    if (!upload.empty()) target = make_shards::split_s3(upload);
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
    if (read != count) return 1;
    if (upload.empty()) return 0;
    // The shards and their indexes to S3, then read back from there.
    const auto up = common::Clock::now();
    const auto& [bucket, prefix] = target;
    std::vector<std::filesystem::path> urls;
    std::uint64_t bytes = 0;
    for (const auto& shard : shards) {
      const std::string key = (prefix.empty() ? "" : prefix + "/") + shard.filename().string();
      for (const std::string_view suffix : {".idx", ""}) {  // a shard's index first
        const std::filesystem::path file = shard.string() + std::string(suffix);
        if (!suffix.empty() && !std::filesystem::exists(file)) continue;
        make_shards::upload(file, bucket, key + std::string(suffix));
        bytes += std::filesystem::file_size(file);
      }
      urls.emplace_back("s3://" + bucket + "/" + key);
    }
    const auto remote = ferry::WebDataset::open(urls);
    ferry::Loader remote_loader(remote, lo);
    std::size_t read_remote = 0;
    for (const ferry::Batch& b : remote_loader.epoch(0)) read_remote += b.size();
    std::printf("%.1f MB uploaded to %s (%.1f s); all %zu read back from there\n",
                static_cast<double>(bytes) / 1e6, upload.c_str(), common::seconds_since(up),
                read_remote);
    return read_remote == count ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_shards: %s\n", e.what());
    return 1;
  }
}
