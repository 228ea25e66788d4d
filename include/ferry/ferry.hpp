#pragma once

/// \file Everything a ferry user includes.

#include "ferry/audio.hpp"          // IWYU pragma: export
#include "ferry/csv_dataset.hpp"    // IWYU pragma: export
#include "ferry/dataset.hpp"        // IWYU pragma: export
#include "ferry/device.hpp"         // IWYU pragma: export
#include "ferry/dtype.hpp"          // IWYU pragma: export
#include "ferry/error.hpp"          // IWYU pragma: export
#include "ferry/event.hpp"          // IWYU pragma: export
#include "ferry/idx_dataset.hpp"    // IWYU pragma: export
#include "ferry/image.hpp"          // IWYU pragma: export
#include "ferry/image_folder.hpp"   // IWYU pragma: export
#include "ferry/limits.hpp"         // IWYU pragma: export
#include "ferry/loader.hpp"         // IWYU pragma: export
#include "ferry/memory.hpp"         // IWYU pragma: export
#include "ferry/mixture.hpp"        // IWYU pragma: export
#include "ferry/ops.hpp"            // IWYU pragma: export
#include "ferry/read_sample.hpp"    // IWYU pragma: export
#include "ferry/remote.hpp"         // IWYU pragma: export
#include "ferry/table.hpp"          // IWYU pragma: export
#include "ferry/tensor.hpp"         // IWYU pragma: export
#include "ferry/token_dataset.hpp"  // IWYU pragma: export
#include "ferry/version.hpp"        // IWYU pragma: export
#include "ferry/video.hpp"          // IWYU pragma: export
#include "ferry/webdataset.hpp"     // IWYU pragma: export
