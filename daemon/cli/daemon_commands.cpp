// The anvil commands that talk to a running anvild over its REST API (docs/API.md):
//   reads:  status | recipes [filters] | recipe ID | history ID | default | engines
//   writes: sync | qualify ID | pin ID | unpin | freeze [--reason R] | unfreeze   (Bearer token)
// Tables for people, --json for the API's answer as it came. Exit 0 ok, 1 anvild said no (4xx),
// 2 the command could not run (usage, anvild unreachable or failing, no token).
#include <netdb.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "daemon/config/host_port.hpp"
#include "daemon/cli/arguments.hpp"
#include "daemon/cli/commands.hpp"

namespace anvil::cli {

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr const char* kDefaultApi = "127.0.0.1:7700";
constexpr const char* kSystemTokenFile = "/var/lib/anvil/api-token";
constexpr const char* kExampleTokenFile = ".anvil/data/api-token";  // examples/anvild.json's data_dir

// Ends the command with one line on stderr and an exit code (1: anvild said no, 2: could not run).
struct CommandFailure {
    int exit_code;
    std::string message;
};

struct ApiAddress {
    std::string host;  // IPv6 without brackets
    int port = 0;
    std::string text;  // as the user wrote it, for messages
};

ApiAddress parse_api(std::string text) {
    const std::string original = text;
    auto bad = [&] {
        return UsageError("--api expects HOST:PORT (e.g. 127.0.0.1:7700), found '" + original + "'");
    };
    if (text.starts_with("http://")) text = text.substr(7);
    while (text.ends_with("/")) text.pop_back();
    const auto split = daemon::split_host_port(text);
    if (!split || split->port < 1) throw bad();
    ApiAddress out;
    out.host = split->host;
    out.port = split->port;
    out.text = original;
    return out;
}

// httplib only says "Connection"; connecting once more ourselves gives the reason a person can act on.
std::string why_unreachable(const ApiAddress& api) {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (int rc = getaddrinfo(api.host.c_str(), std::to_string(api.port).c_str(), &hints, &found); rc != 0)
        return std::string("cannot resolve ") + api.host + ": " + gai_strerror(rc);
    std::string reason = "connection failed";
    for (addrinfo* a = found; a; a = a->ai_next) {
        const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) continue;
        timeval timeout{3, 0};
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);  // bounds connect()
        const int rc = connect(fd, a->ai_addr, a->ai_addrlen);
        const int err = errno;
        close(fd);
        if (rc == 0) {
            reason = "it accepted a connection but did not answer";
            break;
        }
        reason = err == EINPROGRESS || err == EAGAIN ? "connection timed out" : std::strerror(err);
    }
    freeaddrinfo(found);
    if (!reason.empty()) reason[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(reason[0])));
    return reason;
}

std::string percent_encode(const std::string& text) {
    static const char* hex = "0123456789ABCDEF";
    std::string out;
    for (unsigned char c : text) {
        if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') out += static_cast<char>(c);
        else out += '%', out += hex[c >> 4], out += hex[c & 15];
    }
    return out;
}

std::string token_file_path(const std::optional<std::string>& flag) {
    if (flag) return *flag;
    if (const char* env = std::getenv("ANVIL_TOKEN_FILE"); env && *env) return env;
    // An example daemon started from the repository root keeps its token here.
    if (std::error_code ec; fs::exists(kExampleTokenFile, ec)) return kExampleTokenFile;
    return kSystemTokenFile;
}

std::string read_token(const std::string& file) {
    std::ifstream in(file, std::ios::binary);
    if (!in) {
        const int err = errno;
        if (err == EACCES)
            throw CommandFailure{2, "cannot read the API token " + file +
                                        ": permission denied (run as the anvil user or root, or --token-file FILE)"};
        std::string reason = std::strerror(err);
        if (!reason.empty()) reason[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(reason[0])));
        throw CommandFailure{2, "cannot read the API token " + file + ": " + reason +
                                    " (writes need the api-token anvild creates in its data_dir; --token-file FILE or ANVIL_TOKEN_FILE)"};
    }
    std::stringstream bytes;
    bytes << in.rdbuf();
    std::string token = bytes.str();
    while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) token.pop_back();
    if (token.empty()) throw CommandFailure{2, "the API token file " + file + " is empty"};
    return token;
}

