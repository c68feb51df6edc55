// Forwards to registry/support/digest.hpp, the one sha256. Kept only while daemon/qualify still
// includes this path (its owners switch to support::sha256_hex); delete it after that.
#pragma once

#include "registry/support/digest.hpp"

namespace anvil::registry {

using support::sha256_file_hex;
using support::sha256_hex;

}  // namespace anvil::registry
