// The model blocks of a recipe's launch: launch.model (the served weights) and anvil.recipe/v1's
// launch.draft (what anvil-engine speculates with, possibly a second model block), read with every
// problem as a FieldError, and the pinning rules both answer to.
#pragma once

#include <string>
#include <vector>

#include "registry/json_reader.hpp"
#include "registry/recipe.hpp"

namespace anvil::registry {

// launch.model: {path, digest?, dtype, licence?, repository?, revision?}; required (with its
// dtype) for embedded launches.
void read_launch_model(const Node& launch, JsonReader& reader, Launch& launch_out, bool required);

// launch.draft of an anvil.recipe/v1 record, one of
//   {"kind": "self",   "weights": "q8"|"bf16",                  "tokens": K}
//   {"kind": "model",  "model": {a launch.model block}, "weights": "f32"|"bf16"|"q8" (optional), "tokens": K}
//   {"kind": "layers", "layers": N,                             "tokens": K}
//   {"kind": "ngram",  "ngram": N,                              "tokens": K}
// with K 1..16 (default 4), layers N >= 1 and ngram N 1..64 (anvil-engine's ranges); any other key
// is an error. Only an embedded launch may carry
// one, and its arguments may not give --draft-* flags themselves (the driver builds them from this
// block, so that the draft is judged on paper: its memory, licence and pin).
void read_launch_draft(const Node& launch, JsonReader& reader, Launch& launch_out);

// Why the launch's models are not pinned: an embedded model (served or draft) without a content
// digest, a hub revision that is not a 40-hex commit. Appended to `reasons`.
void pin_launch_models(const Launch& launch, std::vector<std::string>& reasons);

}  // namespace anvil::registry
