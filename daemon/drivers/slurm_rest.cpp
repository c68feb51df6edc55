#include "daemon/drivers/slurm_rest.hpp"

#include <sys/socket.h>

#include <httplib.h>

#include <fstream>
#include <sstream>

#include "support/clock.hpp"

namespace anvil::drivers {

using nlohmann::json;

namespace {

constexpr const char* kApi = "/slurm/v0.0.38";

std::string trim(std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
    std::size_t start = 0;
    while (start < s.size() && s[start] == ' ') ++start;
    return s.substr(start);
}

// slurmrestd's `errors`: [{"error": "...", "error_code": N, "description": "..."}], joined in one line.
std::string errors_of(const json& answer) {
    if (!answer.is_object() || !answer.contains("errors") || !answer["errors"].is_array()) return "";
    std::string out;
    for (const auto& e : answer["errors"]) {
        std::string one;
        if (e.is_object()) {
            for (const char* key : {"error", "description"})
                if (e.contains(key) && e[key].is_string() && !e[key].get<std::string>().empty())
                    one += (one.empty() ? "" : ": ") + e[key].get<std::string>();
            if (one.empty()) one = e.dump();
        } else {
            one = e.dump();
        }
        out += (out.empty() ? "" : "; ") + one;
    }
    return out;
}

}  // namespace

SlurmRest::SlurmRest(SlurmRestConfig config) : config_(std::move(config)) {}

std::string SlurmRest::describe() const { return "slurmrestd " + config_.address + " as " + config_.user; }

json SlurmRest::call(const std::string& method, const std::string& path, const json* body) const {
    const std::string where = describe() + ": " + method + " " + path;
    std::ifstream in(config_.token_file, std::ios::binary);
    std::stringstream token;
    token << in.rdbuf();
    if (!in) throw SlurmError(where + ": cannot read the token file " + config_.token_file.string() + " (placement.token_file)");
    const std::string jwt = trim(token.str());
    if (jwt.empty()) throw SlurmError(where + ": the token file " + config_.token_file.string() + " is empty (scontrol token writes one)");

    const bool unix_socket = config_.address.rfind("unix:", 0) == 0;
    std::unique_ptr<httplib::Client> client;
    if (unix_socket) {
        client = std::make_unique<httplib::Client>(config_.address.substr(5));
        client->set_address_family(AF_UNIX);
    } else {
        client = std::make_unique<httplib::Client>(config_.address);
    }
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(config_.timeout).count();
    client->set_connection_timeout(0, us);
    client->set_read_timeout(0, us);
    client->set_write_timeout(0, us);
    httplib::Headers headers{{"X-SLURM-USER-NAME", config_.user}, {"X-SLURM-USER-TOKEN", jwt}};
    if (unix_socket) headers.emplace("Host", "localhost");
    httplib::Result r = method == "GET"      ? client->Get(path, headers)
                        : method == "DELETE" ? client->Delete(path, headers)
                                             : client->Post(path, headers, body ? body->dump() : "{}", "application/json");
    if (!r) throw SlurmError(where + ": " + httplib::to_string(r.error()) + "; is slurmrestd running there (placement.rest)?");
    const json answer = json::parse(r->body, nullptr, false);
    if (r->status == 401 || r->status == 403)
        throw SlurmError(where + ": HTTP " + std::to_string(r->status) +
                         ": authentication refused; renew the token (scontrol token username=" + config_.user + ")");
    const std::string errors = errors_of(answer);
    if (r->status / 100 != 2 || !errors.empty() || answer.is_discarded()) {
        const std::string what = !errors.empty() ? errors : answer.is_discarded() ? "not JSON: " + r->body.substr(0, 200) : r->body.substr(0, 200);
        // slurmrestd 22.05 answers a forged or expired token with a bare 500, so say so.
        const std::string hint = r->status / 100 == 5 ? " (an expired or refused token ends this way too: scontrol token username=" +
                                                            config_.user + " writes a new one)"
                                                      : "";
        throw SlurmError(where + ": HTTP " + std::to_string(r->status) + ": " + what + hint);
    }
    return answer;
}

json SlurmRest::get(const std::string& path) const { return call("GET", path, nullptr); }
json SlurmRest::post(const std::string& path, const json& body) const { return call("POST", path, &body); }
json SlurmRest::remove(const std::string& path) const { return call("DELETE", path, nullptr); }

json SlurmRest::ping() const { return get(std::string(kApi) + "/ping"); }

registry::SlurmCluster SlurmRest::nodes() const {
    const std::string observed_at = support::utc_now();
    const json answer = get(std::string(kApi) + "/nodes");
    std::string version;
    if (answer.contains("meta") && answer["meta"].is_object()) {
        const json& slurm = answer["meta"].value("Slurm", json::object());
        if (slurm.is_object() && slurm.contains("release") && slurm["release"].is_string()) version = slurm["release"].get<std::string>();
    }
    registry::FieldErrors errors;
    auto cluster = registry::parse_slurm_nodes(answer, "slurmrestd " + config_.address + (version.empty() ? "" : " (Slurm " + version + ")"),
                                               observed_at, errors);
    if (!cluster) {
        std::string lines;
        for (const auto& e : errors) lines += (lines.empty() ? "" : "; ") + e.describe();
        throw SlurmError(describe() + ": GET " + kApi + "/nodes: an answer anvil cannot read: " + lines);
    }
    return *cluster;
}

}  // namespace anvil::drivers
