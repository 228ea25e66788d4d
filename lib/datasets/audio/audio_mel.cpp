// The log-mel spectrogram, as torchaudio's MelSpectrogram (then log): centered frames of a
// reflect-padded signal, a periodic Hann window, FFTW's real FFT, power 2, triangular filters on
// the "htk" mel scale without normalization, log(max(power, floor)).

#include <fftw3.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <map>
#include <memory>
#include <mutex>
#include <numbers>
#include <tuple>
#include <vector>

#include "datasets/audio/audio_internal.hpp"

namespace ferry::detail::audio {
namespace {

double hz_to_mel(double hz) { return 2595.0 * std::log10(1.0 + hz / 700.0); }
double mel_to_hz(double mel) { return 700.0 * (std::pow(10.0, mel / 2595.0) - 1.0); }

struct PlanDeleter {
  void operator()(fftwf_plan_s* p) const noexcept { fftwf_destroy_plan(p); }
};

// What one (options, rate) needs, made once: the window, each filter's bins and weights, and
// an FFTW plan that any thread executes on arrays of its own (fftw_execute_dft_r2c is
// thread-safe; making a plan is not, hence the lock around the cache).
struct MelPlan {
  int n_fft = 0, bins = 0;
  std::vector<float> window;
  std::vector<int> first, last;             // per filter: its bins [first, last)
  std::vector<std::vector<float>> weights;  // per filter: the weight of each of those bins
  std::unique_ptr<fftwf_plan_s, PlanDeleter> plan;
};

using MelKey = std::tuple<int, int, int, double, double, int>;

std::unique_ptr<MelPlan> make_plan(const MelOptions& o, int rate) {
  auto p = std::make_unique<MelPlan>();
  p->n_fft = o.n_fft;
  p->bins = o.n_fft / 2 + 1;
  p->window.resize(static_cast<std::size_t>(o.n_fft));
  for (int k = 0; k < o.n_fft; ++k) {
    p->window[static_cast<std::size_t>(k)] =
        static_cast<float>(0.5 - 0.5 * std::cos(2.0 * std::numbers::pi * k / o.n_fft));
  }
  // torchaudio's melscale_fbanks: bins at linspace(0, rate // 2, bins), the filters' corners at
  // linspace(mel(f_min), mel(f_max), n_mels + 2) back in Hz.
  const int nyquist = rate / 2;  // torchaudio's sample_rate // 2, for f_max and the bins
  const double f_max = o.f_max > 0 ? o.f_max : static_cast<double>(nyquist);
  const double m_min = hz_to_mel(o.f_min), m_max = hz_to_mel(f_max);
  std::vector<double> corner(static_cast<std::size_t>(o.n_mels + 2));
  for (int i = 0; i < o.n_mels + 2; ++i) {
    corner[static_cast<std::size_t>(i)] = mel_to_hz(m_min + (m_max - m_min) * i / (o.n_mels + 1));
  }
  const auto top = static_cast<double>(nyquist);
  for (int m = 0; m < o.n_mels; ++m) {
    const double lo = corner[static_cast<std::size_t>(m)];
    const double mid = corner[static_cast<std::size_t>(m) + 1];
    const double hi = corner[static_cast<std::size_t>(m) + 2];
    std::vector<float> w;
    int first = -1, last = -1;
    for (int b = 0; b < p->bins; ++b) {
      const double f = p->bins == 1 ? 0.0 : top * b / (p->bins - 1);
      const double down = (f - lo) / (mid - lo), up = (hi - f) / (hi - mid);
      const double v = std::max(0.0, std::min(down, up));
      if (v > 0) {
        if (first < 0) first = b;
        // Bins between two weights above zero are kept, so a filter is one run of bins.
        w.resize(static_cast<std::size_t>(b - first), 0.0F);
        w.push_back(static_cast<float>(v));
        last = b + 1;
      }
    }
    p->first.push_back(std::max(first, 0));
    p->last.push_back(std::max(last, 0));
    p->weights.push_back(std::move(w));
  }
  std::vector<float> in(static_cast<std::size_t>(o.n_fft));
  std::vector<std::complex<float>> out(static_cast<std::size_t>(p->bins));
  p->plan.reset(fftwf_plan_dft_r2c_1d(o.n_fft, in.data(),
                                      reinterpret_cast<fftwf_complex*>(out.data()),
                                      FFTW_ESTIMATE | FFTW_UNALIGNED));
  return p;
}

const MelPlan& mel_plan(const MelOptions& o, int rate) {
  static std::mutex lock;
  static std::map<MelKey, std::unique_ptr<MelPlan>> plans;
  const MelKey key{o.n_fft, o.hop, o.n_mels, o.f_min, o.f_max, rate};
  const std::lock_guard<std::mutex> hold(lock);
  std::unique_ptr<MelPlan>& p = plans[key];
  if (!p) p = make_plan(o, rate);
  return *p;
}

// Index i of a signal of n samples, reflected at both ends as often as needed (torch's reflect
// pad, carried on for a signal shorter than the pad).
std::int64_t reflect(std::int64_t i, std::int64_t n) {
  if (n == 1) return 0;
  const std::int64_t period = 2 * (n - 1);
  i %= period;
  if (i < 0) i += period;
  return i < n ? i : period - i;
}

}  // namespace

void log_mel(std::span<const float> wave, const MelOptions& mel, int sample_rate,
             std::span<float> out) {
  const MelPlan& p = mel_plan(mel, sample_rate);
  const auto n = static_cast<std::int64_t>(wave.size());
  const std::int64_t frames = mel_frames(n, mel);
  const int pad = mel.n_fft / 2;
  std::vector<float> in(static_cast<std::size_t>(mel.n_fft));
  std::vector<std::complex<float>> spectrum(static_cast<std::size_t>(p.bins));
  std::vector<float> power(static_cast<std::size_t>(p.bins));
  const auto floor = static_cast<float>(mel.log_floor);
  for (std::int64_t t = 0; t < frames; ++t) {
    const std::int64_t at = t * mel.hop - pad;
    for (int k = 0; k < mel.n_fft; ++k) {
      std::int64_t i = at + k;
      if (i < 0 || i >= n) i = reflect(i, n);
      in[static_cast<std::size_t>(k)] =
          wave[static_cast<std::size_t>(i)] * p.window[static_cast<std::size_t>(k)];
    }
    fftwf_execute_dft_r2c(p.plan.get(), in.data(),
                          reinterpret_cast<fftwf_complex*>(spectrum.data()));
    for (int b = 0; b < p.bins; ++b)
      power[static_cast<std::size_t>(b)] = std::norm(spectrum[static_cast<std::size_t>(b)]);
    float* row = out.data() + t * mel.n_mels;
    for (int m = 0; m < mel.n_mels; ++m) {
      const auto& w = p.weights[static_cast<std::size_t>(m)];
      float sum = 0;
      for (int b = p.first[static_cast<std::size_t>(m)]; b < p.last[static_cast<std::size_t>(m)];
           ++b) {
        sum += power[static_cast<std::size_t>(b)] *
               w[static_cast<std::size_t>(b - p.first[static_cast<std::size_t>(m)])];
      }
      row[m] = std::log(std::max(sum, floor));
    }
  }
}

}  // namespace ferry::detail::audio
