#include "core/common/sha256.h"

#include <openssl/evp.h>

#include <cstdio>

namespace frost {

std::string sha256_hex(std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(data.data(), data.size(), md, &n, EVP_sha256(), nullptr);
  std::string out;
  out.reserve(2 * n);
  static const char* kHex = "0123456789abcdef";
  for (unsigned int i = 0; i < n; ++i) {
    out.push_back(kHex[md[i] >> 4]);
    out.push_back(kHex[md[i] & 15]);
  }
  return out;
}

}  // namespace frost
