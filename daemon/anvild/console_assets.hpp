// The web console's files (daemon/console, and the Chart.js build npm installed beside them),
// built into anvild by cmake/embed_files.cmake: the console needs no second server and fetches
// nothing from elsewhere.
#pragma once

#include <span>
#include <string_view>

namespace anvil::daemon::console {

struct EmbeddedFile {
    std::string_view path;          // the URL path it is served at: /console/...
    std::string_view content_type;
    std::string_view bytes;
    std::string_view etag;          // its sha256, quoted as an ETag is
};

// Every embedded file (generated: console_files.cpp in the build directory).
std::span<const EmbeddedFile> embedded_files();
// The file served at `path`, or nothing.
const EmbeddedFile* find(std::string_view path);

}  // namespace anvil::daemon::console
