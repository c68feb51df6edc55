// The channel between one HTTP request and the engine thread: the engine pushes what each step
// produced, the HTTP thread pops it; either side can end it (finish, or cancel on disconnect).
// A request for n choices has n sequences writing into one stream, each event tagged with its
// choice's index; each choice ends with its own done event.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/sampler.hpp"

namespace anvil::engine {

struct GeneratedToken {
    int32_t token = -1;
    float logprob = 0.0f;             // filled when the request asked for logprobs
    std::vector<TokenLogprob> top;    // its top_logprobs alternatives
};

struct StreamEvent {
    int index = 0;                       // which of the request's n choices it belongs to
    std::string text;                    // new text, complete UTF-8, stop strings held back
    std::vector<GeneratedToken> tokens;  // the tokens this event covers
    // Prompt logprobs (echo with logprobs): the logprobs of prompt tokens first_prompt_token on,
    // each under the model's distribution after the tokens before it. Sent before any token.
    std::vector<GeneratedToken> prompt;
    int first_prompt_token = 0;
    bool done = false;
    std::string finish_reason;           // "stop" | "length" | "abort" when done
    std::string error;                   // set when the engine failed the request
    int prompt_tokens = 0;
    int completion_tokens = 0;
};

class RequestStream {
public:
    explicit RequestStream(std::function<void()> wake_engine) : wake_engine_(std::move(wake_engine)) {}

    void push(StreamEvent event);
    // The next event, or nothing when `timeout` passes first.
    std::optional<StreamEvent> pop(std::chrono::milliseconds timeout);
    // The client went away: the engine frees the sequence at its next step.
    void cancel();
    bool cancelled() const { return cancelled_.load(); }

private:
    std::mutex mutex_;
    std::condition_variable ready_;
    std::deque<StreamEvent> events_;
    std::atomic<bool> cancelled_{false};
    std::function<void()> wake_engine_;
};

}  // namespace anvil::engine
