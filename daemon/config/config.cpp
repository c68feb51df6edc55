// anvild's configuration file: reading, validation (every problem at once, each naming its JSON
// pointer), defaults, command-line overrides, and the API token file.
#include "daemon/config/config.hpp"

#include "daemon/config/host_port.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "registry/json_reader.hpp"
#include "support/fd.hpp"
#include "support/random.hpp"

namespace anvil::daemon {

namespace fs = std::filesystem;
using registry::FieldError;
using registry::FieldErrors;
using registry::JsonReader;
using registry::Node;
using registry::Presence;
using nlohmann::json;

namespace {

// "<file>: <pointer>: expected X, found Y" — the pointer alone, so the line can be pasted into jq.
std::string config_line(const std::string& file, const FieldError& e) {
    return file + ": " + (e.pointer.empty() ? std::string("/") : e.pointer) + ": expected " + e.expected +
           ", found " + (e.found.empty() ? std::string("nothing") : e.found);
}

std::size_t edit_distance(const std::string& a, const std::string& b) {
    std::vector<std::size_t> row(b.size() + 1);
    for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i) {
        std::size_t diagonal = row[0];
        row[0] = i;
        for (std::size_t j = 1; j <= b.size(); ++j) {
            const std::size_t above = row[j];
            row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
            diagonal = above;
        }
    }
    return row[b.size()];
}

// Unknown keys are errors: a misspelt key silently falling back to its default is the kind of
// mistake that surfaces weeks later as "why did it promote that?".
void reject_unknown_keys(const Node& object, const std::vector<std::string>& known, JsonReader& reader) {
    if (!object.present() || !object.value->is_object()) return;
    for (const auto& [key, _] : object.value->items()) {
        if (std::find(known.begin(), known.end(), key) != known.end()) continue;
        std::string expected = "one of";
        for (std::size_t i = 0; i < known.size(); ++i) expected += (i ? ", " : " ") + known[i];
        std::string found = "the unknown key " + registry::render_short(json(key));
        const std::string* closest = nullptr;
        std::size_t best = std::max<std::size_t>(2, key.size() / 4) + 1;  // suggest only near misses
        for (const auto& k : known) {
            const std::size_t d = edit_distance(key, k);
            if (d < best) best = d, closest = &k;
        }
        if (closest) found += " (did you mean \"" + *closest + "\"?)";
        reader.fail(object.child(key).pointer, expected, found);
    }
}

// A git URL ("https://…", "ssh://…", "file://…", "git@host:path") stays as written; anything else
// is a local path, resolved against the configuration file's directory.
bool looks_like_url(const std::string& text) {
    if (text.find("://") != std::string::npos) return true;
    const auto colon = text.find(':');
    const auto slash = text.find('/');
    return colon != std::string::npos && colon > 1 && (slash == std::string::npos || colon < slash);
}

class ConfigReader {
public:
    ConfigReader(const fs::path& file, FieldErrors& errors)
        : file_(file), base_(fs::absolute(file).parent_path()), reader_(errors) {}

    JsonReader& reader() { return reader_; }

    fs::path resolve(const std::string& text) const {
        const fs::path p(text);
        return (p.is_absolute() ? p : base_ / p).lexically_normal();
    }

    std::optional<fs::path> path(const Node& parent, std::string_view key) {
        auto text = reader_.string(parent, key, Presence::optional);
        if (!text) return std::nullopt;
        if (text->empty()) {
            reader_.fail(parent.child(key), "a path", "an empty string");
            return std::nullopt;
        }
        return resolve(*text);
    }

    std::optional<std::string> non_empty_string(const Node& parent, std::string_view key) {
        auto text = reader_.string(parent, key, Presence::optional);
        if (text && text->empty()) {
            reader_.fail(parent.child(key), "a non-empty string", "an empty string");
            return std::nullopt;
        }
        return text;
    }

