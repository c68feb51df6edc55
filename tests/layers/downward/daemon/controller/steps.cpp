// Down the layers, and within its own unit.
#include "daemon/controller/plan.hpp"
#include "daemon/drivers/driver.hpp"
#include "state/store.hpp"
