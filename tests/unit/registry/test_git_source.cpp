// The git source: documents come from a commit's tree with full provenance; new commits apply
// incrementally (add, change, rename, delete); a force-push is detected and read in full.
#include <sys/resource.h>

#include <algorithm>
#include <fstream>

#include <catch2/catch.hpp>

#include "registry/catalog.hpp"
#include "registry/catalog_report.hpp"
#include "registry/git_source.hpp"
#include "support/digest.hpp"
#include "test_support.hpp"

using namespace anvil::registry;
using anvil::test::GitRepo;
using anvil::test::seed_text;
using anvil::test::TempDir;

namespace {

std::string recipe_with_id(const std::string& id) {
    auto j = json::parse(seed_text("003_"));
    j["data"]["id"] = id;
    return j.dump(2);
}

struct GitFixture {
    TempDir tmp;
    GitRepo upstream{tmp / "upstream"};
    std::filesystem::path data = tmp / "data";

    GitFixture() {
        upstream.write("recipes/a.json", recipe_with_id("recipe-a"));
        upstream.write("recipes/b.json", recipe_with_id("recipe-b"));
        upstream.write("priors/p.json", seed_text("000_"));
        upstream.write("README.md", "not a document");
        upstream.write("schema/recipe.schema.json", R"({"$schema": "x"})");
        upstream.commit("initial registry");
    }
};

}  // namespace

TEST_CASE("a first sync reads every document from the commit with provenance", "[git]") {
    GitFixture f;
    GitSource source(f.upstream.dir().string(), "main", f.data);
    Catalog catalog;
    auto report = catalog.sync(source);
    CHECK(report.mode == SyncReport::Mode::full);
    CHECK(report.added == 3);
    REQUIRE(catalog.size() == 3);
    const std::string head = f.upstream.head();
    CHECK(catalog.commit() == head);
    const auto& a = catalog.documents().at("recipes/a.json");
    CHECK(a.valid());
    CHECK(a.id == "recipe-a");
    CHECK(a.provenance.commit == head);
    CHECK(a.provenance.source_url == f.upstream.dir().string());
    CHECK(a.provenance.blob_id.size() == 40);
    CHECK(a.provenance.sha256 == anvil::support::sha256_hex(anvil::test::read_file(f.upstream.dir() / "recipes/a.json")));
    CHECK(std::filesystem::exists(source.clone_dir() / "HEAD"));  // its own bare clone under the data dir
}

TEST_CASE("documents are read from the commit, never from the working tree", "[git]") {
    GitFixture f;
    f.upstream.write("recipes/a.json", "{ uncommitted garbage");
    f.upstream.write("recipes/new.json", recipe_with_id("uncommitted"));
    GitSource source(f.upstream.dir().string(), "main", f.data);
    Catalog catalog;
    catalog.sync(source);
    CHECK(catalog.size() == 3);
    CHECK(catalog.documents().at("recipes/a.json").valid());
}

