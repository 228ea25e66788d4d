// samples/common/mlp.hpp: the small classifier that the training samples feed with ferry's
// batches, in plain C++ so that they need nothing but ferry.
//
// An Mlp is softmax regression (no hidden layer) or one hidden layer with ReLU; a Trainer takes
// Adam steps on its mean cross-entropy. The math is written as simple loops that the compiler
// vectorizes. Sizes and indices are std::size_t throughout, so that no index arithmetic needs a
// cast. Copy this header along with the sample that uses it.

#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace common {

// One weight array with what Adam keeps for it: the gradient and two running moments.
struct Param {
  std::vector<float> value, grad, m, v;

  explicit Param(std::size_t size) : value(size, 0.0f), grad(size), m(size), v(size) {}
};

// A fully connected layer, y = x · W + b. W is stored input-major (w[i * outputs + j] joins
// input i to output j), so every inner loop walks a contiguous row of outputs.
struct Dense {
  std::size_t inputs, outputs;
  Param w, b;

  Dense(std::size_t in, std::size_t out) : inputs(in), outputs(out), w(in * out), b(out) {}

  // y [n, outputs] of n rows x [n, inputs].
  void forward(const float* x, std::size_t n, float* y) const {
    for (std::size_t r = 0; r < n; ++r) {
      float* yr = y + r * outputs;
      std::copy(b.value.begin(), b.value.end(), yr);
      for (std::size_t i = 0; i < inputs; ++i) {
        const float xi = x[r * inputs + i];
        const float* row = &w.value[i * outputs];
        for (std::size_t j = 0; j < outputs; ++j) yr[j] += xi * row[j];
      }
    }
  }

  // Adds the gradients of n rows to w.grad and b.grad, given the rows' inputs x [n, inputs] and
  // the loss's gradient at their outputs dy [n, outputs]. Writes the gradient at the inputs to
  // dx [n, inputs] unless dx is null (the first layer has no use for it).
  void backward(const float* x, const float* dy, std::size_t n, float* dx) {
    for (std::size_t r = 0; r < n; ++r) {
      const float* dyr = dy + r * outputs;
      for (std::size_t j = 0; j < outputs; ++j) b.grad[j] += dyr[j];
      for (std::size_t i = 0; i < inputs; ++i) {
        const float xi = x[r * inputs + i];
        float* g = &w.grad[i * outputs];
        if (dx == nullptr) {
          for (std::size_t j = 0; j < outputs; ++j) g[j] += xi * dyr[j];
          continue;
        }
        const float* row = &w.value[i * outputs];
        float sum = 0.0f;
        for (std::size_t j = 0; j < outputs; ++j) {
          g[j] += xi * dyr[j];
          sum += row[j] * dyr[j];
        }
        dx[r * inputs + i] = sum;
      }
    }
  }
};

// logits = W2 · relu(W1 · x + b1) + b2, or logits = W · x + b (softmax regression) when there
// is no hidden layer.
class Mlp {
 public:
  // hidden 0: softmax regression. He initialisation: normal weights with variance 2 / fan_in,
  // zero biases, drawn layer after layer from one generator seeded with `seed`.
  Mlp(std::size_t inputs, std::size_t hidden, std::size_t classes, std::uint64_t seed) {
    if (hidden == 0) {
      layers_.emplace_back(inputs, classes);
    } else {
      layers_.emplace_back(inputs, hidden);
      layers_.emplace_back(hidden, classes);
    }
    std::mt19937_64 rng(seed);
    for (Dense& layer : layers_) {
      std::normal_distribution<float> normal(0.0f,
                                             std::sqrt(2.0f / static_cast<float>(layer.inputs)));
      for (float& w : layer.w.value) w = normal(rng);
    }
  }

  std::size_t inputs() const { return layers_.front().inputs; }
  std::size_t hidden() const { return layers_.size() == 1 ? 0 : layers_.front().outputs; }
  std::size_t classes() const { return layers_.back().outputs; }
  std::vector<Dense>& layers() { return layers_; }

  // Logits z [n, classes()] of n rows x [n, inputs()]. With a hidden layer, its activations go
  // to h [n, hidden()] (otherwise h is not used and may be null).
  void forward(const float* x, std::size_t n, float* h, float* z) const {
    if (layers_.size() == 1) {
      layers_[0].forward(x, n, z);
      return;
    }
    layers_[0].forward(x, n, h);
    for (std::size_t i = 0; i < n * hidden(); ++i) h[i] = std::max(h[i], 0.0f);  // ReLU
    layers_[1].forward(h, n, z);
  }

