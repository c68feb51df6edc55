// anvil: the command-line tool for registries, models, feasibility and a running anvild.
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "daemon/cli/arguments.hpp"
#include "daemon/cli/commands.hpp"

namespace {

constexpr const char* kUsage = R"(usage: anvil <command> [options]

commands:
  registry check <path|url> [--ref R] [--format table|json] [--data-dir DIR] [--max-document-bytes N]
      read, validate and pin-check every document of a registry: a git repository (local path
      or URL, read from the commit's tree), a plain directory, or a single file; documents over
      N bytes (default 1048576, as anvild's max_document_bytes) are invalid
  model digest <dir|file.gguf>
      print the content digest that pins a model directory or GGUF file in an embedded-engine recipe
  feasibility FILE... [--format table|json] [--pretty] [--inventory FILE|measure] [--commercial yes|no]
              [--model-root DIR] [--max-document-bytes N]
      judge on paper what can run here: a feasibility input's candidates by interval maths, and
      recipes by GPU count and memory, context, pinning, licence and collective-path gates, and
      embedded recipes by the host memory their weights, KV cache and draft need (their models'
      config.json read from their paths, ${MODEL_ROOT} being DIR)
  gpus [--json]
      this host's GPUs as NVML measures them: UUID, name, compute capability, total, free and
      idle-used memory, PCI bus id, driver and CUDA versions (exit 2 without a driver)
  gpus --cluster [--api HOST:PORT] [--json]
      with a Slurm placement, the cluster a running anvild places engines on: each node's state,
      partitions, CPUs, memory and GPUs (GRES) free and in all, and the node its gates judge against
  probe collectives [--gpus UUID,UUID] [--deadline S] [--receipts DIR] [--max-bytes N] [--json]
      an NCCL all-reduce (1 KiB to 256 MiB) over the GPUs (default: all), checked and timed in a
      child killed at the deadline (default 30 s); writes a receipt (path and sha256 printed) under
      --receipts (default <data-dir>/receipts/collectives). Exit 0 proven, 1 failed, 2 could not run

talking to a running anvild (options: --api HOST:PORT, --token-file FILE for writes, --json):
  status                      the default, policy, conditions, last reconcile pass, engines
  recipes [--status S --engine E --hardware H --pinned yes|no --verdict V --q TEXT
           --limit N --offset N]
                              recipes with their status and verdict, a page at a time
  recipe ID | history ID      one recipe's revisions, feasibility and evidence | its transitions
  default | engines           the current default | the engines anvild runs
  sync                        fetch every registry source now
  qualify ID                  queue the newest revision of a recipe for qualification
  pin ID | unpin              make a validated recipe the default | release the pin
  freeze [--reason R] | unfreeze
                              stop | resume automatic promotion
  exit status: 0 done, 1 anvild refused (4xx), 2 could not run (unreachable, no token, usage)

environment: ANVIL_LOG=debug|info|warn|error (default warn), ANVIL_DATA_DIR,
  ANVIL_API (default 127.0.0.1:7700), ANVIL_TOKEN_FILE (default ./.anvil/data/api-token when it
  exists, else /var/lib/anvil/api-token)
)";

}  // namespace

namespace anvil::cli {

std::string default_data_dir() {
    if (const char* d = std::getenv("ANVIL_DATA_DIR"); d && *d) return d;
    if (const char* x = std::getenv("XDG_STATE_HOME"); x && *x) return std::string(x) + "/anvil";
    if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.local/state/anvil";
    return ".anvil";
}

}  // namespace anvil::cli

int main(int argc, char** argv) {
    auto logger = spdlog::stderr_color_mt("anvil");
    spdlog::set_default_logger(logger);
    const char* level = std::getenv("ANVIL_LOG");
    spdlog::set_level(level ? spdlog::level::from_str(level) : spdlog::level::warn);

    std::vector<std::string> words(argv + 1, argv + argc);
    if (words.empty() || words[0] == "--help" || words[0] == "-h" || words[0] == "help") {
        std::cout << kUsage;
        return words.empty() ? 2 : 0;
    }
    const std::string command = words[0];
    std::vector<std::string> rest(words.begin() + 1, words.end());
    try {
        if (command == "registry") return anvil::cli::registry_command(rest);
        if (command == "model") return anvil::cli::model_command(rest);
        if (command == "feasibility") return anvil::cli::feasibility_command(rest);
        if (command == "gpus") return anvil::cli::gpus_command(rest);
        if (command == "probe") return anvil::cli::probe_command(rest);
        if (anvil::cli::is_daemon_command(command)) return anvil::cli::daemon_command(command, rest);
        std::cerr << "anvil: unknown command '" << command << "'\n" << kUsage;
        return 2;
    } catch (const anvil::cli::UsageError& e) {
        std::cerr << "anvil " << command << ": " << e.what() << " (see anvil --help)\n";
        return 2;
    } catch (const std::exception& e) {
        std::cerr << "anvil " << command << ": " << e.what() << "\n";
        return 2;
    }
}
