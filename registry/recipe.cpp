#include "registry/recipe.hpp"

#include <algorithm>
#include <array>
#include <set>
#include <sstream>

#include "registry/engine_environment.hpp"
#include "registry/launch_models.hpp"
#include "registry/owned_flags.hpp"

namespace anvil::registry {

namespace {

const std::set<std::string> kRegistryLaunchKinds{"reference", "docker", "docker-compose", "controller", "script", "native"};
const std::set<std::string> kContainerStates{"digest-pinned", "mutable", "indirect", "none"};
const std::set<std::string> kFactStates{"known", "unknown", "unavailable", "not_applicable"};
const std::array<const char*, 4> kTensorParallelFlags{"--tensor-parallel-size", "--tp-size", "--tp", "-tp"};

// Arguments split on whitespace, so that flags inside a shell script item are seen too.
std::vector<std::string> argument_tokens(const std::vector<std::string>& arguments) {
    std::vector<std::string> tokens;
    for (const auto& arg : arguments) {
        std::istringstream in(arg);
        std::string word;
        while (in >> word) tokens.push_back(word);
    }
    return tokens;
}

std::optional<std::string> flag_value(const std::vector<std::string>& tokens, std::string_view flag) {
    for (std::size_t i = 0; i < tokens.size(); ++i) {
        const std::string& t = tokens[i];
        if (t == flag && i + 1 < tokens.size()) return tokens[i + 1];
        if (t.size() > flag.size() + 1 && t.starts_with(flag) && t[flag.size()] == '=') return t.substr(flag.size() + 1);
    }
    return std::nullopt;
}

std::optional<std::int64_t> to_int(const std::string& text) {
    if (text.empty() || text.size() > 9 || text.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
    return std::stoll(text);
}

// ^[a-z0-9][a-z0-9.-]*$, the registry's id pattern.
bool is_registry_id(std::string_view id) {
    auto ok = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
    if (id.empty() || !ok(id[0])) return false;
    return std::all_of(id.begin(), id.end(), [&](char c) { return ok(c) || c == '.' || c == '-'; });
}

// N of an id ending in "-tpN": the tensor parallelism the id claims.
std::optional<std::int64_t> tp_suffix(std::string_view id) {
    auto at = id.rfind("-tp");
    if (at == std::string_view::npos) return std::nullopt;
    return to_int(std::string(id.substr(at + 3)));
}

// Which serving engine the launch arguments start, if they name one.
std::optional<std::string> engine_in_arguments(const std::vector<std::string>& tokens) {
    for (const auto& t : tokens) {
        if (t == "vllm" || t.starts_with("vllm.entrypoints") || t.ends_with("/vllm")) return "vllm";
        if (t.starts_with("sglang.launch_server") || t == "sglang") return "sglang";
        if (t == "llama-server" || t == "llama-bench" || t == "llama-cli" || t.ends_with("/llama-server"))
            return "llama.cpp";
    }
    return std::nullopt;
}

bool is_shell(const std::string& arg) {
    return arg == "bash" || arg == "sh" || arg.ends_with("/bash") || arg.ends_with("/sh");
}

void read_capabilities(const Node& root, JsonReader& reader, Recipe& r) {
    Node caps = reader.object(root, "capabilities");
    if (!caps.present()) return;
    r.capabilities.chat = reader.nullable_boolean(caps, "chat");
    r.capabilities.reasoning = reader.nullable_boolean(caps, "reasoning");
    r.capabilities.tools = reader.nullable_boolean(caps, "tools");
    r.capabilities.vision = reader.nullable_boolean(caps, "vision");
    // Optional (local-ai-registry records do not carry it): a claim of retrieval over the whole context.
    if (caps.child("retrieval").present()) r.capabilities.retrieval = reader.nullable_boolean(caps, "retrieval");
    // Optional too: a claim that response_format constrains the answer to JSON.
    if (caps.child("structured_output").present())
        r.capabilities.structured_output = reader.nullable_boolean(caps, "structured_output");
}

void read_serving(const Node& root, JsonReader& reader, Recipe& r) {
    Node s = reader.object(root, "serving");
    if (!s.present()) return;
    if (auto slot = reader.string(s, "slot", Presence::optional)) r.serving.slot = *slot;
    r.serving.max_context_tokens = reader.integer(s, "max_context_tokens", Presence::optional, 1);
    r.serving.max_concurrency = reader.integer(s, "max_concurrency", Presence::optional, 1);
    r.serving.tensor_parallel = reader.integer(s, "tensor_parallel", Presence::optional, 1);
    r.serving.expert_parallel = reader.integer(s, "expert_parallel", Presence::optional, 1);
    r.serving.kv_cache_tokens = reader.integer(s, "kv_cache_tokens", Presence::optional, 0);
    r.serving.kv_cache_dtype = reader.string(s, "kv_cache_dtype", Presence::optional);
    r.serving.served_model_name = reader.string(s, "served_model_name", Presence::optional);
}

void read_facts(const Node& root, JsonReader& reader, RecipeCheck& check, bool required) {
    Node facts = reader.object(root, "facts", required ? Presence::required : Presence::optional);
    if (!facts.present()) return;
    for (const auto& [name, value] : facts.value->items()) {
        Node fact = facts.child(name);
        if (!value.is_object()) {
            reader.fail(fact, "a fact object {state, provenance, value?}");
            continue;
        }
        auto state = reader.string(fact, "state");
        if (state && !kFactStates.count(*state)) {
            reader.fail(fact.child("state"), "one of known, unknown, unavailable, not_applicable");
        } else if (state && *state == "known" && !value.contains("value")) {
            check.warnings.push_back("fact " + fact.pointer + " is `known` but records no value");
        }
    }
}

void read_container(const Node& launch, JsonReader& reader, Launch& l) {
    Node c = reader.object(launch, "container", Presence::optional);
    if (!c.present()) return;
    ContainerRecord rec;
    if (auto s = reader.string(c, "state")) {
        rec.state = *s;
        if (!kContainerStates.count(*s)) reader.fail(c.child("state"), "one of digest-pinned, mutable, indirect, none");
    }
    rec.runtime = reader.string(c, "runtime", Presence::optional);
    rec.image = reader.string(c, "image", Presence::optional);
    rec.digest = reader.string(c, "digest", Presence::optional);
    if (auto s = reader.string(c, "reason", Presence::optional)) rec.reason = *s;
    if (rec.digest && !is_sha256_digest(*rec.digest)) reader.fail(c.child("digest"), "null or \"sha256:<64 lowercase hex>\"");
    if (rec.state == "digest-pinned" && !rec.digest)
        reader.fail(c.child("digest"), "a sha256 digest, since launch.container.state is digest-pinned");
    if (rec.state == "mutable" && rec.digest)
        reader.fail(c.child("state"), "\"digest-pinned\", since launch.container.digest is set", "\"mutable\"");
    if (rec.digest && rec.state != "digest-pinned" && rec.state != "mutable" && kContainerStates.count(rec.state))
        reader.fail(c.child("state"), "\"digest-pinned\", since launch.container.digest is set", render_short(rec.state));
    if (rec.image && rec.digest) {
        auto image_pin = image_digest(*rec.image);
        if (image_pin && *image_pin != *rec.digest)
            reader.fail(c.child("image"), "an image pinned to the recorded digest " + abbreviate(*rec.digest),
                        render_short(*rec.image));
    }
    l.container = std::move(rec);
}

void read_mounts(const Node& launch, JsonReader& reader, Launch& l) {
    Node mounts = reader.array(launch, "mounts", Presence::optional);
    for (std::size_t i = 0; mounts.present() && i < mounts.value->size(); ++i) {
        Node m = mounts.at(i);
        if (!m.value->is_object()) {
            reader.fail(m, "a mount object {source, target, read_only}");
            continue;
        }
        Mount mount;
        if (auto s = reader.string(m, "source")) mount.source = *s;
        if (auto s = reader.string(m, "target")) mount.target = *s;
        if (auto ro = reader.boolean(m, "read_only", Presence::optional)) mount.read_only = *ro;
        Node prov = reader.object(m, "provision", Presence::optional);
        if (prov.present()) {
            ModelProvision p;
            if (auto s = reader.string(prov, "repository")) p.repository = *s;
            if (auto s = reader.string(prov, "revision")) p.revision = *s;
            mount.provision = p;
        }
        l.mounts.push_back(std::move(mount));
    }
}

void read_launch(const Node& root, JsonReader& reader, Recipe& r, bool anvil_schema) {
    Node launch = reader.object(root, "launch");
    if (!launch.present()) return;
    Launch& l = r.launch;
    if (auto kind = reader.string(launch, "kind")) {
        l.kind = *kind;
        bool known = kRegistryLaunchKinds.count(*kind) || (anvil_schema && *kind == "embedded");
        if (!known)
            reader.fail(launch.child("kind"), anvil_schema ? "one of embedded, native, docker, docker-compose, reference, controller, script"
                                                           : "one of reference, docker, docker-compose, controller, script, native");
    }
    l.arguments = reader.string_array(launch, "arguments", Presence::optional);
    Node env = reader.object(launch, "environment", Presence::optional);
    if (env.present()) {
        for (const auto& [key, value] : env.value->items()) {
            if (value.is_string()) l.environment[key] = value.get<std::string>();
            else reader.fail(env.child(key), "a string (environment values are passed exactly)");
        }
    }
    l.image = reader.string(launch, "image", Presence::optional);
    l.container_port = reader.integer(launch, "container_port", Presence::optional, 1);
    l.host_port = reader.integer(launch, "host_port", Presence::optional, 1);
    l.ipc = reader.string(launch, "ipc", Presence::optional);
    l.shm_size = reader.string(launch, "shm_size", Presence::optional);
    l.accelerator_backend = reader.string(launch, "accelerator_backend", Presence::optional);
    if (launch.child("ready_timeout_seconds").present()) {
        constexpr std::int64_t kDay = 24 * 3600;
        const Node n = launch.child("ready_timeout_seconds");
        if (n.value->is_number_integer() && n.value->get<std::int64_t>() >= 1 && n.value->get<std::int64_t>() <= kDay)
            l.ready_timeout_seconds = n.value->get<std::int64_t>();
        else if (!n.value->is_null())
            reader.fail(n, "a whole number of seconds from 1 to 86400");
    }
    read_container(launch, reader, l);
    read_mounts(launch, reader, l);
    read_launch_model(launch, reader, l, l.kind == "embedded");
    if (anvil_schema) read_launch_draft(launch, reader, l);
    if (l.runs_container() && !l.image && !(l.container && l.container->image))
        reader.fail(launch.child("image"), "an image reference for a " + l.kind + " launch");
}

// Checks that span several fields: the claims a record makes about itself must agree.
void check_consistency(const Node& root, JsonReader& reader, Recipe& r, RecipeCheck& check) {
    const auto tokens = argument_tokens(r.launch.arguments);
    std::optional<std::int64_t> flag_tp;
    std::string tp_flag;
    for (const char* flag : kTensorParallelFlags) {
        if (auto v = flag_value(tokens, flag)) {
            flag_tp = to_int(*v);
            tp_flag = flag;
            if (!flag_tp) reader.fail(root.child("launch").child("arguments"), std::string("an integer after ") + flag, render_short(*v));
            break;
        }
    }
    if (flag_tp && r.serving.tensor_parallel && *flag_tp != *r.serving.tensor_parallel)
        reader.fail(root.child("serving").child("tensor_parallel"),
                    "the tensor parallelism the launch uses (" + tp_flag + " " + std::to_string(*flag_tp) + ")",
                    std::to_string(*r.serving.tensor_parallel));
    const std::int64_t tp = r.effective_tensor_parallel();
    if (tp > r.hardware_count)
        reader.fail(root.child("hardware_count"), "at least " + std::to_string(tp) + " devices for tensor parallelism " + std::to_string(tp),
                    std::to_string(r.hardware_count));

    if (auto claimed = tp_suffix(r.id)) {
        if (*claimed != tp)
            reader.fail(root.child("id"), "an id whose -tpN suffix matches tensor parallelism " + std::to_string(tp), render_short(r.id));
    }

    if (auto launched = engine_in_arguments(tokens); launched && *launched != normalize_engine(r.engine_name))
        reader.fail(root.child("engine").child("name"), "the engine the launch runs (" + *launched + ")", render_short(r.engine_name));

    // `bash -lc SCRIPT extra…`: the extras become $0, $1… of the script, never options.
    const auto& args = r.launch.arguments;
    for (std::size_t i = 0; i < args.size(); ++i) {
        if (args[i] != "-c" && args[i] != "-lc") continue;
        if (i > 0 && !is_shell(args[i - 1])) continue;  // `-c` alone is also llama.cpp's context flag
        check.warnings.push_back("launch runs a shell script inside the image; its flags are read but not guaranteed");
        if (args.size() > i + 2)
            reader.fail(root.child("launch").child("arguments").at(i + 2),
                        "nothing after the shell script at /launch/arguments/" + std::to_string(i + 1) + " (" +
                            std::to_string(args.size() - i - 2) + " more items would become positional parameters)",
                        render_short(args[i + 2]));
        break;
    }
    for (const char* flag : {"-m", "--model", "--model-path"}) {
        auto v = flag_value(tokens, flag);
        if (v && v->starts_with("-")) check.warnings.push_back(std::string("launch argument ") + flag + " has no value (next is " + *v + ")");
    }
}

// anvil-engine's --weights takes these and no other (engine/weights.cpp): another is refused here,
// not when the engine starts.
constexpr std::string_view kEmbeddedWeights[] = {"f32", "bf16", "q8", "stored", "auto"};

void read_weights_precision(const Node& root, JsonReader& reader, Recipe& r, RecipeCheck& check) {
    const auto& args = r.launch.arguments;
    if (r.launch.kind == "embedded") {
        for (std::size_t i = 0; i < args.size(); ++i) {
            std::optional<std::string> value;
            std::size_t at = i;
            if (args[i] == "--weights" && i + 1 < args.size()) value = args[at = i + 1];
            else if (args[i].starts_with("--weights=")) value = args[i].substr(10);
            if (value && std::find(std::begin(kEmbeddedWeights), std::end(kEmbeddedWeights), *value) == std::end(kEmbeddedWeights))
                reader.fail(root.child("launch").child("arguments").at(at), "one of anvil-engine's weights: f32, bf16, q8, stored or auto",
                            render_short(*value));
        }
    }
    const auto spelling = weights_spelling(args, r.launch.model ? std::optional(r.launch.model->dtype) : std::nullopt);
    r.weights = weights_precision(spelling);
    if (r.weights == WeightsPrecision::unknown)
        check.warnings.push_back("weights '" + *spelling + "' are of a precision anvild does not know: qualified after the known ones");
}

void assess_pins(const Recipe& r, RecipeCheck& check) {
    auto& reasons = check.pins.unpinned_reasons;
    const Launch& l = r.launch;
    if (l.kind == "reference" || l.kind == "controller" || l.kind == "script")
        reasons.push_back("launch kind '" + l.kind + "' points at a run elsewhere; it is no launch contract");
    if (l.runs_container()) {
        const std::string image = l.image ? *l.image : l.container && l.container->image ? *l.container->image : "";
        auto pin = image_digest(image);
        if (!pin) {
            std::string why = "image '" + image + "' is not pinned by digest";
            if (l.container && !l.container->reason.empty()) why += " (" + l.container->state + ": " + l.container->reason + ")";
            reasons.push_back(why);
        } else if (l.container && l.container->digest && *l.container->digest != *pin) {
            reasons.push_back("launch.image is pinned to " + abbreviate(*pin) + " but launch.container records " +
                              abbreviate(*l.container->digest) + " for " + l.container->image.value_or("another image"));
        } else if (l.container && l.container->state == "mutable") {
            reasons.push_back("launch.container.state is mutable although the image carries a digest");
        }
    }
    if (l.kind == "native") reasons.push_back("a native launch runs a host binary that no digest pins");
    pin_launch_models(l, reasons);
    for (const auto& mount : l.mounts) {
        if (mount.provision && !is_commit_id(mount.provision->revision))
            reasons.push_back("model " + mount.provision->repository + " mounted at " + mount.target + " is at revision '" +
                              mount.provision->revision + "', not a 40-hex commit");
    }
    if (auto rev = flag_value(argument_tokens(l.arguments), "--revision"); rev && !is_commit_id(*rev))
        reasons.push_back("--revision '" + *rev + "' is not a 40-hex commit");
}

}  // namespace

std::optional<std::string> last_flag_value(const std::vector<std::string>& arguments, std::string_view flag) {
    std::optional<std::string> out;
    for (std::size_t i = 0; i < arguments.size(); ++i) {
        const std::string& a = arguments[i];
        if (a == flag && i + 1 < arguments.size()) out = arguments[i + 1];
        else if (a.size() > flag.size() && a.starts_with(flag) && a[flag.size()] == '=') out = a.substr(flag.size() + 1);
    }
    return out;
}

std::string normalize_engine(std::string name) {
    if (name == "llama-cpp" || name == "llamacpp") return "llama.cpp";
    return name;
}

std::int64_t Recipe::effective_tensor_parallel() const {
    if (serving.tensor_parallel) return *serving.tensor_parallel;
    const auto tokens = argument_tokens(launch.arguments);
    for (const char* flag : kTensorParallelFlags) {
        if (auto v = flag_value(tokens, flag)) {
            if (auto n = to_int(*v)) return *n;
        }
    }
    return 1;
}

std::optional<std::string> Recipe::served_model_name() const {
    if (serving.served_model_name) return serving.served_model_name;
    if (auto v = flag_value(argument_tokens(launch.arguments), "--served-model-name")) return v;
    if (launch.kind == "embedded") return id;
    return std::nullopt;
}

std::optional<Recipe> parse_recipe(const Node& root, JsonReader& reader, RecipeCheck& check) {
    const std::size_t before = reader.error_count();
    Recipe r;
    r.schema_version = root.value->value("schema_version", "");
    const bool anvil_schema = r.schema_version == kAnvilRecipeSchema;
    const Presence registry_required = anvil_schema ? Presence::optional : Presence::required;

    if (auto id = reader.string(root, "id")) {
        r.id = *id;
        if (!is_registry_id(*id)) reader.fail(root.child("id"), "an id of lowercase letters, digits, '.' and '-'");
    }
    if (auto s = reader.string(root, "recipe_source", registry_required)) r.recipe_source = *s;
    if (auto s = reader.string(root, "status")) {
        r.status = *s;
        if (*s != "candidate" && *s != "validated") reader.fail(root.child("status"), "\"candidate\" or \"validated\"");
    }
    if (auto s = reader.string(root, "description", Presence::optional)) r.description = *s;
    if (auto s = reader.string(root, "model_instance_id")) r.model_instance_id = *s;
    if (auto s = reader.string(root, "hardware_id")) r.hardware_id = *s;
    if (auto n = reader.integer(root, "hardware_count", Presence::required, 1)) r.hardware_count = *n;
    Node engine = reader.object(root, "engine");
    if (engine.present()) {
        if (auto s = reader.string(engine, "name")) r.engine_name = *s;
        r.engine_version = reader.string(engine, "version", Presence::optional);
    }
    Node hf = reader.object(root, "huggingface", Presence::optional);
    if (hf.present()) r.huggingface_repository = reader.string(hf, "repository", Presence::optional);
    read_launch(root, reader, r, anvil_schema);
    read_serving(root, reader, r);
    read_capabilities(root, reader, r);

    // The registry writes both spellings; either is accepted, and both must then agree.
    Node sweeps = root.child("speed_sweep_ids");
    Node sweeps_alt = root.child("speed_sweeps_ids");
    if (sweeps.present()) r.speed_sweep_ids = reader.string_array(root, "speed_sweep_ids");
    if (sweeps_alt.present()) {
        auto alt = reader.string_array(root, "speed_sweeps_ids");
        if (sweeps.present() && alt != r.speed_sweep_ids)
            reader.fail(sweeps_alt, "the same ids as /speed_sweep_ids when both spellings are given");
        r.speed_sweep_ids = alt;
    }
    if (!sweeps.present() && !sweeps_alt.present() && !anvil_schema)
        reader.fail(sweeps, "an array of speed sweep ids (speed_sweep_ids or speed_sweeps_ids)");
    reader.object(root, "metadata", registry_required);
    reader.object(root, "provenance", registry_required);
    read_facts(root, reader, check, !anvil_schema);

    if (reader.error_count() != before) return std::nullopt;
    check_consistency(root, reader, r, check);
    read_weights_precision(root, reader, r, check);
    if (reader.error_count() != before) return std::nullopt;
    assess_pins(r, check);
    // anvild's policy rather than the registry's schema: the document stays valid, and the check says
    // what anvild will do with it (reject it on paper).
    if (auto why = environment_refusal(r.launch)) check.warnings.push_back("anvild refuses this recipe: " + *why);
    if (auto why = owned_flag_refusal(r)) check.warnings.push_back("anvild refuses this recipe: " + *why);
    return r;
}

}  // namespace anvil::registry
