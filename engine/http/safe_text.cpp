#include "engine/http/safe_text.hpp"


namespace anvil::http {


ParsedBody parse_json_body(std::string_view text, std::size_t max_depth) {
    struct TooDeep {};
    ParsedBody out;
    try {
        out.value = nlohmann::json::parse(text, [max_depth](int depth, nlohmann::json::parse_event_t event, nlohmann::json&) {
            // `depth` is the number of containers open around the one that starts.
            const bool starts = event == nlohmann::json::parse_event_t::object_start || event == nlohmann::json::parse_event_t::array_start;
            if (starts && static_cast<std::size_t>(depth) >= max_depth) throw TooDeep{};
            return true;
        });
    } catch (const TooDeep&) {
        out.value = nullptr;
        out.error = "the JSON body nests objects and arrays deeper than " + std::to_string(max_depth) + " levels";
    } catch (const nlohmann::json::exception& e) {
        out.value = nullptr;
        out.error = valid_utf8(e.what());
    }
    return out;
}


}  // namespace anvil::http
