#include "state/migrations.hpp"

#include <string>

namespace anvil::state {

namespace {

// Version 1: the ledger itself. Transitions are append-only (triggers refuse UPDATE and DELETE);
// revision_status and the summary columns of recipes are caches of the ledger kept in the same
// transaction, and rebuildable from it.
constexpr std::string_view kVersion1 = R"sql(
CREATE TABLE sources (
  id INTEGER PRIMARY KEY,
  url TEXT NOT NULL,
  ref TEXT NOT NULL,
  created_at TEXT NOT NULL,
  UNIQUE (url, ref)
);
CREATE TABLE source_commits (
  id INTEGER PRIMARY KEY,
  source_id INTEGER NOT NULL REFERENCES sources(id),
  commit_id TEXT NOT NULL,
  mode TEXT NOT NULL,
  added INTEGER NOT NULL, modified INTEGER NOT NULL, deleted INTEGER NOT NULL, renamed INTEGER NOT NULL,
  seen_at TEXT NOT NULL
);
CREATE TABLE recipes (
  id TEXT PRIMARY KEY,
  latest_revision_id INTEGER,
  status TEXT,
  engine TEXT,
  hardware_id TEXT,
  pinned INTEGER,
  verdict TEXT,
  search_text TEXT NOT NULL DEFAULT '',
  first_seen_at TEXT NOT NULL
);
CREATE TABLE recipe_revisions (
  id INTEGER PRIMARY KEY,
  recipe_id TEXT NOT NULL REFERENCES recipes(id),
  sha256 TEXT NOT NULL,
  source_id INTEGER REFERENCES sources(id),
  commit_id TEXT NOT NULL,
  path TEXT NOT NULL,
  blob_id TEXT NOT NULL,
  engine TEXT NOT NULL,
  hardware_id TEXT NOT NULL,
  launch_kind TEXT NOT NULL,
  serving_slot TEXT NOT NULL,
  pinned INTEGER NOT NULL CHECK (pinned IN (0, 1)),
  unpinned_reasons TEXT NOT NULL,
  document TEXT NOT NULL,
  created_at TEXT NOT NULL,
  UNIQUE (recipe_id, sha256)
);
CREATE TABLE evidence (
  id INTEGER PRIMARY KEY,
  revision_id INTEGER NOT NULL REFERENCES recipe_revisions(id),
  metric TEXT NOT NULL,
  value_min,
  value_max,
  unit TEXT NOT NULL,
  status TEXT NOT NULL CHECK (status IN ('measured', 'confirmed', 'estimated', 'assumed', 'unknown')),
  class TEXT NOT NULL CHECK (class IN ('local', 'external-prior')),
  source TEXT NOT NULL,
  observed_at TEXT NOT NULL,
  receipt_sha256 TEXT,
  receipt_path TEXT,
  created_at TEXT NOT NULL
);
CREATE TABLE verdicts (
  id INTEGER PRIMARY KEY,
  revision_id INTEGER NOT NULL REFERENCES recipe_revisions(id),
  gate TEXT NOT NULL,
  result TEXT NOT NULL CHECK (result IN ('pass', 'fail', 'unknown')),
  class TEXT,
  reasons TEXT NOT NULL,
  evidence_ids TEXT NOT NULL,
  created_at TEXT NOT NULL
);
CREATE TABLE transitions (
  id INTEGER PRIMARY KEY,
  revision_id INTEGER NOT NULL REFERENCES recipe_revisions(id),
  from_status TEXT,
  to_status TEXT NOT NULL,
  reason TEXT NOT NULL,
  evidence_ids TEXT NOT NULL,
  verdict_ids TEXT NOT NULL,
  commit_id TEXT,
  actor TEXT NOT NULL,
  created_at TEXT NOT NULL
);
CREATE TRIGGER transitions_are_append_only_update BEFORE UPDATE ON transitions
  BEGIN SELECT RAISE(ABORT, 'transitions are append-only'); END;
CREATE TRIGGER transitions_are_append_only_delete BEFORE DELETE ON transitions
  BEGIN SELECT RAISE(ABORT, 'transitions are append-only'); END;
CREATE TABLE revision_status (
  revision_id INTEGER PRIMARY KEY REFERENCES recipe_revisions(id),
  status TEXT NOT NULL,
  serving_slot TEXT NOT NULL,
  last_transition_id INTEGER NOT NULL REFERENCES transitions(id)
);
CREATE UNIQUE INDEX one_promoted_revision_per_slot ON revision_status(serving_slot) WHERE status = 'promoted';
CREATE INDEX recipe_revisions_by_recipe ON recipe_revisions(recipe_id);
CREATE INDEX transitions_by_revision ON transitions(revision_id);
CREATE INDEX evidence_by_revision ON evidence(revision_id);
CREATE INDEX verdicts_by_revision ON verdicts(revision_id, gate);
)sql";

// Version 2: what runs, and a feed of everything that happened, for the daemon and its API.
constexpr std::string_view kVersion2 = R"sql(
CREATE TABLE engines (
  id INTEGER PRIMARY KEY,
  revision_id INTEGER REFERENCES recipe_revisions(id),
  driver TEXT NOT NULL CHECK (driver IN ('embedded', 'process', 'container')),
  pid INTEGER,
  container_id TEXT,
  port INTEGER,
  started_at TEXT NOT NULL,
  health TEXT NOT NULL,
  health_at TEXT NOT NULL,
  stopped_at TEXT,
  exit_code INTEGER
);
CREATE INDEX engines_running ON engines(stopped_at);
CREATE TABLE events (
  id INTEGER PRIMARY KEY,
  kind TEXT NOT NULL,
  subject TEXT NOT NULL,
  message TEXT NOT NULL,
  data TEXT NOT NULL,
  created_at TEXT NOT NULL
);
CREATE INDEX recipes_by_status ON recipes(status, id);
CREATE INDEX recipes_by_engine ON recipes(engine, id);
CREATE INDEX recipes_by_hardware ON recipes(hardware_id, id);
CREATE INDEX recipes_by_verdict ON recipes(verdict, id);
)sql";

