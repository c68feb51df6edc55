#include "kernels/hardware/nvml_inventory.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <exception>

#include <spdlog/spdlog.h>

#include "kernels/hardware/nvml_abi.hpp"
#include "support/clock.hpp"

namespace anvil::hardware {

namespace {

// A C string from a fixed NVML buffer, which need not be terminated when full.
std::string from_buffer(const char* buffer, std::size_t size) {
    std::size_t n = 0;
    while (n < size && buffer[n] != '\0') ++n;
    return std::string(buffer, n);
}

struct Library {
    void* handle = nullptr;
    ~Library() {
        if (handle) dlclose(handle);
    }
};

class Nvml {
public:
    explicit Nvml(void* handle) : handle_(handle) {}

    // Resolves `name`; records the first symbol that is missing.
    template <typename Fn>
    Fn get(const char* name) {
        void* symbol = dlsym(handle_, name);
        if (!symbol && missing_.empty()) missing_ = name;
        return reinterpret_cast<Fn>(symbol);
    }
    const std::string& missing() const { return missing_; }

private:
    void* handle_;
    std::string missing_;
};

struct NvmlFailure {
    std::string message;
};

}  // namespace

std::string default_nvml_library() {
    if (const char* p = std::getenv("ANVIL_NVML_LIBRARY"); p && *p) return p;
    return "libnvidia-ml.so.1";
}

InventoryReading read_inventory(const std::string& nvml_library) {
    InventoryReading r;
    r.library = nvml_library;
    r.observed_at = support::utc_now(support::Precision::seconds);
    r.source = "NVML (" + nvml_library + ")";

    Library lib;
    lib.handle = dlopen(nvml_library.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib.handle) {
        const char* why = dlerror();
        r.error = "no NVIDIA driver: " + nvml_library + " cannot be loaded (" + (why ? why : "unknown reason") +
                  "); install the NVIDIA driver, or declare the GPUs in configuration";
        r.source = r.error;
        return r;
    }
    Nvml nvml(lib.handle);
    const auto init = nvml.get<nvml::InitFn>("nvmlInit_v2");
    const auto shutdown = nvml.get<nvml::ShutdownFn>("nvmlShutdown");
    const auto error_string = nvml.get<nvml::ErrorStringFn>("nvmlErrorString");
    const auto get_count = nvml.get<nvml::DeviceGetCountFn>("nvmlDeviceGetCount_v2");
    const auto get_handle = nvml.get<nvml::DeviceGetHandleByIndexFn>("nvmlDeviceGetHandleByIndex_v2");
    const auto get_uuid = nvml.get<nvml::DeviceGetStringFn>("nvmlDeviceGetUUID");
    const auto get_name = nvml.get<nvml::DeviceGetStringFn>("nvmlDeviceGetName");
    const auto get_cc = nvml.get<nvml::DeviceGetCudaComputeCapabilityFn>("nvmlDeviceGetCudaComputeCapability");
    const auto get_memory = nvml.get<nvml::DeviceGetMemoryInfoFn>("nvmlDeviceGetMemoryInfo");
    const auto get_pci = nvml.get<nvml::DeviceGetPciInfoFn>("nvmlDeviceGetPciInfo_v3");
    const auto driver_version = nvml.get<nvml::SystemGetDriverVersionFn>("nvmlSystemGetDriverVersion");
    const auto cuda_version = nvml.get<nvml::SystemGetCudaDriverVersionFn>("nvmlSystemGetCudaDriverVersion_v2");
    if (!nvml.missing().empty()) {
        r.error = nvml_library + " has no " + nvml.missing() + ": the NVIDIA driver is too old for anvil; update it";
        r.source = r.error;
        return r;
    }
    auto describe = [&](nvmlReturn_t code) {
        const char* s = error_string(code);
        return std::string(s ? s : "unknown error") + " (NVML error " + std::to_string(code) + ")";
    };

    if (const nvmlReturn_t rc = init(); rc != nvml::kSuccess) {
        r.error = "NVML cannot start: " + describe(rc) + "; is the NVIDIA kernel module loaded (nvidia-smi says more)?";
        r.source = r.error;
        return r;
    }
    // Every path below ends NVML's session once.
    struct Session {
        nvml::ShutdownFn shutdown;
        ~Session() { shutdown(); }
    } session{shutdown};

    try {
        auto check = [&](nvmlReturn_t rc, const std::string& what) {
            if (rc != nvml::kSuccess) throw NvmlFailure{what + ": " + describe(rc)};
        };
        char text[nvml::kDriverVersionBufferSize] = {};
        check(driver_version(text, sizeof text), "nvmlSystemGetDriverVersion");
        r.driver_version = from_buffer(text, sizeof text);
        int cuda = 0;
        check(cuda_version(&cuda), "nvmlSystemGetCudaDriverVersion_v2");
        r.cuda_driver_version = std::to_string(cuda / 1000) + "." + std::to_string(cuda % 1000 / 10);

        unsigned int count = 0;
        check(get_count(&count), "nvmlDeviceGetCount_v2");
        for (unsigned int i = 0; i < count; ++i) {
            const std::string at = "GPU " + std::to_string(i);
            nvmlDevice_t device = nullptr;
            check(get_handle(i, &device), "nvmlDeviceGetHandleByIndex_v2(" + std::to_string(i) + ")");
            GpuReading gpu;
            gpu.index = static_cast<int>(i);
            char uuid[nvml::kUuidBufferSize] = {};
            check(get_uuid(device, uuid, sizeof uuid), "nvmlDeviceGetUUID(" + at + ")");
            gpu.uuid = from_buffer(uuid, sizeof uuid);
            char name[nvml::kNameBufferSize] = {};
            check(get_name(device, name, sizeof name), "nvmlDeviceGetName(" + at + ")");
            gpu.name = from_buffer(name, sizeof name);
            nvmlMemory_t memory{};
            check(get_memory(device, &memory), "nvmlDeviceGetMemoryInfo(" + gpu.uuid + ")");
            if (memory.total > static_cast<unsigned long long>(INT64_MAX) || memory.free > memory.total)
                throw NvmlFailure{"nvmlDeviceGetMemoryInfo(" + gpu.uuid + "): free " + std::to_string(memory.free) +
                                  " bytes of total " + std::to_string(memory.total) + " makes no sense"};
            gpu.total_bytes = static_cast<std::int64_t>(memory.total);
            gpu.free_bytes = static_cast<std::int64_t>(memory.free);
            // Whatever is not free is not ours to use: driver reservations, other processes.
            gpu.idle_used_bytes = static_cast<std::int64_t>(memory.total - memory.free);

            int major = 0, minor = 0;
            if (const nvmlReturn_t rc = get_cc(device, &major, &minor); rc == nvml::kSuccess)
                gpu.compute_capability = std::to_string(major) + "." + std::to_string(minor);
            else
                r.notes.push_back(gpu.uuid + ": no compute capability: " + describe(rc));
            nvmlPciInfo_t pci{};
            if (const nvmlReturn_t rc = get_pci(device, &pci); rc == nvml::kSuccess)
                gpu.pci_bus_id = from_buffer(pci.busId, sizeof pci.busId);
            else
                r.notes.push_back(gpu.uuid + ": no PCI bus id: " + describe(rc));
            r.gpus.push_back(std::move(gpu));
        }
    } catch (const NvmlFailure& f) {
        r.error = "NVML " + f.message;
        r.gpus.clear();
        r.source = r.error;
        return r;
    }
    for (const auto& n : r.notes) spdlog::info("GPU inventory: {}", n);
    r.ok = true;
    return r;
}

}  // namespace anvil::hardware