struct Options {
    ApiAddress api;
    std::optional<std::string> token_file;
    bool json_output = false;
};

struct Answer {
    int status = 0;
    std::string raw;
    json body;
};

// One request to anvild. Failures become CommandFailure; a 4xx or 5xx with --json still prints the
// body, so scripts see the API's error object.
Answer call(const Options& options, const std::string& method, const std::string& path,
            const std::optional<json>& body = std::nullopt) {
    httplib::Client client(options.api.host, options.api.port);
    client.set_connection_timeout(5, 0);
    client.set_read_timeout(60, 0);
    client.set_write_timeout(30, 0);
    httplib::Headers headers{{"Accept", "application/json"}};
    std::string token_file;
    if (method == "POST") {
        token_file = token_file_path(options.token_file);
        headers.emplace("Authorization", "Bearer " + read_token(token_file));
    }
    httplib::Result result = method == "POST"
                                 ? client.Post(path.c_str(), headers, body ? body->dump() : std::string(), "application/json")
                                 : client.Get(path.c_str(), headers);
    if (!result) {
        const auto error = result.error();
        std::string reason = error == httplib::Error::Connection || error == httplib::Error::ConnectionTimeout
                                 ? why_unreachable(options.api)
                                 : "the connection broke (" + httplib::to_string(error) + ")";
        throw CommandFailure{2, "cannot reach anvild at " + options.api.text + ": " + reason +
                                    " (is it running? --api HOST:PORT)"};
    }
    Answer answer;
    answer.status = result->status;
    answer.raw = result->body;
    try {
        answer.body = answer.raw.empty() ? json() : json::parse(answer.raw);
    } catch (const json::exception&) {
        if (answer.status < 400)
            throw CommandFailure{2, "anvild at " + options.api.text + " answered " + path + " with something that is not JSON (is --api the REST API, not the serving endpoint?)"};
    }
    if (answer.status < 400) return answer;

    // Flushed now so the body comes before the error line when both go to one terminal or pipe.
    if (options.json_output) std::cout << answer.raw << (answer.raw.ends_with("\n") ? "" : "\n") << std::flush;
    std::string code, message;
    if (answer.body.is_object() && answer.body.contains("error") && answer.body["error"].is_object()) {
        code = answer.body["error"].value("code", "");
        message = answer.body["error"].value("message", "");
    }
    if (message.empty()) {
        // Not anvild's {"error": {...}}: most likely --api names some other server.
        throw CommandFailure{answer.status < 500 ? 1 : 2, options.api.text + " answered " + std::to_string(answer.status) +
                                                              " to " + method + " " + path +
                                                              " without an anvild error (is --api anvild's REST API address?)"};
    }
    const std::string tag = " (" + std::to_string(answer.status) + (code.empty() ? "" : " " + code) + ")";
    if (answer.status == 401)
        throw CommandFailure{1, message + tag + ": the token in " + token_file +
                                    " is not this anvild's (--token-file FILE or ANVIL_TOKEN_FILE)"};
    if (answer.status < 500) throw CommandFailure{1, message + tag};
    throw CommandFailure{2, "anvild could not answer: " + message + tag};
}

// --- rendering -------------------------------------------------------------------------------

std::string text(const json& v) {
    if (v.is_null()) return "-";
    if (v.is_string()) return v.get<std::string>().empty() ? "-" : v.get<std::string>();
    if (v.is_boolean()) return v.get<bool>() ? "yes" : "no";
    if (v.is_array()) {
        std::string out;
        for (const auto& item : v) out += (out.empty() ? "" : ", ") + text(item);
        return out.empty() ? "-" : out;
    }
    return v.dump();
}

std::string field(const json& object, const char* key) {
    if (!object.is_object()) return "-";
    auto it = object.find(key);
    return it == object.end() ? "-" : text(*it);
}