    // Seconds as a JSON number (fractions allowed, so tests can poll fast), as milliseconds.
    std::optional<std::chrono::milliseconds> seconds(const Node& parent, std::string_view key, bool zero_allowed) {
        const Node n = parent.child(key);
        if (n.is_null()) return std::nullopt;
        const char* expected = zero_allowed ? "a number of seconds, 0 or more" : "a number of seconds above 0";
        if (!n.value->is_number()) {
            reader_.fail(n, expected);
            return std::nullopt;
        }
        const double s = n.value->get<double>();
        if (!std::isfinite(s) || s < 0 || (!zero_allowed && s <= 0) || s > 365.0 * 24 * 3600) {
            reader_.fail(n, expected);
            return std::nullopt;
        }
        auto ms = std::chrono::milliseconds(static_cast<std::int64_t>(std::llround(s * 1000.0)));
        if (!zero_allowed && ms.count() == 0) ms = std::chrono::milliseconds(1);
        return ms;
    }

    std::optional<HostPort> host_port(const Node& parent, std::string_view key) {
        auto text = reader_.string(parent, key, Presence::optional);
        if (!text) return std::nullopt;
        try {
            return parse_host_port(*text, parent.child(key).pointer);
        } catch (const ConfigError&) {
            reader_.fail(parent.child(key), "\"HOST:PORT\" with a port from 0 to 65535 (\"127.0.0.1:7700\", \"[::1]:7700\")");
            return std::nullopt;
        }
    }

