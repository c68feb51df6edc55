// The container backend that speaks the Docker-compatible Engine API over a unix socket: dockerd's
// /var/run/docker.sock, or `podman system service` (rootful: /run/podman/podman.sock). Unversioned
// paths, so the server answers in its own current API version. Every failure names the socket and
// the API's own message.
#include <sys/socket.h>

#include <httplib.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <cctype>
#include <cmath>

#include "daemon/drivers/container_driver.hpp"

namespace anvil::drivers {

using nlohmann::json;

// "64m", "32g", "1.5GiB", "1048576": docker's --shm-size units (binary multiples), in bytes.
std::optional<std::int64_t> parse_byte_size(const std::string& text) {
    std::size_t i = 0;
    while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
    if (i == 0) return std::nullopt;
    double value = 0;
    try {
        value = std::stod(text.substr(0, i));
    } catch (const std::exception&) {
        return std::nullopt;
    }
    std::string unit;
    for (std::size_t j = i; j < text.size(); ++j)
        if (text[j] != ' ') unit += char(std::tolower(static_cast<unsigned char>(text[j])));
    if (unit.ends_with("ib")) unit.resize(unit.size() - 2);
    else if (unit.size() > 1 && unit.ends_with("b")) unit.pop_back();
    static const std::map<std::string, int> kPower = {{"", 0}, {"b", 0}, {"k", 1}, {"m", 2}, {"g", 3}, {"t", 4}, {"p", 5}};
    const auto power = kPower.find(unit);
    if (power == kPower.end()) return std::nullopt;
    const double bytes = value * std::pow(1024.0, power->second);
    if (!std::isfinite(bytes) || bytes > 9.0e18) return std::nullopt;
    return std::int64_t(bytes);
}

// The frames of a non-TTY attach or logs stream: [stream, 0, 0, 0, size (4 bytes, big-endian)] then
// the payload. Anything not framed that way is taken as raw text (a container started with a TTY).
std::string demultiplex_stream(const std::string& body) {
    std::string out;
    std::size_t pos = 0;
    while (pos + 8 <= body.size()) {
        const auto* h = reinterpret_cast<const unsigned char*>(body.data() + pos);
        if (h[0] > 2 || h[1] || h[2] || h[3]) return pos == 0 ? body : out + body.substr(pos);
        const std::size_t size = (std::size_t(h[4]) << 24) | (std::size_t(h[5]) << 16) | (std::size_t(h[6]) << 8) | h[7];
        out.append(body, pos + 8, size);  // clamps a frame cut short
        pos += 8 + size;
    }
    return pos == 0 ? body : out;
}

namespace {

std::string query_escape(const std::string& s) {
    static const char* hex = "0123456789ABCDEF";
    std::string out;
    for (unsigned char c : s) {
        if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') out += char(c);
        else out += {'%', hex[c >> 4], hex[c & 15]};
    }
    return out;
}

class ApiError : public EngineError {
public:
    using EngineError::EngineError;
};

class ApiBackend : public ContainerBackend {
public:
    explicit ApiBackend(const ContainerDriverOptions& o) : socket_(o.api_socket.string()) {}

    std::string describe() const override { return "the Engine API at " + socket_; }

    std::string run(const ContainerSpec& s) override {
        json env = json::array();
        for (const auto& [k, v] : s.environment) env.push_back(k + "=" + v);
        json binds = json::array();
        for (const auto& m : s.mounts) binds.push_back(m.source.string() + ":" + m.target + (m.read_only ? ":ro" : ""));
        json host = {{"Binds", binds}, {"NetworkMode", s.network}, {"LogConfig", {{"Type", ""}, {"Config", {{"max-size", std::to_string(s.log_cap_bytes)}}}}}};
        json body = {{"Image", s.image}, {"Env", env}, {"Labels", s.labels}};
        if (!s.arguments.empty()) body["Cmd"] = s.arguments;
        if (s.publish_host) {
            const std::string port = std::to_string(s.container_port) + "/tcp";
            body["ExposedPorts"] = {{port, json::object()}};
            host["PortBindings"] = {{port, json::array({{{"HostIp", *s.publish_host}, {"HostPort", std::to_string(s.publish_port)}}})}};
        }
        if (s.ipc) host["IpcMode"] = *s.ipc;
        if (s.shm_size) {
            const auto bytes = parse_byte_size(*s.shm_size);
            if (!bytes) throw LaunchError("/launch/shm_size: expected a size such as \"64m\" or \"32g\", found \"" + *s.shm_size + "\"");
            host["ShmSize"] = *bytes;
        }
        // The Engine API names CDI devices through a device request of driver "cdi", as `--device` does on the CLI.
        if (!s.cdi_devices.empty()) host["DeviceRequests"] = json::array({{{"Driver", "cdi"}, {"DeviceIDs", s.cdi_devices}}});
        body["HostConfig"] = host;

        const json created = call("POST", "/containers/create?name=" + query_escape(s.name), body.dump(), {201});
        const std::string id = created.is_object() && created.contains("Id") && created["Id"].is_string() ? created["Id"].get<std::string>() : "";
        if (id.empty()) throw ApiError(where("POST", "/containers/create") + ": the answer carries no container Id");
        try {
            call("POST", "/containers/" + id + "/start", "", {204, 304});
        } catch (const EngineError&) {
            remove(id);
            throw;
        }
        return id;
    }

