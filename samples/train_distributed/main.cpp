// train_distributed: the Fashion-MNIST MLP of train_fashion_mnist, data-parallel over MPI.
//
//   mpirun -np 2 train_distributed [--epochs N] [--batch N] [--seed S] [--data DIR]
//   mpirun -np 2 train_distributed --check-shards [--data DIR]
//
// Every process (rank) makes its own Loader from LoaderOptions::from_env(), which reads its rank
// and the world size from the launcher's variables: OpenMPI's OMPI_COMM_WORLD_RANK / _SIZE /
// _LOCAL_RANK under mpirun, torchrun's RANK / WORLD_SIZE / LOCAL_RANK under torchrun. All ranks
// shuffle the same epoch order (same seed); each takes its own disjoint share of it, and every
// rank gets the same number of batches every epoch, so no rank waits in an all-reduce for
// another that ran out. Each rank computes the gradients of its batch, MPI_Allreduce sums them
// over the ranks, each divides by the world size and takes the same Adam step: the models stay
// equal, as if one process trained on batches of world size x --batch samples. Rank 0 then
// measures the test accuracy. On GPUs the same program would keep one loader per GPU
// (from_env() picks cuda:LOCAL_RANK) and average gradients with NCCL instead.
//
// --check-shards: no training; every rank lists the samples of its shard for two epochs, rank 0
// gathers the lists (MPI_Gatherv) and checks that the ranks got as many batches, that the shards
// are disjoint and together the whole training set (end-of-epoch padding aside), and that the
// job's LoaderState resumes the epoch half way on another world size.

#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/cli.hpp"
#include "common/fashion_mnist.hpp"
#include "common/mlp.hpp"
#include "ferry/ferry.hpp"

