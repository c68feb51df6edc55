// SHA-256 of bytes and files (OpenSSL's libcrypto: a well-kept, constant-time implementation).
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace anvil::support {

// 64 lowercase hex digits.
std::string sha256_hex(std::string_view bytes);
// Streams the file; throws std::runtime_error naming the file when it cannot be read.
std::string sha256_file_hex(const std::filesystem::path& file);

}  // namespace anvil::support
