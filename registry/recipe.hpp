// The typed recipe: a local-ai-registry/v1 record (vLLM, SGLang, llama.cpp in containers) or an
// anvil.recipe/v1 record (the same shape, plus launch kind `embedded`, a pinned model block and a
// draft to speculate with). Both read alike: engine, launch {kind, arguments, environment, mounts,
// model, draft}, serving, capabilities.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "registry/json_reader.hpp"
#include "registry/pinning.hpp"
#include "registry/weights_precision.hpp"

namespace anvil::registry {

inline constexpr std::string_view kLocalAiRegistrySchema = "local-ai-registry/v1";
inline constexpr std::string_view kAnvilRecipeSchema = "anvil.recipe/v1";

struct ModelProvision {  // a hub checkout a mount expects, e.g. a speculative-decoding draft
    std::string repository;
    std::string revision;
};

struct Mount {
    std::string source;  // may hold ${PLACEHOLDERS}, resolved against allowed roots at launch
    std::string target;
    bool read_only = true;
    std::optional<ModelProvision> provision;
};

// launch.container: where the image's digest was captured, and whether it is pinned.
struct ContainerRecord {
    std::string state;  // digest-pinned | mutable | indirect | none
    std::optional<std::string> runtime;
    std::optional<std::string> image;
    std::optional<std::string> digest;
    std::string reason;
};

// The weights an engine serves, pinned by a hub revision or by a content digest of the directory.
struct ModelRef {
    std::string path;                       // directory, may hold ${MODEL_ROOT}
    std::optional<std::string> digest;      // sha256 over the directory's files (anvil model digest)
    std::optional<std::string> repository;  // hub repository it came from, if any
    std::optional<std::string> revision;    // 40-hex hub commit, if any
    std::string dtype;                      // f32 | bf16 | f16 | q8 ... as the engine loads it
    std::optional<std::string> licence;     // for weights no hub repository describes (a local model)
};

// anvil.recipe/v1 launch.draft: what anvil-engine speculates with (embedded launches only; vLLM and
// SGLang recipes give their speculative flags in launch.arguments). Read by registry/launch_models.
enum class DraftKind { self, model, layers, ngram };
std::string_view to_string(DraftKind kind);

struct Draft {
    DraftKind kind = DraftKind::ngram;
    // self: q8 | bf16, the target's own weights converted (required). model: f32 | bf16 | q8, the
    // format the draft model is served in (optional: as stored, like the target without --weights).
    std::optional<std::string> weights;
    std::optional<ModelRef> model;      // model: a second model, pinned like launch.model
    std::optional<std::int64_t> layers;  // layers: the target's first N layers, its final norm and LM head
    std::optional<std::int64_t> ngram;   // ngram: the N-token match prompt lookup searches for
    std::int64_t tokens = 4;             // K tokens proposed per verification, 1..16
};

struct Launch {
    std::string kind;  // embedded | native | docker | docker-compose | reference | controller | script
    std::vector<std::string> arguments;
    std::map<std::string, std::string> environment;
    std::optional<std::string> image;
    std::vector<Mount> mounts;
    std::optional<ContainerRecord> container;
    std::optional<ModelRef> model;
    std::optional<Draft> draft;  // anvil.recipe/v1, embedded launches only
    std::optional<std::int64_t> container_port;
    std::optional<std::int64_t> host_port;
    std::optional<std::string> ipc;
    std::optional<std::string> shm_size;
    std::optional<std::string> accelerator_backend;
    // anvil.recipe/v1: how long this engine may take to become ready (a large model loading); the
    // daemon's engine_ready_timeout_seconds when unset.
    std::optional<std::int64_t> ready_timeout_seconds;

    bool runs_container() const { return kind == "docker" || kind == "docker-compose"; }
};

struct Serving {
    std::string slot = "default";  // the default a recipe competes to be (one stable endpoint a slot)
    std::optional<std::int64_t> max_context_tokens;
    std::optional<std::int64_t> max_concurrency;
    std::optional<std::int64_t> tensor_parallel;
    std::optional<std::int64_t> expert_parallel;
    std::optional<std::int64_t> kv_cache_tokens;
    std::optional<std::string> kv_cache_dtype;
    std::optional<std::string> served_model_name;
};

struct Capabilities {  // null in the document means "not validated"
    std::optional<bool> chat, reasoning, tools, vision;
    std::optional<bool> retrieval;  // finds a fact anywhere in its context: the needle gate holds it to that
    // honours response_format (json_object, json_schema): the json gate requires the answer to parse
    std::optional<bool> structured_output;
};

struct Recipe {
    std::string schema_version;
    std::string id;
    std::string recipe_source;
    std::string status;  // the registry's own claim (candidate | validated); anvil derives its own
    std::string description;
    std::string model_instance_id;
    std::string hardware_id;
    std::int64_t hardware_count = 1;
    std::string engine_name;
    std::optional<std::string> engine_version;
    std::optional<std::string> huggingface_repository;  // huggingface.repository: the hub model served
    Launch launch;
    Serving serving;
    Capabilities capabilities;
    std::vector<std::string> speed_sweep_ids;
    // How precisely the weights are served (registry/weights_precision.hpp), from the launch's
    // flags or the model block: what orders candidates for qualification.
    WeightsPrecision weights = WeightsPrecision::unstated;

    // Runs on host CPUs and needs no GPU: hardware "cpu", or accelerator backend "cpu".
    bool runs_on_cpu() const { return hardware_id == "cpu" || launch.accelerator_backend == std::optional<std::string>("cpu"); }
    // Tensor parallelism as served: serving.tensor_parallel, else the launch flags, else 1.
    std::int64_t effective_tensor_parallel() const;
    // The model id an OpenAI client must ask for: serving.served_model_name or --served-model-name.
    std::optional<std::string> served_model_name() const;
};

struct RecipeCheck {
    std::vector<std::string> warnings;  // suspicious but not disqualifying
    PinStatus pins;
};

// An engine's name as the registry's recipes spell it ("llama-cpp" and "llamacpp" are "llama.cpp").
std::string normalize_engine(std::string name);

// The last value launch arguments give `flag` ("--flag value" or "--flag=value"): the one an
// engine that keeps the last of a repeated flag uses. Nothing when the flag is absent.
std::optional<std::string> last_flag_value(const std::vector<std::string>& arguments, std::string_view flag);

// Reads the record at `root` (already unwrapped from a {"data", "meta"} envelope). Structural and
// consistency problems go to `reader`; pinning and warnings go to `check`.
std::optional<Recipe> parse_recipe(const Node& root, JsonReader& reader, RecipeCheck& check);

}  // namespace anvil::registry
