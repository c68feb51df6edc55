#include "engine/serve_command.hpp"

#include <omp.h>

#include <chrono>
#include <csignal>
#include <iostream>
#include <memory>
#include <thread>

#include <spdlog/spdlog.h>

#include "engine/engine.hpp"
#include "engine/kv_cache.hpp"
#include "engine/server.hpp"
#include "kernels/cpu_features.hpp"

namespace anvil::engine {

namespace {
Server* g_server = nullptr;
extern "C" void on_signal(int) {
    if (g_server) g_server->stop();
}
}  // namespace

DraftOptions draft_options(const ServeOptions& o) {
    DraftOptions d;
    int kinds = 0;
    if (!o.draft_self.empty()) {
        ++kinds;
        d.kind = DraftKind::Self;
        d.weights = parse_weight_format(o.draft_self);
    }
    if (!o.draft_model.empty()) {
        ++kinds;
        d.kind = DraftKind::Model;
        d.model_dir = o.draft_model;
        d.weights = parse_weight_format(o.draft_weights.empty() ? "stored" : o.draft_weights);
    } else if (!o.draft_weights.empty()) {
        throw std::invalid_argument("--draft-weights applies to --draft-model only (--draft-self names its own format)");
    }
    if (o.draft_layers > 0) {
        ++kinds;
        d.kind = DraftKind::Layers;
        d.layers = o.draft_layers;
    }
    if (o.draft_ngram > 0) {
        ++kinds;
        d.kind = DraftKind::Ngram;
        d.ngram = o.draft_ngram;
    }
    if (kinds > 1)
        throw std::invalid_argument("--draft-self, --draft-model, --draft-layers and --draft-ngram each name a draft; give one");
    d.tokens = o.draft_tokens;
    if (kinds == 1 && (o.draft_tokens < 1 || o.draft_tokens > kMaxDraftTokens))
        throw std::invalid_argument("--draft-tokens " + std::to_string(o.draft_tokens) + ": expected 1 to " +
                                    std::to_string(kMaxDraftTokens));
    return d;
}

int serve(const ServeOptions& o) {
    if (o.max_seqs < 1 || (o.max_context != 0 && o.max_context < 2) || o.max_batch_tokens < 1)
        throw std::runtime_error("--max-seqs, --max-context and --max-batch-tokens must be positive");
    EngineOptions e;
    e.max_seqs = o.max_seqs;
    e.max_context = o.max_context;
    e.max_batch_tokens = o.max_batch_tokens;
    e.kv_blocks = o.kv_blocks;
    e.prefix_caching = o.prefix_caching;
    e.weights = parse_weight_format(o.weights);
    e.kv_type = parse_kv_type(o.kv_dtype);
    e.seed = o.seed;
    e.threads = o.threads;
    e.device = o.device;
    e.gpu_memory_utilization = o.gpu_memory_utilization;
    e.draft = draft_options(o);
    // Without --max-context the context the engine will serve bounds request bodies; a model that
    // cannot be read fails in the loader below, with its error on /health.
    int context = o.max_context;
    if (context == 0) {
        try {
            context = resolved_max_context(e, load_config(o.model_dir));
        } catch (const std::exception&) {
            context = 2048;
        }
    }

    ServerOptions s;
    s.host = o.host;
    s.port = o.port;
    // By default the directory's name, or the GGUF file's without ".gguf" (as Ollama names a model).
    const auto model_path = std::filesystem::absolute(o.model_dir);
    s.served_model_name = !o.served_model_name.empty()         ? o.served_model_name
                          : model_path.extension() == ".gguf" ? model_path.stem().string()
                                                              : model_path.filename().string();
    s.http_threads = 4 * o.max_seqs + 8;
    s.api_key = o.api_key;
    s.max_body_bytes = max_body_bytes_for_context(context);
    Server server(s);
    const int port = server.bind();
    // The port line on stdout is how a parent that passed --port 0 learns the port.
    std::cout << "anvil-engine: listening on http://" << o.host << ":" << port << std::endl;
    if (o.device == "cpu")
        spdlog::info("loading {} with kernels {}, {} threads", o.model_dir.string(), kernels::isa_name(kernels::active_isa()),
                     o.threads > 0 ? o.threads : omp_get_max_threads());
    else
        spdlog::info("loading {} onto {}", o.model_dir.string(), o.device);

    g_server = &server;
    std::signal(SIGINT, on_signal);
    std::signal(SIGTERM, on_signal);

    std::unique_ptr<Engine> engine;
    bool failed = false;
    std::thread loader([&] {
        try {
            engine = std::make_unique<Engine>(o.model_dir, e);
            server.set_engine(engine.get());
            spdlog::info("ready: serving {} on {}:{}", s.served_model_name, o.host, port);
        } catch (const std::exception& error) {
            std::cerr << "anvil-engine serve: cannot load " << o.model_dir.string() << ": " << error.what() << "\n";
            server.set_load_error(error.what());
            failed = true;
            // Nothing to serve: stop once the server is up, so the process exits with the error.
            while (!server.running()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
            server.stop();
        }
    });
    server.serve();
    loader.join();
    g_server = nullptr;
    server.set_engine(nullptr);
    return failed ? 1 : 0;
}

}  // namespace anvil::engine
