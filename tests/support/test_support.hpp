// Test helpers: temporary directories, files, real git repositories driven through the git CLI
// (argv, no shell), and running the anvil binary.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace anvil::registry {
struct Document;
}

namespace anvil::test {

// A fresh directory under $TMPDIR, removed with everything in it when the object goes away.
class TempDir {
public:
    TempDir();
    ~TempDir();
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    const std::filesystem::path& path() const { return path_; }
    std::filesystem::path operator/(const std::string& child) const { return path_ / child; }

private:
    std::filesystem::path path_;
};

std::string read_file(const std::filesystem::path& file);
void write_file(const std::filesystem::path& file, const std::string& content);
// s without its trailing whitespace (a command's output without its newline).
std::string trimmed(std::string s);
// A parsed document's error lines, one a line: what a failed check prints.
std::string all_errors(const registry::Document& doc);

struct ProcessResult {
    int exit_code = -1;
    std::string output;  // stdout and stderr together
};
// Runs argv[0] (looked up on PATH) with the arguments, in `cwd`, capturing its output.
ProcessResult run(const std::vector<std::string>& argv, const std::filesystem::path& cwd = {});

// A child process whose stdout is read line by line while it runs (stderr passes through).
class ChildProcess {
public:
    explicit ChildProcess(const std::vector<std::string>& argv);
    ~ChildProcess();  // kills and reaps the child if it still runs
    ChildProcess(const ChildProcess&) = delete;
    ChildProcess& operator=(const ChildProcess&) = delete;
    // The next line (without '\n'), or false at end of output or after `timeout_ms`.
    bool read_line(std::string& line, int timeout_ms);
    void kill(int signal);
    int wait();  // exit code, or 128 + signal
    int pid() const { return pid_; }

private:
    int pid_ = -1;
    int fd_ = -1;
    std::string buffer_;
    bool reaped_ = false;
    int status_ = 0;
};

// A real git repository with a working tree, for tests to commit registry documents into.
class GitRepo {
public:
    explicit GitRepo(std::filesystem::path dir, const std::string& branch = "main");
    const std::filesystem::path& dir() const { return dir_; }
    void write(const std::string& relative, const std::string& content);
    void git(const std::vector<std::string>& args);
    // Stages everything and commits; returns the new commit id.
    std::string commit(const std::string& message);
    std::string head();

private:
    std::filesystem::path dir_;
};

std::string seed_path(const std::string& prefix);  // the seed file whose name starts with prefix
std::string seed_text(const std::string& prefix);

// An embedded anvil-engine recipe in the registry's shape, digest-pinned: the model at
// ${MODEL_ROOT}/tiny, `weights` passed as --weights, on `hardware_id` (count 1). JSON text.
// A container image's root file system holding `engine` (anvil-engine, at /bin/anvil-engine) and the
// shared libraries it loads, as a tar file in `dir` for `podman import`; "" with `why` on failure.
std::filesystem::path engine_rootfs_tar(const std::filesystem::path& dir, const std::filesystem::path& engine, std::string& why);

std::string embedded_recipe_json(const std::string& id, const std::string& weights, const std::string& digest,
                                 const std::string& hardware_id = "cpu");

}  // namespace anvil::test
