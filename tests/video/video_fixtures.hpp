#pragma once

// The video tests' fixtures (tests/video/make_fixtures.sh, the ffmpeg program), made once per
// version of the script into a folder under the temporary directory and shared by every test
// process: made in a folder of their own, then renamed into place, so that two processes making
// them at once both succeed.

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "../source_dir.hpp"

namespace ferry::testing {

inline std::string slurp(const std::filesystem::path& p) {
  std::string out;
  if (std::FILE* f = std::fopen(p.c_str(), "rb")) {
    char buf[4096];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, n);
    std::fclose(f);
  }
  return out;
}

inline const std::filesystem::path& video_fixtures() {
  namespace fs = std::filesystem;
  static const fs::path dir = [] {
    const fs::path script = fs::path(FERRY_SOURCE_DIR) / "tests/video/make_fixtures.sh";
    std::uint64_t h = 0xcbf29ce484222325ULL;
    for (const char c : slurp(script)) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
    const fs::path final_dir =
        fs::temp_directory_path() / ("ferry_video_fixtures_" + std::to_string(::getuid()) + "_" +
                                     std::to_string(h % 1000000007ULL));
    if (fs::exists(final_dir / "audio.mkv")) return final_dir;
    const fs::path tmp = final_dir.string() + ".tmp" + std::to_string(::getpid());
    fs::remove_all(tmp);
    const std::string cmd = script.string() + " " + tmp.string();
    if (std::system(cmd.c_str()) != 0) {
      ADD_FAILURE() << "cannot make the video fixtures: " << cmd;
      return final_dir;
    }
    std::error_code ec;
    fs::rename(tmp, final_dir, ec);
    if (ec) fs::remove_all(tmp);  // another process made them first
    return final_dir;
  }();
  return dir;
}

}  // namespace ferry::testing
