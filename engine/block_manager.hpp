// Which KV-cache blocks are free, and which hold a known prefix. Pure bookkeeping: it never
// touches the cache's memory.
//
// Prefix caching, as vLLM's automatic prefix caching does it: a block whose positions are all
// computed is named by a hash of its tokens and of the block before it (so a name stands for the
// whole prefix up to it), and a sequence whose prompt starts with the same tokens takes those
// blocks instead of computing them. Blocks are counted by their holders; one no sequence holds but
// that has a name stays in the cache, least recently released first to be reused, and counts as
// free. The hash is keyed per process (a client cannot aim a collision at another's prefix) and a
// match also compares the block's tokens.
#pragma once

#include <cstdint>
#include <list>
#include <unordered_map>
#include <vector>

namespace anvil::engine {

class BlockManager {
public:
    BlockManager(int n_blocks, int block_size, bool prefix_caching = false);

    int block_size() const { return block_size_; }
    int total() const { return total_; }
    // Blocks no sequence holds: never used, or holding a cached prefix that may be reused.
    int free() const { return int(free_.size() + cached_.size()); }
    int used() const { return total_ - free(); }
    int cached() const { return int(cached_.size()); }  // free blocks still holding a prefix
    bool prefix_caching() const { return prefix_caching_; }
    // Blocks a sequence of `tokens` positions occupies.
    int blocks_for(int tokens) const { return (tokens + block_size_ - 1) / block_size_; }

    // Grows `table` until it covers `tokens` positions; false (table unchanged) when the free
    // blocks do not suffice. New blocks come from the never-used ones first, then from the
    // cached prefixes released longest ago.
    bool grow(std::vector<int32_t>& table, int tokens);
    void release(std::vector<int32_t>& table);
    // Returns the blocks past those `tokens` positions need: what a speculative step reserved for
    // draft tokens the target rejected.
    void shrink(std::vector<int32_t>& table, int tokens);

    // Prefix caching. `hashes` holds the names of a sequence's leading full blocks, in order.
    // match: for an empty `table`, takes the cached blocks that hold `tokens`' first full blocks,
    // at most `max_blocks` of them; returns how many.
    int match(const std::vector<int32_t>& tokens, int max_blocks, std::vector<int32_t>& table, std::vector<uint64_t>& hashes);
    // After the sequence's first `computed` positions are in the cache: names its full blocks.
    void name_full_blocks(const std::vector<int32_t>& tokens, int computed, const std::vector<int32_t>& table,
                          std::vector<uint64_t>& hashes);

private:
    uint64_t name(uint64_t previous, const int32_t* tokens) const;
    void drop(int32_t block);  // one holder fewer

    int total_;
    int block_size_;
    bool prefix_caching_;
    uint64_t key_;
    std::vector<int32_t> free_;  // never-used blocks, a stack: the most recently freed first
    std::vector<int32_t> holders_;
    std::vector<uint64_t> name_;    // [block]: its name, 0 when it has none
    std::vector<int32_t> tokens_;   // [block][block_size]: the tokens a named block holds
    std::unordered_map<uint64_t, int32_t> by_name_;
    std::list<int32_t> cached_;     // named blocks no one holds, least recently released first
    std::vector<std::list<int32_t>::iterator> where_;  // [block]: its place in cached_
};

}  // namespace anvil::engine
