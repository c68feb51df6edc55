// support/: the atomic writer leaves the new bytes and nothing else, refuses a missing
// directory by name; the clock's text has one shape and reads back to the same instant; text,
// random tokens, descriptors and the child runner each do their one thing.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <csignal>
#include <map>
#include <system_error>
#include <thread>

#include "support/atomic_file.hpp"
#include "support/clock.hpp"
#include "support/child.hpp"
#include "support/digest.hpp"
#include "support/fd.hpp"
#include "support/random.hpp"
#include "support/text.hpp"
#include "test_support.hpp"

using namespace anvil::support;
using anvil::test::TempDir;
using std::chrono::system_clock;

namespace {

std::size_t entries(const std::filesystem::path& dir) {
    std::size_t n = 0;
    for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++n;
    return n;
}

system_clock::time_point at(int y, unsigned m, unsigned d, int hh, int mm, int ss, int ms) {
    using namespace std::chrono;
    return sys_days(year(y) / month(m) / day(d)) + hours(hh) + minutes(mm) + seconds(ss) + milliseconds(ms);
}

}  // namespace

TEST_CASE("write_file_atomically replaces the file whole and leaves no temporary file", "[support]") {
    TempDir dir;
    const auto file = dir / "record.json";
    write_file_atomically(file, "first\n");
    CHECK(anvil::test::read_file(file) == "first\n");
    write_file_atomically(file, std::string(100000, 'x'));
    CHECK(anvil::test::read_file(file) == std::string(100000, 'x'));
    write_file_atomically(file, "");
    CHECK(anvil::test::read_file(file).empty());
    CHECK(entries(dir.path()) == 1);
}

