// The qualification's only way to talk to an engine: one HTTP/1.1 request at a time per call
// (whole or streamed as server-sent events), timed, and recorded in a Journal that becomes the
// receipt's "exchanges". Transport failures are values (Exchange::error), never exceptions:
// an engine that is down fails gates, it does not abort a qualification.
#pragma once

#include <atomic>
#include <chrono>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace anvil::qualify::detail {

struct Exchange {
    std::string label;  // the gate or measurement that sent it: "smoke", "ttft", "quality", …
    std::string method, path;
    nlohmann::json request;  // the body as sent (null for GET)
    bool streamed = false;
    int status = 0;          // HTTP status; 0 when no response came
    std::string error;       // the transport error (connection refused, timeout); empty otherwise
    std::string body;        // the whole body of an unstreamed response
    std::vector<std::string> events;  // streamed: every SSE data payload in order, "[DONE]" included
    double started = 0;      // seconds since the journal's start
    double seconds = 0;      // wall time to the last byte
    // Streamed: seconds to the first event that carries generated text or a finish reason (a
    // role-only chat chunk does not count: no token has been produced yet).
    std::optional<double> first_content_seconds;

    bool ok() const { return error.empty() && status == 200; }
    // The body parsed, or nullopt when it is not JSON.
    std::optional<nlohmann::json> json() const;
    // One line for a gate's reasons: the transport error, or the status and the engine's message.
    std::string failure() const;
};

// Every exchange of one qualification run, thread-safe (the concurrency measurement sends from
// several threads). Long request strings are kept as their length and sha256 (see shorten()).
class Journal {
public:
    Journal();
    double elapsed() const;  // seconds since construction
    void record(const Exchange& exchange);
    void note(const std::string& label, const std::string& text);  // a decision worth keeping (skips, calibrations)
    nlohmann::json exchanges() const;
    nlohmann::json notes() const;

private:
    std::chrono::steady_clock::time_point start_;
    mutable std::mutex mutex_;
    nlohmann::json exchanges_ = nlohmann::json::array();
    nlohmann::json notes_ = nlohmann::json::array();
};

// Strings longer than `limit` bytes anywhere in `value` become {"length", "sha256", "head"}: a
// receipt proves which prompt was sent without carrying megabytes of filler.
nlohmann::json shorten(const nlohmann::json& value, std::size_t limit = 512);

class EngineClient {
public:
    // Once `*cancelled` is true, requests fail at once with the error "cancelled" (still values,
    // still journaled) and a stream in progress is dropped.
    EngineClient(std::string host, int port, std::chrono::milliseconds timeout, Journal& journal,
                 const std::atomic<bool>* cancelled = nullptr, std::string api_key = "");
    Exchange get(const std::string& label, const std::string& path) const;
    // Streams (SSE) when body["stream"] is true; otherwise reads the whole body.
    Exchange post(const std::string& label, const std::string& path, const nlohmann::json& body) const;

private:
    std::string host_;
    int port_;
    std::chrono::milliseconds timeout_;
    Journal& journal_;
    const std::atomic<bool>* cancelled_;
    std::string api_key_;

    bool cancelled() const { return cancelled_ && cancelled_->load(); }
    // True (and the exchange recorded as "cancelled", never sent) when the caller is stopping.
    bool called_off(Exchange& x) const;
};

// Helpers over OpenAI-shaped replies (chat or text completion, whole or as chunks).
std::string reply_text(const nlohmann::json& reply);            // message.content or text; "" if absent
std::string reply_finish_reason(const nlohmann::json& reply);   // "" when absent or null
std::optional<long long> usage_of(const nlohmann::json& reply, const char* field);
// The streamed events as JSON (without "[DONE]"); nullopt with a reason when one does not parse.
struct StreamSummary {
    std::string text;           // the concatenated deltas
    std::string finish_reason;  // the last non-null finish reason
    std::optional<long long> prompt_tokens, completion_tokens;  // from a usage chunk, when sent
    int content_events = 0;     // events that carried text
    bool done = false;          // "[DONE]" ended the stream
    std::string error;          // the first problem: an event that is not JSON, an error event
};
StreamSummary summarize_stream(const Exchange& exchange);

}  // namespace anvil::qualify::detail