    std::optional<ContainerInfo> inspect(const std::string& container) override {
        const json j = call("GET", "/containers/" + query_escape(container) + "/json", "", {200, 404});
        if (!j.is_object() || !j.contains("Id")) return std::nullopt;
        return container_info(j);
    }

    std::vector<std::string> image_repo_digests(const std::string& image) override {
        std::vector<std::string> out;
        const json j = call("GET", "/images/" + query_escape(image) + "/json", "", {200, 404});
        if (j.is_object())
            for (const auto& d : j.value("RepoDigests", json::array()))
                if (d.is_string()) out.push_back(d.get<std::string>());
        return out;
    }

    void stop(const std::string& container, long long seconds) override {
        const std::string id = query_escape(container);
        try {
            // The server itself kills the container after t seconds; the read waits a little longer.
            call("POST", "/containers/" + id + "/stop?t=" + std::to_string(seconds), "", {204, 304, 404}, seconds + 30);
        } catch (const EngineError& e) {
            spdlog::warn("{}; killing it", e.what());
            try {
                call("POST", "/containers/" + id + "/kill", "", {204, 404, 409});
            } catch (const EngineError& kill) {
                spdlog::warn("{}", kill.what());
            }
        }
    }

    std::optional<std::string> logs(const std::string& container, std::optional<std::size_t> tail) override {
        const std::string path = "/containers/" + query_escape(container) + "/logs?stdout=true&stderr=true&tail=" +
                                 (tail ? std::to_string(*tail) : std::string("all"));
        try {
            std::string body;
            if (request("GET", path, "", {200, 404}, 30, &body) == 404) return std::nullopt;
            return demultiplex_stream(body);
        } catch (const EngineError& e) {
            spdlog::warn("{}", e.what());
            return std::nullopt;
        }
    }

    void remove(const std::string& container) override {
        try {
            call("DELETE", "/containers/" + query_escape(container) + "?force=true", "", {204, 404});
        } catch (const EngineError& e) {
            spdlog::warn("cannot remove container {}: {}", container.substr(0, 12), e.what());
        }
    }

    std::vector<std::string> list_labelled(const std::string& key, const std::string& value) override {
        const json filters = {{"label", json::array({key + "=" + value})}};
        const json list = call("GET", "/containers/json?all=true&filters=" + query_escape(filters.dump()), "", {200});
        std::vector<std::string> ids;
        for (const auto& c : list.is_array() ? list : json::array())
            if (c.is_object() && c.contains("Id") && c["Id"].is_string()) ids.push_back(c["Id"].get<std::string>());
        return ids;
    }

private:
    std::string where(const std::string& method, const std::string& path) const {
        return "container API at unix socket " + socket_ + ": " + method + " " + path.substr(0, path.find('?'));
    }

    // The answer's JSON (null for an empty body or a 404 that `accept` allows).
    json call(const std::string& method, const std::string& path, const std::string& body, std::initializer_list<int> accept,
              long long read_seconds = 30) {
        std::string answer;
        const int status = request(method, path, body, accept, read_seconds, &answer);
        if (status == 404 || answer.empty()) return nullptr;
        return json::parse(answer, nullptr, false);
    }

    // Returns the status when it is one of `accept`; throws ApiError with the API's message otherwise.
    int request(const std::string& method, const std::string& path, const std::string& body, std::initializer_list<int> accept,
                long long read_seconds, std::string* answer) {
        httplib::Client client(socket_);
        client.set_address_family(AF_UNIX);
        // httplib would send the socket path as Host, which Go's server refuses as malformed.
        client.set_default_headers({{"Host", "localhost"}});
        client.set_connection_timeout(5);
        client.set_read_timeout(time_t(read_seconds));
        client.set_write_timeout(30);
        auto r = method == "GET"      ? client.Get(path.c_str())
                 : method == "DELETE" ? client.Delete(path.c_str())
                                      : client.Post(path.c_str(), body, "application/json");
        if (!r)
            throw ApiError(where(method, path) + ": " + httplib::to_string(r.error()) +
                           "; check that a service listens there (podman system service, dockerd) and that anvild may open the socket");
        for (int ok : accept)
            if (r->status == ok) {
                *answer = r->body;
                return r->status;
            }
        const json j = json::parse(r->body, nullptr, false);
        std::string message = j.is_object() && j.contains("message") && j["message"].is_string() ? j["message"].get<std::string>() : r->body;
        while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) message.pop_back();
        throw ApiError(where(method, path) + ": HTTP " + std::to_string(r->status) + ": " + message);
    }

    std::string socket_;
};

}  // namespace

std::unique_ptr<ContainerBackend> make_api_backend(const ContainerDriverOptions& options) {
    return std::make_unique<ApiBackend>(options);
}

}  // namespace anvil::drivers