// Version 3: substring search over recipe ids and descriptions through a trigram index keyed by the
// recipes table's rowid, so that
// `?q=` does not scan every description (measured: 16 ms over 10,000 recipes before, see bench_state).
constexpr std::string_view kVersion3 = R"sql(
CREATE VIRTUAL TABLE recipe_search USING fts5(text, tokenize = 'trigram');
INSERT INTO recipe_search (rowid, text) SELECT rowid, search_text FROM recipes;
)sql";

// Version 4: what the daemon needs to find its engines again and to remember operator decisions.
// engines.engine_key is the driver's own id (its state directory's name), role says why it runs;
// settings hold the promotion policy an operator set (pin, freeze), each change also an event.
constexpr std::string_view kVersion4 = R"sql(
ALTER TABLE engines ADD COLUMN engine_key TEXT;
ALTER TABLE engines ADD COLUMN role TEXT NOT NULL DEFAULT 'serving';
CREATE TABLE settings (
  key TEXT PRIMARY KEY,
  value TEXT NOT NULL,
  actor TEXT NOT NULL,
  updated_at TEXT NOT NULL
);
)sql";

// Version 5: a document is stored once. The search text was the whole lower-cased description, kept
// in recipes, again as the FTS table's own content, and again in its trigram index: a 20 MB
// description cost four copies. Now the search text is bounded (the id and the description's
// first 4 KiB) and the index reads it from recipes (external content) instead of copying it.
// The status index lets each pass find superseded revisions without reading every status.
constexpr std::string_view kVersion5 = R"sql(
DROP TABLE recipe_search;
UPDATE recipes SET search_text = substr(search_text, 1, 4096) WHERE length(search_text) > 4096;
CREATE VIRTUAL TABLE recipe_search USING fts5(search_text, content = 'recipes', content_rowid = 'rowid', tokenize = 'trigram');
INSERT INTO recipe_search (recipe_search) VALUES ('rebuild');
CREATE INDEX revision_status_by_status ON revision_status(status);
)sql";

// Version 6: the revision a measurement was compared against is a column of its evidence row, not
// a second row ("quality_control_revision", the control's id as a number) to be found beside it.
// Existing ledgers get the column filled from that fact: every local row recorded with it (same
// revision, source and receipt: one qualification) names the control. The old rows stay.
constexpr std::string_view kVersion6 = R"sql(
ALTER TABLE evidence ADD COLUMN control_revision_id INTEGER REFERENCES recipe_revisions(id);
UPDATE evidence SET control_revision_id = (
    SELECT CAST(q.value_min AS INTEGER) FROM evidence q
    WHERE q.revision_id = evidence.revision_id AND q.metric = 'quality_control_revision' AND q.class = 'local'
      AND q.source = evidence.source AND q.receipt_sha256 IS evidence.receipt_sha256
      AND CAST(q.value_min AS INTEGER) IN (SELECT id FROM recipe_revisions)
    ORDER BY q.id DESC LIMIT 1)
  WHERE class = 'local';
)sql";

