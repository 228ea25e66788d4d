// samples/common/fashion_mnist.hpp: what the Fashion-MNIST samples share between the loader's
// batches and the Mlp: the pixels on the host, and the test accuracy.

#pragma once

#include <cstddef>
#include <cstdint>

#include "common/mlp.hpp"
#include "ferry/ferry.hpp"

namespace common {

// u8 images [n, 28, 28] on the loader's device to f32 pixels in [0, 1] on the host, [n, 784].
// normalize_images() converts on the images' device (a kernel on a GPU); with mean 0 and std 1
// it only scales by 1/255. It wants [N, H, W, C] images, so the single channel is made explicit
// first. On the CPU, cpu() returns the same tensor; on a GPU it copies the batch to the host.
inline ferry::Tensor to_host_pixels(const ferry::Tensor& images) {
  const ferry::Tensor nhwc = images.reshape({images.shape(0), images.shape(1), images.shape(2), 1});
  return ferry::normalize_images(nhwc, {.mean = {0.0f}, .std = {1.0f}}).cpu();
}

// Fraction of `loader`'s samples (one epoch) that the model classifies correctly.
inline double accuracy(const Mlp& model, ferry::Loader& loader) {
  std::size_t correct = 0, total = 0;
  for (const ferry::Batch& batch : loader.epoch(0)) {
    const ferry::Tensor x = to_host_pixels(batch["image"]);
    const ferry::Tensor y = batch["label"].cpu();
    correct += model.count_correct(x.data<float>(), y.data<std::int64_t>(), batch.size());
    total += batch.size();
  }
  return static_cast<double>(correct) / static_cast<double>(total);
}

}  // namespace common
