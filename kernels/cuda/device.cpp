#include "kernels/cuda/device.hpp"

#include <algorithm>
#include <charconv>
#include <cstring>

#include "kernels/cuda/check.hpp"
#include "kernels/device_name.hpp"

namespace anvil::kernels::cuda {

namespace detail {

void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
    throw CudaError(std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " +
                    cudaGetErrorName(status) + ": " + cudaGetErrorString(status));
}

void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
    throw CudaError(std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " +
                    cublasGetStatusName(status) + ": " + cublasGetStatusString(status));
}

void* device_alloc(size_t bytes) {
    void* pointer = nullptr;
    if (bytes == 0) return nullptr;
    ANVIL_CUDA_CHECK(cudaMalloc(&pointer, bytes));
    return pointer;
}

void device_free(void* pointer) noexcept {
    // A failure here (a context already torn down at exit) has nowhere to go from a destructor.
    if (pointer) (void)cudaFree(pointer);
}

void copy_to_device(void* dst, const void* src, size_t bytes) {
    if (bytes) ANVIL_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}

void copy_to_host(void* dst, const void* src, size_t bytes) {
    if (bytes) ANVIL_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

void copy_on_device(void* dst, const void* src, size_t bytes) {
    if (bytes) ANVIL_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice));
}

void set_device(int device) { ANVIL_CUDA_CHECK(cudaSetDevice(device)); }

void* pinned_alloc(size_t bytes) {
    void* pointer = nullptr;
    if (bytes == 0) return nullptr;
    ANVIL_CUDA_CHECK(cudaMallocHost(&pointer, bytes));
    return pointer;
}

void pinned_free(void* pointer) noexcept {
    if (pointer) (void)cudaFreeHost(pointer);
}

}  // namespace detail

DeviceProbe probe_devices() {
    DeviceProbe probe;
    const cudaError_t status = cudaGetDeviceCount(&probe.count);
    if (status != cudaSuccess) {
        (void)cudaGetLastError();  // clear it so that later calls start clean
        probe.count = 0;
        probe.reason = std::string("no CUDA device: cudaGetDeviceCount: ") + cudaGetErrorName(status) + ": " +
                       cudaGetErrorString(status);
    } else if (probe.count == 0) {
        probe.reason = "no CUDA device: the driver reports none";
    }
    return probe;
}

DeviceInfo device_info(int device) {
    cudaDeviceProp properties{};
    ANVIL_CUDA_CHECK(cudaGetDeviceProperties(&properties, device));
    DeviceInfo info;
    info.name = properties.name;
    info.compute_major = properties.major;
    info.compute_minor = properties.minor;
    info.total_memory = properties.totalGlobalMem;
    info.multiprocessors = properties.multiProcessorCount;
    return info;
}

DeviceMemory device_memory(int device) {
    int current = 0;
    ANVIL_CUDA_CHECK(cudaGetDevice(&current));
    ANVIL_CUDA_CHECK(cudaSetDevice(device));
    DeviceMemory memory;
    const cudaError_t status = cudaMemGetInfo(&memory.free, &memory.total);
    (void)cudaSetDevice(current);
    if (status != cudaSuccess) detail::throw_cuda_error(status, "cudaMemGetInfo(&memory.free, &memory.total)", __FILE__, __LINE__);
    return memory;
}

Context::Context(int device) : device_(device) {
    const DeviceProbe probe = probe_devices();
    if (device < 0 || device >= probe.count)
        throw CudaError(probe.count == 0 ? "cuda:" + std::to_string(device) + ": " + probe.reason
                                         : no_such_cuda_device(device, probe.count));
    activate();
    cudaStream_t stream = nullptr;
    // A blocking stream: it waits for the synchronous copies of DeviceArray (on the legacy default
    // stream, whose host-to-device copies may still be in flight when cudaMemcpy returns).
    ANVIL_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamDefault));
    stream_ = stream;
    cublasHandle_t handle = nullptr;
    try {
        ANVIL_CUBLAS_CHECK(cublasCreate(&handle));
        cublas_ = handle;
        ANVIL_CUBLAS_CHECK(cublasSetStream(handle, stream));
        // Products in full f32 (no TF32 shortcut) unless a caller chooses otherwise.
        ANVIL_CUBLAS_CHECK(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH));
        // A workspace of our own (after cublasSetStream, which resets it), so that cuBLAS never
        // allocates while a CUDA graph is being captured.
        workspace_ = detail::device_alloc(kCublasWorkspaceBytes);
        ANVIL_CUBLAS_CHECK(cublasSetWorkspace(handle, workspace_, kCublasWorkspaceBytes));
    } catch (...) {
        detail::device_free(workspace_);
        if (handle) (void)cublasDestroy(handle);
        (void)cudaStreamDestroy(stream);
        throw;
    }
}

Context::~Context() {
    (void)cudaSetDevice(device_);
    (void)cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
    detail::device_free(scratch_);
    (void)cublasDestroy(static_cast<cublasHandle_t>(cublas_));
    detail::device_free(workspace_);
    (void)cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

void Context::activate() const { ANVIL_CUDA_CHECK(cudaSetDevice(device_)); }

void Context::synchronize() const {
    activate();
    ANVIL_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)));
}

void* Context::scratch(size_t bytes) {
    if (bytes <= scratch_bytes_) return scratch_;
    synchronize();  // queued work may still read the old area
    detail::device_free(scratch_);
    scratch_ = nullptr;
    scratch_bytes_ = 0;
    activate();
    scratch_ = detail::device_alloc(bytes);
    scratch_bytes_ = bytes;
    return scratch_;
}

void copy_async(Context& context, void* dst, const void* src, size_t bytes) {
    context.activate();
    if (bytes)
        ANVIL_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, detail::stream_of(context)));
}

