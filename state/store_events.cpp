// The store's event feed: events appended beside the ledger, and the feed that merges them with
// transitions under a two-part cursor.
#include "state/store_impl.hpp"

#include <algorithm>

namespace anvil::state {

using nlohmann::json;
using namespace store_detail;

Id Store::Impl::insert_event(const std::string& kind, const std::string& subject, const std::string& message, const json& data,
                             const std::string& now) {
    auto& insert = w("INSERT INTO events (kind, subject, message, data, created_at) VALUES (?, ?, ?, ?, ?)");
    insert.bind(1, kind).bind(2, subject).bind(3, message).bind(4, data.dump()).bind(5, now);
    insert.run();
    return writer->conn.last_insert_id();
}

Id Store::append_event(const std::string& kind, const std::string& subject, const std::string& message, const json& data) {
    return write("an event", [&] { return impl_->insert_event(kind, subject, message, data, impl_->now()); });
}

FeedCursor Store::feed_head() const {
    auto r = impl_->reader();
    auto& s = r.prepare("SELECT (SELECT coalesce(max(id), 0) FROM transitions), (SELECT coalesce(max(id), 0) FROM events)");
    s.step();
    FeedCursor head{s.integer(0), s.integer(1)};
    s.reset();
    return head;
}

std::vector<FeedItem> Store::feed_since(FeedCursor after, int limit) const {
    limit = std::clamp(limit, 1, 1000);
    auto r = impl_->reader();
    std::vector<FeedItem> transitions, events;
    auto& t = r.prepare("SELECT t.id, r.recipe_id, t.revision_id, t.from_status, t.to_status, t.reason, t.actor, t.created_at "
                        "FROM transitions t JOIN recipe_revisions r ON r.id = t.revision_id WHERE t.id > ? ORDER BY t.id LIMIT ?");
    t.bind(1, after.transition).bind(2, static_cast<std::int64_t>(limit));
    while (t.step()) {
        FeedItem item;
        item.cursor.transition = t.integer(0);
        item.kind = "transition";
        item.subject = t.text(1);
        const std::string from = t.optional_text(3).value_or("(new)");
        item.message = from + " → " + t.text(4) + ": " + t.text(5);
        item.data = {{"transition_id", t.integer(0)}, {"revision_id", t.integer(2)}, {"from", t.is_null(3) ? json() : json(t.text(3))},
                     {"to", t.text(4)}, {"actor", t.text(6)}};
        item.created_at = t.text(7);
        transitions.push_back(std::move(item));
    }
    t.reset();
    auto& e = r.prepare("SELECT id, kind, subject, message, data, created_at FROM events WHERE id > ? ORDER BY id LIMIT ?");
    e.bind(1, after.event).bind(2, static_cast<std::int64_t>(limit));
    while (e.step()) {
        FeedItem item;
        item.cursor.event = e.integer(0);
        item.kind = e.text(1);
        item.subject = e.text(2);
        item.message = e.text(3);
        item.data = json::parse(e.text(4));
        item.created_at = e.text(5);
        events.push_back(std::move(item));
    }
    e.reset();
    // Merge by time; each item's cursor is the pair of high-water marks once it has been read.
    std::vector<FeedItem> out;
    FeedCursor mark = after;
    std::size_t i = 0, j = 0;
    while (out.size() < static_cast<std::size_t>(limit) && (i < transitions.size() || j < events.size())) {
        const bool take_transition = j >= events.size() || (i < transitions.size() && transitions[i].created_at <= events[j].created_at);
        FeedItem item = take_transition ? std::move(transitions[i++]) : std::move(events[j++]);
        if (take_transition) mark.transition = item.cursor.transition;
        else mark.event = item.cursor.event;
        item.cursor = mark;
        out.push_back(std::move(item));
    }
    return out;
}

std::vector<TransitionRow> Store::transitions_since(Id cursor, int limit) const {
    auto r = impl_->reader();
    auto& s = r.prepare("SELECT id, revision_id, from_status, to_status, reason, evidence_ids, verdict_ids, commit_id, actor, created_at "
                        "FROM transitions WHERE id > ? ORDER BY id LIMIT ?");
    s.bind(1, cursor).bind(2, static_cast<std::int64_t>(std::max(limit, 1)));
    std::vector<TransitionRow> out;
    while (s.step()) out.push_back(read_transition(s));
    s.reset();
    return out;
}

}  // namespace anvil::state
