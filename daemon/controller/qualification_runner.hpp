// Runs one qualification at a time on its own thread: starts the candidate's engine, runs the
// qualification suite against it (with the default's quality samples as the control, when there
// is a default), records every measurement as local evidence with the receipt's digest, every gate
// as a verdict, moves the revision to validated or failed, and stops the engine whatever happened.
#pragma once

#include <atomic>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "daemon/config/config.hpp"
#include "daemon/drivers/engine_supervisor.hpp"
#include "daemon/qualify/qualification.hpp"
#include "state/store.hpp"

namespace anvil::daemon {

struct QualificationJob {
    state::Id revision_id = 0;
    registry::Recipe recipe;
    std::string revision_sha256;
    std::string commit_id;
    std::optional<state::Id> control_revision;  // the default it is compared with
};

// Why a revision may not be validated now (its document is not at the synced commit of its
// source), or nothing when it may. Called on the runner's thread.
using RegistryCheck = std::function<std::optional<std::string>(state::Id revision_id)>;

class QualificationRunner {
public:
    QualificationRunner(const DaemonConfig& config, state::Store& store, drivers::EngineSupervisor& engines, RegistryCheck in_registry = {});
    ~QualificationRunner();  // cancels the running job and waits for it

    bool busy() const { return busy_; }
    std::optional<state::Id> current() const;
    // Starts `job` on the worker thread (the revision must already be `qualifying`); calls `done`
    // on that thread when the outcome is recorded. False if a job is still running.
    bool run(QualificationJob job, std::function<void()> done);
    void wait();
    // Cuts the running job short (anvild stopping or reloading): its engine start or its requests
    // end within a poll, its engine is stopped, and nothing is recorded but an event: the revision
    // stays `qualifying`, and the next anvild qualifies it again from the start.
    void cancel() {
        stopping_ = true;
        cancel_ = true;
    }
    // Cuts the job of `revision_id` short because it must not go on (removed from the registry,
    // superseded): as cancel(), but the runner takes the next job afterwards. The caller retires the
    // revision once the runner is no longer busy with it.
    void withdraw(state::Id revision_id, const std::string& why);

    // Where a validated revision's quality samples are kept for later candidates to be compared with.
    std::filesystem::path samples_path(state::Id revision_id) const;

private:
    void execute(const QualificationJob& job);

    const DaemonConfig& config_;
    state::Store& store_;
    drivers::EngineSupervisor& engines_;
    RegistryCheck in_registry_;
    std::atomic<bool> busy_{false};
    std::atomic<bool> cancel_{false};    // the running job stops at its next poll (stopping or withdrawn)
    std::atomic<bool> stopping_{false};  // anvild stops or reloads: no job starts any more
    mutable std::mutex mutex_;
    std::optional<state::Id> current_;
    std::optional<std::string> withdrawn_;  // why the running job was withdrawn
    std::thread worker_;
};

// The plan for a recipe under the configured requirements and promotion settings.
qualify::Plan plan_for(const registry::Recipe& recipe, const DaemonConfig& config);

}  // namespace anvil::daemon