TEST_CASE("new commits apply incrementally: add, change, rename, delete", "[git]") {
    GitFixture f;
    GitSource source(f.upstream.dir().string(), "main", f.data);
    Catalog catalog;
    catalog.sync(source);
    const std::string first = catalog.commit();

    f.upstream.write("recipes/c.json", recipe_with_id("recipe-c"));
    f.upstream.write("recipes/a.json", recipe_with_id("recipe-a2"));
    f.upstream.git({"mv", "recipes/b.json", "recipes/renamed-b.json"});
    f.upstream.git({"rm", "-q", "priors/p.json"});
    const std::string second = f.upstream.commit("add c, change a, rename b, drop priors");

    auto report = catalog.sync(source);
    CHECK(report.mode == SyncReport::Mode::incremental);
    CHECK(report.previous_commit == first);
    CHECK(report.commit == second);
    CHECK(report.added == 1);
    CHECK(report.modified == 1);
    CHECK(report.renamed == 1);
    CHECK(report.deleted == 1);
    REQUIRE(catalog.size() == 3);
    CHECK(catalog.documents().count("recipes/b.json") == 0);
    CHECK(catalog.documents().at("recipes/renamed-b.json").id == "recipe-b");
    CHECK(catalog.documents().at("recipes/a.json").id == "recipe-a2");
    CHECK(catalog.find(DocumentKind::recipe, "recipe-c"));
    CHECK_FALSE(catalog.find(DocumentKind::external_priors, "priors:wrldsuksgo2mars/GLM-5.3-Flash-EXL3-K3-v1@319d66a8b530"));
    for (const auto& [_, doc] : catalog.documents()) CHECK(doc.provenance.commit == second);

    // The incremental result equals a cold read of the same commit.
    Catalog cold;
    cold.apply(source, second);
    REQUIRE(cold.size() == catalog.size());
    for (const auto& [path, doc] : cold.documents()) {
        CHECK(catalog.documents().at(path).provenance.blob_id == doc.provenance.blob_id);
        CHECK(catalog.documents().at(path).id == doc.id);
    }

    auto unchanged = catalog.sync(source);
    CHECK(unchanged.mode == SyncReport::Mode::unchanged);
}

TEST_CASE("an incremental step is read without touching the catalog, then applied: the same as apply", "[git][catalog]") {
    GitFixture f;
    GitSource source(f.upstream.dir().string(), "main", f.data);
    Catalog catalog;
    catalog.sync(source);
    const std::string first = catalog.commit();
    f.upstream.write("recipes/c.json", recipe_with_id("recipe-c"));
    f.upstream.git({"mv", "recipes/b.json", "recipes/renamed-b.json"});
    const std::string second = f.upstream.commit("add c, rename b");
    const std::string fetched = source.fetch();
    REQUIRE(fetched == second);
    REQUIRE(catalog.full_read_reason(source, second).empty());

    CatalogChanges changes = catalog.read_changes(source, second);
    // Read, not applied: other threads reading the catalog meanwhile see the first commit whole.
    CHECK(catalog.commit() == first);
    CHECK(catalog.documents().count("recipes/b.json") == 1);
    CHECK_FALSE(catalog.find(DocumentKind::recipe, "recipe-c"));
    CHECK(changes.steps.size() == 2);

    const SyncReport report = catalog.apply_changes(std::move(changes));
    CHECK(report.mode == SyncReport::Mode::incremental);
    CHECK(report.added == 1);
    CHECK(report.renamed == 1);
    CHECK(catalog.commit() == second);
    CHECK(catalog.documents().count("recipes/b.json") == 0);
    CHECK(catalog.documents().at("recipes/renamed-b.json").id == "recipe-b");
    CHECK(catalog.find(DocumentKind::recipe, "recipe-c"));
    Catalog cold;
    cold.apply(source, second);
    REQUIRE(cold.size() == catalog.size());
    for (const auto& [path, doc] : cold.documents()) CHECK(catalog.documents().at(path).provenance.blob_id == doc.provenance.blob_id);
}

TEST_CASE("a corrupt file is reported and the other documents are still read", "[git]") {
    GitFixture f;
    GitSource source(f.upstream.dir().string(), "main", f.data);
    Catalog catalog;
    catalog.sync(source);
    f.upstream.write("recipes/a.json", "{\"schema_version\": \"local-ai-registry/v1\", ");
    f.upstream.commit("break a");
    catalog.sync(source);
    const auto& a = catalog.documents().at("recipes/a.json");
    CHECK_FALSE(a.valid());
    CHECK_THAT(a.error_lines().at(0), Catch::StartsWith("recipes/a.json: ") && Catch::Contains("invalid JSON"));
    CHECK(catalog.documents().at("recipes/b.json").valid());
    CHECK(summarize(catalog).invalid == 1);

    f.upstream.write("recipes/a.json", recipe_with_id("recipe-a"));
    f.upstream.commit("fix a");
    catalog.sync(source);
    CHECK(summarize(catalog).invalid == 0);
}

