#pragma once

#include <cuda_runtime_api.h>

/// Queues a one-thread kernel on `stream` that spins for `cycles` SM clock cycles.
cudaError_t launch_spin(long long cycles, cudaStream_t stream);
