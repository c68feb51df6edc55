// StreamPipe: see stream_pipe.hpp.
#include "daemon/endpoint/stream_pipe.hpp"

namespace anvil::endpoint {

bool StreamPipe::set_head(const httplib::Response& response) {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (cancelled_) return false;
        head_ = Head{response.status, response.headers};
    }
    changed_.notify_all();
    return true;
}

bool StreamPipe::push(const char* data, std::size_t size) {
    {
        std::unique_lock<std::mutex> lock(mutex_);
        // An empty queue always takes the piece, so one piece larger than the capacity still passes.
        changed_.wait(lock, [&] { return cancelled_ || queued_.empty() || queued_.size() + size <= capacity_; });
        if (cancelled_) return false;
        queued_.append(data, size);
    }
    changed_.notify_all();
    return true;
}

void StreamPipe::finish(SendOutcome outcome) {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        end_ = std::move(outcome);
    }
    changed_.notify_all();
}

bool StreamPipe::wait_started(std::chrono::milliseconds wait) {
    std::unique_lock<std::mutex> lock(mutex_);
    return changed_.wait_for(lock, wait, [&] { return head_.has_value() || end_.has_value(); });
}

std::optional<StreamPipe::Head> StreamPipe::head() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return head_;
}

std::optional<SendOutcome> StreamPipe::end() const {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!queued_.empty()) return std::nullopt;
    return end_;
}

StreamPipe::Next StreamPipe::pop(std::string& out, std::chrono::milliseconds wait) {
    Next next = Next::waiting;
    {
        std::unique_lock<std::mutex> lock(mutex_);
        changed_.wait_for(lock, wait, [&] { return !queued_.empty() || end_.has_value(); });
        if (!queued_.empty()) {
            out.append(queued_);
            queued_.clear();
            next = Next::data;
        } else if (end_) {
            next = Next::end;
        }
    }
    // Room again: wake a producer blocked on a full queue.
    if (next == Next::data) changed_.notify_all();
    return next;
}

void StreamPipe::cancel() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        cancelled_ = true;
    }
    changed_.notify_all();
    slot_.cancel();
}

}  // namespace anvil::endpoint
