// The receipt file: atomic write (temporary, fsync, rename, fsync of the directory) and its sha256.
#include "daemon/qualify/receipt.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <stdexcept>

#include "registry/sha256.hpp"

namespace anvil::qualify::detail {

namespace {

[[noreturn]] void fail(const std::string& what, const std::filesystem::path& path, int error) {
    throw std::runtime_error("cannot " + what + " receipt " + path.string() + ": " + std::strerror(error));
}

std::string safe_name(const std::string& text) {
    std::string out;
    for (char c : text) out += std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_' ? c : '_';
    if (out.empty() || out[0] == '.') out.insert(0, "_");
    return out;
}

void write_all(int fd, const std::string& bytes, const std::filesystem::path& path) {
    std::size_t done = 0;
    while (done < bytes.size()) {
        const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) fail("write", path, errno);
        done += std::size_t(n);
    }
}

}  // namespace

std::string utc_timestamp() {
    const auto now = std::chrono::system_clock::now();
    const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
    const auto millis = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
    std::tm tm{};
    gmtime_r(&seconds, &tm);
    char text[96];
    std::snprintf(text, sizeof text, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                  tm.tm_hour, tm.tm_min, tm.tm_sec, int(millis));
    return text;
}

WrittenReceipt write_receipt(const std::filesystem::path& dir, const std::string& recipe_id, std::int64_t revision_id,
                             const nlohmann::json& receipt) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) fail("create the directory of", dir, ec.value());

    // The time in the name has no ':' (not portable in file names) and keeps milliseconds.
    std::string stamp = utc_timestamp();
    std::erase(stamp, ':');
    std::erase(stamp, '-');
    const std::string stem = safe_name(recipe_id.empty() ? "engine" : recipe_id) + "-" + std::to_string(revision_id) + "-" + stamp;
    std::filesystem::path path = dir / (stem + ".json");
    for (int n = 2; std::filesystem::exists(path); ++n) path = dir / (stem + "-" + std::to_string(n) + ".json");

    const std::string bytes = receipt.dump(2) + "\n";
    const std::filesystem::path temporary = dir / ("." + path.filename().string() + ".tmp-" + std::to_string(::getpid()));
    const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) fail("create", temporary, errno);
    try {
        write_all(fd, bytes, temporary);
        if (::fsync(fd) != 0) fail("fsync", temporary, errno);
    } catch (...) {
        ::close(fd);
        ::unlink(temporary.c_str());
        throw;
    }
    if (::close(fd) != 0) {
        const int error = errno;
        ::unlink(temporary.c_str());
        fail("close", temporary, error);
    }
    if (::rename(temporary.c_str(), path.c_str()) != 0) {
        const int error = errno;
        ::unlink(temporary.c_str());
        fail("rename", path, error);
    }
    // The rename is durable only once the directory entry is.
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) fail("open the directory of", path, errno);
    const int synced = ::fsync(dfd);
    const int error = errno;
    ::close(dfd);
    if (synced != 0) fail("fsync the directory of", path, error);
    return {path, registry::sha256_hex(bytes)};
}

}  // namespace anvil::qualify::detail
