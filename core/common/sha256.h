#pragma once
// SHA-256 (OpenSSL libcrypto) for artifact and checkpoint integrity.
#include <string>
#include <string_view>

namespace frost {

// Lower-case hex digest of `data`.
std::string sha256_hex(std::string_view data);

}  // namespace frost