    std::optional<int> port(const Node& parent, std::string_view key) {
        const Node n = parent.child(key);
        auto value = reader_.integer(parent, key, Presence::required, 1);
        if (!value) return std::nullopt;
        if (*value > 65535) {
            reader_.fail(n, "a port from 1 to 65535");
            return std::nullopt;
        }
        return static_cast<int>(*value);
    }

private:
    fs::path file_;
    fs::path base_;
    JsonReader reader_;
};

void read_sources(const Node& root, ConfigReader& cr, DaemonConfig& config) {
    JsonReader& reader = cr.reader();
    const Node sources = reader.array(root, "sources", Presence::optional);
    std::map<std::string, std::string> names;  // name → pointer of its first use
    for (std::size_t i = 0; sources.present() && i < sources.value->size(); ++i) {
        const Node item = sources.at(i);
        if (!item.value->is_object()) {
            reader.fail(item, "a source object {name, url, ref, poll_interval_seconds}");
            continue;
        }
        reject_unknown_keys(item, {"name", "url", "ref", "poll_interval_seconds"}, reader);
        SourceConfig source;
        auto url = reader.string(item, "url");
        if (url && url->empty()) reader.fail(item.child("url"), "a git URL or a path", "an empty string");
        else if (url) source.url = looks_like_url(*url) ? *url : cr.resolve(*url).string();
        source.name = cr.non_empty_string(item, "name").value_or(url.value_or(""));
        source.ref = reader.string(item, "ref", Presence::optional).value_or("");
        if (auto poll = cr.seconds(item, "poll_interval_seconds", false)) source.poll_interval = *poll;
        if (!source.name.empty()) {
            auto [it, fresh] = names.emplace(source.name, item.pointer);
            if (!fresh)
                reader.fail(item.child("name").pointer, "a source name not used before (" + it->second + " has it)",
                            registry::render_short(json(source.name)));
        }
        config.sources.push_back(std::move(source));
    }
}

void read_inventory(const Node& root, const std::string& file, DaemonConfig& config, JsonReader& reader) {
    const Node n = root.child("inventory");
    if (n.is_null()) return;
    if (n.value->is_string()) {
        const auto mode = n.value->get<std::string>();
        if (mode == "auto" || mode == "none") config.inventory_mode = mode;
        else reader.fail(n, "\"auto\", \"none\" or an inventory object {gpus: [...]}");
        return;
    }
    if (!n.value->is_object()) {
        reader.fail(n, "\"auto\", \"none\" or an inventory object {gpus: [...]}");
        return;
    }
    reject_unknown_keys(n, {"gpus", "collectives", "collectives_notes"}, reader);
    config.inventory_mode = "declared";
    config.inventory = registry::parse_inventory(n, reader, "configuration " + file);
}

// "local", or {"kind": "slurm", "rest", "user", "token_file", "partition"?, "account"?,
// "time_limit_minutes"?, "gpu_memory_mib"?, "timeout_seconds"?, "job_directory"?, "cpus_per_engine"?,
// "memory_mib_per_engine"?, "environment"?}.
void read_placement(const Node& root, ConfigReader& cr, DaemonConfig& config) {
    JsonReader& reader = cr.reader();
    const Node n = root.child("placement");
    const char* expected = "\"local\" or a placement object {\"kind\": \"slurm\", \"rest\", \"user\", \"token_file\", ...}";
    if (n.is_null()) return;
    if (n.value->is_string()) {
        if (n.value->get<std::string>() != "local") reader.fail(n, expected);
        return;
    }
    if (!n.value->is_object()) {
        reader.fail(n, expected);
        return;
    }
    reject_unknown_keys(n, {"kind", "rest", "user", "token_file", "partition", "account", "time_limit_minutes", "gpu_memory_mib",
                            "timeout_seconds", "job_directory", "cpus_per_engine", "memory_mib_per_engine", "environment"},
                        reader);
    const auto kind = reader.string(n, "kind");
    if (kind && *kind == "local") return;
    if (kind && *kind != "slurm") {
        reader.fail(n.child("kind"), "\"local\" or \"slurm\"");
        return;
    }
    drivers::SlurmPlacement p;
    if (auto rest = reader.string(n, "rest")) {
        const bool http = rest->rfind("http://", 0) == 0 || rest->rfind("https://", 0) == 0;
        const bool unix_socket = rest->rfind("unix:/", 0) == 0;
        if (http || unix_socket) p.rest.address = *rest;
        else reader.fail(n.child("rest"), "slurmrestd's address: \"http://HOST:PORT\" or \"unix:/path/to/socket\"");
        while (http && !p.rest.address.empty() && p.rest.address.back() == '/') p.rest.address.pop_back();
    }
    if (auto user = reader.string(n, "user")) {
        if (user->empty() || *user == "root") reader.fail(n.child("user"), "the user jobs run as: not root (slurmrestd refuses its tokens)");
        else p.rest.user = *user;
    }
    if (n.child("token_file").is_null()) reader.fail(n.child("token_file"), "a file holding the user's JWT (scontrol token)");
    if (auto f = cr.path(n, "token_file")) p.rest.token_file = *f;
    if (auto s = cr.non_empty_string(n, "partition")) p.partition = *s;
    if (auto s = cr.non_empty_string(n, "account")) p.account = *s;
    if (auto m = reader.integer(n, "time_limit_minutes", Presence::optional, 0)) {
        // A year is more than any partition allows; beyond it is a typo.
        if (*m <= 525600) p.time_limit = std::chrono::minutes(*m);
        else reader.fail(n.child("time_limit_minutes"), "minutes from 0 (the partition's limit) to 525600");
    }
    if (auto t = cr.seconds(n, "timeout_seconds", false)) p.rest.timeout = *t;
    if (auto d = cr.path(n, "job_directory")) p.job_directory = *d;
    if (auto c = reader.integer(n, "cpus_per_engine", Presence::optional, 1)) {
        if (*c <= 4096) p.cpus_per_engine = static_cast<int>(*c);
        else reader.fail(n.child("cpus_per_engine"), "CPUs from 1 to 4096");
    }
    if (auto m = reader.integer(n, "memory_mib_per_engine", Presence::optional, 0)) p.memory_mib_per_engine = *m;
    const Node memory = reader.object(n, "gpu_memory_mib", Presence::optional);
    if (memory.present()) {
        for (const auto& [type, mib] : memory.value->items()) {
            const Node m = memory.child(type);
            if (!mib.is_number_integer() || mib.get<std::int64_t>() <= 0 || mib.get<std::int64_t>() > (std::int64_t(1) << 40))
                reader.fail(m, "one GPU's memory in MiB (a whole number above 0), by GRES type or \"*\"");
            else p.gpu_memory_mib[type] = mib.get<std::int64_t>();
        }
    }
    // The site's variables for every job (HOME for a container runtime, a module path, a proxy):
    // configuration, never a recipe's. anvil-job-exec's own names are anvild's to set.
    const Node environment = reader.object(n, "environment", Presence::optional);
    if (environment.present()) {
        for (const auto& [name, value] : environment.value->items()) {
            const Node v = environment.child(name);
            const bool valid_name = !name.empty() && name.find('=') == std::string::npos && name.rfind("ANVIL_JOB_", 0) != 0;
            if (!valid_name) reader.fail(v, "a variable name without '=' (ANVIL_JOB_* are anvild's own)");
            else if (!value.is_string()) reader.fail(v, "the variable's value as a string");
            else p.environment[name] = value.get<std::string>();
        }
    }
    config.slurm = std::move(p);
}

void read_promotion(const Node& root, ConfigReader& cr, PromotionConfig& p) {
    JsonReader& reader = cr.reader();
    const Node n = reader.object(root, "promotion", Presence::optional);
    if (!n.present()) return;
    reject_unknown_keys(n,
                        {"policy", "min_interval_seconds", "margin", "attempts", "needle_depths", "exclusive_window",
                         "drain_timeout_seconds", "retry_backoff_min_seconds", "retry_backoff_max_seconds",
                         "warm_e2e_min_seconds"},
                        reader);
    if (auto policy = reader.string(n, "policy", Presence::optional)) {
        if (const auto parsed = qualify::parse_policy(*policy)) p.policy = *parsed;
        else reader.fail(n.child("policy"), "\"auto\" or \"manual\"");
    }
    if (auto v = reader.integer(n, "min_interval_seconds", Presence::optional, 0)) p.min_interval = std::chrono::seconds(*v);
    if (auto v = reader.number(n, "margin", Presence::optional)) {
        if (*v >= 0 && *v < 1) p.margin = *v;
        else reader.fail(n.child("margin"), "a ratio from 0 up to (not including) 1");
    }
    if (auto v = reader.integer(n, "attempts", Presence::optional, 1)) {
        if (*v <= 100) p.attempts = static_cast<int>(*v);
        else reader.fail(n.child("attempts"), "a number of attempts from 1 to 100");
    }
    const Node depths = reader.array(n, "needle_depths", Presence::optional);
    if (depths.present()) {
        std::vector<double> values;
        for (std::size_t i = 0; i < depths.value->size(); ++i) {
            const Node d = depths.at(i);
            if (!d.value->is_number() || d.value->get<double>() < 0 || d.value->get<double>() > 1) {
                reader.fail(d, "a depth from 0 (start of the context) to 1 (its end)");
                continue;
            }
            values.push_back(d.value->get<double>());
        }
        if (depths.value->empty()) reader.fail(depths, "at least one needle depth", "an empty array");
        p.needle_depths = std::move(values);
    }
    const Node window = n.child("exclusive_window");
    if (!window.is_null()) {
        if (window.value->is_string()) p.exclusive_window = qualify::parse_exclusive_window(window.value->get<std::string>());
        if (!p.exclusive_window) reader.fail(window, "a local-time window \"HH:MM-HH:MM\" (e.g. \"02:00-05:00\"), or null");
    }
    if (auto v = cr.seconds(n, "drain_timeout_seconds", true)) p.drain_timeout = *v;
    if (auto v = cr.seconds(n, "retry_backoff_min_seconds", false)) p.retry_backoff_min = *v;
    if (auto v = cr.seconds(n, "retry_backoff_max_seconds", false)) p.retry_backoff_max = *v;
    if (auto v = cr.seconds(n, "warm_e2e_min_seconds", true)) p.warm_e2e_min = *v;
    if (p.retry_backoff_max < p.retry_backoff_min)
        reader.fail(n.child("retry_backoff_max_seconds").pointer, "at least retry_backoff_min_seconds",
                    std::to_string(p.retry_backoff_max.count() / 1000.0) + " s, below the minimum");
}

// "/run/podman/podman.sock" or "unix:///run/podman/podman.sock"; null keeps the CLI. A socket's path
// does not depend on where the configuration file lies, so a relative one is an error, not resolved.
void read_container_api_socket(const Node& top, JsonReader& reader, DaemonConfig& config) {
    const Node n = top.child("container_api_socket");
    if (n.is_null()) return;
    std::string text = n.value->is_string() ? n.value->get<std::string>() : "";
    if (text.starts_with("unix://")) text = text.substr(7);
    if (text.empty() || text.front() != '/') {
        reader.fail(n, "the absolute path of the container Engine API's unix socket (\"/run/podman/podman.sock\", "
                       "\"unix:///var/run/docker.sock\"), or null for the CLI");
        return;
    }
    config.container_api_socket = fs::path(text).lexically_normal();
    if (!config.container_runtime_arguments.empty())
        reader.fail(top.child("container_runtime_arguments"), "no command-line arguments when container_api_socket is set (the API takes none)",
                    registry::render_short(*top.child("container_runtime_arguments").value));
}

}  // namespace

