// The store's evidence and verdicts: measurements and priors with their receipts, and gate verdicts
// citing them (a feasibility verdict also updates the recipe's summary).
#include "state/store_impl.hpp"

namespace anvil::state {

using nlohmann::json;
using namespace store_detail;

Id Store::add_evidence(const EvidenceRow& row) {
    return write("evidence", [&] {
        if (row.metric.empty()) throw StoreError("evidence needs a metric name");
        if (row.source.empty()) throw StoreError("evidence for " + row.metric + " needs a source");
        auto& insert = impl_->w("INSERT INTO evidence (revision_id, metric, value_min, value_max, unit, status, class, source, observed_at, "
                                "receipt_sha256, receipt_path, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
        insert.bind(1, row.revision_id).bind(2, row.metric).bind(3, to_sql(row.min)).bind(4, to_sql(row.max)).bind(5, row.unit);
        insert.bind(6, std::string(registry::to_string(row.status))).bind(7, std::string(to_string(row.evidence_class)));
        insert.bind(8, row.source).bind(9, row.observed_at.empty() ? now_iso8601() : row.observed_at);
        insert.bind(10, row.receipt_sha256).bind(11, row.receipt_path).bind(12, now_iso8601());
        insert.run();
        return impl_->writer->conn.last_insert_id();
    });
}

Id Store::add_verdict(const VerdictRow& row) { return add_verdicts({row}).front(); }

std::vector<Id> Store::add_verdicts(const std::vector<VerdictRow>& rows) {
    return write("verdicts", [&] {
        for (const auto& row : rows)
            if (row.gate.empty()) throw StoreError("a verdict needs a gate name");
        std::vector<Id> ids;
        ids.reserve(rows.size());
        for (const auto& row : rows) {
            auto& insert = impl_->w("INSERT INTO verdicts (revision_id, gate, result, class, reasons, evidence_ids, created_at) "
                                    "VALUES (?, ?, ?, ?, ?, ?, ?)");
            insert.bind(1, row.revision_id).bind(2, row.gate).bind(3, std::string(to_string(row.result))).bind(4, row.verdict_class);
            insert.bind(5, json(row.reasons).dump()).bind(6, ids_json(row.evidence_ids)).bind(7, now_iso8601());
            insert.run();
            ids.push_back(impl_->writer->conn.last_insert_id());
            if (row.gate == "feasibility") {
                auto& summary = impl_->w("UPDATE recipes SET verdict = ?2 WHERE id = (SELECT recipe_id FROM recipe_revisions WHERE id = ?1) "
                                         "AND latest_revision_id = ?1");
                summary.bind(1, row.revision_id).bind(2, row.verdict_class.value_or(std::string(to_string(row.result))));
                summary.run();
            }
        }
        return ids;
    });
}

}  // namespace anvil::state