namespace {

using common::Clock;
using common::seconds_since;

constexpr std::size_t kSide = 28;  // images are kSide x kSide pixels
constexpr std::size_t kInputs = kSide * kSide;
constexpr std::size_t kHidden = 128;
constexpr std::size_t kClasses = 10;

int mpi_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

int mpi_size() {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

// ---- command line ---------------------------------------------------------------------------

struct Options {
  std::size_t epochs = 3;
  std::size_t batch = 64;  // per rank
  std::uint64_t seed = 1;
  bool check_shards = false;
  std::filesystem::path data = "/usr/share/datasets/fashion-mnist";
};

constexpr const char* kUsage =
    "usage: mpirun -np W train_distributed [--epochs N] [--batch N] [--seed S] [--data DIR]\n"
    "                                      [--check-shards]\n"
    "  --epochs N      passes over the training set (default 3)\n"
    "  --batch N       samples per batch on each rank (default 64)\n"
    "  --seed S        seed of the shuffle and the initial weights (default 1)\n"
    "  --data DIR      folder with Fashion-MNIST's four .gz IDX files\n"
    "                  (default /usr/share/datasets/fashion-mnist)\n"
    "  --check-shards  check that the ranks' shards are disjoint and complete; no training\n";

Options parse_options(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (flag == "--check-shards") {
      options.check_shards = true;
      continue;
    }
    if (i + 1 == argc) throw std::invalid_argument("unknown option or missing value: " + flag);
    const std::string value = argv[++i];
    if (flag == "--epochs") {
      options.epochs = common::parse_number(flag, value);
    } else if (flag == "--batch") {
      options.batch = common::parse_number(flag, value);
    } else if (flag == "--seed") {
      options.seed = common::parse_number(flag, value);
    } else if (flag == "--data") {
      options.data = value;
    } else {
      throw std::invalid_argument("unknown option: " + flag);
    }
  }
  if (options.batch == 0) throw std::invalid_argument("--batch must be at least 1");
  return options;
}

// ---- training -------------------------------------------------------------------------------

// Sums every layer's gradients over the ranks and divides by their number: each rank then holds
// the gradient of the whole global batch (the mean of the ranks' means).
void average_gradients(std::vector<common::Dense>& layers, int world) {
  const float scale = 1.0f / static_cast<float>(world);
  for (common::Dense& layer : layers) {
    for (common::Param* p : {&layer.w, &layer.b}) {
      MPI_Allreduce(MPI_IN_PLACE, p->grad.data(), static_cast<int>(p->grad.size()), MPI_FLOAT,
                    MPI_SUM, MPI_COMM_WORLD);
      for (float& g : p->grad) g *= scale;
    }
  }
}

int train(const Options& options, const std::shared_ptr<ferry::IdxDataset>& train_set,
          const std::shared_ptr<ferry::IdxDataset>& test_set) {
  // One loader per rank: rank, world size and device from the launcher's environment.
  ferry::LoaderOptions train_options = ferry::LoaderOptions::from_env();
  train_options.batch_size = options.batch;
  train_options.shuffle = true;
  train_options.seed = options.seed;  // the same on every rank: one epoch order, split
  train_options.workers = 1;          // the ranks share the machine's cores
  ferry::Loader train_loader(train_set, train_options);
  const int rank = train_options.rank;
  const int world = train_options.world_size;
  if (world != mpi_size() || rank != mpi_rank()) {
    throw std::runtime_error("the launcher's variables say rank " + std::to_string(rank) + " of " +
                             std::to_string(world) + ", MPI says " + std::to_string(mpi_rank()) +
                             " of " + std::to_string(mpi_size()));
  }

  // The whole test set, on rank 0 only.
  ferry::LoaderOptions test_options = train_options;
  test_options.shuffle = false;
  test_options.rank = 0;
  test_options.world_size = 1;
  std::unique_ptr<ferry::Loader> test_loader;
  if (rank == 0) test_loader = std::make_unique<ferry::Loader>(test_set, test_options);

  if (rank == 0) {
    std::printf("ferry %s: %d ranks on %s, batches of %zu per rank (%zu a step), %zu per epoch\n",
                ferry::kVersion, world, train_options.device.str().c_str(), options.batch,
                options.batch * static_cast<std::size_t>(world), train_loader.batches_per_epoch());
    std::fflush(stdout);
  }

  // The same seed on every rank: the same initial weights.
  common::Mlp model(kInputs, kHidden, kClasses, options.seed);
  common::Trainer trainer(model, options.batch, /*learning_rate=*/1e-3f);
  const auto reduce = [world](std::vector<common::Dense>& layers) {
    average_gradients(layers, world);
  };

  for (std::size_t epoch = 0; epoch < options.epochs; ++epoch) {
    const auto start = Clock::now();
    double loss_sum = 0;
    std::size_t samples = 0;
    for (const ferry::Batch& batch : train_loader.epoch(epoch)) {
      const ferry::Tensor x = common::to_host_pixels(batch["image"]);
      const ferry::Tensor y = batch["label"].cpu();
      loss_sum += trainer.step(x.data<float>(), y.data<std::int64_t>(), batch.size(), reduce);
      samples += batch.size();
    }
    // The job's mean loss: every rank's sums.
    double sums[2] = {loss_sum, static_cast<double>(samples)};
    MPI_Allreduce(MPI_IN_PLACE, sums, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    const double seconds = seconds_since(start);
    if (rank == 0) {
      const double test_accuracy = common::accuracy(model, *test_loader);
      std::printf("epoch %zu/%zu: mean training loss %.4f, %.0f samples/s over %d ranks (%.1f s)\n",
                  epoch + 1, options.epochs, sums[0] / sums[1], sums[1] / seconds, world, seconds);
      std::printf("test accuracy: %.4f\n", test_accuracy);
      std::printf("loader (rank 0): %s\n", train_loader.stats().summary().c_str());
      std::fflush(stdout);
    }
  }
  return 0;
}

// ---- --check-shards -------------------------------------------------------------------------

// Every rank's values at rank 0 (empty elsewhere), rank after rank.
std::vector<std::vector<std::uint64_t>> gather(const std::vector<std::uint64_t>& mine, int world) {
  const int count = static_cast<int>(mine.size());
  std::vector<int> counts(static_cast<std::size_t>(world)), displs(static_cast<std::size_t>(world));
  MPI_Gather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  int total = 0;
  for (std::size_t r = 0; r < counts.size(); ++r) {
    displs[r] = total;
    total += counts[r];
  }
  std::vector<std::uint64_t> all(mpi_rank() == 0 ? static_cast<std::size_t>(total) : 0);
  MPI_Gatherv(mine.data(), count, MPI_UINT64_T, all.data(), counts.data(), displs.data(),
              MPI_UINT64_T, 0, MPI_COMM_WORLD);
  std::vector<std::vector<std::uint64_t>> out;
  if (mpi_rank() != 0) return out;
  for (std::size_t r = 0; r < counts.size(); ++r) {
    out.emplace_back(all.begin() + displs[r], all.begin() + displs[r] + counts[r]);
  }
  return out;
}

// Rank 0: fails unless every sample of [0, n) is in `shards` and at most `padding` of them twice.
bool check_cover(const std::vector<std::vector<std::uint64_t>>& shards, std::size_t n,
                 std::size_t padding, const char* what) {
  std::vector<int> seen(n, 0);
  std::size_t total = 0;
  for (const auto& shard : shards) {
    for (const std::uint64_t i : shard) {
      if (i >= n) {
        std::printf("%s: sample %llu is out of range\n", what, static_cast<unsigned long long>(i));
        return false;
      }
      ++seen[i];
      ++total;
    }
  }
  const auto missing = static_cast<std::size_t>(std::count(seen.begin(), seen.end(), 0));
  const std::size_t repeated = total + missing - n;
  std::printf("%s: %zu samples over %zu ranks, %zu missing, %zu repeated (padding allows %zu)\n",
              what, total, shards.size(), missing, repeated, padding);
  return missing == 0 && repeated <= padding;
}

int check_shards(const Options& options, const std::shared_ptr<ferry::IdxDataset>& train_set) {
  ferry::LoaderOptions o = ferry::LoaderOptions::from_env();
  o.batch_size = options.batch;
  o.shuffle = true;
  o.seed = options.seed;
  o.workers = 1;
  const int world = o.world_size;
  const std::size_t n = train_set->size();
  const std::size_t padding = (n + static_cast<std::size_t>(world) - 1) /
                                  static_cast<std::size_t>(world) *
                                  static_cast<std::size_t>(world) -
                              n;
  bool ok = true;
  ferry::Loader loader(train_set, o);
  for (std::uint64_t epoch = 0; epoch < 2; ++epoch) {
    std::vector<std::uint64_t> mine, batches;
    for (const ferry::Batch& b : loader.epoch(epoch)) {
      mine.insert(mine.end(), b.indices().begin(), b.indices().end());
    }
    batches.push_back(loader.batches_per_epoch());
    const auto counts = gather(batches, world);
    const auto shards = gather(mine, world);
    if (mpi_rank() == 0) {
      for (const auto& c : counts) ok = ok && c[0] == counts[0][0];
      std::printf("epoch %llu: %llu batches on every rank: %s\n",
                  static_cast<unsigned long long>(epoch),
                  static_cast<unsigned long long>(counts[0][0]), ok ? "yes" : "NO");
      const std::string what = "epoch " + std::to_string(epoch) + " shards";
      ok = check_cover(shards, n, padding, what.c_str()) && ok;
    }
  }

  // Elastic resume: the job stops half way through epoch 2; its state (any rank's) is resumed
  // by a job of one rank with another batch size, which must deliver exactly the rest.
  std::vector<std::uint64_t> before;
  ferry::LoaderState state;
  {
    ferry::Epoch ep = loader.epoch(2);
    const std::size_t half = loader.batches_per_epoch() / 2;
    for (std::size_t k = 0; k < half; ++k) {
      const ferry::Batch* b = ep.next();
      before.insert(before.end(), b->indices().begin(), b->indices().end());
    }
    state = loader.state();
  }
  const auto parts = gather(before, world);
  const auto texts = gather(std::vector<std::uint64_t>{state.position, state.next_batch}, world);
  if (mpi_rank() == 0) {
    for (const auto& t : texts) ok = ok && t == texts[0];
    std::printf("state: %s (%s on every rank)\n", state.str().c_str(),
                ok ? "the same" : "NOT the same");
    ferry::LoaderOptions single = o;
    single.rank = 0;
    single.world_size = 1;
    single.batch_size = options.batch * 3 + 1;
    ferry::Loader resumed(train_set, single);
    std::vector<std::uint64_t> rest;
    for (const ferry::Batch& b : resumed.resume(state)) {
      rest.insert(rest.end(), b.indices().begin(), b.indices().end());
    }
    std::vector<std::vector<std::uint64_t>> all = parts;
    all.push_back(rest);
    ok = check_cover(all, n, 0, "epoch 2 resumed on 1 rank") && ok;
  }
  int result = ok ? 0 : 1;
  MPI_Bcast(&result, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (mpi_rank() == 0) std::printf("shards: %s\n", result == 0 ? "ok" : "FAILED");
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int status = 0;
  try {
    const Options options = parse_options(argc, argv);
    const auto train_set = ferry::IdxDataset::open(options.data / "train-images-idx3-ubyte.gz",
                                                   options.data / "train-labels-idx1-ubyte.gz");
    const auto test_set = ferry::IdxDataset::open(options.data / "t10k-images-idx3-ubyte.gz",
                                                  options.data / "t10k-labels-idx1-ubyte.gz");
    status = options.check_shards ? check_shards(options, train_set)
                                  : train(options, train_set, test_set);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_distributed (rank %d): %s\n", mpi_rank(), e.what());
    // One rank failing alone would leave the others waiting in a collective: stop them all.
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  MPI_Finalize();
  return status;
}