ConfigError::ConfigError(std::vector<std::string> lines) : std::runtime_error(fmt::format("{}", fmt::join(lines, "\n"))), problems(std::move(lines)) {}

HostPort parse_host_port(const std::string& text, const std::string& where) {
    auto bad = [&] {
        return ConfigError(where + ": expected \"HOST:PORT\" with a port from 0 to 65535, found " +
                           registry::render_short(json(text)));
    };
    const auto split = split_host_port(text);
    if (!split) throw bad();
    return HostPort{split->host, split->port};
}

namespace {

// allowed_hosts: plain host names; allowed_origins: "*" or scheme://host[:port], as a browser's
// Origin header spells it.
void read_allowed_origins(const Node& top, JsonReader& reader, DaemonConfig& config) {
    auto names = [&](std::string_view key, auto&& valid, const char* expected, std::vector<std::string>& out) {
        const Node list = reader.array(top, key, Presence::optional);
        for (std::size_t i = 0; list.present() && i < list.value->size(); ++i) {
            const Node item = list.at(i);
            if (!item.value->is_string() || !valid(item.value->get<std::string>())) reader.fail(item, expected);
            else out.push_back(item.value->get<std::string>());
        }
    };
    names("allowed_hosts", [](const std::string& h) {
        return !h.empty() && h.find_first_of(":/ \t*") == std::string::npos;
    }, "a host name without port or scheme (such as \"gpu-box.lan\")", config.allowed_hosts);
    names("allowed_origins", [](const std::string& o) {
        if (o == "*") return true;
        const auto scheme = o.find("://");
        if (scheme == std::string::npos || (o.compare(0, scheme, "http") != 0 && o.compare(0, scheme, "https") != 0)) return false;
        const std::string rest = o.substr(scheme + 3);
        return !rest.empty() && rest.find_first_of("/ \t") == std::string::npos;
    }, "an origin as browsers send it (\"http://host:port\", no path) or \"*\"", config.allowed_origins);
}

}  // namespace

