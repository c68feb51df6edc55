#include "daemon/anvild/atomic_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace anvil::daemon {

void write_atomically(const std::filesystem::path& file, const std::string& text) {
    std::filesystem::create_directories(file.parent_path());
    const auto tmp = file.string() + ".tmp";
    // 0600 whatever the umask: these files are the daemon's records, for its user alone.
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) throw std::runtime_error("cannot write " + tmp + ": " + std::strerror(errno));
    ::fchmod(fd, 0600);  // an older, wider temporary file left by a crash
    std::size_t written = 0;
    while (written < text.size()) {
        const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            const int error = errno;
            ::close(fd);
            throw std::runtime_error("cannot write " + tmp + ": " + std::strerror(error));
        }
        written += static_cast<std::size_t>(n);
    }
    ::fsync(fd);
    ::close(fd);
    std::filesystem::rename(tmp, file);
    if (int dir = ::open(file.parent_path().c_str(), O_RDONLY | O_DIRECTORY); dir >= 0) {
        ::fsync(dir);
        ::close(dir);
    }
}

}  // namespace anvil::daemon
