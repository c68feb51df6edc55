// anvil model digest DIR|FILE
#include <iostream>

#include "daemon/cli/arguments.hpp"
#include "daemon/cli/commands.hpp"
#include "registry/model_digest.hpp"

namespace anvil::cli {

int model_command(const std::vector<std::string>& args) {
    if (args.empty() || args[0] != "digest") throw UsageError("expected `anvil model digest DIR|FILE.gguf`");
    Arguments parsed(std::vector<std::string>(args.begin() + 1, args.end()), {});
    if (parsed.positional().size() != 1) throw UsageError("expected one model directory or GGUF file");
    std::cout << registry::model_digest(parsed.positional()[0]) << "\n";
    return 0;
}

}  // namespace anvil::cli