std::string short_commit(const std::string& commit) { return commit.size() > 12 ? commit.substr(0, 12) : commit; }

class Table {
public:
    explicit Table(std::vector<std::string> headers) : rows_{std::move(headers)} {}
    void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
    bool empty() const { return rows_.size() == 1; }
    void print(std::ostream& out, const std::string& indent = "") const {
        std::vector<std::size_t> widths(rows_[0].size(), 0);
        for (const auto& row : rows_)
            for (std::size_t i = 0; i < row.size() && i < widths.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
        for (const auto& row : rows_) {
            std::string line = indent;
            for (std::size_t i = 0; i < row.size(); ++i) {
                line += row[i];
                if (i + 1 < row.size()) line += std::string(widths[i] - row[i].size() + 2, ' ');
            }
            out << line << "\n";
        }
    }

private:
    std::vector<std::vector<std::string>> rows_;
};

// {"a": 1, "b": "x"} → "a 1, b x": for objects whose keys the API may extend.
std::string inline_object(const json& v) {
    if (!v.is_object()) return text(v);
    std::string out;
    for (const auto& [key, value] : v.items()) {
        if (value.is_object()) continue;
        out += (out.empty() ? "" : ", ") + key + " " + text(value);
    }
    return out.empty() ? "-" : out;
}

std::string describe_default(const json& d) {
    if (!d.is_object()) return "none";
    std::string out = field(d, "recipe_id");
    if (d.contains("revision_id")) out += " (revision " + field(d, "revision_id") + ")";
    if (field(d, "since") != "-") out += " since " + field(d, "since");
    if (d.value("pinned", false)) out += ", pinned";
    return out;
}

void print_status(const json& s) {
    std::cout << "default     " << describe_default(s.value("default", json())) << "\n";
    const json policy = s.value("policy", json::object());
    std::string frozen = "no";
    if (policy.value("frozen", false)) {
        frozen = "yes";
        const json freeze = policy.value("freeze", json());
        if (freeze.is_object() && freeze.contains("reason") && freeze["reason"].is_string()) frozen += " (" + freeze["reason"].get<std::string>() + ")";
    }
    std::cout << "policy      " << field(policy, "mode") << ", frozen " << frozen << ", pinned " << field(policy, "pinned") << "\n";
    const json endpoint = s.value("endpoint", json::object());
    const json upstream = endpoint.value("upstream", json());
    std::string to = "no upstream (nothing to serve yet)";
    if (upstream.is_object())
        to = field(upstream, "recipe_id") + " (engine " + field(upstream, "engine_id") + ", port " + field(upstream, "port") + ")";
    else if (!upstream.is_null()) to = text(upstream);
    std::cout << "endpoint    " << field(endpoint, "address") << " -> " << to << "\n";
    if (s.contains("qualifying") && !s["qualifying"].is_null()) std::cout << "qualifying  " << inline_object(s["qualifying"]) << "\n";
    std::cout << "engines     " << field(s, "engines") << "\n";
    std::string counts;
    const json by_status = s.value("recipes", json::object());
    for (const auto& [status, count] : by_status.items())
        if (!(count.is_number() && count.get<double>() == 0)) counts += (counts.empty() ? "" : ", ") + status + " " + text(count);
    std::cout << "recipes     " << (counts.empty() ? "none" : counts) << "\n";
    if (s.contains("inventory")) std::cout << "inventory   " << inline_object(s["inventory"]) << "\n";
    std::cout << "last pass   " << inline_object(s.value("last_pass", json())) << "\n";
    const json conditions = s.value("conditions", json::array());
    if (conditions.is_array() && !conditions.empty()) {
        std::cout << "conditions:\n";
        Table t({"TYPE", "STATUS", "REASON", "SINCE", "MESSAGE"});
        for (const auto& c : conditions)
            t.add({field(c, "type"), field(c, "status"), field(c, "reason"), field(c, "since"), field(c, "message")});
        t.print(std::cout, "  ");
    }
}

void print_recipes(const json& answer, const std::vector<std::string>& words) {
    const json data = answer.value("data", json::array());
    Table t({"ID", "STATUS", "ENGINE", "HARDWARE", "PINNED", "VERDICT"});
    for (const auto& r : data)
        t.add({field(r, "id"), field(r, "status"), field(r, "engine"), field(r, "hardware_id"), field(r, "pinned"), field(r, "verdict")});
    if (!t.empty()) t.print(std::cout);
    const json meta = answer.value("meta", json::object());
    const auto offset = meta.value("offset", 0);
    const auto total = meta.value("total", static_cast<int>(data.size()));
    if (data.empty()) std::cout << "no recipes match (" << total << " in all)\n";
    else std::cout << "recipes " << offset + 1 << "-" << offset + static_cast<int>(data.size()) << " of " << total << "\n";
    const json links = answer.value("links", json::object());
    if (links.is_object() && links.contains("next") && !links["next"].is_null()) {
        // The same command, one page on.
        std::string again = "anvil recipes";
        for (std::size_t i = 0; i < words.size(); ++i) {
            if (words[i] == "--offset") { ++i; continue; }
            if (words[i].starts_with("--offset=")) continue;
            again += " " + words[i];
        }
        std::cout << "next page: " << again << " --offset " << offset + static_cast<int>(data.size()) << "\n";
    }
}

void print_history_table(const json& history, const std::string& indent) {
    Table t({"WHEN", "REVISION", "FROM", "TO", "ACTOR", "REASON"});
    for (const auto& h : history)
        t.add({field(h, "created_at"), field(h, "revision_id"), field(h, "from"), field(h, "to"), field(h, "actor"), field(h, "reason")});
    t.print(std::cout, indent);
}

void print_recipe(const json& answer) {
    const json r = answer.value("data", json::object());
    std::cout << field(r, "id") << "  " << field(r, "status") << "\n";
    const json revisions = r.value("revisions", json::array());
    if (!revisions.empty()) {
        std::cout << "revisions:\n";
        Table t({"REVISION", "STATUS", "PINNED", "SOURCE", "COMMIT", "PATH", "CREATED"});
        for (const auto& v : revisions) {
            std::string pinned = field(v, "pinned");
            if (v.contains("unpinned_reasons") && v["unpinned_reasons"].is_array() && !v["unpinned_reasons"].empty())
                pinned += " (" + text(v["unpinned_reasons"]) + ")";
            t.add({field(v, "revision_id"), field(v, "status"), pinned, field(v, "source"), short_commit(field(v, "commit")),
                   field(v, "path"), field(v, "created_at")});
        }
        t.print(std::cout, "  ");
    }
    const json feasibility = r.value("feasibility", json());
    if (feasibility.is_object()) {
        std::cout << "feasibility: " << field(feasibility, "verdict");
        if (feasibility.contains("promotable")) std::cout << ", promotable " << field(feasibility, "promotable");
        std::cout << "\n";
        for (const char* list : {"reasons", "promotion_blockers"}) {
            const json items = feasibility.value(list, json::array());
            for (const auto& item : items) std::cout << "  - " << (item.is_string() ? item.get<std::string>() : inline_object(item)) << "\n";
        }
    }
    const json evidence = r.value("evidence", json::array());
    const json verdicts = r.value("verdicts", json::array());
    std::cout << "evidence: " << evidence.size() << " record(s); verdicts: " << verdicts.size() << "\n";
    const json history = r.value("history", json::array());
    if (!history.empty()) {
        std::cout << "history:\n";
        print_history_table(history, "  ");
    }
}

void print_engines(const json& answer) {
    const json data = answer.value("data", json::array());
    if (data.empty()) {
        std::cout << "no engines\n";
        return;
    }
    Table t({"ID", "RECIPE", "ROLE", "DRIVER", "PID/CONTAINER", "PORT", "HEALTH", "STARTED"});
    for (const auto& e : data) {
        std::string process = field(e, "pid");
        if (e.contains("container_id") && !e["container_id"].is_null()) process = short_commit(field(e, "container_id"));
        t.add({field(e, "id"), field(e, "recipe_id"), field(e, "role"), field(e, "driver"), process, field(e, "port"),
               field(e, "health"), field(e, "started_at")});
    }
    t.print(std::cout);
}

// `anvil gpus --cluster`: the Slurm cluster anvild places engines on, a row per node, and the node
// the gates judge against.
void print_cluster(const json& answer) {
    const json data = answer.value("data", json::object());
    const json judging = data.value("judging_with", json::object());
    if (!data.contains("cluster")) {
        std::cout << "anvild places engines on this host (placement local); its GPUs: anvil gpus\n";
        return;
    }
    const json cluster = data["cluster"];
    const json placement = cluster.value("placement", json::object());
    std::cout << "placement   slurm, " << field(placement, "rest") << " as " << field(placement, "user")
              << (field(placement, "partition").empty() ? "" : ", partition " + field(placement, "partition")) << "\n";
    std::cout << "judging     " << field(judging, "source") << "\n";
    if (cluster.contains("error")) {
        std::cout << "nodes       unreadable now: " << field(cluster, "error") << "\n";
        return;
    }
    Table t({"NODE", "STATE", "PARTITIONS", "CPUS IDLE/ALL", "MEMORY MIB USED/ALL", "GPUS FREE/ALL", "GPU TYPES"});
    for (const auto& n : cluster.value("nodes", json::array())) {
        std::string state = field(n, "state");
        for (const auto& f : n.value("state_flags", json::array())) state += "+" + f.get<std::string>();
        std::string partitions, types;
        for (const auto& p : n.value("partitions", json::array())) partitions += (partitions.empty() ? "" : ",") + p.get<std::string>();
        for (const auto& g : n.value("gpus", json::array()))
            types += (types.empty() ? "" : ",") + (field(g, "type").empty() ? std::string("gpu") : field(g, "type")) + ":" + field(g, "count");
        t.add({field(n, "name"), state, partitions, field(n, "idle_cpus") + "/" + field(n, "cpus"),
               field(n, "alloc_memory_mib") + "/" + field(n, "real_memory_mib"), field(n, "free_gpus") + "/" + field(n, "gpu_count"),
               types.empty() ? "-" : types});
    }
    t.print(std::cout);
}

// --- commands --------------------------------------------------------------------------------

struct Spec {
    std::size_t positional;          // how many words after the command
    const char* positional_name;     // for the usage line
    std::set<std::string> extra_flags;
};

const std::map<std::string, Spec>& specs() {
    static const std::map<std::string, Spec> table{
        {"status", {0, "", {}}},
        {"recipes", {0, "", {"--status", "--engine", "--hardware", "--pinned", "--verdict", "--q", "--limit", "--offset"}}},
        {"recipe", {1, "ID", {}}},
        {"history", {1, "ID", {}}},
        {"default", {0, "", {}}},
        {"engines", {0, "", {}}},
        {"sync", {0, "", {}}},
        {"qualify", {1, "ID", {}}},
        {"pin", {1, "ID", {}}},
        {"unpin", {0, "", {}}},
        {"freeze", {0, "", {"--reason"}}},
        {"unfreeze", {0, "", {}}},
        {"gpus --cluster", {0, "", {}}},  // reached through `anvil gpus --cluster` only
    };
    return table;
}

std::string recipes_query(const Arguments& args) {
    std::string query;
    auto add = [&](const std::string& key, const std::string& value) {
        query += (query.empty() ? "?" : "&") + key + "=" + percent_encode(value);
    };
    for (const char* key : {"status", "engine", "hardware", "verdict", "q"})
        if (auto v = args.value(std::string("--") + key)) add(key, *v);
    if (auto v = args.value("--pinned")) {
        if (*v == "yes" || *v == "true") add("pinned", "true");
        else if (*v == "no" || *v == "false") add("pinned", "false");
        else throw UsageError("--pinned expects yes or no, found '" + *v + "'");
    }
    for (const char* key : {"limit", "offset"}) {
        if (auto v = args.value(std::string("--") + key)) {
            if (v->empty() || v->size() > 9 || !std::all_of(v->begin(), v->end(), [](char c) { return c >= '0' && c <= '9'; }))
                throw UsageError(std::string("--") + key + " expects a whole number, found '" + *v + "'");
            add(key, *v);
        }
    }
    return query;
}

int run(const std::string& name, const std::vector<std::string>& words) {
    const Spec& spec = specs().at(name);
    std::set<std::string> value_flags = spec.extra_flags;
    value_flags.insert({"--api", "--token-file"});
    Arguments args(words, value_flags, {"--json"});
    if (args.positional().size() != spec.positional)
        throw UsageError(spec.positional ? "expects " + std::string(spec.positional_name) : "takes no arguments");
    Options options;
    const char* env_api = std::getenv("ANVIL_API");
    options.api = parse_api(args.value("--api").value_or(env_api && *env_api ? env_api : kDefaultApi));
    options.token_file = args.value("--token-file");
    options.json_output = args.has("--json");
    const std::string id = spec.positional ? percent_encode(args.positional()[0]) : "";
    const std::string shown_id = spec.positional ? args.positional()[0] : "";

    Answer answer;
    if (name == "status") answer = call(options, "GET", "/api/v1/status");
    else if (name == "recipes") answer = call(options, "GET", "/api/v1/recipes" + recipes_query(args));
    else if (name == "recipe") answer = call(options, "GET", "/api/v1/recipes/" + id);
    else if (name == "history") answer = call(options, "GET", "/api/v1/recipes/" + id + "/history");
    else if (name == "default") answer = call(options, "GET", "/api/v1/default");
    else if (name == "engines") answer = call(options, "GET", "/api/v1/engines");
    else if (name == "sync") answer = call(options, "POST", "/api/v1/registry/sync");
    else if (name == "qualify") answer = call(options, "POST", "/api/v1/recipes/" + id + "/qualify");
    else if (name == "pin") answer = call(options, "POST", "/api/v1/default", json{{"recipe_id", shown_id}});
    else if (name == "unpin") answer = call(options, "POST", "/api/v1/default", json{{"recipe_id", nullptr}});
    else if (name == "freeze") {
        json body = json::object();
        if (auto reason = args.value("--reason")) body["reason"] = *reason;
        answer = call(options, "POST", "/api/v1/promotion/freeze", body);
    } else if (name == "unfreeze") answer = call(options, "POST", "/api/v1/promotion/unfreeze");
    else if (name == "gpus --cluster") answer = call(options, "GET", "/api/v1/inventory");

    if (options.json_output) {
        std::cout << answer.raw << (answer.raw.ends_with("\n") ? "" : "\n");
        return 0;
    }
    if (name == "status") print_status(answer.body);
    else if (name == "recipes") print_recipes(answer.body, words);
    else if (name == "recipe") print_recipe(answer.body);
    else if (name == "history") {
        const json history = answer.body.value("data", json::array());
        if (history.empty()) std::cout << "no transitions recorded for " << shown_id << "\n";
        else print_history_table(history, "");
    }
    else if (name == "default") std::cout << "default: " << describe_default(answer.body.value("data", json())) << "\n";
    else if (name == "engines") print_engines(answer.body);
    else if (name == "sync") std::cout << "registry sync queued\n";
    else if (name == "qualify") std::cout << "qualification of " << shown_id << " queued\n";
    else if (name == "pin") std::cout << shown_id << " pinned: anvild makes it the default on its next pass\n";
    else if (name == "unpin") std::cout << "default pin released; automatic promotion decides again\n";
    else if (name == "freeze") std::cout << "automatic promotion frozen\n";
    else if (name == "unfreeze") std::cout << "automatic promotion resumed\n";
    else if (name == "gpus --cluster") print_cluster(answer.body);
    return 0;
}

}  // namespace

bool is_daemon_command(const std::string& name) { return name != "gpus --cluster" && specs().count(name) > 0; }

int daemon_command(const std::string& name, const std::vector<std::string>& args) {
    try {
        return run(name, args);
    } catch (const CommandFailure& failure) {
        std::cerr << "anvil: " << failure.message << "\n";
        return failure.exit_code;
    }
}

}  // namespace anvil::cli
