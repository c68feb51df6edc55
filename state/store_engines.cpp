// The store's engines: what was started, its health, its stop, and what still runs.
#include "state/store_impl.hpp"

namespace anvil::state {

using nlohmann::json;
using namespace store_detail;

Id Store::record_engine_start(const EngineRow& row) {
    return write("an engine", [&] {
        auto& insert = impl_->w("INSERT INTO engines (revision_id, driver, pid, container_id, port, started_at, health, health_at, "
                                "engine_key, role, job_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
        const std::string now = impl_->now();
        insert.bind(1, row.revision_id).bind(2, row.driver).bind(3, row.pid).bind(4, row.container_id).bind(5, row.port);
        insert.bind(6, row.started_at.empty() ? now : row.started_at).bind(7, row.health.empty() ? "starting" : row.health).bind(8, now);
        insert.bind(9, row.engine_key).bind(10, row.role).bind(11, row.job_id);
        insert.run();
        return impl_->writer->conn.last_insert_id();
    });
}

void Store::record_engine_health(Id engine_id, const std::string& health) {
    write("an engine's health", [&] {
        auto& update = impl_->w("UPDATE engines SET health = ?2, health_at = ?3 WHERE id = ?1");
        update.bind(1, engine_id).bind(2, health).bind(3, impl_->now());
        update.run();
    });
}

void Store::record_engine_stop(Id engine_id, std::optional<std::int64_t> exit_code) {
    write("an engine's stop", [&] {
        const std::string now = impl_->now();
        auto& update = impl_->w("UPDATE engines SET stopped_at = ?2, exit_code = ?3, health = 'exited', health_at = ?2 WHERE id = ?1");
        update.bind(1, engine_id).bind(2, now).bind(3, exit_code);
        update.run();
    });
}

std::vector<EngineRow> Store::running_engines() const {
    auto r = impl_->reader();
    auto& s = r.prepare("SELECT id, revision_id, driver, pid, container_id, port, started_at, health, health_at, engine_key, role, job_id FROM engines "
                        "WHERE stopped_at IS NULL ORDER BY id");
    std::vector<EngineRow> out;
    while (s.step()) {
        EngineRow e;
        e.id = s.integer(0);
        if (!s.is_null(1)) e.revision_id = s.integer(1);
        e.driver = s.text(2);
        if (!s.is_null(3)) e.pid = s.integer(3);
        e.container_id = s.optional_text(4);
        if (!s.is_null(5)) e.port = s.integer(5);
        e.started_at = s.text(6);
        e.health = s.text(7);
        e.health_at = s.text(8);
        e.engine_key = s.optional_text(9).value_or("");
        e.role = s.text(10);
        e.job_id = s.optional_text(11);
        out.push_back(std::move(e));
    }
    s.reset();
    return out;
}

}  // namespace anvil::state
