// Fuzzes the document parsers: any bytes must yield a Document (valid or with errors), never a
// crash, a hang, an exception or undefined behaviour; and what it reports must serialise as JSON
// (dump() throws on text that is not UTF-8, as the API's registry report once did).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "registry/document.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::string_view bytes(reinterpret_cast<const char*>(data), size);
    // The path steers local-ai-registry kind detection, so let the first byte choose one.
    static constexpr const char* kPaths[] = {"recipe/x.json", "hardware/x.json", "model/x.json", "model-instance/x.json",
                                             "speed-sweeps/x.json", "x.json"};
    const char* path = kPaths[size > 0 ? data[0] % 6 : 0];
    auto doc = anvil::registry::parse_document(bytes, {"fuzz", "", path, "", ""});
    (void)nlohmann::json{{"path", doc.provenance.path}, {"errors", doc.error_lines()}, {"warnings", doc.warnings}}.dump();
    if (doc.valid()) {
        (void)doc.to_json().dump();
        if (const auto* recipe = doc.recipe()) {
            (void)recipe->effective_tensor_parallel();
            (void)recipe->served_model_name();
        }
    }
    return 0;
}
