// A feasibility input from a JSON document, for the calculator's tests: the test fails, naming the
// first error, when the document is not a valid input.
#pragma once

#include <catch2/catch.hpp>

#include "registry/feasibility_input.hpp"

namespace anvil::test {

inline registry::FeasibilityInput feasibility_input(const registry::json& doc) {
    registry::FieldErrors errors;
    registry::JsonReader reader(errors);
    auto in = registry::parse_feasibility_input(registry::Node{&doc, ""}, reader);
    INFO((errors.empty() ? std::string() : errors.front().describe()));
    REQUIRE(in);
    return *in;
}

}  // namespace anvil::test
