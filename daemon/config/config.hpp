// anvild's configuration: one JSON file (/etc/anvil/anvild.json unless --config says otherwise),
// validated whole at start and on SIGHUP. Every error names the file, the JSON pointer of the key
// and what was expected. Relative paths are resolved against the file's directory.
#pragma once

#include <chrono>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/qualify/controller_rules.hpp"
#include "daemon/qualify/promotion_policy.hpp"
#include "daemon/drivers/engine_supervisor.hpp"
#include "daemon/drivers/slurm_rest.hpp"
#include "registry/document.hpp"
#include "registry/feasibility_input.hpp"
#include "registry/inventory.hpp"

namespace anvil::daemon {

inline constexpr const char* kDefaultConfigFile = "/etc/anvil/anvild.json";

// A configuration that cannot be used: "<file>: <pointer>: expected …, found …", one line each.
struct ConfigError : std::runtime_error {
    using std::runtime_error::runtime_error;
    // Every problem, one line each; what() is them joined by newlines.
    explicit ConfigError(std::vector<std::string> lines);
    std::vector<std::string> problems;
};

struct HostPort {
    std::string host;
    int port = 0;
    // An IPv6 host is kept without brackets (what bind() wants) and bracketed here.
    std::string str() const {
        return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
    }
};
// "127.0.0.1:7700", "[::1]:7700", "localhost:0"; throws ConfigError naming `where` otherwise.
HostPort parse_host_port(const std::string& text, const std::string& where);

struct SourceConfig {
    std::string name;  // unique; defaults to the URL
    std::string url;   // a local path (plain directory or git repository) or a git URL
    std::string ref;   // branch, tag or commit; empty: the source's HEAD
    std::chrono::milliseconds poll_interval{std::chrono::seconds(60)};
    registry::DocumentLimits document_limits;  // the top-level max_document_bytes, the same for every source
};

struct PromotionConfig {
    qualify::Policy policy = qualify::Policy::automatic;
    std::chrono::seconds min_interval{std::chrono::seconds(300)};  // between two automatic promotions
    double margin = 0.02;         // a candidate must beat each threshold by this much more (no flapping)
    int attempts = 3;             // per hard gate; its pass rate is judged against min_deterministic_pass_rate
    std::vector<double> needle_depths{0.25, 0.5, 0.75};
    // When the candidate and the default cannot run side by side, qualification may stop serving
    // only inside this local-time window, "HH:MM-HH:MM" (may wrap midnight). Unset: never.
    std::optional<qualify::ExclusiveWindow> exclusive_window;
    std::chrono::milliseconds drain_timeout{std::chrono::seconds(30)};
    std::chrono::milliseconds retry_backoff_min{std::chrono::seconds(30)};   // failed → retried after
    std::chrono::milliseconds retry_backoff_max{std::chrono::seconds(3600)};
    // Warm e2e passes continue (past 3, up to 25) until they add up to this: qualify::Plan.
    std::chrono::milliseconds warm_e2e_min{std::chrono::seconds(3)};
};

struct DaemonConfig {
    std::filesystem::path config_file;
    std::vector<SourceConfig> sources;
    std::filesystem::path data_dir = "/var/lib/anvil";
    // A registry document larger than this is invalid, refused before its bytes are parsed.
    std::size_t max_document_bytes = registry::kDefaultMaxDocumentBytes;

    // The shape of seed 004's `requirements`: tokens, concurrency, VRAM and reserves, thresholds.
    std::optional<registry::Requirements> requirements;
    nlohmann::json requirements_json;  // as written, for the API and receipts
    // "auto": nvidia-smi when present, else no inventory. "none": judge without one.
    // "declared": the `inventory` object (the shape anvil feasibility --inventory reads).
    std::string inventory_mode = "auto";
    std::optional<registry::Inventory> inventory;
    std::optional<bool> commercial;  // licence policy; unset leaves non-commercial licences an open question

    std::filesystem::path model_root;  // ${MODEL_ROOT} in recipes
    std::filesystem::path cache_root;  // ${CACHE_ROOT}
    std::vector<std::filesystem::path> allowed_mount_roots;  // model_root and cache_root are always allowed
    std::string container_runtime = "podman";
    std::vector<std::string> container_runtime_arguments;
    // When set, containers are run through the Docker-compatible Engine API on this unix socket
    // (dockerd's /var/run/docker.sock, `podman system service`'s /run/podman/podman.sock), not the CLI.
    std::filesystem::path container_api_socket;
    std::filesystem::path engine_binary;  // anvil-engine; empty: the one installed beside anvild
    // Where engines run: unset ("local"), on this host; set, as jobs of this Slurm cluster, and the
    // inventory is the cluster's largest node.
    std::optional<drivers::SlurmPlacement> slurm;

    HostPort listen{"127.0.0.1", 7700};  // REST API
    HostPort serve{"127.0.0.1", 7701};   // the stable OpenAI-compatible endpoint
    std::string served_model_alias = "anvil-default";  // the model id clients of the endpoint may use
    int port_first = 20000;  // engines' ports
    int port_last = 20999;
    std::filesystem::path token_file;  // empty: <data_dir>/api-token (created 0600 at first start)
    // Host names the API and the endpoint answer besides IP addresses, localhost and this machine's
    // name; origins of web pages that may call them besides their own ("*": any). See
    // engine/http/origin_policy.hpp.
    std::vector<std::string> allowed_hosts;
    std::vector<std::string> allowed_origins;
    // Request bodies larger than this get 413 before they are read, on the API and the endpoint.
    std::size_t max_request_body_bytes = std::size_t(16) << 20;

    PromotionConfig promotion;
    std::chrono::milliseconds reconcile_interval{std::chrono::seconds(10)};
    // How long an engine may take to become ready when its recipe names no launch.ready_timeout_seconds.
    std::chrono::milliseconds engine_ready_timeout{std::chrono::seconds(600)};
    bool stop_engines_on_exit = false;  // SIGTERM leaves engines running unless this is set
};

// Reads and validates `file`; throws ConfigError listing every problem found (one per line).
DaemonConfig load_config(const std::filesystem::path& file);
// The same, from text (tests); `file` only names the source in errors and anchors relative paths.
DaemonConfig parse_config(const std::string& text, const std::filesystem::path& file);

struct ConfigOverrides {
    std::optional<std::filesystem::path> data_dir;
    std::optional<HostPort> listen;
    std::optional<HostPort> serve;
};
void apply_overrides(DaemonConfig& config, const ConfigOverrides& overrides);

// The promotion thresholds: the requirements' thresholds block (when given) and the margin.
qualify::Thresholds promotion_thresholds(const DaemonConfig& config);

// What the engine supervisor reads of the configuration: data directory, engine binary, container
// runtime, and the launch rules (placeholders, allowed roots, port range, ready timeout).
drivers::SupervisorSettings supervisor_settings(const DaemonConfig& config);

// The token file's path after defaults.
std::filesystem::path token_path(const DaemonConfig& config);
// Reads the API token, creating the file (0600, 32 random bytes hex) when it does not exist.
// Throws std::runtime_error if it exists with wider permissions than 0600.
std::string ensure_token(const std::filesystem::path& file);

}  // namespace anvil::daemon
