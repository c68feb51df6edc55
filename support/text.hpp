// Small text rules more than one layer needs, once.
#pragma once

#include <string>
#include <string_view>

namespace anvil::support {

// `text` with A-Z as a-z and every other byte as it is: hostnames, header names, engine and
// hardware names compare this way (never by locale).
std::string ascii_lower(std::string_view text);

}  // namespace anvil::support
