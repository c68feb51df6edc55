// The controller's view of the world it acts on, as interfaces: engines (drivers::EngineFleet), the
// stable endpoint (endpoint::UpstreamSwitch), qualification runs and the clock. Production wires
// the real ones (the Reconciler constructor without ports); the controller's tests wire fakes that start nothing and
// a clock they move by hand, so backoff, probation, rollback and the exclusive window are checked
// without sleeping.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>

#include "daemon/controller/qualification_runner.hpp"
#include "daemon/endpoint/stable_endpoint.hpp"
#include "daemon/drivers/engine_fleet.hpp"

namespace anvil::daemon {

class Clock {
public:
    virtual ~Clock() = default;
    virtual std::chrono::steady_clock::time_point steady() const = 0;  // backoff and polling
    virtual std::chrono::system_clock::time_point system() const = 0;  // ledger times, probation, anti-flap
    // Minutes since local midnight, for the exclusive window ("HH:MM-HH:MM", local time).
    virtual int local_minute_of_day() const = 0;
};

class SystemClock final : public Clock {
public:
    std::chrono::steady_clock::time_point steady() const override { return std::chrono::steady_clock::now(); }
    std::chrono::system_clock::time_point system() const override { return std::chrono::system_clock::now(); }
    int local_minute_of_day() const override;
};

// One qualification at a time, on its own thread (QualificationRunner is the real one).
class Qualifications {
public:
    virtual ~Qualifications() = default;
    virtual bool busy() const = 0;
    virtual std::optional<state::Id> current() const = 0;
    // Starts `job` (the revision is already `qualifying`); `done` is called when it is recorded.
    virtual void run(QualificationJob job, std::function<void()> done) = 0;
    // Cuts the job of `revision_id` short; the runner takes the next job afterwards.
    virtual void withdraw(state::Id revision_id, const std::string& why) = 0;
    // Cuts everything short and waits (anvild stopping).
    virtual void cancel_and_wait() = 0;
};

// The real runner behind the interface.
class RunnerQualifications final : public Qualifications {
public:
    RunnerQualifications(const DaemonConfig& config, state::Store& store, drivers::EngineSupervisor& engines, RegistryCheck in_registry)
        : runner_(config, store, engines, std::move(in_registry)) {}
    bool busy() const override { return runner_.busy(); }
    std::optional<state::Id> current() const override { return runner_.current(); }
    void run(QualificationJob job, std::function<void()> done) override { runner_.run(std::move(job), std::move(done)); }
    void withdraw(state::Id revision_id, const std::string& why) override { runner_.withdraw(revision_id, why); }
    void cancel_and_wait() override {
        runner_.cancel();
        runner_.wait();
    }

private:
    QualificationRunner runner_;
};

struct ControllerPorts {
    drivers::EngineFleet& engines;
    endpoint::UpstreamSwitch& endpoint;
    Qualifications& qualifications;
    const Clock& clock;
};

}  // namespace anvil::daemon
