// The CUDA device layer the engine sees: choosing a device (`cuda:N`), finding out whether there is
// one, device memory, and a context (one device, one stream, one cuBLAS handle) every kernel runs
// in. Plain C++: no CUDA type crosses this header, so engine code builds without the toolkit's
// headers. Every CUDA call behind it is checked; a failure throws CudaError naming the call, the
// file and the line.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kernels/device_name.hpp"

namespace anvil::kernels::cuda {

class CudaError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// "cuda" is device 0; "cuda:N" is device N. Anything else throws std::invalid_argument saying what
// the accepted forms are (kernels/device_name.hpp, which builds without the toolkit).
inline int parse_device(std::string_view text) { return parse_cuda_device(text); }

// What the driver reports. count is 0 and reason says why when there is no usable device: no
// driver, no device, or a failing cudaGetDeviceCount (its error string is kept).
struct DeviceProbe {
    int count = 0;
    std::string reason;  // empty when count > 0
};
DeviceProbe probe_devices();

struct DeviceInfo {
    std::string name;
    int compute_major = 0, compute_minor = 0;
    size_t total_memory = 0;
    int multiprocessors = 0;
};
DeviceInfo device_info(int device);

// What cudaMemGetInfo reports for a device: its free and total memory now.
struct DeviceMemory {
    size_t free = 0, total = 0;
};
DeviceMemory device_memory(int device);

namespace detail {
void* device_alloc(size_t bytes);  // on the current device; throws CudaError
void device_free(void* pointer) noexcept;
void copy_to_device(void* dst, const void* src, size_t bytes);
void copy_to_host(void* dst, const void* src, size_t bytes);
void copy_on_device(void* dst, const void* src, size_t bytes);
void set_device(int device);
void* pinned_alloc(size_t bytes);  // page-locked host memory; throws CudaError
void pinned_free(void* pointer) noexcept;
}  // namespace detail

// count elements of T in device memory of the current device, freed with the array. Copies are
// synchronous (they wait for the device); kernels take data() through the kernel headers.
template <typename T>
class DeviceArray {
public:
    DeviceArray() = default;
    explicit DeviceArray(size_t count) : pointer_(static_cast<T*>(detail::device_alloc(count * sizeof(T)))), count_(count) {}
    explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) { upload(host.data(), host.size()); }
    DeviceArray(const DeviceArray&) = delete;
    DeviceArray& operator=(const DeviceArray&) = delete;
    DeviceArray(DeviceArray&& other) noexcept
        : pointer_(std::exchange(other.pointer_, nullptr)), count_(std::exchange(other.count_, 0)) {}
    DeviceArray& operator=(DeviceArray&& other) noexcept {
        if (this != &other) {
            detail::device_free(pointer_);
            pointer_ = std::exchange(other.pointer_, nullptr);
            count_ = std::exchange(other.count_, 0);
        }
        return *this;
    }
    ~DeviceArray() { detail::device_free(pointer_); }

    T* data() { return pointer_; }
    const T* data() const { return pointer_; }
    size_t size() const { return count_; }
    size_t bytes() const { return count_ * sizeof(T); }

    void upload(const T* host, size_t count, size_t offset = 0) {
        check_range(count, offset);
        detail::copy_to_device(pointer_ + offset, host, count * sizeof(T));
    }
    void download(T* host, size_t count, size_t offset = 0) const {
        check_range(count, offset);
        detail::copy_to_host(host, pointer_ + offset, count * sizeof(T));
    }
    std::vector<T> to_host() const {
        std::vector<T> host(count_);
        download(host.data(), count_);
        return host;
    }

private:
    void check_range(size_t count, size_t offset) const {
        if (offset > count_ || count > count_ - offset)
            throw std::out_of_range("device array of " + std::to_string(count_) + " elements: copy of " +
                                    std::to_string(count) + " at " + std::to_string(offset));
    }

    T* pointer_ = nullptr;
    size_t count_ = 0;
};

// count elements of T in page-locked host memory: copies between it and the device run
// asynchronously, at the link's full speed (pageable memory is staged by the driver, synchronously).
template <typename T>
class PinnedArray {
public:
    PinnedArray() = default;
    explicit PinnedArray(size_t count) : pointer_(static_cast<T*>(detail::pinned_alloc(count * sizeof(T)))), count_(count) {}
    PinnedArray(const PinnedArray&) = delete;
    PinnedArray& operator=(const PinnedArray&) = delete;
    PinnedArray(PinnedArray&& other) noexcept
        : pointer_(std::exchange(other.pointer_, nullptr)), count_(std::exchange(other.count_, 0)) {}
    PinnedArray& operator=(PinnedArray&& other) noexcept {
        if (this != &other) {
            detail::pinned_free(pointer_);
            pointer_ = std::exchange(other.pointer_, nullptr);
            count_ = std::exchange(other.count_, 0);
        }
        return *this;
    }
    ~PinnedArray() { detail::pinned_free(pointer_); }