TEST_CASE("a duplicate id added later is an error until the first goes away", "[git]") {
    GitFixture f;
    GitSource source(f.upstream.dir().string(), "main", f.data);
    Catalog catalog;
    catalog.sync(source);
    f.upstream.write("recipes/z-copy.json", recipe_with_id("recipe-a"));
    f.upstream.commit("copy a");
    catalog.sync(source);
    CHECK(catalog.duplicate_of(catalog.documents().at("recipes/z-copy.json")) == "recipes/a.json");
    f.upstream.git({"rm", "-q", "recipes/a.json"});
    f.upstream.commit("drop the original");
    catalog.sync(source);
    CHECK(catalog.usable(catalog.documents().at("recipes/z-copy.json")));
}

TEST_CASE("a force-pushed ref is detected and read in full", "[git]") {
    GitFixture f;
    GitSource source(f.upstream.dir().string(), "main", f.data);
    Catalog catalog;
    catalog.sync(source);
    f.upstream.write("recipes/c.json", recipe_with_id("recipe-c"));
    const std::string ahead = f.upstream.commit("add c");
    catalog.sync(source);
    REQUIRE(catalog.find(DocumentKind::recipe, "recipe-c"));

    f.upstream.git({"reset", "-q", "--hard", "HEAD~1"});
    f.upstream.write("recipes/d.json", recipe_with_id("recipe-d"));
    const std::string rewritten = f.upstream.commit("history rewritten");
    auto report = catalog.sync(source);
    CHECK(report.mode == SyncReport::Mode::full);
    CHECK_THAT(report.full_reason, Catch::Contains("force-pushed"));
    CHECK(report.commit == rewritten);
    CHECK(report.added == 1);    // d
    CHECK(report.deleted == 1);  // c
    CHECK_FALSE(catalog.find(DocumentKind::recipe, "recipe-c"));
    CHECK(catalog.find(DocumentKind::recipe, "recipe-d"));
}

TEST_CASE("refs: branches, tags, commits, the default branch, and a clear error for a missing ref", "[git]") {
    GitFixture f;
    const std::string first = f.upstream.head();
    f.upstream.git({"tag", "v1"});
    f.upstream.write("recipes/c.json", recipe_with_id("recipe-c"));
    f.upstream.commit("add c");
    {
        GitSource tagged(f.upstream.dir().string(), "v1", f.data);
        CHECK(tagged.fetch() == first);
    }
    {
        GitSource pinned(f.upstream.dir().string(), first, f.data);
        CHECK(pinned.fetch() == first);
    }
    {
        GitSource head(f.upstream.dir().string(), "", f.data);
        CHECK(head.fetch() == f.upstream.head());
    }
    GitSource missing(f.upstream.dir().string(), "no-such-branch", f.data);
    try {
        missing.fetch();
        FAIL("a missing ref must throw");
    } catch (const SourceError& e) {
        CHECK_THAT(e.what(), Catch::Contains("'no-such-branch' not found") && Catch::Contains("branches: main") &&
                                 Catch::Contains("tags: v1"));
    }
}

TEST_CASE("an unreachable source is a clear error", "[git]") {
    TempDir tmp;
    GitSource source((tmp / "nowhere").string(), "main", tmp / "data");
    CHECK_THROWS_WITH(source.fetch(), Catch::Contains("cannot reach registry source") && Catch::Contains("nowhere"));
}

