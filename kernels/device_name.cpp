#include "kernels/device_name.hpp"

#include <charconv>
#include <stdexcept>
#include <string>

namespace anvil::kernels {

int parse_cuda_device(std::string_view text) {
    const auto refuse = [&] {
        return std::invalid_argument("device \"" + std::string(text) +
                                     "\": expected cuda or cuda:N with N a device index (0, 1, ...)");
    };
    if (text == "cuda") return 0;
    constexpr std::string_view prefix = "cuda:";
    if (!text.starts_with(prefix)) throw refuse();
    const std::string_view digits = text.substr(prefix.size());
    if (digits.empty() || digits.size() > 4) throw refuse();
    int index = 0;
    const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (error != std::errc() || end != digits.data() + digits.size() || index < 0) throw refuse();
    return index;
}

std::string no_such_cuda_device(int index, int count) {
    return "cuda:" + std::to_string(index) + ": there " + (count == 1 ? "is 1 CUDA device (cuda:0)" : "are " + std::to_string(count) +
           " CUDA devices (cuda:0 to cuda:" + std::to_string(count - 1) + ")");
}

}  // namespace anvil::kernels
