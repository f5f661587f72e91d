#include "tests/testing/test_util.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>

namespace fs = std::filesystem;

namespace frost::testing {

std::string shared_dir() {
  if (const char* env = std::getenv("FROST_SHARED_DIR"); env && *env) {
    return fs::exists(env) ? fs::absolute(env).lexically_normal().string() : "";
  }
  fs::path p = fs::path(FROST_SOURCE_DIR).parent_path() / "shared";
  return fs::exists(p) ? p.lexically_normal().string() : "";
}

std::string shared_path(const std::string& rel) {
  std::string d = shared_dir();
  if (d.empty()) return "";
  fs::path p = fs::path(d) / rel;
  return fs::exists(p) ? p.string() : "";
}

std::string source_path(const std::string& rel) { return (fs::path(FROST_SOURCE_DIR) / rel).string(); }

TempDir::TempDir(const std::string& prefix) {
  static std::mt19937_64 rng{std::random_device{}()};
  fs::path base = fs::temp_directory_path();
  for (int i = 0; i < 100; ++i) {
    fs::path p = base / (prefix + "_" + std::to_string(rng()));
    std::error_code ec;
    if (fs::create_directory(p, ec)) {
      path_ = fs::canonical(p).string();  // its realpath, so tests that compare realpaths need no wrapper
      return;
    }
  }
  throw std::runtime_error("TempDir: cannot create a directory under " + base.string());
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

void write_text_file(const std::string& path, const std::string& contents) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(contents.data(), static_cast<std::streamsize>(contents.size()));
  if (!f) throw std::runtime_error("cannot write " + path);
}

std::string read_text_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read " + path);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  if (a.sizes() != b.sizes()) return std::numeric_limits<double>::infinity();
  if (a.numel() == 0) return 0;
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

}  // namespace frost::testing
