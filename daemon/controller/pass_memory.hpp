// What the reconcile loop carries from one pass to the next, as one named value. Everything else a
// pass reads again (the ledger, the registry's catalogs, the engines), so a restart loses only
// this: backoffs start over, notes are written once more, a pending retire or ingest is found again
// by the first pass's full look.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "daemon/controller/ledger_fault.hpp"
#include "daemon/controller/registry_watch.hpp"
#include "state/records.hpp"

namespace anvil::daemon {

struct PassMemory {
    using Time = std::chrono::steady_clock::time_point;
    struct Backoff {
        int failures = 0;
        Time next{};
    };
    // What the retire step has still to look at: every recipe at the first pass and after a full
    // read of a source (a first clone, a force-push), otherwise the recipes commits touched since
    // it last ran, so that a one-file commit costs a one-recipe check (bench_daemon).
    struct RetireScope {
        bool all = true;
        std::set<std::string> recipes;
    };

    // The registry: each source's ledger id, and what a source brought that the ledger did not
    // take yet (a full disk), ingested again before that source is read further.
    std::map<std::string, state::Id> source_ids;
    std::map<std::string, WatchResult> pending_ingest;
    RetireScope retire_scope;
    std::map<state::Id, int> fidelity_ranks;  // revision → fidelity_rank, computed once
    // Serving and qualification.
    std::map<state::Id, Backoff> serving_backoff;  // the default's engine that will not start
    std::map<state::Id, Backoff> retry_backoff;    // a failed qualification
    bool exclusive_qualification = false;          // the default's engine is paused for a qualification
    std::optional<std::pair<std::string, std::string>> resume_after_exclusive;  // (default, candidate)
    std::map<std::string, std::string> last_notes;  // de-duplicates repeated hold reasons
    Time next_inventory_read{};                     // under a Slurm placement
    // While the ledger cannot be written: why, how many attempts failed, when to try again, and
    // when engines were last measured (their health, for the API, is under the controller's mutex).
    std::optional<LedgerFault> ledger_fault;
    int ledger_failures = 0;
    Time ledger_retry_at{};
    Time engines_measured_at{};
    bool ledger_low_space = false;
};

}  // namespace anvil::daemon
