#include "engine/request_stream.hpp"

namespace anvil::engine {

void RequestStream::push(StreamEvent event) {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        events_.push_back(std::move(event));
    }
    ready_.notify_one();
}

std::optional<StreamEvent> RequestStream::pop(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!ready_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return std::nullopt;
    StreamEvent event = std::move(events_.front());
    events_.pop_front();
    return event;
}

void RequestStream::cancel() {
    cancelled_ = true;
    if (wake_engine_) wake_engine_();
}

}  // namespace anvil::engine
