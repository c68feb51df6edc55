// How the container driver reaches a container runtime: the podman or docker command line, or the
// Docker-compatible Engine API on a unix socket (podman system service, dockerd). The driver keeps
// every decision (pinning, drift, labels, adoption, saved logs); a backend only carries it out.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/drivers/driver.hpp"

namespace anvil::drivers {

struct ContainerDriverOptions;

// One container, exactly as the driver wants it run. Built once by container_spec() so that both
// backends label, mount and map it alike (adoption works across them).
struct ContainerSpec {
    std::string name;
    std::string image;                          // name@sha256:…
    std::vector<std::string> arguments;         // the command after the image's entrypoint; no shell
    std::map<std::string, std::string> environment;
    std::map<std::string, std::string> labels;
    std::vector<ResolvedMount> mounts;
    std::string network;
    std::optional<std::string> publish_host;    // with publish ports, when not on the host network
    int publish_port = 0;
    std::int64_t container_port = 0;
    std::optional<std::string> ipc;
    std::optional<std::string> shm_size;        // as the recipe writes it: "32g"
    std::vector<std::string> cdi_devices;       // nvidia.com/gpu=<uuid>
    std::size_t log_cap_bytes = 0;
};

// What the driver needs to know of a container, whichever backend asked.
struct ContainerInfo {
    std::string id;
    std::string status;  // running | created | exited | …
    std::optional<int> exit_code;
    std::map<std::string, std::string> labels;
    std::string image_id;      // the image the container was created from
    std::string image_digest;  // the manifest digest when the runtime reports it (podman), else ""
};

class ContainerBackend {
public:
    virtual ~ContainerBackend() = default;
    // Names the runtime in errors: "podman", "docker", "the Engine API at /run/podman/podman.sock".
    virtual std::string describe() const = 0;
    // Creates and starts the container; returns its id. Throws EngineError with the runtime's reason.
    virtual std::string run(const ContainerSpec& spec) = 0;
    // Nothing when the container does not exist.
    virtual std::optional<ContainerInfo> inspect(const std::string& container) = 0;
    // The repository digests (name@sha256:…) of a local image.
    virtual std::vector<std::string> image_repo_digests(const std::string& image) = 0;
    // Asks the container to stop, kills it after `seconds`; a failure is logged, never thrown.
    virtual void stop(const std::string& container, long long seconds) = 0;
    // stdout and stderr, the last `tail` lines (all when unset); nothing when the container is gone.
    virtual std::optional<std::string> logs(const std::string& container, std::optional<std::size_t> tail) = 0;
    virtual void remove(const std::string& container) = 0;
    // Ids of every container, running or not, carrying the label `key=value`. Throws EngineError.
    virtual std::vector<std::string> list_labelled(const std::string& key, const std::string& value) = 0;
};

// The fields of an inspect answer (CLI or Engine API: the same shape) the driver reads.
ContainerInfo container_info(const nlohmann::json& inspected);

ContainerSpec container_spec(const ContainerDriverOptions& options, const EngineHandle& engine, const ResolvedLaunch& launch);

// docker's size units ("64m", "32g", "1.5GiB"; binary multiples) in bytes, for the API's ShmSize.
std::optional<std::int64_t> parse_byte_size(const std::string& text);
// The stdout and stderr frames of a logs answer (8-byte headers unless the container has a TTY), joined.
std::string demultiplex_stream(const std::string& body);

std::unique_ptr<ContainerBackend> make_cli_backend(const ContainerDriverOptions& options);
std::unique_ptr<ContainerBackend> make_api_backend(const ContainerDriverOptions& options);

}  // namespace anvil::drivers
