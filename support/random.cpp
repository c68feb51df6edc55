#include "support/random.hpp"

#include <openssl/rand.h>

#include <stdexcept>
#include <vector>

namespace anvil::support {

std::string random_hex(std::size_t bytes) {
    std::vector<unsigned char> raw(bytes);
    if (bytes > 0 && RAND_bytes(raw.data(), static_cast<int>(raw.size())) != 1)
        throw std::runtime_error("the system's random generator gave no bytes");
    static constexpr char kDigits[] = "0123456789abcdef";
    std::string out;
    out.reserve(2 * bytes);
    for (unsigned char b : raw) {
        out += kDigits[b >> 4];
        out += kDigits[b & 15];
    }
    return out;
}

}  // namespace anvil::support
