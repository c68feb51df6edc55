#include "engine/block_manager.hpp"

#include <stdexcept>

namespace anvil::engine {

BlockManager::BlockManager(int n_blocks, int block_size) : total_(n_blocks), block_size_(block_size) {
    if (n_blocks <= 0 || block_size <= 0) throw std::invalid_argument("the KV cache needs blocks of positive size");
    free_.reserve(size_t(n_blocks));
    for (int b = n_blocks - 1; b >= 0; --b) free_.push_back(b);
}

bool BlockManager::grow(std::vector<int32_t>& table, int tokens) {
    const int needed = blocks_for(tokens) - int(table.size());
    if (needed <= 0) return true;
    if (needed > free()) return false;
    for (int i = 0; i < needed; ++i) {
        table.push_back(free_.back());
        free_.pop_back();
    }
    return true;
}

void BlockManager::release(std::vector<int32_t>& table) {
    for (auto it = table.rbegin(); it != table.rend(); ++it) free_.push_back(*it);
    table.clear();
}

void BlockManager::shrink(std::vector<int32_t>& table, int tokens) {
    const size_t keep = size_t(blocks_for(tokens));
    while (table.size() > keep) {
        free_.push_back(table.back());
        table.pop_back();
    }
}

}  // namespace anvil::engine
