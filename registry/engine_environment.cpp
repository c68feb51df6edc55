#include "registry/engine_environment.hpp"

#include <algorithm>
#include <array>

#include <fmt/ranges.h>

#include "registry/json_reader.hpp"

namespace anvil::registry {

namespace {

// What anvil-engine reads from its environment that changes no code it loads: its log level, the
// kernel level (its own code, refused when the processor lacks it) and OpenMP's thread count and
// waiting. ANVIL_ENGINE_API_KEY is anvil's to set, ANVIL_ENGINE_CUDA_PLUGIN loads a library.
constexpr auto kEngineAllowlist = std::to_array<std::string_view>({"ANVIL_LOG", "ANVIL_KERNELS", "OMP_NUM_THREADS", "OMP_WAIT_POLICY",
                                                              "GOMP_SPINCOUNT"});

// glibc's unsecure-envvars.h (less TMPDIR and TZDIR, which load nothing), and the files bash and
// sh run before a `-c` script: refused under every policy.
constexpr auto kLibcAndShell = std::to_array<std::string_view>({
    "GCONV_PATH", "GETCONF_DIR", "GLIBC_TUNABLES", "HOSTALIASES", "LOCALDOMAIN", "LOCPATH",  "MALLOC_TRACE", "NIS_PATH",
    "NLSPATH",    "RESOLV_HOST_CONF", "RES_OPTIONS", "BASH_ENV",  "ENV",         "SHELLOPTS", "BASHOPTS",
});

// Set by anvil for the engine: the bearer token anvil talks to it with (anvil-engine, vLLM and
// llama.cpp's server read theirs from these): refused under every policy.
constexpr auto kEngineKeys = std::to_array<std::string_view>({"ANVIL_ENGINE_API_KEY", "VLLM_API_KEY", "LLAMA_API_KEY"});

// A host process: variables that load code or plugins from a path, choose which program runs, or
// place the engine on GPUs anvil did not give it.
constexpr auto kHostProcessRefused = std::to_array<std::string_view>({
    // which programs and user files a process finds
    "PATH", "HOME",
    // the CUDA driver's and NVTX's injection libraries, its compiled-kernel cache; the GPUs
    "CUDA_INJECTION64_PATH", "CUDA_INJECTION32_PATH", "NVTX_INJECTION64_PATH", "NVTX_INJECTION32_PATH", "CUDA_CACHE_PATH",
    "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL",
    // NCCL's configuration file can set its plugins
    "NCCL_CONF_FILE",
    // OpenMP's tool interface loads libraries
    "OMP_TOOL", "OMP_TOOL_LIBRARIES", "OMP_TOOL_VERBOSE_INIT",
    // other language runtimes' code paths and options
    "PERL5LIB", "PERL5OPT", "PERLLIB", "PERL5DB", "RUBYLIB", "RUBYOPT", "NODE_OPTIONS", "NODE_PATH", "JAVA_TOOL_OPTIONS",
    "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "CLASSPATH",
    // compiled code that PyTorch, Triton, vLLM and transformers load from a cache directory
    "TRITON_CACHE_DIR", "TRITON_LIBCUDA_PATH", "TORCH_EXTENSIONS_DIR", "TORCHINDUCTOR_CACHE_DIR", "VLLM_CACHE_ROOT", "HF_MODULES_CACHE",
    // anvil's own programs' libraries and helpers
    "ANVIL_ENGINE_CUDA_PLUGIN", "ANVIL_NVML_LIBRARY", "ANVIL_COLLECTIVE_PROBE", "ANVIL_JOB_GPU_DEVICES_AT",
    // OpenSSL's configuration loads modules and engines (Python's ssl and hashlib read it)
    "OPENSSL_CONF", "OPENSSL_MODULES", "OPENSSL_ENGINES",
    // the parents of the caches above, and the temporary directory Inductor compiles into
    "HF_HOME", "TRITON_HOME", "XDG_CACHE_HOME", "TMPDIR",
    // ROCm's tools library, libfabric's providers, UCX's modules: libraries loaded from a path
    "HSA_TOOLS_LIB", "FI_PROVIDER_PATH", "UCX_MODULE_DIR",
    // a program Python's webbrowser module runs
    "BROWSER",
});

// Python's variables that change no code it loads (not PYTHONWARNINGS: a warning category names
// a module, which Python imports).
constexpr auto kPythonHarmless = std::to_array<std::string_view>({"PYTHONUNBUFFERED", "PYTHONHASHSEED", "PYTHONIOENCODING", "PYTHONUTF8",
                                                            "PYTHONDONTWRITEBYTECODE", "PYTHONFAULTHANDLER"});

template <std::size_t N>
bool listed(const std::array<std::string_view, N>& list, std::string_view name) {
    return std::find(list.begin(), list.end(), name) != list.end();
}

std::optional<std::string> refused_everywhere(std::string_view name) {
    if (name.empty() || name.find('=') != std::string_view::npos || name.find('\0') != std::string_view::npos)
        return "is not a variable name (empty, or holds '=' or NUL)";
    if (name.starts_with("LD_"))
        return "is a dynamic-loader variable (LD_*): it would load code or libraries that the recipe does not pin into the engine";
    if (listed(kLibcAndShell, name)) return "makes libc or the shell load code or configuration from a path the recipe chooses (glibc's unsecure variables)";
    if (listed(kEngineKeys, name)) return "is the engine's key, which anvil makes for each engine";
    return std::nullopt;
}

std::optional<std::string> refused_on_host(std::string_view name) {
    if (name == "CUDA_VISIBLE_DEVICES" || name == "NVIDIA_VISIBLE_DEVICES" || name == "HIP_VISIBLE_DEVICES" ||
        name == "ROCR_VISIBLE_DEVICES" || name == "GPU_DEVICE_ORDINAL")
        return "chooses the engine's GPUs, which anvil places (by UUID)";
    if (name == "PATH" || name == "HOME") return "changes which programs and user files (a shell's, Python's user site) the process finds";
    if (name.starts_with("PYTHON") && !listed(kPythonHarmless, name))
        return "makes Python load code or modules from a path the recipe chooses";
    if (name.starts_with("NCCL_") && name.find("PLUGIN") != std::string_view::npos)
        return "makes NCCL load a plugin library";
    if (name.starts_with("LLAMA_ARG_"))
        return "sets a flag of llama.cpp's server (its model, address and key among them), which the recipe's arguments say or anvil gives";
    if (listed(kHostProcessRefused, name)) return "makes the engine or a library it uses load code or plugins from a path the recipe chooses";
    return std::nullopt;
}

}  // namespace

EnvironmentPolicy environment_policy(std::string_view launch_kind) {
    if (launch_kind == "embedded") return EnvironmentPolicy::engine_allowlist;
    if (launch_kind == "docker" || launch_kind == "docker-compose") return EnvironmentPolicy::container;
    return EnvironmentPolicy::host_process;
}

std::span<const std::string_view> engine_environment_allowlist() { return kEngineAllowlist; }

std::optional<std::string> refused_environment_variable(std::string_view name, EnvironmentPolicy policy) {
    if (auto why = refused_everywhere(name)) return why;
    switch (policy) {
        case EnvironmentPolicy::engine_allowlist:
            if (listed(kEngineAllowlist, name)) return std::nullopt;
            return fmt::format("is not one that anvil-engine takes from a recipe ({})", fmt::join(kEngineAllowlist, ", "));
        case EnvironmentPolicy::host_process:
            return refused_on_host(name);
        case EnvironmentPolicy::container:
            return std::nullopt;
    }
    return std::nullopt;
}

std::optional<std::string> environment_refusal(const Launch& launch) {
    const auto policy = environment_policy(launch.kind);
    for (const auto& [name, value] : launch.environment) {
        if (auto why = refused_environment_variable(name, policy))
            return "launch.environment at /launch/environment/" + escape_pointer_token(name) + ": " + render_short(nlohmann::json(name)) +
                   " " + *why + "; remove it from the recipe (docs/RECIPES.md, \"What a recipe may set\")";
    }
    return std::nullopt;
}

}  // namespace anvil::registry
