#pragma once

// LoaderOptions::from_env() with the environment and the GPU count passed in, so that tests
// cover every launcher layout, with and without GPUs, on any machine.

#include <functional>
#include <optional>
#include <string_view>

#include "ferry/loader.hpp"

namespace ferry::detail {

/// An environment: the text of variable `name`, or nothing when it is unset.
using EnvLookup = std::function<std::optional<std::string_view>(const char* name)>;

/// The process's environment (getenv). Call it at setup, not while another thread sets
/// variables.
std::optional<std::string_view> process_env(const char* name);

/// What LoaderOptions::from_env() returns when the environment is `env` and `gpu_count` GPUs
/// are usable; from_env() is options_from_env(process_env, cuda_device_count()).
/// \throws ConfigError, DeviceError as LoaderOptions::from_env().
LoaderOptions options_from_env(const EnvLookup& env, int gpu_count);

}  // namespace ferry::detail