DaemonConfig parse_config(const std::string& text, const fs::path& file) {
    const std::string name = file.string();
    json root;
    try {
        root = json::parse(text);
    } catch (const json::exception& e) {
        throw ConfigError(name + ": not valid JSON: " + e.what());
    }
    if (!root.is_object()) throw ConfigError(name + ": /: expected a JSON object, found " + registry::render_short(root));

    DaemonConfig config;
    config.config_file = fs::absolute(file).lexically_normal();
    FieldErrors errors;
    ConfigReader cr(file, errors);
    JsonReader& reader = cr.reader();
    const Node top{&root, ""};
    reject_unknown_keys(top,
                        {"sources", "data_dir", "max_document_bytes", "requirements", "inventory", "commercial", "model_root", "cache_root",
                         "allowed_mount_roots", "container_runtime", "container_runtime_arguments", "container_api_socket",
                         "engine_binary", "placement",
                         "listen", "serve", "served_model_alias", "engine_ports", "token_file", "promotion",
                         "reconcile_interval_seconds", "engine_ready_timeout_seconds", "stop_engines_on_exit", "max_request_body_bytes",
                         "allowed_hosts", "allowed_origins"},
                        reader);

    read_sources(top, cr, config);
    if (auto p = cr.path(top, "data_dir")) config.data_dir = *p;
    if (auto n = reader.integer(top, "max_document_bytes", Presence::optional, 1)) config.max_document_bytes = static_cast<std::size_t>(*n);
    for (auto& source : config.sources) source.document_limits.max_document_bytes = config.max_document_bytes;

    const Node requirements = reader.object(top, "requirements", Presence::optional);
    if (requirements.present()) {
        reject_unknown_keys(requirements, {"tokens", "concurrency", "physical_vram_bytes", "vram_reserves", "thresholds"},
                            reader);
        config.requirements = registry::parse_requirements(requirements, reader);
        config.requirements_json = *requirements.value;
    }
    read_inventory(top, name, config, reader);
    const Node commercial = top.child("commercial");
    if (!commercial.is_null()) {
        if (commercial.value->is_boolean()) config.commercial = commercial.value->get<bool>();
        else reader.fail(commercial, "true, false or null (null leaves non-commercial licences an open question)");
    }

    if (auto p = cr.path(top, "model_root")) config.model_root = *p;
    if (auto p = cr.path(top, "cache_root")) config.cache_root = *p;
    const Node roots = reader.array(top, "allowed_mount_roots", Presence::optional);
    for (std::size_t i = 0; roots.present() && i < roots.value->size(); ++i) {
        const Node r = roots.at(i);
        if (!r.value->is_string() || r.value->get<std::string>().empty()) reader.fail(r, "a path");
        else config.allowed_mount_roots.push_back(cr.resolve(r.value->get<std::string>()));
    }
    if (auto s = cr.non_empty_string(top, "container_runtime")) config.container_runtime = *s;
    config.container_runtime_arguments = reader.string_array(top, "container_runtime_arguments", Presence::optional);
    read_container_api_socket(top, reader, config);
    if (auto p = cr.path(top, "engine_binary")) config.engine_binary = *p;
    read_placement(top, cr, config);
    if (config.slurm && config.inventory_mode == "declared")
        reader.fail("/inventory", "\"auto\" or nothing with a Slurm placement (the cluster's nodes are the inventory)", "an inventory object");

    if (auto hp = cr.host_port(top, "listen")) config.listen = *hp;
    if (auto hp = cr.host_port(top, "serve")) config.serve = *hp;
    if (auto s = cr.non_empty_string(top, "served_model_alias")) config.served_model_alias = *s;
    const Node ports = reader.object(top, "engine_ports", Presence::optional);
    if (ports.present()) {
        reject_unknown_keys(ports, {"first", "last"}, reader);
        auto first = cr.port(ports, "first");
        auto last = cr.port(ports, "last");
        if (first && last && *first > *last)
            reader.fail(ports.child("last").pointer, "a port at or above first (" + std::to_string(*first) + ")",
                        std::to_string(*last));
        else if (first && last) config.port_first = *first, config.port_last = *last;
    }
    if (auto p = cr.path(top, "token_file")) config.token_file = *p;

    read_promotion(top, cr, config.promotion);
    if (auto v = cr.seconds(top, "reconcile_interval_seconds", false)) config.reconcile_interval = *v;
    if (auto v = cr.seconds(top, "engine_ready_timeout_seconds", false)) config.engine_ready_timeout = *v;
    if (auto n = reader.integer(top, "max_request_body_bytes", Presence::optional, 1024)) config.max_request_body_bytes = static_cast<std::size_t>(*n);
    if (auto v = reader.boolean(top, "stop_engines_on_exit", Presence::optional)) config.stop_engines_on_exit = *v;
    read_allowed_origins(top, reader, config);
    if (config.listen.host == config.serve.host && config.listen.port == config.serve.port && config.listen.port != 0)
        reader.fail("/serve", "an address other than listen's (" + config.listen.str() + ")",
                    registry::render_short(json(config.serve.str())));

    if (!errors.empty()) {
        std::vector<std::string> lines;
        for (const auto& e : errors) lines.push_back(config_line(name, e));
        throw ConfigError(std::move(lines));
    }
    return config;
}

