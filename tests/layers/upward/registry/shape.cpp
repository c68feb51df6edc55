// A registry file that reaches up into the engine: the check must name it.
#include "engine/model.hpp"
#include "support/clock.hpp"
