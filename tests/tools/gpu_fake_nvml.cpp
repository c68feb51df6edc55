// A stand-in libnvidia-ml for the inventory tests: the NVML functions anvil resolves, answering
// for two fixed GPUs, so the loading and mapping code runs for real on a host without a driver.
// FAKE_NVML_INIT_ERROR=1 makes nvmlInit_v2 fail as without a kernel module; FAKE_NVML_NO_CC=1
// makes the compute capability unsupported. Buffers shorter than NVML's documented minimum are
// refused as NVML refuses them (NVML_ERROR_INSUFFICIENT_SIZE). It is declared with the loader's
// own ABI types: under UBSan's function check a call through a pointer of another signature is an
// error even where the bytes agree (the real libnvidia-ml, plain C, carries no such check).
#include <cstdlib>
#include <cstring>

#include "kernels/hardware/nvml_abi.hpp"

namespace {

constexpr int kSuccess = 0, kUninitialized = 1, kInvalidArgument = 2, kNotSupported = 3, kInsufficientSize = 7,
              kDriverNotLoaded = 9;

struct FakeGpu {
    const char* uuid;
    const char* name;
    int cc_major, cc_minor;
    unsigned long long total, free;
    const char* bus_id;
};

const FakeGpu kGpus[] = {
    {"GPU-11111111-2222-3333-4444-555555555555", "NVIDIA H200", 9, 0, 150754820096ull, 150223650816ull, "00000000:19:00.0"},
    {"GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee", "NVIDIA RTX PRO 6000 Blackwell Workstation Edition", 12, 0, 102641664000ull,
     101000000000ull, "00000000:5A:00.0"},
};

int sessions = 0;

bool flag(const char* name) {
    const char* v = std::getenv(name);
    return v && std::strcmp(v, "1") == 0;
}

const FakeGpu* gpu_of(nvmlDevice_t device) {
    for (const auto& g : kGpus)
        if (reinterpret_cast<const void*>(device) == &g) return &g;
    return nullptr;
}

int copy(char* out, unsigned int length, unsigned int minimum, const char* text) {
    if (!out || length < minimum || std::strlen(text) + 1 > length) return kInsufficientSize;
    std::strcpy(out, text);
    return kSuccess;
}

}  // namespace

extern "C" {

int nvmlInit_v2() {
    if (flag("FAKE_NVML_INIT_ERROR")) return kDriverNotLoaded;
    ++sessions;
    return kSuccess;
}

int nvmlShutdown() {
    if (sessions == 0) return kUninitialized;
    --sessions;
    return kSuccess;
}

const char* nvmlErrorString(int result) {
    switch (result) {
        case kSuccess: return "Success";
        case kUninitialized: return "Uninitialized";
        case kInvalidArgument: return "Invalid Argument";
        case kNotSupported: return "Not Supported";
        case kInsufficientSize: return "Insufficient Size";
        case kDriverNotLoaded: return "Driver Not Loaded";
        default: return "Unknown Error";
    }
}

int nvmlSystemGetDriverVersion(char* version, unsigned int length) {
    if (sessions == 0) return kUninitialized;
    return copy(version, length, 80, "580.95.05");
}

int nvmlSystemGetCudaDriverVersion_v2(int* version) {
    if (!version) return kInvalidArgument;
    *version = 13000;
    return kSuccess;
}

int nvmlDeviceGetCount_v2(unsigned int* count) {
    if (sessions == 0) return kUninitialized;
    if (!count) return kInvalidArgument;
    *count = sizeof kGpus / sizeof kGpus[0];
    return kSuccess;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
    if (sessions == 0) return kUninitialized;
    if (!device || index >= sizeof kGpus / sizeof kGpus[0]) return kInvalidArgument;
    *device = reinterpret_cast<nvmlDevice_t>(const_cast<FakeGpu*>(&kGpus[index]));
    return kSuccess;
}

int nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length) {
    const FakeGpu* g = gpu_of(device);
    return g ? copy(uuid, length, 80, g->uuid) : kInvalidArgument;
}

int nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned int length) {
    const FakeGpu* g = gpu_of(device);
    return g ? copy(name, length, 64, g->name) : kInvalidArgument;
}

int nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int* major, int* minor) {
    const FakeGpu* g = gpu_of(device);
    if (!g || !major || !minor) return kInvalidArgument;
    if (flag("FAKE_NVML_NO_CC")) return kNotSupported;
    *major = g->cc_major;
    *minor = g->cc_minor;
    return kSuccess;
}

int nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
    const FakeGpu* g = gpu_of(device);
    if (!g || !memory) return kInvalidArgument;
    memory->total = g->total;
    memory->free = g->free;
    memory->used = g->total - g->free;
    return kSuccess;
}

int nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t* pci) {
    const FakeGpu* g = gpu_of(device);
    if (!g || !pci) return kInvalidArgument;
    std::memset(pci, 0, sizeof *pci);
    std::strcpy(pci->busIdLegacy, g->bus_id + 4);  // "0000:19:00.0"
    std::strcpy(pci->busId, g->bus_id);
    pci->pciDeviceId = 0x233510de;
    return kSuccess;
}

}  // extern "C"