TEST_CASE("file:// URLs and bare repositories are sources too", "[git]") {
    GitFixture f;
    auto bare = f.tmp / "bare.git";
    REQUIRE(anvil::test::run({"git", "clone", "-q", "--bare", f.upstream.dir().string(), bare.string()}).exit_code == 0);
    CHECK(is_git_location(bare.string()));
    CHECK(is_git_location(f.upstream.dir().string()));
    CHECK_FALSE(is_git_location((f.upstream.dir() / "recipes").string()));
    GitSource source("file://" + bare.string(), "main", f.data);
    Catalog catalog;
    catalog.sync(source);
    CHECK(catalog.size() == 3);
}

TEST_CASE("a source on this machine shares its objects with the clone instead of being fetched", "[git]") {
    GitFixture f;
    GitSource source(f.upstream.dir().string(), "main", f.data);
    Catalog catalog;
    catalog.sync(source);
    const auto alternates = source.clone_dir() / "objects" / "info" / "alternates";
    REQUIRE(std::filesystem::exists(alternates));
    CHECK_THAT(anvil::test::read_file(alternates), Catch::Contains((f.upstream.dir() / ".git" / "objects").string()));
    f.upstream.write("recipes/c.json", recipe_with_id("recipe-c"));
    const std::string second = f.upstream.commit("add c");
    auto report = catalog.sync(source);
    CHECK(report.commit == second);
    CHECK(report.added == 1);
    // Nothing was copied: the clone's own object directory holds no object and no pack.
    std::size_t own_objects = 0;
    for (const auto& entry : std::filesystem::recursive_directory_iterator(source.clone_dir() / "objects"))
        if (entry.is_regular_file() && entry.path().parent_path().filename() != "info") ++own_objects;
    CHECK(own_objects == 0);
    // A branch deleted at the source is pruned from the clone, as a pruning fetch would.
    f.upstream.git({"branch", "-q", "topic"});
    source.fetch();
    CHECK(source.has_commit(second));
    f.upstream.git({"branch", "-q", "-D", "topic"});
    source.fetch();
    GitSource topic(f.upstream.dir().string(), "topic", f.data);
    CHECK_THROWS_WITH(topic.fetch(), Catch::Contains("'topic' not found"));
}


TEST_CASE("an id stays with the file that had it first, even when a newcomer's path sorts first", "[git][catalog]") {
    GitFixture f;
    GitSource source(f.upstream.dir().string(), "main", f.data);
    Catalog catalog;
    catalog.sync(source);
    f.upstream.write("recipes/0-thief.json", recipe_with_id("recipe-b"));
    f.upstream.commit("a newcomer claims recipe-b");
    catalog.sync(source);
    const auto& thief = catalog.documents().at("recipes/0-thief.json");
    CHECK_FALSE(catalog.usable(thief));
    CHECK(catalog.duplicate_of(thief) == "recipes/b.json");
    CHECK_THAT(catalog.problems(thief).back(), Catch::StartsWith("recipes/0-thief.json") && Catch::Contains("already defined by recipes/b.json"));
    CHECK(catalog.find(DocumentKind::recipe, "recipe-b")->provenance.path == "recipes/b.json");

    // The owner edited in place stays the owner.
    f.upstream.write("recipes/b.json", recipe_with_id("recipe-b") + "\n");
    f.upstream.commit("touch b");
    catalog.sync(source);
    CHECK(catalog.find(DocumentKind::recipe, "recipe-b")->provenance.path == "recipes/b.json");

    // A force-push reads everything again; the owner keeps the id.
    f.upstream.git({"commit", "-q", "--amend", "-m", "touch b, rewritten"});
    auto report = catalog.sync(source);
    REQUIRE(report.mode == SyncReport::Mode::full);
    CHECK(catalog.duplicate_of(catalog.documents().at("recipes/0-thief.json")) == "recipes/b.json");

    // Once the owner goes, the newcomer has it.
    f.upstream.git({"rm", "-q", "recipes/b.json"});
    f.upstream.commit("b goes");
    catalog.sync(source);
    CHECK(catalog.usable(catalog.documents().at("recipes/0-thief.json")));
}

