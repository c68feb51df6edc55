// The controller reaching up into anvild: the check must name it too.
#include "daemon/anvild/api_server.hpp"
#include "daemon/controller/steps.hpp"
