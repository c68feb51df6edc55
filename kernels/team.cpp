// The team's barrier: out of line, in the library's baseline instruction set, for every caller.
#include "kernels/team.hpp"

#include <immintrin.h>

#include <stdexcept>
#include <string>

namespace anvil::kernels {

namespace {

thread_local Team* current = nullptr;

// Pauses before a waiter sleeps: a few microseconds, about libgomp's spin under GOMP_SPINCOUNT=1000
// (kernels/thread_policy.hpp). Decode's waits between steps are shorter; a longer one (a
// preempted team mate) costs the waiter a futex wake rather than the host a spinning core.
constexpr int kSpins = 2000;

}  // namespace

Team::Team(int size) : size_(size) {
    if (size < 1 || size > kMaxTeam)
        throw std::invalid_argument("a team of " + std::to_string(size) + " threads; 1 to " + std::to_string(kMaxTeam) + " are possible");
}

void Team::barrier() {
    // Read before arriving: the generation cannot move on until this thread has arrived.
    const std::uint32_t generation = meeting_.generation.load(std::memory_order_acquire);
    if (meeting_.arrived.fetch_add(1, std::memory_order_acq_rel) == size_ - 1) {
        meeting_.arrived.store(0, std::memory_order_relaxed);
        for (int i = 0; i < size_; ++i) counters_[i].claimed.store(0, std::memory_order_relaxed);
        meeting_.generation.store(generation + 1, std::memory_order_seq_cst);
        if (meeting_.sleepers.load(std::memory_order_seq_cst) > 0) meeting_.generation.notify_all();
        return;
    }
    for (int spin = 0; spin < kSpins; ++spin) {
        if (meeting_.generation.load(std::memory_order_acquire) != generation) return;
        _mm_pause();
    }
    meeting_.sleepers.fetch_add(1, std::memory_order_seq_cst);
    while (meeting_.generation.load(std::memory_order_acquire) == generation) meeting_.generation.wait(generation, std::memory_order_acquire);
    meeting_.sleepers.fetch_sub(1, std::memory_order_relaxed);
}

Team* current_team() { return current; }

void detail::set_current_team(Team* team) { current = team; }

}  // namespace anvil::kernels
