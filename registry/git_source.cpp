#include "registry/git_source.hpp"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <set>

#include <fmt/ranges.h>
#include <git2.h>

#include "registry/document.hpp"
#include "support/digest.hpp"

namespace anvil::registry {

namespace {

struct LibGit2 {
    LibGit2() { git_libgit2_init(); }
    ~LibGit2() { git_libgit2_shutdown(); }
};

void ensure_libgit2() { static LibGit2 instance; }

[[noreturn]] void raise(const std::string& context) {
    const git_error* e = git_error_last();
    throw SourceError(context + ": " + (e && e->message ? e->message : "unknown libgit2 error"));
}

void check(int rc, const std::string& context) {
    if (rc < 0) raise(context);
}

template <typename T, void (*Free)(T*)>
struct Owned {
    T* ptr = nullptr;
    Owned() = default;
    Owned(const Owned&) = delete;
    Owned& operator=(const Owned&) = delete;
    ~Owned() {
        if (ptr) Free(ptr);
    }
    T** out() { return &ptr; }
    T* get() const { return ptr; }
};
using Remote = Owned<git_remote, git_remote_free>;
using Reference = Owned<git_reference, git_reference_free>;
using Commit = Owned<git_commit, git_commit_free>;
using Tree = Owned<git_tree, git_tree_free>;
using Blob = Owned<git_blob, git_blob_free>;
using Diff = Owned<git_diff, git_diff_free>;
using Object = Owned<git_object, git_object_free>;
using Repository = Owned<git_repository, git_repository_free>;
using Odb = Owned<git_odb, git_odb_free>;
using ReferenceIterator = Owned<git_reference_iterator, git_reference_iterator_free>;

struct Buf {
    git_buf buf = GIT_BUF_INIT;
    ~Buf() { git_buf_dispose(&buf); }
};

std::string oid_string(const git_oid* oid) {
    char text[GIT_OID_HEXSZ + 1] = {};
    git_oid_tostr(text, sizeof text, oid);
    return text;
}

git_oid parse_oid(const std::string& id) {
    git_oid oid;
    if (git_oid_fromstr(&oid, id.c_str()) < 0) throw SourceError("'" + id + "' is not a git object id");
    return oid;
}

std::string clone_name(const std::string& url) {
    std::string base = url;
    while (!base.empty() && (base.back() == '/' || base.back() == '\\')) base.pop_back();
    if (auto slash = base.find_last_of('/'); slash != std::string::npos) base = base.substr(slash + 1);
    if (base.ends_with(".git")) base.resize(base.size() - 4);
    std::replace_if(base.begin(), base.end(), [](char c) { return !std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_'; }, '_');
    if (base.empty()) base = "registry";
    return base + "-" + support::sha256_hex(url).substr(0, 12) + ".git";
}

// A path on this machine rather than a URL: such a source shares its objects with the clone
// instead of being fetched (see GitSource::fetch).
bool is_local_path(const std::string& location) {
    return location.find("://") == std::string::npos && !location.starts_with("git@");
}

}  // namespace

bool is_git_location(const std::string& location) {
    if (location.find("://") != std::string::npos || location.starts_with("git@")) return true;
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::path p(location);
    if (fs::exists(p / ".git", ec)) return true;
    return fs::is_regular_file(p / "HEAD", ec) && fs::is_directory(p / "objects", ec) && fs::is_directory(p / "refs", ec);
}

struct GitSource::Impl {
    git_repository* repo = nullptr;
    ~Impl() {
        if (repo) git_repository_free(repo);
    }

    void lookup_tree(const std::string& commit_id, Tree& tree) const {
        git_oid oid = parse_oid(commit_id);
        Commit commit;
        check(git_commit_lookup(commit.out(), repo, &oid), "commit " + commit_id);
        check(git_commit_tree(tree.out(), commit.get()), "tree of commit " + commit_id);
    }

    std::vector<std::string> names(const char* prefix) const {
        std::vector<std::string> out;
        git_strarray refs{};
        if (git_reference_list(&refs, repo) == 0) {
            for (std::size_t i = 0; i < refs.count; ++i) {
                std::string name = refs.strings[i];
                if (name.starts_with(prefix) && !name.ends_with("/HEAD")) out.push_back(name.substr(std::strlen(prefix)));
            }
            git_strarray_dispose(&refs);
        }
        std::sort(out.begin(), out.end());
        return out;
    }
};

GitSource::GitSource(std::string url, std::string ref, const std::filesystem::path& data_dir)
    : impl_(std::make_unique<Impl>()), url_(std::move(url)), ref_(std::move(ref)) {
    ensure_libgit2();
    clone_dir_ = data_dir / "sources" / clone_name(url_);
    std::error_code ec;
    std::filesystem::create_directories(clone_dir_.parent_path(), ec);
    if (ec) throw SourceError(clone_dir_.parent_path().string() + ": cannot create the data directory: " + ec.message());
    if (std::filesystem::exists(clone_dir_ / "HEAD")) {
        check(git_repository_open_bare(&impl_->repo, clone_dir_.c_str()), "opening the clone " + clone_dir_.string());
        return;
    }
    check(git_repository_init(&impl_->repo, clone_dir_.c_str(), /*is_bare=*/1), "creating the clone " + clone_dir_.string());
    Remote remote;
    check(git_remote_create_with_fetchspec(remote.out(), impl_->repo, "origin", url_.c_str(), "+refs/heads/*:refs/remotes/origin/*"),
          "configuring the source " + url_);
    check(git_remote_add_fetch(impl_->repo, "origin", "+refs/tags/*:refs/tags/*"), "configuring tag fetch for " + url_);
}

GitSource::~GitSource() = default;

std::string GitSource::fetch() {
    if (is_local_path(url_)) return sync_local();
    Remote remote;
    check(git_remote_lookup(remote.out(), impl_->repo, "origin"), "source " + url_);
    // The *_init functions rather than the INIT macros: the macros leave fields implicit.
    git_remote_callbacks callbacks;
    git_remote_init_callbacks(&callbacks, GIT_REMOTE_CALLBACKS_VERSION);
    if (git_remote_connect(remote.get(), GIT_DIRECTION_FETCH, &callbacks, nullptr, nullptr) < 0)
        raise("cannot reach registry source " + url_ + " (is the path or URL right?)");
    Buf head;
    const bool has_head = git_remote_default_branch(&head.buf, remote.get()) == 0;
    git_fetch_options options;
    git_fetch_options_init(&options, GIT_FETCH_OPTIONS_VERSION);
    options.prune = GIT_FETCH_PRUNE;
    options.download_tags = GIT_REMOTE_DOWNLOAD_TAGS_ALL;
    check(git_remote_download(remote.get(), nullptr, &options), "fetching " + url_);
    check(git_remote_update_tips(remote.get(), &callbacks, 1, GIT_REMOTE_DOWNLOAD_TAGS_ALL, nullptr), "updating refs from " + url_);
    git_remote_prune(remote.get(), &callbacks);
    git_remote_disconnect(remote.get());
    if (has_head && std::string_view(head.buf.ptr).starts_with("refs/heads/")) {
        std::string target = "refs/remotes/origin/" + std::string(head.buf.ptr + std::strlen("refs/heads/"));
        Reference symbolic;
        check(git_reference_symbolic_create(symbolic.out(), impl_->repo, "refs/remotes/origin/HEAD", target.c_str(), 1, "anvil: default branch"),
              "recording the default branch of " + url_);
    }
    return resolve();
}

// A source on this machine is read as `git clone --shared` reads it: the clone lists the source's
// object directory in objects/info/alternates and copies only its refs. A fetch from a local path
// builds and indexes a pack of every new object, tens of milliseconds for one changed file in a
// 10,000-file tree; copying refs is well under one. The trade, as with --shared: objects the source
// itself deletes (gc after a history rewrite) become unreadable here too, which costs nothing the
// ledger needs, since it keeps every ingested document whole.
std::string GitSource::sync_local() {
    Repository source;
    if (git_repository_open_ext(source.out(), url_.c_str(), GIT_REPOSITORY_OPEN_NO_SEARCH, nullptr) < 0)
        raise("cannot reach registry source " + url_ + " (is the path or URL right?)");
    const std::string objects = std::filesystem::absolute(std::filesystem::path(git_repository_commondir(source.get())) / "objects").lexically_normal().string();
    share_objects_with(objects);

    std::set<std::string> copied;
    ReferenceIterator refs;
    check(git_reference_iterator_new(refs.out(), source.get()), "listing the refs of " + url_);
    git_reference* ref = nullptr;
    while (git_reference_next(&ref, refs.get()) == 0) {
        Reference owned;
        *owned.out() = ref;
        const std::string name = git_reference_name(ref);
        std::string local;
        if (name.starts_with("refs/heads/")) local = "refs/remotes/origin/" + name.substr(std::strlen("refs/heads/"));
        else if (name.starts_with("refs/tags/")) local = name;
        else continue;
        Reference direct;
        if (git_reference_resolve(direct.out(), ref) < 0) continue;  // a dangling symbolic ref names nothing to copy
        const git_oid* target = git_reference_target(direct.get());
        copied.insert(local);
        git_oid current;
        if (git_reference_name_to_id(&current, impl_->repo, local.c_str()) == 0 && git_oid_equal(&current, target)) continue;
        Reference written;
        check(git_reference_create(written.out(), impl_->repo, local.c_str(), target, 1, "anvil: sync from local source"),
              "recording " + local + " from " + url_);
    }
    // As a pruning fetch would: branches and tags gone from the source go from the clone.
    for (const char* prefix : {"refs/remotes/origin/", "refs/tags/"}) {
        for (const auto& name : impl_->names(prefix)) {
            const std::string full = prefix + name;
            if (copied.count(full)) continue;
            Reference stale;
            if (git_reference_lookup(stale.out(), impl_->repo, full.c_str()) == 0) check(git_reference_delete(stale.get()), "pruning " + full);
        }
    }
    Reference head;
    if (git_reference_lookup(head.out(), source.get(), "HEAD") == 0 && git_reference_type(head.get()) == GIT_REFERENCE_SYMBOLIC) {
        const std::string_view branch = git_reference_symbolic_target(head.get());
        if (branch.starts_with("refs/heads/")) {
            const std::string target = "refs/remotes/origin/" + std::string(branch.substr(std::strlen("refs/heads/")));
            Reference mine;
            const bool same = git_reference_lookup(mine.out(), impl_->repo, "refs/remotes/origin/HEAD") == 0 &&
                              git_reference_type(mine.get()) == GIT_REFERENCE_SYMBOLIC && target == git_reference_symbolic_target(mine.get());
            Reference symbolic;
            if (!same)
                check(git_reference_symbolic_create(symbolic.out(), impl_->repo, "refs/remotes/origin/HEAD", target.c_str(), 1, "anvil: default branch"),
                      "recording the default branch of " + url_);
        }
    }
    return resolve();
}

void GitSource::share_objects_with(const std::string& objects_dir) {
    if (shared_objects_ == objects_dir) return;
    const auto alternates = clone_dir_ / "objects" / "info" / "alternates";
    std::set<std::string> listed;
    {
        std::ifstream in(alternates);
        for (std::string line; std::getline(in, line);) listed.insert(line);
    }
    if (!listed.count(objects_dir)) {
        // A line torn by a crash names no directory, and libgit2 skips alternates that do not exist.
        std::error_code ec;
        std::filesystem::create_directories(alternates.parent_path(), ec);
        std::ofstream out(alternates, std::ios::app);
        out << objects_dir << "\n";
        if (!out.flush()) throw SourceError(alternates.string() + ": cannot record the source's object directory " + objects_dir);
        out.close();
        // The open clone read info/alternates before the line existed: reopen it to read it again.
        git_repository* reopened = nullptr;
        check(git_repository_open_bare(&reopened, clone_dir_.c_str()), "reopening the clone " + clone_dir_.string());
        git_repository_free(impl_->repo);
        impl_->repo = reopened;
    }
    shared_objects_ = objects_dir;
}

std::string GitSource::resolve() const {
    if (is_commit_id(ref_)) {
        git_oid oid = parse_oid(ref_);
        Commit commit;
        if (git_commit_lookup(commit.out(), impl_->repo, &oid) < 0)
            throw SourceError("commit " + ref_ + " is not in registry source " + url_);
        return ref_;
    }
    std::vector<std::string> candidates;
    if (ref_.empty()) candidates = {"refs/remotes/origin/HEAD"};
    else if (ref_.starts_with("refs/heads/")) candidates = {"refs/remotes/origin/" + ref_.substr(11)};
    else if (ref_.starts_with("refs/")) candidates = {ref_};
    else candidates = {"refs/remotes/origin/" + ref_, "refs/tags/" + ref_};
    for (const auto& name : candidates) {
        Object object;
        if (git_revparse_single(object.out(), impl_->repo, (name + "^{commit}").c_str()) == 0)
            return oid_string(git_object_id(object.get()));
    }
    auto join = [](const std::vector<std::string>& items) {
        return items.empty() ? std::string("none") : fmt::format("{}", fmt::join(items, ", "));
    };
    throw SourceError("ref '" + (ref_.empty() ? std::string("HEAD") : ref_) + "' not found in registry source " + url_ +
                      " (branches: " + join(impl_->names("refs/remotes/origin/")) + "; tags: " + join(impl_->names("refs/tags/")) + ")");
}

std::vector<TreeEntry> GitSource::list_documents(const std::string& commit) const {
    Tree tree;
    impl_->lookup_tree(commit, tree);
    std::vector<TreeEntry> out;
    auto callback = [](const char* root, const git_tree_entry* entry, void* payload) -> int {
        if (git_tree_entry_type(entry) != GIT_OBJECT_BLOB) return 0;
        std::string path = std::string(root) + git_tree_entry_name(entry);
        if (!is_document_path(path)) return 0;
        static_cast<std::vector<TreeEntry>*>(payload)->push_back({std::move(path), oid_string(git_tree_entry_id(entry))});
        return 0;
    };
    check(git_tree_walk(tree.get(), GIT_TREEWALK_PRE, callback, &out), "walking the tree of " + commit);
    std::sort(out.begin(), out.end(), [](const TreeEntry& a, const TreeEntry& b) { return a.path < b.path; });
    return out;
}

std::string GitSource::read_blob(const std::string& blob_id) const {
    git_oid oid = parse_oid(blob_id);
    Blob blob;
    check(git_blob_lookup(blob.out(), impl_->repo, &oid), "blob " + blob_id);
    const auto* data = static_cast<const char*>(git_blob_rawcontent(blob.get()));
    return std::string(data, static_cast<std::size_t>(git_blob_rawsize(blob.get())));
}

std::uint64_t GitSource::blob_size(const std::string& blob_id) const {
    git_oid oid = parse_oid(blob_id);
    Odb odb;
    check(git_repository_odb(odb.out(), impl_->repo), "the object database");
    std::size_t size = 0;
    git_object_t type = GIT_OBJECT_INVALID;
    // The object's header alone: a loose object's first bytes inflated, a packed one's entry (a
    // delta's header says its result's size), never the content.
    check(git_odb_read_header(&size, &type, odb.get(), &oid), "the header of blob " + blob_id);
    return size;
}

std::vector<PathChange> GitSource::diff(const std::string& from_commit, const std::string& to_commit) const {
    Tree from, to;
    impl_->lookup_tree(from_commit, from);
    impl_->lookup_tree(to_commit, to);
    Diff diff;
    git_diff_options options;
    git_diff_options_init(&options, GIT_DIFF_OPTIONS_VERSION);
    check(git_diff_tree_to_tree(diff.out(), impl_->repo, from.get(), to.get(), &options), "diffing " + from_commit + ".." + to_commit);
    git_diff_find_options find;
    git_diff_find_options_init(&find, GIT_DIFF_FIND_OPTIONS_VERSION);
    // Renames by identical content only: similarity would read (inflate) every added and deleted
    // blob, however large, before anything checks its size. A rename with changes reads as a
    // deletion and an addition.
    find.flags = GIT_DIFF_FIND_RENAMES | GIT_DIFF_FIND_EXACT_MATCH_ONLY;
    check(git_diff_find_similar(diff.get(), &find), "finding renames in " + from_commit + ".." + to_commit);

    std::vector<PathChange> out;
    const std::size_t n = git_diff_num_deltas(diff.get());
    for (std::size_t i = 0; i < n; ++i) {
        const git_diff_delta* d = git_diff_get_delta(diff.get(), i);
        const std::string old_path = d->old_file.path ? d->old_file.path : "";
        const std::string new_path = d->new_file.path ? d->new_file.path : "";
        const bool old_doc = is_document_path(old_path), new_doc = is_document_path(new_path);
        const std::string new_blob = oid_string(&d->new_file.id);
        switch (d->status) {
            case GIT_DELTA_ADDED:
                if (new_doc) out.push_back({PathChange::Kind::added, new_path, "", new_blob});
                break;
            case GIT_DELTA_DELETED:
                if (old_doc) out.push_back({PathChange::Kind::deleted, old_path, "", ""});
                break;
            case GIT_DELTA_RENAMED:
                if (old_doc && new_doc) out.push_back({PathChange::Kind::renamed, new_path, old_path, new_blob});
                else if (old_doc) out.push_back({PathChange::Kind::deleted, old_path, "", ""});
                else if (new_doc) out.push_back({PathChange::Kind::added, new_path, "", new_blob});
                break;
            default:  // modified, type change, copied
                if (new_doc) out.push_back({PathChange::Kind::modified, new_path, "", new_blob});
                else if (old_doc) out.push_back({PathChange::Kind::deleted, old_path, "", ""});
                break;
        }
    }
    return out;
}

bool GitSource::descends_from(const std::string& commit, const std::string& ancestor) const {
    if (commit == ancestor) return true;
    git_oid a = parse_oid(commit), b = parse_oid(ancestor);
    int rc = git_graph_descendant_of(impl_->repo, &a, &b);
    if (rc < 0) return false;
    return rc == 1;
}

bool GitSource::has_commit(const std::string& commit) const {
    if (!is_commit_id(commit)) return false;
    git_oid oid = parse_oid(commit);
    Commit c;
    return git_commit_lookup(c.out(), impl_->repo, &oid) == 0;
}

}  // namespace anvil::registry