void copy_to_device_async(Context& context, void* dst, const void* src, size_t bytes) {
    context.activate();
    if (bytes) ANVIL_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, detail::stream_of(context)));
}

void copy_to_host_async(Context& context, void* dst, const void* src, size_t bytes) {
    context.activate();
    if (bytes) ANVIL_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, detail::stream_of(context)));
}

StagedUploader::StagedUploader(Context& context, size_t chunk_bytes) : context_(context), chunk_(chunk_bytes) {
    if (chunk_bytes == 0) throw std::invalid_argument("staged upload: chunks of at least one byte");
    context_.activate();
    staging_[0] = PinnedArray<uint8_t>(chunk_bytes);
    staging_[1] = PinnedArray<uint8_t>(chunk_bytes);
    for (void*& event : copied_) {
        cudaEvent_t made = nullptr;
        const cudaError_t status = cudaEventCreateWithFlags(&made, cudaEventDisableTiming);
        if (status != cudaSuccess) {
            for (void* e : copied_)
                if (e) (void)cudaEventDestroy(static_cast<cudaEvent_t>(e));
            detail::throw_cuda_error(status, "cudaEventCreateWithFlags(&made, cudaEventDisableTiming)", __FILE__, __LINE__);
        }
        event = made;
        // Recorded once, so that the first wait on each buffer returns at once.
        ANVIL_CUDA_CHECK(cudaEventRecord(made, detail::stream_of(context_)));
    }
}

StagedUploader::~StagedUploader() {
    (void)cudaSetDevice(context_.device());
    (void)cudaStreamSynchronize(detail::stream_of(context_));  // no copy may still read a buffer freed below
    for (void* event : copied_)
        if (event) (void)cudaEventDestroy(static_cast<cudaEvent_t>(event));
}

void StagedUploader::upload(void* dst, const void* src, size_t bytes) {
    context_.activate();
    const auto* from = static_cast<const uint8_t*>(src);
    auto* to = static_cast<uint8_t*>(dst);
    for (size_t done = 0; done < bytes;) {
        const size_t n = std::min(chunk_, bytes - done);
        const auto event = static_cast<cudaEvent_t>(copied_[next_]);
        ANVIL_CUDA_CHECK(cudaEventSynchronize(event));  // the buffer's previous copy has left it
        std::memcpy(staging_[next_].data(), from + done, n);
        ANVIL_CUDA_CHECK(cudaMemcpyAsync(to + done, staging_[next_].data(), n, cudaMemcpyHostToDevice,
                                         detail::stream_of(context_)));
        ANVIL_CUDA_CHECK(cudaEventRecord(event, detail::stream_of(context_)));
        next_ ^= 1;
        done += n;
    }
    uploaded_ += bytes;
}

void StagedUploader::finish() { context_.synchronize(); }

void fill_bytes(Context& context, void* dst, int byte, size_t bytes) {
    context.activate();
    if (bytes) ANVIL_CUDA_CHECK(cudaMemsetAsync(dst, byte, bytes, detail::stream_of(context)));
}

void Graph::begin_capture() {
    context_.activate();
    ANVIL_CUDA_CHECK(cudaStreamBeginCapture(detail::stream_of(context_), cudaStreamCaptureModeThreadLocal));
}

void Graph::end_capture() {
    cudaGraph_t graph = nullptr;
    ANVIL_CUDA_CHECK(cudaStreamEndCapture(detail::stream_of(context_), &graph));
    graph_ = graph;
    cudaGraphExec_t instance = nullptr;
    const cudaError_t status = cudaGraphInstantiate(&instance, graph, 0);
    if (status != cudaSuccess) {
        (void)cudaGraphDestroy(graph);
        graph_ = nullptr;
        detail::throw_cuda_error(status, "cudaGraphInstantiate(&instance, graph, 0)", __FILE__, __LINE__);
    }
    instance_ = instance;
}

void Graph::abandon_capture() noexcept {
    cudaGraph_t graph = nullptr;
    if (cudaStreamEndCapture(detail::stream_of(context_), &graph) == cudaSuccess && graph) (void)cudaGraphDestroy(graph);
    (void)cudaGetLastError();
}

Graph::~Graph() {
    if (instance_) (void)cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(instance_));
    if (graph_) (void)cudaGraphDestroy(static_cast<cudaGraph_t>(graph_));
}

void Graph::launch() {
    context_.activate();
    ANVIL_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(instance_), detail::stream_of(context_)));
}

StreamTimer::StreamTimer(const Context& context) : context_(context) {
    context_.activate();
    cudaEvent_t start = nullptr, stop = nullptr;
    ANVIL_CUDA_CHECK(cudaEventCreate(&start));
    start_ = start;
    const cudaError_t status = cudaEventCreate(&stop);
    if (status != cudaSuccess) {
        (void)cudaEventDestroy(start);
        detail::throw_cuda_error(status, "cudaEventCreate(&stop)", __FILE__, __LINE__);
    }
    stop_ = stop;
}

StreamTimer::~StreamTimer() {
    if (start_) (void)cudaEventDestroy(static_cast<cudaEvent_t>(start_));
    if (stop_) (void)cudaEventDestroy(static_cast<cudaEvent_t>(stop_));
}

void StreamTimer::start() {
    ANVIL_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(start_), detail::stream_of(context_)));
}

double StreamTimer::stop_seconds() {
    ANVIL_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(stop_), detail::stream_of(context_)));
    ANVIL_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(stop_)));
    float milliseconds = 0.0f;
    ANVIL_CUDA_CHECK(cudaEventElapsedTime(&milliseconds, static_cast<cudaEvent_t>(start_), static_cast<cudaEvent_t>(stop_)));
    return double(milliseconds) / 1000.0;
}

}  // namespace anvil::kernels::cuda
