// A forward pass's threads as one team in one OpenMP region. Each product of a decode step used to
// open its own region: a fork and a join of two threads cost 3.0-3.2 us on the Zen 5 VM, ~49 of
// them a token (docs/PERFORMANCE.md). Inside run_as_team every thread of the team runs the whole
// pass; each step shares its items out (share_items) and ends at Team::barrier, a spin on one
// cache line (~0.2 us for two threads) that sleeps on a futex when the wait grows long, because a
// spinning waiter on a shared machine holds up whoever it waits for (kernels/thread_policy.hpp).
//
// The same share_items outside a team forks a region of its own as before, so the kernels and the
// model runner have one code path for both.
#pragma once

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>

namespace anvil::kernels {

constexpr int kMaxTeam = 64;

// How far one contiguous share of a step's items has been claimed, alone on its cache line.
struct alignas(64) ShareCounter {
    std::atomic<int> claimed{0};
};

class Team {
public:
    explicit Team(int capacity);  // the most threads run_as_team asks OpenMP for
    Team(const Team&) = delete;
    Team& operator=(const Team&) = delete;

    int capacity() const { return capacity_; }
    // The threads of the current run: as many as OpenMP granted (fewer where OMP_DYNAMIC is set or
    // a region is already active, one inside another region).
    int size() const { return size_.load(std::memory_order_relaxed); }
    // Returns once every thread of the team has called it. The last to arrive zeroes the share
    // counters, so each step's share_items starts from fresh shares without a barrier of its own.
    void barrier();
    ShareCounter* counters() { return counters_; }
    // Pauses a waiter spins before it sleeps: GOMP_SPINCOUNT and OMP_WAIT_POLICY as libgomp reads them.
    std::uint64_t spins() const { return spins_; }

    // Each thread of a run, first thing: every one stores the same count, so each reads back its own.
    void join(int granted) { size_.store(granted, std::memory_order_relaxed); }
    // A thread's step threw: the first exception is kept, and every thread leaves the run at the
    // step's barrier (share_items), so none is left waiting at a barrier the thrower never reaches.
    void fail(std::exception_ptr failure);
    bool failed() const { return failed_.load(std::memory_order_relaxed); }
    // After the run, when no thread is in it: rethrows what a thread threw, leaving the team ready
    // for the next run (no arrivals, no claims).
    void rethrow_failure();

private:
    struct alignas(64) Meeting {
        std::atomic<int> arrived{0};
        std::atomic<std::uint32_t> generation{0};
        std::atomic<int> sleepers{0};
    };
    Meeting meeting_;
    int capacity_;
    std::atomic<int> size_;
    std::uint64_t spins_;
    std::atomic<bool> failed_{false};
    std::exception_ptr failure_;  // written by the one thread that set failed_
    ShareCounter counters_[kMaxTeam];
};

// The team the calling thread runs in (inside run_as_team), or nullptr.
Team* current_team();

namespace detail {

void set_current_team(Team* team);

// What the threads of a failed run leave their step with; run_as_team rethrows the failure itself.
struct TeamAbandoned {};

// Thread `own` of `count` takes the own-th contiguous share of items 0..items-1, claiming `chunk`
// items at a time, then claims what is left of the other shares. So each thread reads its rows in
// one long stream the prefetchers follow, and a thread the OS preempts holds nobody up for long:
// the others finish its share. OpenMP's dynamic schedule handed out alternating chunks instead
// (docs/PERFORMANCE.md). Counters start at zero; a team smaller than `count` still covers every share.
template <typename Body>
void work_shares(ShareCounter* counters, int count, int own, int items, int chunk, Body&& body) {
    for (int k = 0; k < count; ++k) {
        const int s = (own + k) % count;
        const int begin = int(std::int64_t(items) * s / count), end = int(std::int64_t(items) * (s + 1) / count);
        for (;;) {
            const int first = begin + counters[s].claimed.fetch_add(chunk, std::memory_order_relaxed);
            if (first >= end) break;
            const int last = std::min(end, first + chunk);
            for (int item = first; item < last; ++item) body(item);
        }
    }
}

}  // namespace detail

// Runs body(item) for items 0..items-1 and returns when all are done. Inside run_as_team every
// thread of the team calls it with the same arguments and the team shares the items. Outside,
// a region of omp_get_max_threads() threads shares them when `parallel`, and this thread runs them
// in order otherwise (a team of one still paid libgomp's region entry and exit: a 256-row Q4_0
// product held in L2 took 4.2-4.5 us with it, 2.7-3.0 without).
template <typename Body>
void share_items(bool parallel, int items, int chunk, Body&& body) {
    if (Team* team = current_team()) {
        try {
            detail::work_shares(team->counters(), team->size(), omp_get_thread_num(), items, chunk, body);
        } catch (...) {
            team->fail(std::current_exception());
        }
        team->barrier();
        if (team->failed()) throw detail::TeamAbandoned{};
        return;
    }
    const int count = parallel ? std::min(omp_get_max_threads(), kMaxTeam) : 1;
    if (count <= 1) {
        for (int item = 0; item < items; ++item) body(item);
        return;
    }
    ShareCounter counters[kMaxTeam];
#pragma omp parallel
    detail::work_shares(counters, count, omp_get_thread_num(), items, chunk, body);
}

// Runs body() on each thread of one OpenMP region of up to team.capacity() threads, current_team()
// set; the team is as many as OpenMP granted. What a thread throws ends the run at the step's
// barrier for all (Team::fail) and is rethrown here. A throw outside share_items must be one every
// thread meets at the same point (the kernels' checks of their arguments are).
template <typename Body>
void run_as_team(Team& team, Body&& body) {
#pragma omp parallel num_threads(team.capacity())
    {
        team.join(omp_get_num_threads());
        detail::set_current_team(&team);
        try {
            body();
        } catch (...) {
            team.fail(std::current_exception());
        }
        detail::set_current_team(nullptr);
    }
    team.rethrow_failure();
}

}  // namespace anvil::kernels
