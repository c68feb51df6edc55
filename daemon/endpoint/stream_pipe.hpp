// The bounded queue between the thread that reads a streaming upstream response and the HTTP thread
// that writes it to the client: bytes pass as soon as the upstream produces them; a slow client
// blocks the upstream reader once `capacity` bytes wait (back-pressure, bounded memory); either side
// can end it (the client went away: cancel; the upstream finished or failed: finish).
#pragma once

#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <optional>
#include <string>

#include "daemon/endpoint/generation.hpp"

namespace anvil::endpoint {

class StreamPipe {
public:
    struct Head {
        int status = 0;
        httplib::Headers headers;
    };

    explicit StreamPipe(std::size_t capacity = 256 * 1024) : capacity_(capacity) {}

    // Producer side. Each returns false once the consumer cancelled.
    bool set_head(const httplib::Response& response);
    bool push(const char* data, std::size_t size);
    void finish(SendOutcome outcome);

    // Consumer side. Waits up to `wait` for the head or the end; true once either is known.
    bool wait_started(std::chrono::milliseconds wait);
    std::optional<Head> head() const;
    std::optional<SendOutcome> end() const;  // set once the producer finished, and nothing is queued
    enum class Next { data, waiting, end };
    // Appends everything queued to `out` (data), or reports nothing yet after `wait` (waiting), or
    // that the producer finished and all its bytes were taken (end).
    Next pop(std::string& out, std::chrono::milliseconds wait);
    // Stops the producer: pushes fail and the request upstream is aborted.
    void cancel();

    CancelSlot& cancel_slot() { return slot_; }

private:
    const std::size_t capacity_;
    mutable std::mutex mutex_;
    std::condition_variable changed_;
    std::optional<Head> head_;
    std::string queued_;
    std::optional<SendOutcome> end_;
    bool cancelled_ = false;
    CancelSlot slot_;
};

}  // namespace anvil::endpoint
