// The web console: its files built into the binary (console_assets.hpp), reading only the API.
#include "daemon/anvild/api_routes.hpp"

#include "daemon/anvild/console_assets.hpp"
#include "engine/http/safe_text.hpp"

namespace anvil::daemon {

using json = nlohmann::json;

void add_console_routes(ApiRoutes& routes) {
    auto serve_file = [](const httplib::Request& req, httplib::Response& res, const console::EmbeddedFile& f) {
        // Scripts and styles only from this origin, no inline script, no framing: a page that
        // holds a bearer token in its session gives nothing else a way in.
        res.set_header("Content-Security-Policy",
                       "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
                       "base-uri 'none'; form-action 'self'; frame-ancestors 'none'");
        res.set_header("X-Content-Type-Options", "nosniff");
        res.set_header("Referrer-Policy", "no-referrer");
        res.set_header("Cache-Control", "no-cache");
        res.set_header("ETag", std::string(f.etag));
        if (req.get_header_value("If-None-Match") == f.etag) {
            res.status = 304;
            return;
        }
        res.status = 200;
        res.set_content(std::string(f.bytes), std::string(f.content_type));
    };
    routes.get("/", "/", [serve_file](const httplib::Request& req, httplib::Response& res, const std::string&) {
        const auto* f = console::find("/console/index.html");
        if (!f) throw ApiError{404, "not_found", "this anvild was built without its console"};
        serve_file(req, res, *f);
    });
    routes.get(R"(/console/.*)", "/console/{file}", [serve_file](const httplib::Request& req, httplib::Response& res, const std::string&) {
        const auto* f = console::find(req.path);
        if (!f) throw ApiError{404, "not_found", "the console has no file " + http::valid_utf8(req.path)};
        serve_file(req, res, *f);
    });
}

}  // namespace anvil::daemon
