// File descriptors: an owner that closes one exactly once, and a whole write.
#pragma once

#include <string_view>
#include <utility>

namespace anvil::support {

// Owns one descriptor (or none: -1) and closes it when it goes; moves, never copies.
class UniqueFd {
public:
    UniqueFd() = default;
    explicit UniqueFd(int fd) : fd_(fd) {}
    UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
    UniqueFd& operator=(UniqueFd&& other) noexcept {
        if (this != &other) reset(std::exchange(other.fd_, -1));
        return *this;
    }
    UniqueFd(const UniqueFd&) = delete;
    UniqueFd& operator=(const UniqueFd&) = delete;
    ~UniqueFd() { reset(); }

    int get() const { return fd_; }
    explicit operator bool() const { return fd_ >= 0; }
    // Gives the descriptor up without closing it.
    int release() { return std::exchange(fd_, -1); }
    // Closes the one held (if any) and holds `fd`.
    void reset(int fd = -1) noexcept;

private:
    int fd_ = -1;
};

// Writes all of `bytes` to `fd`, through short writes and EINTR. Returns 0, or the errno of the
// write that failed. Allocates nothing and throws nothing, so that a child may call it between
// fork and exec.
int write_all(int fd, std::string_view bytes) noexcept;

}  // namespace anvil::support