    T* data() { return pointer_; }
    const T* data() const { return pointer_; }
    size_t size() const { return count_; }
    T& operator[](size_t i) { return pointer_[i]; }
    const T& operator[](size_t i) const { return pointer_[i]; }

private:
    T* pointer_ = nullptr;
    size_t count_ = 0;
};

// One device, one stream on it, one cuBLAS handle bound to that stream, and a scratch area the
// products use (bf16 copies of activations for cuBLAS). Kernels are queued on the stream in order;
// synchronize() waits for them and reports any error they raised. Not thread-safe: one engine
// thread owns a context.
class Context {
public:
    explicit Context(int device);
    Context(const Context&) = delete;
    Context& operator=(const Context&) = delete;
    ~Context();

    int device() const { return device_; }
    void* stream() const { return stream_; }   // cudaStream_t
    void* cublas() const { return cublas_; }   // cublasHandle_t
    // Makes this context's device current on the calling thread (every kernel call does).
    void activate() const;
    void synchronize() const;
    // At least `bytes` of scratch, grown (with a device synchronization) only when too small:
    // reserve the largest size up front and no call allocates.
    void* scratch(size_t bytes);
    void reserve_scratch(size_t bytes) { scratch(bytes); }

private:
    int device_;
    void* stream_ = nullptr;
    void* cublas_ = nullptr;
    static constexpr size_t kCublasWorkspaceBytes = size_t(32) << 20;
    void* workspace_ = nullptr;
    void* scratch_ = nullptr;
    size_t scratch_bytes_ = 0;
};

// Queued on the context's stream (asynchronous to the host).
void copy_async(Context& context, void* dst, const void* src, size_t bytes);  // device to device
// Host to device and back, host memory pinned (PinnedArray): the host side must stay untouched
// until the stream reaches the copy (synchronize()).
void copy_to_device_async(Context& context, void* dst, const void* src, size_t bytes);
void copy_to_host_async(Context& context, void* dst, const void* src, size_t bytes);

// Uploads host memory of any kind (a file's mapping, converted weights) through two pinned staging
// buffers on the context's stream: the host fills one while the other's copy runs, so a large
// model goes up at the link's speed instead of the driver's synchronous pageable copies. upload()
// returns once `src` has been read (it may be freed); finish() waits for the copies.
class StagedUploader {
public:
    explicit StagedUploader(Context& context, size_t chunk_bytes = size_t(64) << 20);
    StagedUploader(const StagedUploader&) = delete;
    StagedUploader& operator=(const StagedUploader&) = delete;
    ~StagedUploader();
    void upload(void* dst, const void* src, size_t bytes);
    void finish();
    size_t uploaded_bytes() const { return uploaded_; }

private:
    Context& context_;
    size_t chunk_;
    PinnedArray<uint8_t> staging_[2];
    void* copied_[2] = {nullptr, nullptr};  // cudaEvent_t: the buffer's last copy is done
    int next_ = 0;
    size_t uploaded_ = 0;
};
void fill_bytes(Context& context, void* dst, int byte, size_t bytes);

// A CUDA graph: the kernels one call of `work` queues on the context's stream, recorded once and
// replayed with one launch (at batch 1 the launches of a forward pass cost as much as its work).
// `work` must not allocate (reserve the context's scratch first) nor synchronize.
class Graph {
public:
    template <typename Work>
    Graph(Context& context, Work&& work) : context_(context) {
        begin_capture();
        try {
            work();
        } catch (...) {
            abandon_capture();
            throw;
        }
        end_capture();
    }
    Graph(const Graph&) = delete;
    Graph& operator=(const Graph&) = delete;
    ~Graph();
    void launch();  // queued on the context's stream

private:
    void begin_capture();
    void end_capture();
    void abandon_capture() noexcept;

    Context& context_;
    void* graph_ = nullptr;     // cudaGraph_t
    void* instance_ = nullptr;  // cudaGraphExec_t
};

// Times work queued on a context's stream with CUDA events: the device's own clock.
class StreamTimer {
public:
    explicit StreamTimer(const Context& context);
    StreamTimer(const StreamTimer&) = delete;
    StreamTimer& operator=(const StreamTimer&) = delete;
    ~StreamTimer();
    void start();
    double stop_seconds();  // waits for the stream

private:
    const Context& context_;
    void* start_ = nullptr;
    void* stop_ = nullptr;
};

}  // namespace anvil::kernels::cuda
