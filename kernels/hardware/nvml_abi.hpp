// The few NVML declarations the inventory needs, written to match the driver's ABI (nvml.h) so the
// build needs neither the driver nor a toolkit that ships nvml.h. libnvidia-ml is never linked:
// it comes with the driver, so the inventory dlopen()s it and resolves these symbols by name.
// Layouts and sizes follow NVIDIA's NVML API reference (nvmlMemory_t, nvmlPciInfo_t, buffer sizes).
#pragma once

extern "C" {

using nvmlReturn_t = int;  // enum nvmlReturn_enum (int-sized)
struct nvmlDevice_st;
using nvmlDevice_t = nvmlDevice_st*;

struct nvmlMemory_t {
    unsigned long long total;  // bytes
    unsigned long long free;
    unsigned long long used;
};

struct nvmlPciInfo_t {
    char busIdLegacy[16];  // NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    char busId[32];  // NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE: "00000000:19:00.0"
};

}  // extern "C"

namespace anvil::hardware::nvml {

constexpr nvmlReturn_t kSuccess = 0;
constexpr nvmlReturn_t kErrorNotSupported = 3;
constexpr unsigned kUuidBufferSize = 96;           // NVML_DEVICE_UUID_V2_BUFFER_SIZE
constexpr unsigned kNameBufferSize = 96;           // NVML_DEVICE_NAME_V2_BUFFER_SIZE
constexpr unsigned kDriverVersionBufferSize = 80;  // NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE

using InitFn = nvmlReturn_t (*)();
using ShutdownFn = nvmlReturn_t (*)();
using ErrorStringFn = const char* (*)(nvmlReturn_t);
using DeviceGetCountFn = nvmlReturn_t (*)(unsigned int*);
using DeviceGetHandleByIndexFn = nvmlReturn_t (*)(unsigned int, nvmlDevice_t*);
using DeviceGetStringFn = nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned int);  // GetUUID, GetName
using DeviceGetCudaComputeCapabilityFn = nvmlReturn_t (*)(nvmlDevice_t, int*, int*);
using DeviceGetMemoryInfoFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_t*);
using DeviceGetPciInfoFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlPciInfo_t*);
using SystemGetDriverVersionFn = nvmlReturn_t (*)(char*, unsigned int);
using SystemGetCudaDriverVersionFn = nvmlReturn_t (*)(int*);

}  // namespace anvil::hardware::nvml
