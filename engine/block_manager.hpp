// Which KV-cache blocks are free. Pure bookkeeping: it never touches the cache's memory.
#pragma once

#include <cstdint>
#include <vector>

namespace anvil::engine {

class BlockManager {
public:
    BlockManager(int n_blocks, int block_size);

    int block_size() const { return block_size_; }
    int total() const { return total_; }
    int free() const { return int(free_.size()); }
    int used() const { return total_ - free(); }
    // Blocks a sequence of `tokens` positions occupies.
    int blocks_for(int tokens) const { return (tokens + block_size_ - 1) / block_size_; }

    // Grows `table` until it covers `tokens` positions; false (table unchanged) when the free
    // blocks do not suffice.
    bool grow(std::vector<int32_t>& table, int tokens);
    void release(std::vector<int32_t>& table);
    // Returns the blocks past those `tokens` positions need: what a speculative step reserved for
    // draft tokens the target rejected.
    void shrink(std::vector<int32_t>& table, int tokens);

private:
    int total_;
    int block_size_;
    std::vector<int32_t> free_;  // a stack: the most recently freed block is reused first
};

}  // namespace anvil::engine