DaemonConfig load_config(const fs::path& file) {
    std::ifstream in(file, std::ios::binary);
    if (!in) {
        const int err = errno;
        throw ConfigError(file.string() + ": cannot read the configuration: " + std::strerror(err) +
                          (file == kDefaultConfigFile ? " (--config FILE names another)" : ""));
    }
    std::ostringstream bytes;
    bytes << in.rdbuf();
    return parse_config(bytes.str(), file);
}

void apply_overrides(DaemonConfig& config, const ConfigOverrides& overrides) {
    if (overrides.data_dir) config.data_dir = fs::absolute(*overrides.data_dir).lexically_normal();
    if (overrides.listen) config.listen = *overrides.listen;
    if (overrides.serve) config.serve = *overrides.serve;
}

fs::path token_path(const DaemonConfig& config) {
    return config.token_file.empty() ? config.data_dir / "api-token" : config.token_file;
}

namespace {

std::string errno_text(int err) { return std::strerror(err); }

std::string read_token(int fd, const fs::path& file) {
    struct stat st {};
    if (fstat(fd, &st) != 0) throw std::runtime_error(file.string() + ": cannot stat the API token file: " + errno_text(errno));
    if (!S_ISREG(st.st_mode)) throw std::runtime_error(file.string() + ": the API token file is not a regular file");
    if ((st.st_mode & 077) != 0) {
        char mode[8];
        std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
        throw std::runtime_error(file.string() + ": the API token file is readable by others (mode " + mode +
                                 "); run: chmod 600 " + file.string());
    }
    std::string content;
    char buffer[512];
    for (;;) {
        const ssize_t n = ::read(fd, buffer, sizeof buffer);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throw std::runtime_error(file.string() + ": cannot read the API token: " + errno_text(errno));
        if (n == 0) break;
        content.append(buffer, static_cast<std::size_t>(n));
        if (content.size() > 4096) throw std::runtime_error(file.string() + ": the API token file is too large to be a token");
    }
    while (!content.empty() && std::isspace(static_cast<unsigned char>(content.back()))) content.pop_back();
    const bool printable = std::all_of(content.begin(), content.end(),
                                       [](char c) { return c > ' ' && c < 127; });
    if (content.empty() || !printable)
        throw std::runtime_error(file.string() + ": the API token file holds no usable token (one line, no spaces); "
                                 "remove it and anvild creates a new one");
    return content;
}

void write_all(int fd, const std::string& text, const fs::path& file) {
    if (const int error = support::write_all(fd, text))
        throw std::runtime_error(file.string() + ": cannot write the API token: " + errno_text(error));
}

}  // namespace

