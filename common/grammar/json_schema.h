// JSON Schema (and OpenAI's response_format json_object) translated into GBNF (grammar.h), so
// that constrained decoding produces JSON text that validates against the schema.
//
// Supported keywords (every other keyword is an error naming it and its JSON Pointer path,
// never silently ignored; annotations that do not constrain values are accepted: title,
// description, $comment, examples, default, $schema, $id, deprecated, readOnly, writeOnly):
//   type (a name or a list of names, "null" included), properties, required,
//   additionalProperties (false, true, or a schema), items, prefixItems (and the older
//   items-as-an-array with additionalItems), minItems, maxItems,
//   enum, const, anyOf, oneOf (as anyOf: alternatives the generator may take; exclusivity is
//   not enforced and the docs say so), allOf with one element, $ref to "#", "#/$defs/..." and
//   "#/definitions/..." (recursion included), string minLength / maxLength / pattern (regex.h)
//   / format (date, date-time, time, uuid, email, ipv4), integer and number minimum / maximum /
//   exclusiveMinimum / exclusiveMaximum (numbers, or draft 4's booleans). Combinations the
//   grammar cannot intersect are errors too: $ref, anyOf, oneOf or allOf next to other
//   constraints, enum/const next to anything but type, pattern next to format.
//
// Output layout: compact JSON with at most `max_whitespace` bytes of whitespace between tokens
// (0 by default: the model writes `{"a":1}`), properties in the schema's order (required ones
// always present, optional ones in order, each may be skipped), numbers with bounded length
// (SchemaOptions), so that on a bounded schema every walk of the grammar can finish.
//
// What the grammar generates is a subset of what the schema accepts, chosen so that it is
// exact where it matters and finite everywhere:
//  * Strings are spelled canonically (raw characters; \" \\ \b \f \n \r \t and \u00xx for
//    the rest of the control characters, as JSON.stringify writes them). minLength/maxLength
//    count characters (code points), each escape being one.
//  * Objects: without `additionalProperties`, an object that declares `properties` gets only
//    those (OpenAI's strict mode reads schemas this way; fewer properties than the schema allows
//    is still valid); one that declares none gets any properties. `additionalProperties: true`
//    or a schema adds extra members after the declared ones, with keys that differ from every
//    declared name (a grammar cannot keep extra keys apart from each other: the model may repeat
//    one). Required names missing from `properties` are generated with the
//    additionalProperties schema (any value when it is absent).
//  * Without `type`, the types are those whose keywords appear (`properties` -> object,
//    `items` -> array, `minLength` -> string, `minimum` -> number, ...), or every type when
//    none do. Keywords of a type the schema excludes are checked for form and have no effect.
//  * Integers: exactly the integers in [minimum, maximum] (exclusive bounds and fractional
//    bounds rounded inwards), written without leading zeros or "-0". A side without a bound
//    reaches max_integer_digits digits (more if the other bound needs them; at most 18).
//  * Numbers with bounds: decimal text -?I(.F)? without exponent, compared with the bounds
//    exactly in decimal (a bound is read as the shortest decimal of its double). The value
//    has at most 15 significant digits, so a validator comparing doubles agrees, exclusive
//    bounds included. Without bounds: -?I(.F)?([eE][+-]?X)? within the digit limits.
//  * enum / const: the values' compact JSON text (filtered by `type` when both appear).
//  * oneOf is anyOf: the grammar cannot exclude a value that matches two alternatives.
//  * format date: YYYY-MM-DD with the days of each month (Feb 29 in leap years only); time:
//    HH:MM:SS(.fraction)? with Z or +HH:MM (RFC 3339's full-time; no leap second); date-time:
//    date "T" time; uuid: 8-4-4-4-12 hex digits; email: one to three dot-atoms of at most 16
//    characters "@" two to four domain labels of at most 32 (a bounded subset of what
//    ajv-formats accepts, within RFC 5321's lengths, so that an answer always ends); ipv4:
//    dotted decimal octets.
//  * pattern: a search (regex.h); together with minLength/maxLength only as regex.h allows.
//
// Errors (all InvalidArgument) name the keyword and the JSON Pointer of the schema holding it
// ("#/properties/a/minimum"): unsupported keywords, malformed values, bounds that leave no
// value, unresolvable or remote $ref, $ref cycles that consume nothing (left recursion) or
// never end (no finite value), and every SchemaOptions limit exceeded (named).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace pagoda::grammar {

struct SchemaOptions {
  int32_t max_whitespace = 0;        // bytes of optional whitespace between JSON tokens
  int32_t max_integer_digits = 15;   // digits of an integer (before any fraction); at most 18
  int32_t max_fraction_digits = 15;  // digits after the decimal point
  // Exponent digits of an unbounded number: 2 keeps every value finite as a double (1e999
  // is not).
  int32_t max_exponent_digits = 2;
  int32_t max_unbounded_items =
      -1;                          // -1: arrays (and extra members) without maxItems are unbounded
  int32_t max_string_length = -1;  // -1: strings without maxLength are unbounded
  int32_t max_nodes = 10000;       // schema objects visited (a hostile schema's size bound)
  int32_t max_depth = 100;         // schema objects nested in each other (and $ref chains)
  int32_t max_enum_bytes = 1 << 20;  // bytes of enum/const values
  // The largest repetition count the grammar writes: a minItems/minLength above it is an
  // error; a maxItems/maxLength above it is enforced as this limit (fewer is still valid).
  int32_t max_repetition = 1000;
  // Sum of the repetition counts of the whole grammar (what the GBNF engine expands).
  int32_t max_total_repetition = 20000;
  int32_t max_gbnf_bytes = 1 << 20;  // the resulting GBNF text (grammar.h's max_source_bytes)
};

// GBNF for JSON values matching `schema` (a JSON Schema object, or `true`). An ordered_json,
// since properties come out in the schema's order (a nlohmann::json converts implicitly, with
// its keys sorted).
absl::StatusOr<std::string> JsonSchemaToGbnf(const nlohmann::ordered_json& schema,
                                             const SchemaOptions& options = {});

// GBNF for any JSON object (OpenAI's response_format {"type": "json_object"}).
std::string JsonObjectGbnf(const SchemaOptions& options = {});

}  // namespace pagoda::grammar
