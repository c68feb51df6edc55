#include "support/fd.hpp"

#include <unistd.h>

#include <cerrno>

namespace anvil::support {

void UniqueFd::reset(int fd) noexcept {
    // close() is not retried on EINTR: on Linux the descriptor is released whatever it returns.
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
}

int write_all(int fd, std::string_view bytes) noexcept {
    while (!bytes.empty()) {
        const ssize_t n = ::write(fd, bytes.data(), bytes.size());
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return errno;
        if (n == 0) return EIO;  // a regular file or pipe that takes nothing will take nothing again
        bytes.remove_prefix(static_cast<std::size_t>(n));
    }
    return 0;
}

}  // namespace anvil::support