// Version 7: engines placed on a Slurm cluster (slurm-embedded, slurm-process), with their job's id.
// SQLite cannot widen a CHECK constraint in place: the table is rebuilt with its rows, ids kept.
constexpr std::string_view kVersion7 = R"sql(
CREATE TABLE engines_v7 (
  id INTEGER PRIMARY KEY,
  revision_id INTEGER REFERENCES recipe_revisions(id),
  driver TEXT NOT NULL CHECK (driver IN ('embedded', 'process', 'container', 'slurm-embedded', 'slurm-process')),
  pid INTEGER,
  container_id TEXT,
  port INTEGER,
  started_at TEXT NOT NULL,
  health TEXT NOT NULL,
  health_at TEXT NOT NULL,
  stopped_at TEXT,
  exit_code INTEGER,
  engine_key TEXT,
  role TEXT NOT NULL DEFAULT 'serving',
  job_id TEXT
);
INSERT INTO engines_v7 (id, revision_id, driver, pid, container_id, port, started_at, health, health_at, stopped_at, exit_code, engine_key, role)
  SELECT id, revision_id, driver, pid, container_id, port, started_at, health, health_at, stopped_at, exit_code, engine_key, role FROM engines;
DROP TABLE engines;
ALTER TABLE engines_v7 RENAME TO engines;
CREATE INDEX engines_running ON engines(stopped_at);
)sql";

// Version 8: container engines on a Slurm cluster too (slurm-container). The table is rebuilt
// again, as for version 7, rows and ids kept.
constexpr std::string_view kVersion8 = R"sql(
CREATE TABLE engines_v8 (
  id INTEGER PRIMARY KEY,
  revision_id INTEGER REFERENCES recipe_revisions(id),
  driver TEXT NOT NULL CHECK (driver IN ('embedded', 'process', 'container', 'slurm-embedded', 'slurm-process', 'slurm-container')),
  pid INTEGER,
  container_id TEXT,
  port INTEGER,
  started_at TEXT NOT NULL,
  health TEXT NOT NULL,
  health_at TEXT NOT NULL,
  stopped_at TEXT,
  exit_code INTEGER,
  engine_key TEXT,
  role TEXT NOT NULL DEFAULT 'serving',
  job_id TEXT
);
INSERT INTO engines_v8 SELECT id, revision_id, driver, pid, container_id, port, started_at, health, health_at, stopped_at, exit_code,
  engine_key, role, job_id FROM engines;
DROP TABLE engines;
ALTER TABLE engines_v8 RENAME TO engines;
CREATE INDEX engines_running ON engines(stopped_at);
)sql";

}  // namespace

const std::vector<Migration>& migrations() {
    static const std::vector<Migration> all{
        {1, "ledger: sources, recipes, revisions, evidence, verdicts, transitions", kVersion1},
        {2, "engines, events, listing indexes", kVersion2},
        {3, "trigram search over recipe ids and descriptions", kVersion3},
        {4, "engine keys and roles, operator settings", kVersion4},
        {5, "search text bounded and indexed without a copy; statuses indexed", kVersion5},
        {6, "evidence names the control revision it was compared against", kVersion6},
        {7, "engines on a Slurm cluster, with their job ids", kVersion7},
        {8, "container engines on a Slurm cluster", kVersion8},
    };
    return all;
}

int current_schema_version() { return migrations().back().version; }

int migrate(Connection& db, int target) {
    if (target == 0) target = current_schema_version();
    Transaction tx(db);
    Statement version(db, "PRAGMA user_version");
    version.step();
    const int found = static_cast<int>(version.integer(0));
    version.reset();
    if (found > current_schema_version())
        throw StoreError("state database " + db.path().string() + " has schema version " + std::to_string(found) +
                         ", newer than this anvil understands (" + std::to_string(current_schema_version()) +
                         "): run a newer anvil or restore a backup");
    for (const auto& m : migrations()) {
        if (m.version <= found || m.version > target) continue;
        db.exec(m.sql);
        db.exec("PRAGMA user_version = " + std::to_string(m.version));
    }
    tx.commit();
    return found;
}

}  // namespace anvil::state
