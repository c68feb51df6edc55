// A child process for the state store's crash and failure tests.
//   crash DB SEED        perform transitions forever, printing "T <id>" after each commit, until killed
//   disk-full DIR        on a 256 KiB tmpfs (own mount namespace): write until the disk is full
//   read-only DIR        on a tmpfs remounted read-only: open, refuse writes, serve reads
// Exit 0 on success, 1 on a broken promise, 77 when the namespace or mount is not permitted here.
#include <sched.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>

#include "registry/document.hpp"
#include "state/inspection.hpp"
#include "state/store.hpp"
#include "test_support.hpp"

using namespace anvil;
using namespace anvil::state;

namespace {

void say(const std::string& line) {
    std::string out = line + "\n";
    (void)!write(STDOUT_FILENO, out.data(), out.size());
}

registry::Document recipe(const std::string& id, bool pinned) {
    auto j = nlohmann::json::parse(test::seed_text(pinned ? "003_" : "002_"));
    j["data"]["id"] = id;
    return registry::parse_document(j.dump(), {"torture", "", "recipes/" + id + ".json", "", ""});
}

// Gives a revision a local pass for every hard gate, so validated and promoted are reachable.
void pass_gates(Store& store, Id revision) {
    for (const auto& gate : default_hard_gates()) {
        EvidenceRow e;
        e.revision_id = revision;
        e.metric = "gate:" + gate;
        e.min = e.max = registry::Number{std::int64_t{1}};
        e.unit = "ratio";
        e.source = "state_torture";
        Id evidence = store.add_evidence(e);
        store.add_verdict({0, revision, gate, GateResult::pass, std::nullopt, {"torture"}, {evidence}, ""});
    }
}

int crash(const std::string& db, unsigned seed) {
    Store store(db);
    constexpr int kRevisions = 6;
    std::vector<Id> revisions;
    for (int i = 0; i < kRevisions; ++i) {
        auto ingested = store.ingest_revision(0, recipe("torture-" + std::to_string(i), true));
        revisions.push_back(ingested.revision_id);
        if (ingested.created) pass_gates(store, ingested.revision_id);
    }
    std::mt19937 rng(seed);
    const std::vector<Status> all{Status::candidate, Status::qualifying, Status::validated, Status::promoted,
                                  Status::retired, Status::rejected, Status::failed};
    for (;;) {
        const Id revision = revisions[rng() % revisions.size()];
        const Status to = all[rng() % all.size()];
        try {
            if (to == Status::promoted) {
                auto p = store.promote(revision, "torture promotion", "reconciler");
                if (p.retired_transition) say("T " + std::to_string(*p.retired_transition));
                say("T " + std::to_string(p.promoted_transition));
            } else if (rng() % 4 == 0) {
                // A batch: two moves of one revision, committed together or not at all.
                auto ids = store.transition_batch({{revision, to, "torture batch", "reconciler", {}, {}, std::nullopt},
                                                   {revision, Status::retired, "torture batch", "reconciler", {}, {}, std::nullopt}});
                for (Id id : ids) say("T " + std::to_string(id));
            } else {
                say("T " + std::to_string(store.transition({revision, to, "torture", "reconciler", {}, {}, std::nullopt})));
            }
        } catch (const TransitionRefused&) {
            // Illegal moves are expected: the guards are part of what is exercised.
        }
    }
}

int enter_private_tmpfs(const std::string& dir, const char* size) {
    if (unshare(CLONE_NEWNS) != 0 || mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
        std::fprintf(stderr, "cannot create a mount namespace: %s\n", std::strerror(errno));
        return 77;
    }
    std::string options = std::string("size=") + size;
    if (mount("tmpfs", dir.c_str(), "tmpfs", 0, options.c_str()) != 0) {
        std::fprintf(stderr, "cannot mount a tmpfs: %s\n", std::strerror(errno));
        return 77;
    }
    return 0;
}

int disk_full(const std::string& dir) {
    if (int rc = enter_private_tmpfs(dir, "256k")) return rc;
    Store store(dir + "/state.db");
    store.ingest_revision(0, recipe("full-disk", true));
    const std::string filler(4096, 'x');
    std::string error;
    for (int i = 0; i < 10000 && error.empty(); ++i) {
        try {
            store.append_event("filler", "full-disk", filler, {{"i", i}});
        } catch (const StoreError& e) {
            error = e.what();
        }
    }
    if (error.empty()) {
        say("the disk never filled up");
        return 1;
    }
    const auto page = store.list_recipes({});
    if (page.total != 1 || anvil::state::Inspection(store).integrity_check() != "ok") {
        say("reads failed after the disk filled up");
        return 1;
    }
    say("error: " + error);
    return 0;
}

int read_only(const std::string& dir) {
    if (int rc = enter_private_tmpfs(dir, "4m")) return rc;
    const std::string db = dir + "/state.db";
    {
        Store store(db);
        store.ingest_revision(0, recipe("read-only", true));
    }
    if (mount(nullptr, dir.c_str(), nullptr, MS_REMOUNT | MS_RDONLY, nullptr) != 0) {
        std::fprintf(stderr, "cannot remount read-only: %s\n", std::strerror(errno));
        return 77;
    }
    Store store(db);
    if (store.writable()) {
        say("a store on a read-only mount claims to be writable");
        return 1;
    }
    try {
        store.append_event("x", "y", "z");
        say("a write on a read-only store succeeded");
        return 1;
    } catch (const StoreError& e) {
        say("error: " + std::string(e.what()));
    }
    if (store.list_recipes({}).total != 1 || !store.recipe("read-only")) {
        say("reads failed on a read-only store");
        return 1;
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: state_torture crash DB SEED | disk-full DIR | read-only DIR\n");
        return 2;
    }
    const std::string mode = argv[1];
    try {
        if (mode == "crash" && argc == 4) return crash(argv[2], static_cast<unsigned>(std::stoul(argv[3])));
        if (mode == "disk-full") return disk_full(argv[2]);
        if (mode == "read-only") return read_only(argv[2]);
    } catch (const std::exception& e) {
        say(std::string("unexpected error: ") + e.what());
        return 1;
    }
    std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
    return 2;
}
