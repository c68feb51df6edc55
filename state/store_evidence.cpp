// The store's evidence and verdicts: measurements and priors with their receipts, gate verdicts
// citing them (a feasibility verdict also updates the recipe's summary), and a qualification's
// whole outcome in one transaction.
#include "state/store_impl.hpp"

namespace anvil::state {

using nlohmann::json;
using namespace store_detail;

Id Store::Impl::insert_evidence(const EvidenceRow& row) {
    if (row.metric.empty()) throw StoreError("evidence needs a metric name");
    if (row.source.empty()) throw StoreError("evidence for " + row.metric + " needs a source");
    auto& insert = w("INSERT INTO evidence (revision_id, metric, value_min, value_max, unit, status, class, source, observed_at, "
                     "receipt_sha256, receipt_path, created_at, control_revision_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    insert.bind(1, row.revision_id).bind(2, row.metric).bind(3, to_sql(row.min)).bind(4, to_sql(row.max)).bind(5, row.unit);
    insert.bind(6, std::string(registry::to_string(row.status))).bind(7, std::string(to_string(row.evidence_class)));
    insert.bind(8, row.source).bind(9, row.observed_at.empty() ? now() : row.observed_at);
    insert.bind(10, row.receipt_sha256).bind(11, row.receipt_path).bind(12, now()).bind(13, row.control_revision_id);
    insert.run();
    return writer->conn.last_insert_id();
}

Id Store::Impl::insert_verdict(const VerdictRow& row) {
    if (row.gate.empty()) throw StoreError("a verdict needs a gate name");
    auto& insert = w("INSERT INTO verdicts (revision_id, gate, result, class, reasons, evidence_ids, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)");
    insert.bind(1, row.revision_id).bind(2, row.gate).bind(3, std::string(to_string(row.result))).bind(4, row.verdict_class);
    insert.bind(5, json(row.reasons).dump()).bind(6, ids_json(row.evidence_ids)).bind(7, now());
    insert.run();
    const Id id = writer->conn.last_insert_id();
    if (row.gate == "feasibility") {
        auto& summary = w("UPDATE recipes SET verdict = ?2 WHERE id = (SELECT recipe_id FROM recipe_revisions WHERE id = ?1) "
                          "AND latest_revision_id = ?1");
        summary.bind(1, row.revision_id).bind(2, row.verdict_class.value_or(std::string(to_string(row.result))));
        summary.run();
    }
    return id;
}

Id Store::add_evidence(const EvidenceRow& row) {
    return write("evidence", [&] { return impl_->insert_evidence(row); });
}

Id Store::add_verdict(const VerdictRow& row) { return add_verdicts({row}).front(); }

std::vector<Id> Store::add_verdicts(const std::vector<VerdictRow>& rows) {
    return write("verdicts", [&] {
        std::vector<Id> ids;
        ids.reserve(rows.size());
        for (const auto& row : rows) ids.push_back(impl_->insert_verdict(row));
        return ids;
    });
}

QualificationRecorded Store::record_qualification(const QualificationRecord& record) {
    if (record.to != Status::validated && record.to != Status::failed && record.to != Status::retired)
        throw StoreError("a qualification ends validated, failed or retired, not " + std::string(to_string(record.to)));
    return write("a qualification", [&] {
        QualificationRecorded out;
        out.evidence_ids.reserve(record.evidence.size());
        for (EvidenceRow row : record.evidence) {
            row.revision_id = record.revision_id;
            out.evidence_ids.push_back(impl_->insert_evidence(row));
        }
        for (const auto& v : record.verdicts) {
            VerdictRow row{0, record.revision_id, v.gate, v.result, v.verdict_class, v.reasons, {}, ""};
            for (std::size_t position : v.evidence) {
                if (position >= out.evidence_ids.size())
                    throw StoreError("verdict " + v.gate + " cites evidence " + std::to_string(position) + " of " +
                                     std::to_string(out.evidence_ids.size()));
                row.evidence_ids.push_back(out.evidence_ids[position]);
            }
            out.verdict_ids.push_back(impl_->insert_verdict(row));
        }
        // The guard reads verdicts and evidence through the writer, inside this transaction: the
        // rows just written are what it judges.
        const std::string now = impl_->now();
        const TransitionRequest closing{record.revision_id, record.to, record.reason, record.actor, out.evidence_ids, out.verdict_ids, std::nullopt};
        out.transition_id = impl_->guarded_transition(closing, now);
        if (record.event) impl_->insert_event(record.event->kind, record.event->subject, record.event->message, nlohmann::json::object(), now);
        return out;
    });
}

}  // namespace anvil::state