TEST_CASE("write_file_atomically creates the file with the mode asked for, less the umask", "[support]") {
    TempDir dir;
    const mode_t old = ::umask(022);
    write_file_atomically(dir / "private", "a", 0600);
    write_file_atomically(dir / "shared", "b", 0666);
    ::umask(old);
    struct stat st {};
    REQUIRE(::stat((dir / "private").c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0600);
    REQUIRE(::stat((dir / "shared").c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0644);
}

TEST_CASE("write_file_atomically into a missing directory throws naming the path", "[support]") {
    TempDir dir;
    const auto file = dir / "absent" / "record.json";
    try {
        write_file_atomically(file, "x");
        FAIL("no exception");
    } catch (const std::system_error& e) {
        CHECK_THAT(e.what(), Catch::Contains(file.string()));
        CHECK(e.code() == std::errc::no_such_file_or_directory);
    }
    CHECK_FALSE(std::filesystem::exists(dir / "absent"));
}

TEST_CASE("write_file_atomically over a directory fails, removes its temporary file and keeps the directory", "[support]") {
    TempDir dir;
    std::filesystem::create_directory(dir / "taken");
    CHECK_THROWS_AS(write_file_atomically(dir / "taken", "x"), std::system_error);
    CHECK(std::filesystem::is_directory(dir / "taken"));
    CHECK(entries(dir.path()) == 1);
}

TEST_CASE("format_utc writes ISO 8601 in UTC, to the millisecond or the second", "[support]") {
    const auto t = at(2026, 11, 30, 6, 14, 0, 123);
    CHECK(format_utc(t) == "2026-11-30T06:14:00.123Z");
    CHECK(format_utc(t, Precision::seconds) == "2026-11-30T06:14:00Z");
    CHECK(format_utc_compact(t) == "20261130T061400Z");
    CHECK(format_utc_compact(t, Precision::milliseconds) == "20261130T061400.123Z");
    CHECK(format_utc(at(2026, 1, 2, 3, 4, 5, 7)) == "2026-01-02T03:04:05.007Z");
    // Before 1970 the millisecond still counts forward within its second.
    CHECK(format_utc(at(1969, 12, 31, 23, 59, 59, 900)) == "1969-12-31T23:59:59.900Z");
}

TEST_CASE("utc_now has the ledger's shape and is now", "[support]") {
    const auto before = std::chrono::floor<std::chrono::milliseconds>(system_clock::now());
    const std::string now = utc_now();
    REQUIRE(now.size() == 24);
    CHECK(now[10] == 'T');
    CHECK(now.back() == 'Z');
    const auto read = parse_utc(now);
    REQUIRE(read);
    CHECK(*read >= before);
    CHECK(*read <= system_clock::now());
    CHECK(utc_now(Precision::seconds).size() == 20);
}

TEST_CASE("parse_utc reads what format_utc writes and refuses anything else", "[support]") {
    const auto t = at(2024, 2, 29, 23, 59, 58, 42);
    CHECK(parse_utc(format_utc(t)) == t);
    CHECK(parse_utc(format_utc(t, Precision::seconds)) == at(2024, 2, 29, 23, 59, 58, 0));
    CHECK(parse_utc("2024-02-29T23:59:58") == at(2024, 2, 29, 23, 59, 58, 0));
    CHECK(parse_utc("2024-02-29T23:59:58.4") == at(2024, 2, 29, 23, 59, 58, 400));
    CHECK(parse_utc("2024-02-29T23:59:58.123456789Z") == at(2024, 2, 29, 23, 59, 58, 123));
    for (const char* bad : {"", "2024-02-29", "2023-02-29T00:00:00Z", "2024-13-01T00:00:00Z", "2024-01-01T24:00:00Z",
                            "2024-01-01T00:60:00Z", "2024-01-01 00:00:00Z", "2024-01-01T00:00:00+01:00", "2024-01-01T00:00:00.Z",
                            "2024-01-01T00:00:00Zjunk", "2024-1-01T00:00:00Z"})
        CHECK_FALSE(parse_utc(bad));
}

TEST_CASE("sha256_hex matches the standard's test vectors", "[support]") {
    CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    TempDir dir;
    write_file_atomically(dir / "abc", "abc");
    CHECK(sha256_file_hex(dir / "abc") == sha256_hex("abc"));
}

TEST_CASE("ascii_lower lowers A to Z and leaves every other byte", "[support]") {
    CHECK(ascii_lower("vLLM-0.8 Llama.CPP") == "vllm-0.8 llama.cpp");
    CHECK(ascii_lower("\xC3\x89T\xC3\x89") == "\xC3\x89t\xC3\x89");  // ÉTÉ: UTF-8 bytes untouched, no locale
    CHECK(ascii_lower("") == "");
}

TEST_CASE("random_hex gives twice as many lowercase hex digits as bytes, a new value each time", "[support]") {
    const std::string a = random_hex(32), b = random_hex(32);
    CHECK(a.size() == 64);
    CHECK(a.find_first_not_of("0123456789abcdef") == std::string::npos);
    CHECK(a != b);
    CHECK(random_hex(0).empty());
}

TEST_CASE("UniqueFd closes its descriptor once, and write_all writes everything or says why", "[support]") {
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    {
        UniqueFd read_end(fds[0]);
        UniqueFd write_end(fds[1]);
        CHECK(write_all(write_end.get(), "hello") == 0);
        char buffer[8] = {};
        CHECK(::read(read_end.get(), buffer, sizeof buffer) == 5);
        UniqueFd moved(std::move(write_end));
        CHECK_FALSE(write_end);
        CHECK(moved.get() == fds[1]);
        const int released = moved.release();
        CHECK_FALSE(moved);
        moved.reset(released);
    }
    CHECK(::fcntl(fds[0], F_GETFD) == -1);  // both closed by their owners
    CHECK(::fcntl(fds[1], F_GETFD) == -1);
    CHECK(write_all(fds[1], "x") == EBADF);
}

TEST_CASE("run_child: exit codes, output, a deadline that kills, a program that is not there", "[support]") {
    using namespace std::chrono_literals;
    const auto echo = run_child({"/bin/sh", "-c", "echo out; echo err >&2; exit 3"}, std::nullopt, 5s);
    CHECK(echo.exit_code == 3);
    CHECK(echo.out == "out\n");
    CHECK(echo.err == "err\n");
    CHECK_FALSE(echo.ok());
    // An exact environment replaces this process's; without one the child inherits it.
    const auto exact = run_child({"/usr/bin/env"}, std::map<std::string, std::string>{{"ONLY", "this"}}, 5s);
    CHECK(exact.out == "ONLY=this\n");
    CHECK(exact.ok());
    ::setenv("ANVIL_SUPPORT_TEST_INHERITED", "yes", 1);
    CHECK(run_child({"/usr/bin/env"}, std::nullopt, 5s).out.find("ANVIL_SUPPORT_TEST_INHERITED=yes") != std::string::npos);
    ::unsetenv("ANVIL_SUPPORT_TEST_INHERITED");
    const auto slow = run_child({"/bin/sleep", "30"}, std::nullopt, 200ms);
    CHECK(slow.timed_out);
    CHECK(slow.seconds < 10);
    const auto missing = run_child({"/nonexistent/program"}, std::nullopt, 5s);
    CHECK(missing.exec_failed);
    CHECK(missing.err.find("/nonexistent/program") != std::string::npos);
    // No deadline: waits for as long as the child runs.
    CHECK(run_child({"/bin/sh", "-c", "sleep 0.3; echo done"}, std::nullopt, 0ms).out == "done\n");
}

TEST_CASE("run_child ends what the child left in its group, or leaves it when asked", "[support]") {
    using namespace std::chrono_literals;
    TempDir dir;
    const std::string pid_file = (dir / "pid").string();
    auto left_behind = [&](GroupAfterExit after) {
        // The child starts a sleeper in its own group (its output elsewhere, so the pipes close) and exits.
        run_child({"/bin/sh", "-c", "sleep 30 >/dev/null 2>&1 & echo $! > " + pid_file}, std::nullopt, 5s, 1u << 20, after);
        const pid_t pid = std::stoi(anvil::test::read_file(pid_file));
        std::this_thread::sleep_for(100ms);
        // Killed and not yet reaped by whoever inherited it, a zombie: dead all the same.
        bool alive = false;
        if (::kill(pid, 0) == 0) {
            try {
                const std::string stat = anvil::test::read_file("/proc/" + std::to_string(pid) + "/stat");
                const auto close = stat.rfind(')');
                alive = close != std::string::npos && close + 2 < stat.size() && stat[close + 2] != 'Z';
            } catch (const std::runtime_error&) {
                // reaped meanwhile
            }
        }
        if (alive) ::kill(pid, SIGKILL);
        return alive;
    };
    CHECK_FALSE(left_behind(GroupAfterExit::end));
    CHECK(left_behind(GroupAfterExit::leave));
}
