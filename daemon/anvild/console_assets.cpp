#include "daemon/anvild/console_assets.hpp"

namespace anvil::daemon::console {

const EmbeddedFile* find(std::string_view path) {
    for (const auto& f : embedded_files())
        if (f.path == path) return &f;
    return nullptr;
}

}  // namespace anvil::daemon::console
