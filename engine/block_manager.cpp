#include "engine/block_manager.hpp"

#include <algorithm>
#include <random>
#include <stdexcept>

namespace anvil::engine {

BlockManager::BlockManager(int n_blocks, int block_size, bool prefix_caching)
    : total_(n_blocks), block_size_(block_size), prefix_caching_(prefix_caching) {
    if (n_blocks <= 0 || block_size <= 0) throw std::invalid_argument("the KV cache needs blocks of positive size");
    free_.reserve(size_t(n_blocks));
    for (int b = n_blocks - 1; b >= 0; --b) free_.push_back(b);
    holders_.assign(size_t(n_blocks), 0);
    if (prefix_caching_) {
        std::random_device entropy;
        key_ = (uint64_t(entropy()) << 32) ^ entropy();
        name_.assign(size_t(n_blocks), 0);
        tokens_.assign(size_t(n_blocks) * size_t(block_size), 0);
        where_.resize(size_t(n_blocks));
        by_name_.reserve(size_t(n_blocks));
    }
}

bool BlockManager::grow(std::vector<int32_t>& table, int tokens) {
    const int needed = blocks_for(tokens) - int(table.size());
    if (needed <= 0) return true;
    if (needed > free()) return false;
    for (int i = 0; i < needed; ++i) {
        int32_t block;
        if (!free_.empty()) {
            block = free_.back();
            free_.pop_back();
        } else {  // the prefix released longest ago gives its block up
            block = cached_.front();
            cached_.pop_front();
            by_name_.erase(name_[size_t(block)]);
            name_[size_t(block)] = 0;
        }
        holders_[size_t(block)] = 1;
        table.push_back(block);
    }
    return true;
}

void BlockManager::drop(int32_t block) {
    if (--holders_[size_t(block)] > 0) return;
    if (prefix_caching_ && name_[size_t(block)] != 0) where_[size_t(block)] = cached_.insert(cached_.end(), block);
    else free_.push_back(block);
}

void BlockManager::release(std::vector<int32_t>& table) {
    // Last block first: a prefix's tail is reused by fewer prompts than its head, so it goes first.
    for (auto it = table.rbegin(); it != table.rend(); ++it) drop(*it);
    table.clear();
}

void BlockManager::shrink(std::vector<int32_t>& table, int tokens) {
    const size_t keep = size_t(blocks_for(tokens));
    while (table.size() > keep) {
        drop(table.back());
        table.pop_back();
    }
}

uint64_t BlockManager::name(uint64_t previous, const int32_t* tokens) const {
    uint64_t h = key_ ^ (previous * 0x9E3779B97F4A7C15ull);
    for (int i = 0; i < block_size_; ++i) {
        h ^= uint64_t(uint32_t(tokens[i])) + 0x632BE59BD9B4E019ull + (h << 6) + (h >> 2);
        h *= 0xBF58476D1CE4E5B9ull;
        h ^= h >> 31;
    }
    h ^= h >> 33;
    h *= 0x94D049BB133111EBull;
    h ^= h >> 29;
    return h == 0 ? 1 : h;  // 0 means "no name"
}

int BlockManager::match(const std::vector<int32_t>& tokens, int max_blocks, std::vector<int32_t>& table,
                        std::vector<uint64_t>& hashes) {
    hashes.clear();
    if (!prefix_caching_ || !table.empty()) return 0;
    const int full = std::min(max_blocks, int(tokens.size()) / block_size_);
    uint64_t previous = 0;
    for (int b = 0; b < full; ++b) {
        const int32_t* block_tokens = tokens.data() + size_t(b) * size_t(block_size_);
        const uint64_t h = name(previous, block_tokens);
        const auto it = by_name_.find(h);
        if (it == by_name_.end()) break;
        const int32_t block = it->second;
        if (!std::equal(block_tokens, block_tokens + block_size_, tokens_.data() + size_t(block) * size_t(block_size_))) break;
        if (holders_[size_t(block)]++ == 0) cached_.erase(where_[size_t(block)]);
        table.push_back(block);
        hashes.push_back(h);
        previous = h;
    }
    return int(table.size());
}

void BlockManager::name_full_blocks(const std::vector<int32_t>& tokens, int computed, const std::vector<int32_t>& table,
                                    std::vector<uint64_t>& hashes) {
    if (!prefix_caching_) return;
    const size_t full = std::min(size_t(computed / block_size_), table.size());
    while (hashes.size() < full) {
        const size_t b = hashes.size();
        const int32_t* block_tokens = tokens.data() + b * size_t(block_size_);
        const uint64_t h = name(b == 0 ? 0 : hashes[b - 1], block_tokens);
        hashes.push_back(h);
        const int32_t block = table[b];
        // A prefix two sequences computed side by side keeps the first name given; the other
        // block stays unnamed and is freed as usual.
        if (name_[size_t(block)] != 0 || by_name_.count(h)) continue;
        name_[size_t(block)] = h;
        by_name_.emplace(h, block);
        std::copy(block_tokens, block_tokens + block_size_, tokens_.begin() + std::ptrdiff_t(size_t(block) * size_t(block_size_)));
    }
}

}  // namespace anvil::engine