  // How many of n rows x [n, inputs()] the model gives their label y [n] as the top class.
  std::size_t count_correct(const float* x, const std::int64_t* y, std::size_t n) const {
    std::vector<float> h(n * hidden()), z(n * classes());
    forward(x, n, h.data(), z.data());
    std::size_t correct = 0;
    for (std::size_t r = 0; r < n; ++r) {
      const float* zr = &z[r * classes()];
      if (std::max_element(zr, zr + classes()) - zr == y[r]) ++correct;
    }
    return correct;
  }

 private:
  std::vector<Dense> layers_;
};

// Softmax of one row of `classes` logits, in place; returns log(sum(exp(z))) for the loss.
inline float softmax(float* z, std::size_t classes) {
  const float top = *std::max_element(z, z + classes);
  float sum = 0.0f;
  for (std::size_t k = 0; k < classes; ++k) {
    z[k] = std::exp(z[k] - top);
    sum += z[k];
  }
  for (std::size_t k = 0; k < classes; ++k) z[k] /= sum;
  return top + std::log(sum);
}

// Trains an Mlp with Adam (Kingma & Ba, 2015) on mean cross-entropy. Buffers for one batch are
// made once and reused.
class Trainer {
 public:
  Trainer(Mlp& model, std::size_t max_batch, float learning_rate)
      : model_(model),
        lr_(learning_rate),
        h_(max_batch * model.hidden()),
        p_(max_batch * model.classes()),
        dh_(max_batch * model.hidden()) {}

  // One step on n rows x [n, inputs] with labels y [n] (class ids 0..classes-1); n is at most
  // max_batch. Returns the batch's summed cross-entropy. `reduce`, when given, sees the layers'
  // gradients before the update: data-parallel training averages them over its processes there.
  double step(const float* x, const std::int64_t* y, std::size_t n,
              const std::function<void(std::vector<Dense>&)>& reduce = {}) {
    Mlp& m = model_;
    const std::size_t classes = m.classes();
    m.forward(x, n, h_.data(), p_.data());

    // Loss, and its gradient at the logits: dL/dz = (softmax(z) - onehot(y)) / n, into p_.
    double loss = 0;
    for (std::size_t r = 0; r < n; ++r) {
      if (y[r] < 0 || static_cast<std::size_t>(y[r]) >= classes) {
        throw std::invalid_argument("label " + std::to_string(y[r]) + " is not a class id 0.." +
                                    std::to_string(classes - 1));
      }
      float* pr = &p_[r * classes];
      const auto label = static_cast<std::size_t>(y[r]);
      const float z_label = pr[label];  // the true class's logit, before softmax overwrites it
      loss += softmax(pr, classes) - z_label;
      pr[label] -= 1.0f;
      for (std::size_t k = 0; k < classes; ++k) pr[k] /= static_cast<float>(n);
    }

    // Back through the layers, last first: a hidden layer passes its gradient back through the
    // ReLU (zero where the unit was off).
    std::vector<Dense>& layers = m.layers();
    for (Dense& layer : layers) {
      std::fill(layer.w.grad.begin(), layer.w.grad.end(), 0.0f);
      std::fill(layer.b.grad.begin(), layer.b.grad.end(), 0.0f);
    }
    if (layers.size() == 1) {
      layers[0].backward(x, p_.data(), n, nullptr);
    } else {
      layers[1].backward(h_.data(), p_.data(), n, dh_.data());
      for (std::size_t i = 0; i < n * m.hidden(); ++i) dh_[i] = h_[i] > 0.0f ? dh_[i] : 0.0f;
      layers[0].backward(x, dh_.data(), n, nullptr);
    }

    if (reduce) reduce(layers);
    ++steps_;
    for (Dense& layer : layers) {
      adam(layer.w);
      adam(layer.b);
    }
    return loss;
  }

 private:
  void adam(Param& p) const {
    constexpr float kBeta1 = 0.9f, kBeta2 = 0.999f, kEps = 1e-8f;
    // Bias correction of the moments, folded into the step size.
    const auto t = static_cast<double>(steps_);
    const auto lr = static_cast<float>(lr_ * std::sqrt(1.0 - std::pow(kBeta2, t)) /
                                       (1.0 - std::pow(kBeta1, t)));
    for (std::size_t i = 0; i < p.value.size(); ++i) {
      p.m[i] = kBeta1 * p.m[i] + (1.0f - kBeta1) * p.grad[i];
      p.v[i] = kBeta2 * p.v[i] + (1.0f - kBeta2) * p.grad[i] * p.grad[i];
      p.value[i] -= lr * p.m[i] / (std::sqrt(p.v[i]) + kEps);
    }
  }

  Mlp& model_;
  float lr_;
  std::uint64_t steps_ = 0;
  std::vector<float> h_, p_, dh_;  // hidden activations, probabilities, hidden gradients
};

}  // namespace common
