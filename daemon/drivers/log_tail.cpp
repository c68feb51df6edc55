#include "daemon/drivers/log_tail.hpp"

#include <algorithm>
#include <fstream>

namespace anvil::drivers {

namespace {

// At most the last `limit` bytes of a file: a tail never needs the whole of a large log.
std::string read_end(const std::filesystem::path& path, std::size_t limit) {
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    if (!in) return {};
    const std::streamoff size = in.tellg();
    const std::streamoff start = std::max<std::streamoff>(0, size - std::streamoff(limit));
    in.seekg(start);
    std::string text(std::size_t(size - start), '\0');
    in.read(text.data(), std::streamsize(text.size()));
    text.resize(std::size_t(in.gcount()));
    return text;
}

}  // namespace

std::string log_tail(const std::filesystem::path& path, std::size_t lines) {
    constexpr std::size_t kWindow = 256 * 1024;
    std::string text = read_end(path.string() + ".1", kWindow) + read_end(path, kWindow);
    if (lines == 0) return {};
    std::size_t end = text.size();
    if (end > 0 && text[end - 1] == '\n') --end;
    std::size_t pos = end, found = 0;
    while (pos > 0) {
        if (text[pos - 1] == '\n' && ++found == lines) break;
        --pos;
    }
    return text.substr(pos);
}

}  // namespace anvil::drivers
