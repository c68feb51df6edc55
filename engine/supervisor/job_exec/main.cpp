// anvil-job-exec: what a Slurm job of anvild's runs on its node. It execs the command anvild put in
// ANVIL_JOB_ARGV (a JSON array of strings) exactly as given, so the batch script needs no arguments
// and no recipe string is parsed by a shell (slurmrestd 22.05 cannot take a job's argv: it crashes).
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

int main() {
    const char* text = std::getenv("ANVIL_JOB_ARGV");
    if (!text) {
        std::cerr << "anvil-job-exec: ANVIL_JOB_ARGV is not set (anvild sets it on the jobs it submits)\n";
        return 2;
    }
    const nlohmann::json argv = nlohmann::json::parse(text, nullptr, false);
    if (!argv.is_array() || argv.empty() || !std::all_of(argv.begin(), argv.end(), [](const auto& a) { return a.is_string(); })) {
        std::cerr << "anvil-job-exec: ANVIL_JOB_ARGV is not a JSON array of strings\n";
        return 2;
    }
    std::vector<std::string> words;
    for (const auto& a : argv) words.push_back(a.get<std::string>());
    std::vector<char*> pointers;
    for (auto& w : words) pointers.push_back(w.data());
    pointers.push_back(nullptr);
    // The engine need not see how it was started.
    unsetenv("ANVIL_JOB_ARGV");
    execvp(pointers[0], pointers.data());
    std::cerr << "anvil-job-exec: cannot run " << words[0] << ": " << std::strerror(errno) << "\n";
    return errno == ENOENT ? 127 : 126;
}