namespace {

// A fresh token written whole to a private temporary file beside `file` and synced; its path.
fs::path write_temporary_token(const fs::path& file) {
    std::error_code ec;
    const fs::path dir = file.has_parent_path() ? file.parent_path() : fs::path(".");
    fs::create_directories(dir, ec);
    if (ec) throw std::runtime_error(dir.string() + ": cannot create the directory for the API token: " + ec.message());
    const fs::path temporary = dir / ("." + file.filename().string() + "." + std::to_string(::getpid()) + ".new");
    int out = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (out < 0 && errno == EEXIST) {
        // Left by an earlier process with our pid that died mid-write: never linked, so unused.
        ::unlink(temporary.c_str());
        out = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    }
    if (out < 0) throw std::runtime_error(temporary.string() + ": cannot create the API token file: " + errno_text(errno));
    try {
        write_all(out, support::random_hex(32) + "\n", temporary);
        if (::fsync(out) != 0) throw std::runtime_error(temporary.string() + ": fsync failed: " + errno_text(errno));
    } catch (...) {
        ::close(out);
        ::unlink(temporary.c_str());
        throw;
    }
    ::close(out);
    return temporary;
}

void sync_directory_of(const fs::path& file) {
    const fs::path dir = file.has_parent_path() ? file.parent_path() : fs::path(".");
    if (const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
        ::fsync(dfd);  // the new name survives a power cut
        ::close(dfd);
    }
}

// The mode bits others have on an open regular file, or 0.
unsigned others_bits(int fd) {
    struct stat st {};
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return 0;
    return static_cast<unsigned>(st.st_mode & 077);
}

}  // namespace

