#include "support/atomic_file.hpp"
#include "support/fd.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <string>
#include <system_error>

namespace anvil::support {

namespace {

[[noreturn]] void fail(int error, const std::filesystem::path& path, const std::string& step) {
    throw std::system_error(error, std::generic_category(), path.string() + ": cannot " + step);
}

// A name no other writer uses: this process's id and a counter, so threads and processes writing
// the same file never share a temporary. Dot-first and not ending like the target, so directory
// scans for "*.json" and the like never pick one up.
std::filesystem::path temporary_beside(const std::filesystem::path& path, int attempt) {
    static std::atomic<unsigned> counter{0};
    const std::string name = "." + path.filename().string() + ".tmp-" + std::to_string(::getpid()) + "-" +
                             std::to_string(counter.fetch_add(1)) + "-" + std::to_string(attempt);
    return path.parent_path() / name;
}

void write_all(int fd, std::string_view bytes, const std::filesystem::path& path) {
    if (const int error = support::write_all(fd, bytes)) fail(error, path, "write the temporary file");
}

// The rename is durable only once the directory entry is.
void sync_directory(const std::filesystem::path& path) {
    const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) fail(errno, path, "open its directory to fsync it");
    const int synced = ::fsync(fd);
    const int error = errno;
    ::close(fd);
    // EINVAL: a file system that cannot sync directories at all; there is nothing more to make durable.
    if (synced != 0 && error != EINVAL) fail(error, path, "fsync its directory");
}

}  // namespace

void write_file_atomically(const std::filesystem::path& path, std::string_view bytes, mode_t mode) {
    std::filesystem::path temporary;
    int fd = -1;
    // O_EXCL: never write through a name someone else created (a link planted there, or a
    // temporary left by a crashed process that had our pid); such a name is skipped.
    for (int attempt = 0; fd < 0 && attempt < 100; ++attempt) {
        temporary = temporary_beside(path, attempt);
        fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
        if (fd < 0 && errno != EEXIST) fail(errno, path, "create a temporary file beside it");
    }
    if (fd < 0) fail(EEXIST, path, "create a temporary file beside it");
    try {
        write_all(fd, bytes, path);
        if (::fsync(fd) != 0) fail(errno, path, "fsync the temporary file");
        const int closed = ::close(fd);
        fd = -1;
        if (closed != 0) fail(errno, path, "close the temporary file");
        if (::rename(temporary.c_str(), path.c_str()) != 0) fail(errno, path, "rename the temporary file over it");
    } catch (...) {
        if (fd >= 0) ::close(fd);
        ::unlink(temporary.c_str());
        throw;
    }
    sync_directory(path);
}

}  // namespace anvil::support
