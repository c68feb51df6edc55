#include "engine/http/origin_policy.hpp"
#include "support/text.hpp"

#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>

namespace anvil::http {

namespace {

bool is_ip_literal(const std::string& host) {
    unsigned char buffer[16];
    if (host.size() > 2 && host.front() == '[' && host.back() == ']')
        return ::inet_pton(AF_INET6, host.substr(1, host.size() - 2).c_str(), buffer) == 1;
    return ::inet_pton(AF_INET, host.c_str(), buffer) == 1;
}

// The authority of an origin ("http://h:1" → "h:1"), lowercased; empty when it has no scheme.
std::string origin_authority(std::string_view origin) {
    const auto scheme = origin.find("://");
    if (scheme == std::string_view::npos) return "";
    std::string_view authority = origin.substr(scheme + 3);
    authority = authority.substr(0, authority.find('/'));
    return support::ascii_lower(authority);
}

// The authority with the scheme's default port left out, so "h:80" and "h" compare equal.
std::string without_default_port(const std::string& authority, std::string_view scheme) {
    const std::string suffix = scheme == "https" ? ":443" : ":80";
    if (authority.size() > suffix.size() && authority.ends_with(suffix)) return authority.substr(0, authority.size() - suffix.size());
    return authority;
}

}  // namespace

std::string host_without_port(std::string_view authority) {
    if (!authority.empty() && authority.front() == '[') {
        const auto close = authority.find(']');
        return support::ascii_lower(authority.substr(0, close == std::string_view::npos ? authority.size() : close + 1));
    }
    return support::ascii_lower(authority.substr(0, authority.find(':')));
}

OriginVerdict judge_origin(const OriginPolicy& policy, const std::vector<std::string>& machine_names, std::string_view host,
                           std::string_view origin) {
    OriginVerdict verdict;
    if (!host.empty()) {
        const std::string name = host_without_port(host);
        auto listed = [&](const std::vector<std::string>& names) {
            return std::any_of(names.begin(), names.end(), [&](const std::string& n) { return support::ascii_lower(n) == name; });
        };
        if (!is_ip_literal(name) && name != "localhost" && !listed(machine_names) && !listed(policy.host_names)) {
            verdict.allowed = false;
            verdict.refusal = "Host '" + std::string(host) +
                              "' is not a name of this server (a page on another site may have resolved its own name to this "
                              "address); use an IP address or localhost, or add the name to allowed_hosts in anvild's configuration";
            return verdict;
        }
    }
    if (origin.empty()) return verdict;
    const std::string scheme = support::ascii_lower(origin.substr(0, origin.find("://")));
    const std::string authority = origin_authority(origin);
    const bool same = !authority.empty() && without_default_port(authority, scheme) == without_default_port(support::ascii_lower(host), scheme);
    if (same) return verdict;
    const bool configured = std::any_of(policy.origins.begin(), policy.origins.end(), [&](const std::string& o) {
        return o == "*" || support::ascii_lower(o) == support::ascii_lower(origin);
    });
    if (configured) {
        verdict.cross_origin = true;
        return verdict;
    }
    verdict.allowed = false;
    verdict.refusal = "cross-origin requests from '" + std::string(origin) +
                      "' are refused; add the origin to allowed_origins in anvild's configuration to let that page call this server";
    return verdict;
}

std::vector<std::string> machine_names() {
    char name[256] = {};
    if (::gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return {};
    return {name};
}

}  // namespace anvil::http