std::string ensure_token(const fs::path& file) {
    bool rotated = false;
    for (int attempt = 0; attempt < 3; ++attempt) {
        const int fd = ::open(file.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd >= 0) {
            if (const unsigned others = others_bits(fd); others != 0) {
                ::close(fd);
                char mode[8];
                std::snprintf(mode, sizeof mode, "%03o", others);
                if (rotated)
                    throw std::runtime_error(file.string() + ": the new API token file is still readable by others (mode bits " + mode +
                                             "): its filesystem does not keep file modes; set token_file to a path on one that does");
                // Whoever could read it may hold the token: it is replaced, so the old one is refused
                // from now on, and the new file is private.
                const fs::path temporary = write_temporary_token(file);
                if (::rename(temporary.c_str(), file.c_str()) != 0) {
                    const int err = errno;
                    ::unlink(temporary.c_str());
                    throw std::runtime_error(file.string() + ": the API token file is readable by others (mode bits " + mode +
                                             ") and cannot be replaced: " + errno_text(err) + "; remove it, or make it private (chmod 600)");
                }
                rotated = true;
                sync_directory_of(file);
                spdlog::warn("{}: the API token file was readable by others (mode bits {:03o} for group and others): it may have leaked, "
                             "so it holds a new token now and the old one is refused; give clients the new file",
                             file.string(), others);
                continue;
            }
            try {
                std::string token = read_token(fd, file);
                ::close(fd);
                return token;
            } catch (...) {
                ::close(fd);
                throw;
            }
        }
        if (errno == ELOOP) throw std::runtime_error(file.string() + ": the API token file is a symbolic link; anvild refuses to follow it");
        if (errno != ENOENT) throw std::runtime_error(file.string() + ": cannot open the API token file: " + errno_text(errno));
        if (attempt > 1) break;

        // Written whole to a private temporary file, then linked into place: link() refuses an
        // existing name, so a concurrent start never overwrites a token, and a crash never leaves
        // an empty token file behind.
        const fs::path temporary = write_temporary_token(file);
        const int linked = ::link(temporary.c_str(), file.c_str());
        const int link_errno = errno;
        ::unlink(temporary.c_str());
        if (linked != 0 && link_errno != EEXIST)
            throw std::runtime_error(file.string() + ": cannot create the API token file: " + errno_text(link_errno));
        sync_directory_of(file);
        // Read back what is now there (ours, or a concurrent starter's).
    }
    throw std::runtime_error(file.string() + ": the API token file vanished while it was being created");
}

qualify::Thresholds promotion_thresholds(const DaemonConfig& config) {
    qualify::Thresholds t;
    if (config.requirements)
        for (const auto& [name, v] : config.requirements->thresholds) {
            if (!v.value) continue;
            const double x = registry::to_double(*v.value);
            if (name == "min_deterministic_pass_rate") t.min_deterministic_pass_rate = x;
            else if (name == "max_relative_quality_loss") t.max_relative_quality_loss = x;
            else if (name == "min_warm_e2e_gain") t.min_warm_e2e_gain = x;
            else if (name == "min_tasks_per_hour_ratio") t.min_tasks_per_hour_ratio = x;
        }
    t.margin = config.promotion.margin;
    return t;
}

drivers::SupervisorSettings supervisor_settings(const DaemonConfig& c) {
    drivers::SupervisorSettings s;
    s.data_dir = c.data_dir;
    s.engine_binary = c.engine_binary;
    s.container_runtime = c.container_runtime;
    s.container_runtime_arguments = c.container_runtime_arguments;
    s.container_api_socket = c.container_api_socket;
    auto& l = s.launch;
    if (!c.model_root.empty()) l.placeholders["MODEL_ROOT"] = c.model_root.string();
    if (!c.cache_root.empty()) l.placeholders["CACHE_ROOT"] = c.cache_root.string();
    for (const auto& root : {c.model_root, c.cache_root})
        if (!root.empty()) l.allowed_roots.push_back(root);
    l.allowed_roots.insert(l.allowed_roots.end(), c.allowed_mount_roots.begin(), c.allowed_mount_roots.end());
    // On a cluster node an engine must answer anvild from another host: it listens on every
    // address, and its API key (each engine has its own) is what keeps others out.
    l.host = c.slurm ? "0.0.0.0" : "127.0.0.1";
    s.slurm = c.slurm;
    l.port_first = c.port_first;
    l.port_last = c.port_last;
    l.ready_timeout = c.engine_ready_timeout;
    return s;
}

}  // namespace anvil::daemon
