// An httplib server on a free port of 127.0.0.1, listening on its own thread from construction
// until destruction: the stand-in engines of the qualification tests.
#pragma once

#include <thread>

#include <catch2/catch.hpp>
#include <httplib.h>

namespace anvil::test {

class LoopbackServer {
public:
    // `routes` registers the handlers before the server binds.
    template <typename Routes>
    explicit LoopbackServer(Routes&& routes) {
        routes(server_);
        port_ = server_.bind_to_any_port("127.0.0.1");
        REQUIRE(port_ > 0);
        // Bound already: connections queue until the listening thread accepts them.
        thread_ = std::thread([this] { server_.listen_after_bind(); });
    }
    ~LoopbackServer() {
        server_.stop();
        thread_.join();
    }
    LoopbackServer(const LoopbackServer&) = delete;
    LoopbackServer& operator=(const LoopbackServer&) = delete;
    int port() const { return port_; }

private:
    httplib::Server server_;
    int port_ = 0;
    std::thread thread_;
};

}  // namespace anvil::test
