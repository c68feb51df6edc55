// The team's barrier: out of line, in the library's baseline instruction set, for every caller.
#include "kernels/team.hpp"

#include <immintrin.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace anvil::kernels {

namespace {

thread_local Team* current = nullptr;

// How many pauses a waiter spins before it sleeps, read as libgomp reads it for its own waits, so
// that the one setting the engine documents (GOMP_SPINCOUNT, OMP_WAIT_POLICY; anvil-engine sets
// passive and 1000, about ten microseconds, unless the environment chose: thread_policy.hpp)
// governs the team's barrier as it does the regions'. Decode's waits between steps are shorter than
// that spin; a longer one (a preempted team mate) costs the waiter a futex wake-up rather than the
// host a spinning core.
std::uint64_t spins_from_environment() {
    constexpr std::uint64_t kForever = std::numeric_limits<std::uint64_t>::max();
    if (const char* text = std::getenv("GOMP_SPINCOUNT")) {
        const std::string_view value(text);
        if (value == "infinite" || value == "infinity") return kForever;
        char* end = nullptr;
        errno = 0;
        const unsigned long long count = std::strtoull(text, &end, 10);
        if (errno == 0 && end != text && !value.starts_with("-")) {
            const std::string_view suffix(end);
            const std::uint64_t scale = suffix.empty() ? 1 : suffix == "k" || suffix == "K" ? 1000ull
                                    : suffix == "M" ? 1000000ull : suffix == "G" ? 1000000000ull
                                    : suffix == "T" ? 1000000000000ull : 0;
            if (scale != 0) return count > kForever / scale ? kForever : count * scale;
        }
        // Not a count libgomp accepts: it ignores the variable, and so does this.
    }
    if (const char* policy = std::getenv("OMP_WAIT_POLICY")) {
        std::string lower(policy);
        for (char& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
        if (lower == "active") return kForever;
        if (lower == "passive") return 0;
    }
    return 300000;  // libgomp's spin when neither is set
}

}  // namespace

Team::Team(int capacity) : capacity_(capacity), size_(capacity), spins_(spins_from_environment()) {
    if (capacity < 1 || capacity > kMaxTeam)
        throw std::invalid_argument("a team of " + std::to_string(capacity) + " threads; 1 to " + std::to_string(kMaxTeam) +
                                    " are possible");
}

void Team::fail(std::exception_ptr failure) {
    if (!failed_.exchange(true, std::memory_order_acq_rel)) failure_ = std::move(failure);
}

void Team::rethrow_failure() {
    if (!failed_.load(std::memory_order_acquire)) return;
    meeting_.arrived.store(0, std::memory_order_relaxed);
    for (auto& counter : counters_) counter.claimed.store(0, std::memory_order_relaxed);
    std::exception_ptr failure = std::move(failure_);
    failure_ = nullptr;
    failed_.store(false, std::memory_order_relaxed);
    std::rethrow_exception(failure);
}

void Team::barrier() {
    // Read before arriving: the generation cannot move on until this thread has arrived.
    const std::uint32_t generation = meeting_.generation.load(std::memory_order_acquire);
    const int size = this->size();
    if (meeting_.arrived.fetch_add(1, std::memory_order_acq_rel) == size - 1) {
        meeting_.arrived.store(0, std::memory_order_relaxed);
        for (int i = 0; i < size; ++i) counters_[i].claimed.store(0, std::memory_order_relaxed);
        meeting_.generation.store(generation + 1, std::memory_order_seq_cst);
        if (meeting_.sleepers.load(std::memory_order_seq_cst) > 0) meeting_.generation.notify_all();
        return;
    }
    for (std::uint64_t spin = 0; spin < spins_; ++spin) {
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