TEST_CASE("a first read honours the owners remembered from before (the ledger after a restart)", "[git][catalog]") {
    GitFixture f;
    f.upstream.write("recipes/0-thief.json", recipe_with_id("recipe-b"));
    f.upstream.commit("a newcomer claims recipe-b");
    GitSource source(f.upstream.dir().string(), "main", f.data);
    Catalog remembering;
    remembering.remember_owners({{Catalog::id_key(DocumentKind::recipe, "recipe-b"), "recipes/b.json"}});
    remembering.sync(source);
    CHECK(remembering.duplicate_of(remembering.documents().at("recipes/0-thief.json")) == "recipes/b.json");
    // Without a memory, path order decides, as it always did.
    Catalog fresh;
    fresh.sync(source);
    CHECK(fresh.duplicate_of(fresh.documents().at("recipes/b.json")) == "recipes/0-thief.json");

    anvil::test::TempDir dir;
    anvil::test::write_file(dir / "0-thief.json", recipe_with_id("recipe-b"));
    anvil::test::write_file(dir / "b.json", recipe_with_id("recipe-b"));
    auto from_directory = Catalog::from_filesystem(dir.path(), {{Catalog::id_key(DocumentKind::recipe, "recipe-b"), "b.json"}});
    CHECK(from_directory.duplicate_of(from_directory.documents().at("0-thief.json")) == "b.json");
}

namespace {

// `size` bytes of `byte` written in small pieces, so that this process never holds them at once.
void write_repeated(const std::filesystem::path& path, std::size_t size, char byte) {
    std::ofstream out(path, std::ios::binary);
    const std::string piece(64 * 1024, byte);
    for (std::size_t written = 0; written < size; written += piece.size()) out.write(piece.data(), static_cast<std::streamsize>(std::min(piece.size(), size - written)));
}

long peak_rss_kib() {
    rusage usage{};
    ::getrusage(RUSAGE_SELF, &usage);
    return usage.ru_maxrss;
}

}  // namespace

TEST_CASE("an oversized blob is invalid from its object header, never inflated: in a full read and in an update", "[git][hardening]") {
    GitFixture f;
    // 96 MiB of one byte: well under 1 MB in the repository, 96 MiB once inflated.
    const std::size_t big = 96u << 20;
    write_repeated(f.upstream.dir() / "recipes/huge.json", big, ' ');
    f.upstream.commit("a huge blob");
    GitSource source(f.upstream.dir().string(), "main", f.data);
    Catalog catalog(DocumentLimits{64 * 1024});
    const long before = peak_rss_kib();
    auto report = catalog.sync(source);
    CHECK(report.mode == SyncReport::Mode::full);
    const auto& huge = catalog.documents().at("recipes/huge.json");
    REQUIRE_FALSE(huge.valid());
    CHECK(huge.error_lines() == std::vector<std::string>{"recipes/huge.json: at /: expected a document of at most 65536 bytes (max_document_bytes "
                                                         "in anvild's configuration), found " + std::to_string(big) + " bytes"});
    CHECK(catalog.documents().at("recipes/a.json").valid());  // the others are read as ever

    // The same blob added by a later commit, under another name: read through the diff.
    f.upstream.git({"mv", "recipes/huge.json", "recipes/huge-again.json"});
    write_repeated(f.upstream.dir() / "recipes/other-huge.json", big + 1, '\t');
    f.upstream.commit("move it, and add another");
    report = catalog.sync(source);
    CHECK(report.mode == SyncReport::Mode::incremental);
    CHECK_FALSE(catalog.documents().at("recipes/huge-again.json").valid());
    CHECK_THAT(catalog.documents().at("recipes/other-huge.json").error_lines().at(0), Catch::Contains(std::to_string(big + 1) + " bytes"));
    // Had either been inflated, the peak would have grown by its size.
    CHECK(peak_rss_kib() - before < 32 * 1024);
}
