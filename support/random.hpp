// Random identifiers and secrets, from the operating system's generator through OpenSSL: API
// tokens, engine keys and ids, tool call ids. One source, so none is ever drawn from a seeded PRNG.
#pragma once

#include <cstddef>
#include <string>

namespace anvil::support {

// `bytes` random bytes as 2 * bytes lowercase hex digits. Throws std::runtime_error when the
// generator has no entropy to give (never silently weaker).
std::string random_hex(std::size_t bytes);

}  // namespace anvil::support
