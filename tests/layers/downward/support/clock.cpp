// support includes nothing of the project but itself.
#include "support/clock.hpp"
