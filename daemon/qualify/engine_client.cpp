// HTTP to the engine under test (cpp-httplib, private to this library), SSE parsing, the journal
// of exchanges that the receipt carries.
#include "daemon/qualify/engine_client.hpp"

#include <httplib.h>

#include "support/digest.hpp"

namespace anvil::qualify::detail {

using nlohmann::json;

std::optional<json> Exchange::json() const {
    try {
        return nlohmann::json::parse(body);
    } catch (const nlohmann::json::exception&) {
        return std::nullopt;
    }
}

std::string Exchange::failure() const {
    if (!error.empty()) return method + " " + path + ": " + error;
    std::string message;
    if (auto parsed = json(); parsed && parsed->is_object() && parsed->contains("error")) {
        const auto& e = (*parsed)["error"];
        message = e.is_object() && e.contains("message") && e["message"].is_string() ? e["message"].get<std::string>()
                                                                                    : e.dump();
    } else {
        message = body.substr(0, 200);
    }
    return method + " " + path + ": HTTP " + std::to_string(status) + (message.empty() ? "" : ": " + message);
}

Journal::Journal() : start_(std::chrono::steady_clock::now()) {}

double Journal::elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

json shorten(const json& value, std::size_t limit) {
    if (value.is_string()) {
        const auto& s = value.get_ref<const std::string&>();
        if (s.size() <= limit) return value;
        // The head is cut on a character boundary so the receipt stays valid UTF-8.
        std::size_t head = std::min<std::size_t>(64, s.size());
        while (head > 0 && (static_cast<unsigned char>(s[head]) & 0xC0) == 0x80) --head;
        return json{{"length", s.size()}, {"sha256", support::sha256_hex(s)}, {"head", s.substr(0, head)}};
    }
    if (value.is_object()) {
        json out = json::object();
        for (auto it = value.begin(); it != value.end(); ++it) out[it.key()] = shorten(it.value(), limit);
        return out;
    }
    if (value.is_array()) {
        json out = json::array();
        for (const auto& v : value) out.push_back(shorten(v, limit));
        return out;
    }
    return value;
}

void Journal::record(const Exchange& x) {
    json entry = {{"label", x.label},     {"method", x.method},   {"path", x.path},
                  {"started", x.started}, {"seconds", x.seconds}, {"status", x.status}};
    if (!x.request.is_null()) entry["request"] = shorten(x.request);
    if (!x.error.empty()) entry["error"] = x.error;
    if (x.first_content_seconds) entry["first_content_seconds"] = *x.first_content_seconds;
    // Responses are kept as parsed JSON when they are JSON, as text otherwise (that the text was
    // not JSON is itself what the json gate reports).
    auto keep = [](const std::string& text) -> json {
        try {
            return json::parse(text);
        } catch (const json::exception&) {
            return json{{"not_json", shorten(json(text), 4096)}};
        }
    };
    if (x.streamed && x.status == 200) {
        json events = json::array();
        for (const auto& e : x.events) events.push_back(e == "[DONE]" ? json("[DONE]") : keep(e));
        entry["events"] = std::move(events);
    } else if (!x.body.empty()) {
        entry["response"] = keep(x.body);
    }
    std::lock_guard lock(mutex_);
    exchanges_.push_back(std::move(entry));
}

void Journal::note(const std::string& label, const std::string& text) {
    std::lock_guard lock(mutex_);
    notes_.push_back({{"label", label}, {"at", elapsed()}, {"text", text}});
}

json Journal::exchanges() const {
    std::lock_guard lock(mutex_);
    return exchanges_;
}

json Journal::notes() const {
    std::lock_guard lock(mutex_);
    return notes_;
}

EngineClient::EngineClient(std::string host, int port, std::chrono::milliseconds timeout, Journal& journal,
                           const std::atomic<bool>* cancelled, std::string api_key)
    : host_(std::move(host)), port_(port), timeout_(timeout), journal_(journal), cancelled_(cancelled), api_key_(std::move(api_key)) {}

namespace {

void set_timeouts(httplib::Client& client, std::chrono::milliseconds timeout) {
    client.set_tcp_nodelay(true);  // a request's bytes go out at once, not after an ACK
    const auto s = timeout.count() / 1000, us = (timeout.count() % 1000) * 1000;
    client.set_connection_timeout(std::min<long>(long(s), 10), long(us));
    client.set_read_timeout(long(s), long(us));
    client.set_write_timeout(long(s), long(us));
}

// True when an SSE payload carries generated text or a finish reason (chat or text completion).
bool carries_content(const std::string& payload) {
    if (payload == "[DONE]") return false;
    try {
        const json event = json::parse(payload);
        return !reply_text(event).empty() || !reply_finish_reason(event).empty();
    } catch (const json::exception&) {
    }
    return false;
}

}  // namespace

bool EngineClient::called_off(Exchange& x) const {
    if (!cancelled()) return false;
    x.error = "cancelled";
    journal_.record(x);
    return true;
}

Exchange EngineClient::get(const std::string& label, const std::string& path) const {
    Exchange x;
    x.label = label, x.method = "GET", x.path = path;
    if (called_off(x)) return x;
    httplib::Client client(host_, port_);
    set_timeouts(client, timeout_);
    if (!api_key_.empty()) client.set_bearer_token_auth(api_key_.c_str());
    x.started = journal_.elapsed();
    auto result = client.Get(path.c_str());
    x.seconds = journal_.elapsed() - x.started;
    if (!result) {
        x.error = httplib::to_string(result.error());
    } else {
        x.status = result->status;
        x.body = result->body;
    }
    journal_.record(x);
    return x;
}

Exchange EngineClient::post(const std::string& label, const std::string& path, const json& body) const {
    Exchange x;
    x.label = label, x.method = "POST", x.path = path, x.request = body;
    x.streamed = body.is_object() && body.value("stream", false);
    if (called_off(x)) return x;
    httplib::Client client(host_, port_);
    set_timeouts(client, timeout_);
    if (!api_key_.empty()) client.set_bearer_token_auth(api_key_.c_str());

    httplib::Request req;
    req.method = "POST";
    req.path = path;
    req.set_header("Content-Type", "application/json");
    if (x.streamed) req.set_header("Accept", "text/event-stream");
    req.body = body.dump();
    std::string pending;  // streamed bytes not yet split into events
    x.started = journal_.elapsed();
    req.content_receiver = [&](const char* data, size_t length, uint64_t, uint64_t) {
        if (cancelled()) return false;  // drops the connection: a long generation ends now
        x.body.append(data, length);
        if (!x.streamed) return true;
        pending.append(data, length);
        // Events end with a blank line; a payload is the "data:" lines of one event.
        for (;;) {
            std::size_t end = pending.find("\n\n");
            std::size_t skip = 2;
            if (const std::size_t crlf = pending.find("\r\n\r\n"); crlf != std::string::npos && crlf < end) end = crlf, skip = 4;
            if (end == std::string::npos) break;
            const std::string event = pending.substr(0, end);
            pending.erase(0, end + skip);
            std::string payload;
            std::size_t at = 0;
            while (at <= event.size()) {
                std::size_t eol = event.find('\n', at);
                if (eol == std::string::npos) eol = event.size();
                std::string line = event.substr(at, eol - at);
                if (!line.empty() && line.back() == '\r') line.pop_back();
                if (line.rfind("data:", 0) == 0) {
                    std::string part = line.substr(5);
                    if (!part.empty() && part[0] == ' ') part.erase(0, 1);
                    payload += (payload.empty() ? "" : "\n") + part;
                }
                at = eol + 1;
            }
            if (payload.empty()) continue;  // comments and keep-alives
            if (!x.first_content_seconds && carries_content(payload))
                x.first_content_seconds = journal_.elapsed() - x.started;
            x.events.push_back(std::move(payload));
        }
        return true;
    };
    httplib::Response res;
    httplib::Error error = httplib::Error::Success;
    const bool sent = client.send(req, res, error);
    x.seconds = journal_.elapsed() - x.started;
    if (!sent) {
        x.error = cancelled() ? "cancelled" : httplib::to_string(error);
    } else {
        x.status = res.status;
    }
    if (x.streamed && x.status == 200) x.body.clear();  // the events are the response
    journal_.record(x);
    return x;
}

std::string reply_text(const json& reply) {
    if (!reply.is_object() || !reply.contains("choices") || !reply["choices"].is_array() || reply["choices"].empty())
        return "";
    const json& choice = reply["choices"][0];
    if (!choice.is_object()) return "";
    for (const char* holder : {"message", "delta"})
        if (choice.contains(holder) && choice[holder].is_object() && choice[holder].contains("content") &&
            choice[holder]["content"].is_string())
            return choice[holder]["content"];
    if (choice.contains("text") && choice["text"].is_string()) return choice["text"];
    return "";
}

std::string reply_finish_reason(const json& reply) {
    if (!reply.is_object() || !reply.contains("choices") || !reply["choices"].is_array() || reply["choices"].empty())
        return "";
    const json& choice = reply["choices"][0];
    if (!choice.is_object() || !choice.contains("finish_reason") || !choice["finish_reason"].is_string()) return "";
    return choice["finish_reason"];
}

std::optional<long long> usage_of(const json& reply, const char* field) {
    if (!reply.is_object() || !reply.contains("usage") || !reply["usage"].is_object()) return std::nullopt;
    const json& usage = reply["usage"];
    if (!usage.contains(field) || !usage[field].is_number_integer()) return std::nullopt;
    return usage[field].get<long long>();
}

StreamSummary summarize_stream(const Exchange& x) {
    StreamSummary s;
    if (!x.ok()) {
        s.error = x.failure();
        return s;
    }
    for (std::size_t i = 0; i < x.events.size(); ++i) {
        const std::string& payload = x.events[i];
        if (payload == "[DONE]") {
            s.done = true;
            if (i + 1 != x.events.size() && s.error.empty()) s.error = "events arrived after [DONE]";
            continue;
        }
        json event;
        try {
            event = json::parse(payload);
        } catch (const json::exception& e) {
            if (s.error.empty()) s.error = "event " + std::to_string(i) + " is not JSON: " + payload.substr(0, 120);
            continue;
        }
        if (event.is_object() && event.contains("error")) {
            if (s.error.empty()) s.error = "error event: " + event["error"].dump().substr(0, 200);
            continue;
        }
        const std::string text = reply_text(event);
        if (!text.empty()) s.text += text, ++s.content_events;
        if (const std::string finish = reply_finish_reason(event); !finish.empty()) s.finish_reason = finish;
        if (auto p = usage_of(event, "prompt_tokens")) s.prompt_tokens = p;
        if (auto c = usage_of(event, "completion_tokens")) s.completion_tokens = c;
    }
    return s;
}

}  // namespace anvil::qualify::detail
