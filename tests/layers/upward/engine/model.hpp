// The engine may use the formats below it.
#include "formats/gguf.hpp"
