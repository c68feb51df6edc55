// Down the layers only: the check passes.
#include "support/clock.hpp"
#include "formats/gguf.hpp"
#include <vector>
